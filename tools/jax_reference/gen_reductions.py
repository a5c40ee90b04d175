"""Writes tests/golden/jax_reductions.json: the reductions with negative axes and keepdims, var, std,
logsumexp, argmax, argmin, softmax, log_softmax, expand_dims and squeeze of sharded arrays, for
tests/jax/reductions_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_reductions.py

The input is float32[8,8] with x[i] = ((37 i) % 19 - 9) / 4 (flat index i; exact in float32, with
ties and zeros), put on Explicit meshes of 1, 2 and 3 axes with a spec per case. Value cases
("<op>@<mesh>:<spec>:ax<axis>[:k]", ":k" for keepdims=True) record str(jax.typeof(result)) and
the values. Gradient cases ("grad_<op>@...") record jax.grad of sum(op(x) * w), w[i] =
((11 i) % 7 - 3) / 2 over the result's flat index, on Auto meshes (JAX 0.12 cannot differentiate
prod on Explicit axes). `rtol` is relative to max(1, |value|): 0 for integer results.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

MESHES = {
    "e8": ((8,), ("X",), AxisType.Explicit),
    "e2x4": ((2, 4), ("X", "Y"), AxisType.Explicit),
    "e2x2x2": ((2, 2, 2), ("X", "Y", "Z"), AxisType.Explicit),
    "a8": ((8,), ("X",), AxisType.Auto),
    "a2x4": ((2, 4), ("X", "Y"), AxisType.Auto),
}
# (mesh, spec) pairs of the value cases: the reduced axis (-1 or 0) sharded or not.
# Few layouts: every one is a set of instantiations in the C++ test, which CI compiles three times.
VALUE_LAYOUTS = [("e8", "X_"), ("e2x4", "XY"), ("e2x2x2", "X(YZ)")]
GRAD_LAYOUTS = [("a2x4", "XY")]
VARIANTS = [(-1, False), (0, True)]

REDUCTIONS = {
    "sum": jnp.sum, "mean": jnp.mean, "max": jnp.max, "min": jnp.min, "prod": jnp.prod,
    "var": jnp.var, "std": jnp.std, "logsumexp": jax.nn.logsumexp,
    "argmax": jnp.argmax, "argmin": jnp.argmin,
}
NORMALISERS = {"softmax": jax.nn.softmax, "log_softmax": jax.nn.log_softmax}
DIFFERENTIABLE = ["sum", "mean", "max", "min", "prod", "var", "std", "logsumexp", "softmax", "log_softmax"]


def op_fn(name, axis, keep):
    if name in NORMALISERS:
        return lambda x: NORMALISERS[name](x, axis=axis)
    return lambda x: REDUCTIONS[name](x, axis=axis, keepdims=keep)


def inputs():
    return ((((np.arange(64) * 37) % 19) - 9) / 4).astype(np.float32).reshape(8, 8)


def weights(shape):
    n = int(np.prod(shape, dtype=np.int64))
    return ((((np.arange(n) * 11) % 7) - 3) / 2).astype(np.float32).reshape(shape)


def rtol(name):
    return 0.0 if name.startswith("arg") else 1e-5


def main():
    cases = common.Cases()
    x_host = inputs()
    for mesh_key, spec in VALUE_LAYOUTS:
        mesh = common.make_mesh(*MESHES[mesh_key])
        with jax.set_mesh(mesh):
            x = jax.device_put(x_host, NamedSharding(mesh, common.parse_spec(spec)))
            for axis, keep in VARIANTS:
                for name in list(REDUCTIONS) + list(NORMALISERS):
                    y = op_fn(name, axis, keep)(x)
                    key = f"{name}@{mesh_key}:{spec}:ax{axis}" + (":k" if keep else "")
                    cases.add(key, typeof=str(jax.typeof(y)), values=common.flat(y), rtol=rtol(name))
            # The views, and a view fused with element-wise operations.
            views = {
                "expand_dims_last": lambda v: jnp.expand_dims(v, -1),
                "expand_dims_0_2": lambda v: jnp.expand_dims(v * 2, (0, 2)),
                "squeeze_of_expand": lambda v: jnp.squeeze(jnp.expand_dims(v, 1) + 1, -2),
            }
            for vname, f in views.items():
                y = f(x)
                cases.add(f"{vname}@{mesh_key}:{spec}", typeof=str(jax.typeof(y)), values=common.flat(y), rtol=0.0)
    for mesh_key, spec in GRAD_LAYOUTS:
        mesh = common.make_mesh(*MESHES[mesh_key])
        with jax.set_mesh(mesh):
            x = jax.device_put(x_host, NamedSharding(mesh, common.parse_spec(spec)))
            for axis, keep in VARIANTS:
                for name in DIFFERENTIABLE:
                    f = op_fn(name, axis, keep)
                    w = jnp.asarray(weights(jax.eval_shape(f, x).shape))
                    g = jax.grad(lambda v: jnp.sum(f(v) * w))(x)
                    key = f"grad_{name}@{mesh_key}:{spec}:ax{axis}" + (":k" if keep else "")
                    cases.add(key, values=common.flat(g), rtol=1e-5)
    cases.write("jax_reductions.json", "tools/jax_reference/gen_reductions.py")


if __name__ == "__main__":
    main()
