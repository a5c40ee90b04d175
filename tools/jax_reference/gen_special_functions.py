"""Writes tests/golden/jax_special_functions.json: jax.lax.erf, erfc and jax.nn.gelu (both forms), silu
and softplus, their values and gradients, for tests/jax/special_functions_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_special_functions.py

Cases:
  "<f>/f32", "<f>/f64": a sweep of inputs (tiny, near 0, the interpolants' edges, past them, +-inf, NaN)
      and JAX's outputs, both as bit patterns (uint32 / uint64), so the test counts ulps; the float64
      cases run with jax_enable_x64.
  "<f>/grad": jax.grad(lambda x: jnp.sum(f(x))) at float32 points in [-5, 5], as bit patterns.
  "<f>/sharded@e2x4", "<f>/sharded@a2x4": f and jax.grad of sum(f) on a float32[8, 12] input sharded
      P("X", "Y") over a 2x4 mesh with Explicit / Auto axes: values, str(jax.typeof) of the result and
      of the gradient (inside jax.set_mesh).
  "<f>/shard_map": jax.grad through a shard_map whose body applies f to its block and psums the block's
      sum: the gradient's values (check_vma=False: JAX 0.12's erfc fails its own vma check in a body).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

FUNCS = {
    "erf": jax.lax.erf,
    "erfc": jax.lax.erfc,
    "gelu": jax.nn.gelu,
    "gelu_exact": lambda x: jax.nn.gelu(x, approximate=False),
    "silu": jax.nn.silu,
    "softplus": jax.nn.softplus,
}


def bits(x):
    x = np.asarray(x)
    if x.dtype == np.float32:
        return [int(v) for v in x.view(np.uint32).reshape(-1)]
    assert x.dtype == np.float64
    return [int(v) for v in x.view(np.uint64).reshape(-1)]


def sweep(dtype):
    edges = [0.0, -0.0, 1e-45, 1e-40, 1.2e-38, 1e-30, 1e-20, 1e-10, 1e-7, 1e-4, 3.9e-4, 4e-4, 0.01, 0.5, 0.84375,
             1.0, 1.25, 2.0, 3.0, 3.8, 3.832506856900711, 3.8325069, 3.9, 4.0, 5.0, 7.9, 7.99881172180175781,
             8.0, 9.0, 10.0, 15.0, 20.0, 26.0, 30.0, 80.0, 88.0, 89.0, 100.0, 1e10, 1e30, 3.4e38, np.inf]
    xs = np.concatenate([np.linspace(-6.0, 6.0, 1201), np.array(edges), -np.array(edges), [np.nan]])
    if dtype == np.float64:
        xs = np.concatenate([xs, [1e-300, -1e-300, 5e-324, 1e300, -1e300]])
    return xs.astype(dtype)


cases = common.Cases()

for name, f in FUNCS.items():
    x32 = sweep(np.float32)
    cases.add(f"{name}/f32", x=bits(x32), y=bits(f(jnp.asarray(x32))))
    with jax.enable_x64(True):
        x64 = sweep(np.float64)
        cases.add(f"{name}/f64", x=bits(x64), y=bits(f(jnp.asarray(x64))))
    xg = np.linspace(-5.0, 5.0, 201).astype(np.float32)
    g = jax.grad(lambda v: jnp.sum(f(v)))(jnp.asarray(xg))
    cases.add(f"{name}/grad", x=bits(xg), dx=bits(g))

xs = (common.smooth((8, 12), 3) * 2.5).astype(np.float32)
for key, kind in (("e2x4", AxisType.Explicit), ("a2x4", AxisType.Auto)):
    mesh = common.make_mesh((2, 4), ("X", "Y"), kind)
    with jax.set_mesh(mesh):
        x = jax.device_put(xs, NamedSharding(mesh, P("X", "Y")))
        for name, f in FUNCS.items():
            y = jax.jit(f)(x)
            g = jax.jit(jax.grad(lambda v: jnp.sum(f(v))))(x)
            cases.add(f"{name}/sharded@{key}", x=bits(xs), y=bits(y), dx=bits(g), typeof_y=str(jax.typeof(y)),
                      typeof_dx=str(jax.typeof(g)))

mesh = common.make_mesh((2, 4), ("X", "Y"), AxisType.Explicit)
with jax.set_mesh(mesh):
    x = jax.device_put(xs, NamedSharding(mesh, P("X", "Y")))
    for name, f in FUNCS.items():
        body = jax.shard_map(lambda b, f=f: jax.lax.psum(jnp.sum(f(b)), ("X", "Y")), mesh=mesh,
                             in_specs=P("X", "Y"), out_specs=P(), check_vma=False)
        g = jax.jit(jax.grad(body))(x)
        cases.add(f"{name}/shard_map", x=bits(xs), dx=bits(g))

cases.write("jax_special_functions.json", "tools/jax_reference/gen_special_functions.py")
