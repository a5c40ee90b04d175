"""Writes tests/golden/jax_initializers.json: jax.nn.initializers' values, for
tests/jax/initializers_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_initializers.py
Each case is one initializer called op by op (not under jit) as `init(key, shape, dtype)`, its
values stored as bit patterns (uint32 for float32, uint64 for float64) so the test compares bits.
A shape JAX refuses (the fan rules of a rank-1 weight with the default in_axis) is written with
"error": true instead of values. Every float32 case is also made with out_sharding over a 2x4 mesh
and must agree with the unsharded one (the bits do not depend on the sharding).
"""
import os

import numpy as np

from common import Cases, make_mesh  # noqa: F401  (sets up 8 CPU devices)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

jax.config.update("jax_enable_x64", True)  # float64 cases; float32 ones are made with x64 off

I = jax.nn.initializers
MESH = make_mesh((2, 4), ("x", "y"), AxisType.Explicit)

KEYS = {"k0": jax.random.key(0), "kbeef": jax.random.wrap_key_data(
    jnp.array([0xDEADBEEF, 0x12345678], dtype=jnp.uint32))}
SHAPES = [(7,), (8, 16), (5, 7), (2, 4, 8), (3, 3, 4, 8), (0, 4)]


def key_words(k):
    return [int(w) for w in np.asarray(jax.random.key_data(k)).reshape(-1)]


def bits_of(x):
    x = np.asarray(x)
    if x.dtype == np.float32:
        return x.view(np.uint32).reshape(-1).tolist()
    assert x.dtype == np.float64, x.dtype
    return x.view(np.uint64).reshape(-1).tolist()


def spec_for(rank):
    """The sharding the C++ test uses for this rank (uneven blocks included, as JAX pads them)."""
    return {1: P(("x", "y")), 2: P("x", "y"), 3: P("x", None, "y"), 4: P(None, None, "x", "y")}[rank]


# (case name, JSON description the C++ test rebuilds the initializer from, the JAX initializer)
def vs(scale, mode, dist, **axes):
    desc = {"kind": "variance_scaling", "scale": scale, "mode": mode, "distribution": dist}
    desc.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in axes.items()})
    return desc, I.variance_scaling(scale, mode, dist, **axes)


INITS = [
    ("zeros", {"kind": "zeros"}, I.zeros),
    ("ones", {"kind": "ones"}, I.ones),
    ("constant_m7.25", {"kind": "constant", "value": -7.25}, I.constant(-7.25)),
    ("constant_0.1", {"kind": "constant", "value": 0.1}, I.constant(0.1)),
    ("normal", {"kind": "normal", "stddev": 1e-2}, I.normal()),
    ("normal_0.5", {"kind": "normal", "stddev": 0.5}, I.normal(0.5)),
    ("uniform", {"kind": "uniform", "scale": 1e-2}, I.uniform()),
    ("uniform_3", {"kind": "uniform", "scale": 3.0}, I.uniform(3.0)),
    ("truncated_normal", {"kind": "truncated_normal", "stddev": 1e-2, "lower": -2.0, "upper": 2.0},
     I.truncated_normal()),
    ("truncated_normal_0.3", {"kind": "truncated_normal", "stddev": 0.3, "lower": -1.5, "upper": 0.5},
     I.truncated_normal(0.3, lower=-1.5, upper=0.5)),
]
for mode in ("fan_in", "fan_out", "fan_avg", "fan_geo_avg"):
    for dist in ("truncated_normal", "normal", "uniform"):
        INITS.append((f"vs_1.3_{mode}_{dist}", *vs(1.3, mode, dist)))
INITS += [
    ("vs_in0_out1", *vs(1.0, "fan_in", "normal", in_axis=0, out_axis=1)),
    ("vs_in01_avg", *vs(2.0, "fan_avg", "truncated_normal", in_axis=(0, 1), out_axis=-1)),
    ("vs_in_m3m2_out_m1", *vs(0.7, "fan_out", "uniform", in_axis=(-3, -2), out_axis=-1)),
    ("vs_batch0", *vs(1.0, "fan_geo_avg", "uniform", batch_axis=0)),
    ("vs_rank1_in0", *vs(1.0, "fan_in", "uniform", in_axis=0)),
    ("embed_default", *vs(1.0, "fan_in", "normal", out_axis=0)),  # flax.linen.Embed's embedding_init
]
for name in ("lecun_normal", "lecun_uniform", "glorot_normal", "glorot_uniform", "xavier_normal", "xavier_uniform",
             "he_normal", "he_uniform", "kaiming_normal", "kaiming_uniform"):
    INITS.append((name, {"kind": name}, getattr(I, name)()))

cases = Cases()
for iname, desc, init in INITS:
    for kname, k in KEYS.items():
        for shape in SHAPES:
            name = f"{iname}/{kname}/{'x'.join(map(str, shape))}"
            base = {"init": desc, "key": key_words(k), "shape": list(shape), "dtype": "float32"}
            with jax.enable_x64(False):
                try:
                    v = init(k, shape, jnp.float32)
                except (ValueError, IndexError) as e:
                    cases.add(name, **base, error=True, jax_message=str(e))
                    continue
                assert v.dtype == jnp.float32
                sizes = {"x": 2, "y": 4}
                divisible = all(
                    d % int(np.prod([sizes[a] for a in ((e,) if isinstance(e, str) else (e or ()))])) == 0
                    for d, e in zip(shape, tuple(spec_for(len(shape))) + (None,) * len(shape)))
                if v.size and divisible:  # JAX's explicit sharding wants even blocks (tessera pads)
                    s = NamedSharding(MESH, spec_for(len(shape)))
                    with jax.set_mesh(MESH):
                        vsh = init(k, shape, jnp.float32, out_sharding=s)
                    assert vsh.sharding.spec == s.spec, (name, vsh.sharding)
                    assert np.array_equal(np.asarray(vsh), np.asarray(v)), (name, "sharded differs")
            cases.add(name, **base, values=bits_of(v))

# float64 (JAX with x64): a few initializers on one shape.
for iname, desc, init in INITS:
    if iname not in ("normal_0.5", "uniform_3", "truncated_normal_0.3", "vs_1.3_fan_avg_truncated_normal",
                     "vs_1.3_fan_in_normal", "vs_1.3_fan_geo_avg_uniform", "he_normal", "constant_0.1"):
        continue
    k = KEYS["k0"]
    v = init(k, (5, 7), jnp.float64)
    assert v.dtype == jnp.float64
    cases.add(f"{iname}/k0/5x7/float64", init=desc, key=key_words(k), shape=[5, 7], dtype="float64",
              values=bits_of(v))

cases.write("jax_initializers.json", "tools/jax_reference/gen_initializers.py")
