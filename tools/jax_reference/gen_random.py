"""Writes tests/golden/random.json: jax.random's answers, for tests/unit/random_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_random.py
Floats are stored as their bit patterns (uint32 or uint64), so the test compares bits.
Every case runs twice in JAX, unsharded and sharded over 8 CPU devices, and the script
checks that both agree (JAX's partitionable threefry: the bits do not depend on the sharding).
"""
import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)
jax.config.update("jax_enable_x64", True)  # 64-bit dtypes; 32-bit seeds are made as JAX without x64 makes them
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402
from jax._src.random import threefry2x32 as prng  # noqa: E402

assert jax.config.jax_threefry_partitionable, "JAX's default since 0.5: partitionable threefry"
assert len(jax.devices()) == 8

OUT = os.path.join(os.environ.get("TESSERA_GOLDEN_OUT", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden")),
                   "random.json")
MESH = jax.make_mesh((4, 2), ("a", "b"))


def key_words(k):
    return [int(w) for w in np.asarray(jax.random.key_data(k)).reshape(-1)]


def bits_of(x):
    x = np.asarray(x)
    if x.dtype == np.float32:
        return x.view(np.uint32).reshape(-1).tolist()
    if x.dtype == np.float64:
        return x.view(np.uint64).reshape(-1).tolist()
    if x.dtype == np.bool_:
        return x.astype(np.uint8).reshape(-1).tolist()
    return [int(v) for v in x.reshape(-1)]


def spec_for(shape):
    """A sharding over the 4x2 mesh that splits as many dimensions as it can (uneven ones are padded in JAX)."""
    axes = ["a", "b"]
    spec = []
    for d in shape:
        if axes and d % (4 if axes[0] == "a" else 2) == 0 and d > 0:
            spec.append(axes.pop(0))
        else:
            spec.append(None)
    return NamedSharding(MESH, P(*spec))


def sharded_agrees(fn, shape, unsharded, exact=True):
    """The same sampler with out_sharding gives the same values (JAX's own check of sharding invariance).
    truncated_normal is only close: under an outer jit XLA folds erf(lower) and erf(upper) at compile
    time with the C library's erf, while op by op they run through XLA's polynomial (a few ulp apart)."""
    s = spec_for(shape)
    if all(p is None for p in s.spec):
        return
    got = np.asarray(jax.jit(fn, out_shardings=s)())
    want = np.asarray(unsharded)
    if exact:
        assert np.array_equal(got, want, equal_nan=True), (shape, s)
    else:
        assert np.allclose(got, want, rtol=4 * np.finfo(want.dtype).eps, atol=0), (shape, s)


SEEDS = [0, 1, 42, 1701, 2**31 - 1, -1, -7, 2**31, 2**32 + 5, 2**40 + 3, 2**63 - 1, -(2**63)]
SHAPES = [(), (0,), (1,), (7,), (13,), (8,), (3, 5), (4, 6), (2, 3, 4), (5, 1, 8), (1031,)]

cases = {"seeds": [], "split": [], "fold_in": [], "bits": [], "uniform": [], "normal": [],
         "truncated_normal": [], "bernoulli": [], "randint": [], "bits_at": []}

# Seeds: JAX without x64 makes a Python int an int64 NumPy scalar, then an int32 array (the
# low 32 bits); with x64 it stays 64-bit and the high word is kept.
for seed in SEEDS:
    with jax.enable_x64(False):
        k32 = key_words(jax.random.key(seed))
        raw32 = [int(w) for w in np.asarray(jax.random.PRNGKey(seed))]
    assert k32 == raw32
    k64 = key_words(jax.random.key(seed))
    cases["seeds"].append({"seed": str(seed), "x32": k32, "x64": k64})

KEYS = [jax.random.key(s) for s in (0, 42, 1701, 2**31 - 1)] + [jax.random.wrap_key_data(
    jnp.array([0xDEADBEEF, 0x12345678], dtype=jnp.uint32))]

for k in KEYS:
    for n in (1, 2, 3, 8):
        cases["split"].append({"key": key_words(k), "n": n,
                               "keys": [key_words(x) for x in jax.random.split(k, n)]})
    for data in (0, 1, 7, 2**31 - 1, 2**32 - 1):
        cases["fold_in"].append({"key": key_words(k), "data": data,
                                 "key_out": key_words(jax.random.fold_in(k, np.uint32(data)))})

for ki, k in enumerate(KEYS):
    for shape in SHAPES:
        for dt in ("uint8", "uint16", "uint32", "uint64"):
            f = lambda k=k, shape=shape, dt=dt: jax.random.bits(k, shape, jnp.dtype(dt))
            v = f()
            sharded_agrees(f, shape, v)
            cases["bits"].append({"key": key_words(k), "shape": list(shape), "dtype": dt, "values": bits_of(v)})
        for dt in ("float32", "float64"):
            for lo, hi in ((0.0, 1.0), (-3.5, 2.25), (5.0, 5.0)):
                f = lambda k=k, shape=shape, dt=dt, lo=lo, hi=hi: jax.random.uniform(k, shape, jnp.dtype(dt), lo, hi)
                v = f()
                sharded_agrees(f, shape, v)
                cases["uniform"].append({"key": key_words(k), "shape": list(shape), "dtype": dt,
                                         "minval": lo, "maxval": hi, "values": bits_of(v)})
            f = lambda k=k, shape=shape, dt=dt: jax.random.normal(k, shape, jnp.dtype(dt))
            v = f()
            sharded_agrees(f, shape, v)
            cases["normal"].append({"key": key_words(k), "shape": list(shape), "dtype": dt, "values": bits_of(v)})
            # (-1.5, 0.5): -1.5 / sqrt(2) is one ulp from -1.5 * (1 / sqrt(2)), the product XLA's
            # simplifier makes of the division; erf then differs by 2 ulps and samples near 0 by thousands.
            for lo, hi in ((-2.0, 2.0), (-1.0, 0.5), (0.25, 3.0), (-1.5, 0.5)):
                f = lambda k=k, shape=shape, dt=dt, lo=lo, hi=hi: jax.random.truncated_normal(
                    k, lo, hi, shape, jnp.dtype(dt))
                v = f()
                sharded_agrees(f, shape, v, exact=False)
                cases["truncated_normal"].append({"key": key_words(k), "shape": list(shape), "dtype": dt,
                                                  "lower": lo, "upper": hi, "values": bits_of(v)})
        for p in (0.0, 0.3, 0.5, 1.0):
            f = lambda k=k, shape=shape, p=p: jax.random.bernoulli(k, jnp.float32(p), shape)
            v = f()
            sharded_agrees(f, shape, v)
            cases["bernoulli"].append({"key": key_words(k), "shape": list(shape), "p": p, "values": bits_of(v)})
        for dt, lo, hi in (("int32", 0, 10), ("int32", -5, 1000003), ("int32", -(2**31), 2**31 - 1),
                           ("int32", 7, 3), ("uint32", 0, 2**31 + 77), ("int64", -(2**40), 2**50),
                           ("uint8", 0, 256), ("int8", -100, 100), ("int16", -3, 3), ("uint64", 5, 2**62)):
            f = lambda k=k, shape=shape, dt=dt, lo=lo, hi=hi: jax.random.randint(k, shape, lo, hi, jnp.dtype(dt))
            v = f()
            sharded_agrees(f, shape, v)
            cases["randint"].append({"key": key_words(k), "shape": list(shape), "dtype": dt,
                                     "minval": lo, "maxval": hi, "values": bits_of(v)})

# More than 2^32 elements: element i of bits() is the cipher of the counter (i >> 32, i & 0xFFFFFFFF),
# XORed (32-bit) or joined (64-bit). JAX cannot hold 2^32 elements here, so its own cipher is run on
# the sampled counters; the script first checks that rule against jax.random.bits where both fit.
def cipher(k, idx):
    idx = np.asarray(idx, dtype=np.uint64)
    hi = jnp.asarray((idx >> np.uint64(32)).astype(np.uint32))
    lo = jnp.asarray((idx & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    kd = jax.random.key_data(k)
    b0, b1 = prng.threefry2x32_p.bind(kd[0], kd[1], hi, lo)
    return np.asarray(b0), np.asarray(b1)


k = KEYS[2]
small = np.arange(1031)
b0, b1 = cipher(k, small)
assert np.array_equal(b0 ^ b1, np.asarray(jax.random.bits(k, (1031,), jnp.uint32)))
assert np.array_equal((b0.astype(np.uint64) << np.uint64(32)) | b1, np.asarray(jax.random.bits(k, (1031,), jnp.uint64)))
big = [2**32 - 1, 2**32, 2**32 + 1, 2**32 + 12345, 3 * 2**32 + 7, 2**40 + 99]
for kk in KEYS[:3]:
    b0, b1 = cipher(kk, big)
    cases["bits_at"].append({"key": key_words(kk), "index": big,
                             "uint32": [int(v) for v in b0 ^ b1],
                             "uint64": [int(v) for v in (b0.astype(np.uint64) << np.uint64(32)) | b1]})

# lax.erf and lax.erf_inv themselves, which normal and truncated_normal are made of.
pts32 = np.linspace(-3.9, 3.9, 4001).astype(np.float32)
cases["erf"] = {"x": bits_of(pts32), "float32": bits_of(jax.lax.erf(jnp.asarray(pts32)))}
u32 = np.linspace(-0.99999, 0.99999, 4001).astype(np.float32)
u64 = np.linspace(-0.9999999999, 0.9999999999, 4001).astype(np.float64)
cases["erf_inv"] = {"x32": bits_of(u32), "float32": bits_of(jax.lax.erf_inv(jnp.asarray(u32))),
                    "x64": bits_of(u64), "float64": bits_of(jax.lax.erf_inv(jnp.asarray(u64)))}

meta = {"generator": "tools/jax_reference/gen_random.py", "jax": jax.__version__,
        "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "",
        "devices": len(jax.devices()), "threefry_partitionable": True}
total = sum(len(v) for v in cases.values() if isinstance(v, list)) + 3
with open(OUT, "w") as f:
    json.dump({"meta": meta, **cases}, f, separators=(",", ":"))
    f.write("\n")
print(f"wrote {total} cases to {os.path.normpath(OUT)}")
