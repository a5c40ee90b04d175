"""Writes tests/golden/jax_scans.json: jnp.cumsum, jnp.cumprod, jax.lax.cummax and jax.lax.cummin (forward
and reverse=True) on sharded float32 inputs, their result types and values, and jax.grad of
sum(w * scan(x)), for tests/jax/scans_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_scans.py

Cases:
  "<config>/<op>" and "<config>/<op>/rev", for each config in CONFIGS (a mesh, Auto or Explicit axes, a
      shape, a spec, an axis): x and w (float32, multiples of 1/8, so cummax and cummin have ties), the
      scan's values, str(jax.typeof) of the result and of the gradient (Explicit: the sharding is in the
      type; Auto: it is not), and "layout_y", the result's type with the sharding the compiled jit gave it
      (on Auto axes the compiler's choice: the operand's, even along a sharded scanned dimension).
  "dtype/<name>": result dtypes and values of integer and boolean scans (jnp.cumsum of int8 stays int8;
      of bool is int32).
  "ties/<name>", "zeros/<name>": jax.grad at inputs with equal values (cummax, cummin) and zeros (cumprod).
  "explicit_error": the text of JAX's error for a scan along a dimension sharded over an Explicit axis.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

# jnp takes negative axes, jax.lax does not (tessera takes them everywhere, as jnp).
OPS = {
    "cumsum": lambda x, axis, rev: jax.lax.cumsum(x, axis % x.ndim, reverse=rev) if rev else jnp.cumsum(x, axis=axis),
    "cumprod": lambda x, axis, rev: jax.lax.cumprod(x, axis % x.ndim, reverse=rev) if rev else jnp.cumprod(x, axis=axis),
    "cummax": lambda x, axis, rev: jax.lax.cummax(x, axis % x.ndim, reverse=rev),
    "cummin": lambda x, axis, rev: jax.lax.cummin(x, axis % x.ndim, reverse=rev),
}

MESHES = {
    "x8": ((8,), ("x",)),
    "XY": ((2, 4), ("X", "Y")),
    "abc": ((2, 2, 2), ("a", "b", "c")),
}

# (name, mesh, Explicit?, shape, spec, axis). Explicit configs scan an unsharded dimension (JAX refuses
# the others); Auto configs scan sharded ones too.
CONFIGS = [
    ("x8_auto_x_0", "x8", False, (16,), "x", 0),
    ("x8_expl_r_0", "x8", True, (16,), "_", 0),
    ("XY_auto_XY_0", "XY", False, (8, 12), "XY", 0),
    ("XY_auto_XY_-1", "XY", False, (8, 12), "XY", -1),
    ("XY_expl_X__1", "XY", True, (8, 12), "X_", 1),
    ("XY_expl__Y_0", "XY", True, (8, 12), "_Y", 0),
    ("abc_auto_abc_1", "abc", False, (4, 6, 8), "abc", 1),
    ("abc_auto_(ca)_b_0", "abc", False, (4, 6, 8), "(ca)_b", 0),
    ("abc_expl_a_c_1", "abc", True, (4, 6, 8), "a_c", 1),
]


def layout_type(y):
    """y's type with the sharding it has (what jax.typeof prints on Explicit axes)."""
    spec = y.sharding.spec
    dims = []
    for d, n in enumerate(y.shape):
        e = spec[d] if d < len(spec) else None
        if e is None:
            dims.append(str(n))
        elif isinstance(e, (tuple, list)):
            dims.append(f"{n}@{e[0]}" if len(e) == 1 else f"{n}@({','.join(e)})")
        else:
            dims.append(f"{n}@{e}")
    return f"{y.dtype}[{','.join(dims)}]"


cases = common.Cases()

for name, mesh_name, explicit, shape, spec_text, axis in CONFIGS:
    sizes, names = MESHES[mesh_name]
    mesh = common.make_mesh(sizes, names, AxisType.Explicit if explicit else AxisType.Auto)
    xs = common.smooth(shape, 1)
    ws = common.smooth(shape, 4)
    with jax.set_mesh(mesh):
        sharding = NamedSharding(mesh, common.parse_spec(spec_text))
        x = jax.device_put(xs, sharding)
        w = jax.device_put(ws, sharding)
        for op, f in OPS.items():
            for rev in (False, True):
                y = jax.jit(lambda v, f=f, rev=rev: f(v, axis, rev))(x)
                g = jax.jit(jax.grad(lambda v, u, f=f, rev=rev: jnp.sum(u * f(v, axis, rev))))(x, w)
                cases.add(f"{name}/{op}" + ("/rev" if rev else ""), x=common.flat(xs), w=common.flat(ws),
                          y=common.flat(y), dx=common.flat(g), typeof_y=str(jax.typeof(y)),
                          typeof_dx=str(jax.typeof(g)), layout_y=layout_type(y))

# Element types: jnp.cumsum keeps integer types (no widening, unlike jnp.sum), bool becomes int32.
ints = (np.arange(24) * 37 % 29 - 9).astype(np.int8).reshape(4, 6)
for dname, arr, f in (
    ("cumsum_int8", ints, lambda v: jnp.cumsum(v, axis=1)),
    ("cumsum_bool", (np.arange(24) % 3 != 0).reshape(4, 6), lambda v: jnp.cumsum(v, axis=0)),
    ("cumprod_bool", (np.arange(24) % 5 != 0).reshape(4, 6), lambda v: jnp.cumprod(v, axis=1)),
    ("cummax_int32", ints.astype(np.int32), lambda v: jax.lax.cummax(v, 0)),
    ("cummin_int8_rev", ints, lambda v: jax.lax.cummin(v, 1, reverse=True)),
):
    y = f(jnp.asarray(arr))
    cases.add(f"dtype/{dname}", x=np.asarray(arr).astype(np.int64).reshape(-1).tolist(), dtype_x=str(arr.dtype),
              dtype_y=str(y.dtype), y=np.asarray(y).astype(np.int64).reshape(-1).tolist())

# Gradients at ties and zeros, on a line of 8 sharded over x8 (Auto) and replicated.
tie_inputs = {
    "ones": np.ones(8, np.float32),
    "steps": np.array([1, 1, 2, 2, 2, 0, 3, 3], np.float32),
    "zeros": np.array([1, 0, 2, 0, 3, 4, 0.5, 2], np.float32),
    "one_zero": np.array([2, 1.5, 0.5, 0, 3, 1, 2, 1], np.float32),
}
for iname, xs in tie_inputs.items():
    for op in ("cumprod", "cummax", "cummin"):
        for rev in (False, True):
            f = OPS[op]
            g = jax.grad(lambda v, f=f, rev=rev: jnp.sum(f(v, 0, rev)))(jnp.asarray(xs))
            cases.add(f"ties/{iname}/{op}" + ("/rev" if rev else ""), x=common.flat(xs), dx=common.flat(g))

mesh = common.make_mesh((2, 4), ("X", "Y"), AxisType.Explicit)
with jax.set_mesh(mesh):
    x = jax.device_put(common.smooth((8, 12), 1), NamedSharding(mesh, common.parse_spec("XY")))
    try:
        jnp.cumsum(x, axis=0)
        raise AssertionError("JAX accepted a scan along an Explicit sharded dimension")
    except Exception as e:  # noqa: BLE001  (core.ShardingTypeError, not exported)
        assert type(e).__name__ == "ShardingTypeError", type(e)
        cases.add("explicit_error", message=str(e))

cases.write("jax_scans.json", "tools/jax_reference/gen_scans.py")
