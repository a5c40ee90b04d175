"""Writes tests/golden/jax_jit.json: jax.jit of element-wise, reduction, matmul and composed
programs on Auto meshes, for tests/jax/jit_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_jit.py

Every case puts its inputs (float32, small integers, stored in the case) on a mesh of Auto axes
with a NamedSharding each, runs jax.jit(program) without out_shardings, and records the output
values (flat, row-major) and the output sharding spec XLA's propagation chose, normalised: a
list with one entry per dimension (null, "x", or ["x", "y"] for a multi-axis entry), trailing
nulls dropped. Case names are "<program>@<mesh>:<spec>,<spec>,..." with a spec written one
character per dimension ("_" for None, "(xy)" for a multi-axis entry, "r" for P()).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

# JAX 0.12's make_mesh defaults to Explicit axes; these cases are about Auto (XLA's propagation).
MESHES = {
    "8": ((8,), ("x",)),
    "2x4": ((2, 4), ("x", "y")),
    "4x2": ((4, 2), ("x", "y")),
    "2x2x2": ((2, 2, 2), ("x", "y", "z")),
    "1": ((1,), ("x",)),
    "2": ((2,), ("x",)),
    "4": ((4,), ("x",)),
    "2x2": ((2, 2), ("x", "y")),
}


def make_mesh(key):
    shape, names = MESHES[key]
    return common.make_mesh(shape, names, AxisType.Auto)


def values(shape, i):
    """Input i: small integers in [-5, 5], a different pattern per input, exact in float32."""
    n = int(np.prod(shape, dtype=np.int64))
    return (((np.arange(n) * (2 * i + 3) + 7 * i) % 11) - 5).astype(np.float32).reshape(shape)


def softmax0(x):
    e = jnp.exp(x)
    return e / jnp.sum(e, axis=0)


def softmax1(x):
    e = jnp.exp(x)
    return e / jnp.sum(e, axis=1, keepdims=True)


# name -> (function, input shapes, relative tolerance)
# rtol: 0 where every value is exact (small-integer sums in any order); a few ulp where exp/sin
# or a division may round differently in XLA and tessera.
PROGRAMS = {
    "add": (lambda a, b: a + b, [(8, 8), (8, 8)], 0.0),
    "sin2p1": (lambda x: 2 * jnp.sin(x) + 1, [(8, 8)], 1e-6),
    "sin2p1_1d": (lambda x: 2 * jnp.sin(x) + 1, [(16,)], 1e-6),
    "mulsub": (lambda a, b, c: a * b - c, [(8, 8), (8, 8), (8, 8)], 0.0),
    "add_row": (lambda a, r: a + r, [(8, 8), (8,)], 0.0),
    "add_col": (lambda a, c: a + c, [(8, 8), (8, 1)], 0.0),
    "scalars": (lambda x: x * 3 + 0.5, [(8, 8)], 0.0),
    "add_rank0": (lambda x, s: x + s, [(8, 8), ()], 0.0),
    "relu_sub": (lambda a, b: jax.nn.relu(a - b), [(8, 8), (8, 8)], 0.0),
    "sum0": (lambda x: jnp.sum(x, axis=0), [(8, 8)], 0.0),
    "sum1": (lambda x: jnp.sum(x, axis=1), [(8, 8)], 0.0),
    "sum": (lambda x: jnp.sum(x), [(8, 8)], 0.0),
    "max0": (lambda x: jnp.max(x, axis=0), [(8, 8)], 0.0),
    "max1": (lambda x: jnp.max(x, axis=1), [(8, 8)], 0.0),
    "max": (lambda x: jnp.max(x), [(8, 8)], 0.0),
    "min0": (lambda x: jnp.min(x, axis=0), [(8, 8)], 0.0),
    "min1": (lambda x: jnp.min(x, axis=1), [(8, 8)], 0.0),
    "min": (lambda x: jnp.min(x), [(8, 8)], 0.0),
    "mean0": (lambda x: jnp.mean(x, axis=0), [(8, 8)], 1e-6),
    "mean1": (lambda x: jnp.mean(x, axis=1), [(8, 8)], 1e-6),
    "mean": (lambda x: jnp.mean(x), [(8, 8)], 1e-6),
    "sum02_3d": (lambda x: jnp.sum(x, axis=(0, 2)), [(4, 8, 8)], 0.0),
    "sum1_3d": (lambda x: jnp.sum(x, axis=1), [(4, 8, 8)], 0.0),
    "mean2_3d": (lambda x: jnp.mean(x, axis=2), [(4, 8, 8)], 1e-6),
    "max01_3d": (lambda x: jnp.max(x, axis=(0, 1)), [(4, 8, 8)], 0.0),
    "matmul": (lambda a, b: a @ b, [(8, 16), (16, 8)], 0.0),
    "bmm": (lambda a, b: a @ b, [(4, 8, 16), (4, 16, 8)], 0.0),
    "matvec": (lambda a, v: a @ v, [(8, 16), (16,)], 0.0),
    "vecmat": (lambda v, b: v @ b, [(16,), (16, 8)], 0.0),
    "vecvec": (lambda u, v: u @ v, [(16,), (16,)], 0.0),
    "layer": (lambda x, w, b: jax.nn.relu(x @ w + b), [(8, 16), (16, 8), (8,)], 0.0),
    "sigmoid_layer": (lambda x, w, b: jax.nn.sigmoid(x @ w + b), [(8, 16), (16, 8), (8,)], 1e-6),
    "softmax0": (softmax0, [(8, 8)], 1e-6),
    "softmax1": (softmax1, [(8, 8)], 1e-6),
    "center0": (lambda x: x - jnp.mean(x, axis=0), [(8, 8)], 1e-6),
    "scaled_matmul": (lambda a, b: 2.0 * (a @ b) - (a @ b), [(8, 16), (16, 8)], 0.0),
}

# (program, mesh, input specs)
CASES = [
    # element-wise
    ("add", "2x4", "xy,xy"), ("add", "4x2", "xy,xy"), ("add", "8", "x_,x_"), ("add", "2", "x_,x_"),
    ("add", "4", "x_,x_"), ("add", "1", "x_,x_"), ("add", "2x4", "xy,_y"), ("add", "2x4", "x_,_y"),
    ("add", "2x4", "r,xy"), ("add", "2x4", "r,r"), ("add", "2x4", "xy,yx"), ("add", "8", "x_,_x"),
    ("add", "2x4", "x_,y_"), ("add", "2x2x2", "(xy)z,(xy)z"), ("add", "2x2x2", "(xyz)_,(xyz)_"),
    ("add", "2x2", "xy,r"), ("add", "2x4", "x_,_x"), ("add", "2x4", "_y,y_"), ("add", "4x2", "yx,xy"),
    ("sin2p1", "2x4", "xy"), ("sin2p1", "4x2", "xy"), ("sin2p1", "2x4", "yx"), ("sin2p1", "2x4", "(xy)_"),
    ("sin2p1", "2x2x2", "xz"), ("sin2p1_1d", "8", "x"), ("sin2p1_1d", "1", "x"), ("sin2p1_1d", "2", "x"),
    ("sin2p1_1d", "4", "x"),
    ("mulsub", "2x4", "xy,xy,xy"), ("mulsub", "2x4", "x_,_y,r"), ("mulsub", "2x2x2", "x_,_y,z_"),
    ("mulsub", "8", "x_,r,x_"),
    ("add_row", "2x4", "xy,y"), ("add_row", "2x4", "xy,r"), ("add_row", "2x4", "x_,y"), ("add_row", "8", "_x,x"),
    ("add_row", "2x4", "xy,x"), ("add_row", "8", "x_,x"),
    ("add_col", "2x4", "xy,y_"), ("add_col", "2x4", "xy,x_"), ("add_col", "2x4", "_y,x_"), ("add_col", "2x4", "xy,r"),
    ("scalars", "8", "x_"), ("scalars", "2x4", "xy"), ("scalars", "4x2", "yx"),
    ("add_rank0", "2x4", "xy,r"), ("relu_sub", "2x4", "xy,xy"),
    # reductions
    ("sum0", "2x4", "xy"), ("sum1", "2x4", "xy"), ("sum", "2x4", "xy"),
    ("max0", "2x4", "xy"), ("max1", "2x4", "xy"), ("max", "2x4", "xy"),
    ("min0", "2x4", "xy"), ("min1", "2x4", "xy"), ("min", "2x4", "xy"),
    ("mean0", "2x4", "xy"), ("mean1", "2x4", "xy"), ("mean", "2x4", "xy"),
    ("sum0", "4x2", "yx"), ("sum1", "4x2", "yx"), ("sum", "4x2", "yx"),
    ("sum0", "2x2x2", "(xy)z"), ("sum1", "2x2x2", "(xy)z"), ("sum", "2x2x2", "(xy)z"),
    ("sum0", "8", "x_"), ("sum1", "8", "x_"), ("max0", "8", "_x"), ("mean0", "8", "x_"),
    ("sum02_3d", "2x2x2", "xyz"), ("sum1_3d", "2x2x2", "xyz"), ("mean2_3d", "2x2x2", "xyz"),
    ("max01_3d", "2x2x2", "xyz"),
    ("sum0", "1", "x_"), ("sum0", "2", "x_"), ("sum", "2", "x_"), ("sum1", "2x2", "xy"),
    # matmul
    ("matmul", "8", "x_,r"), ("matmul", "2x4", "x_,r"), ("matmul", "2", "x_,r"), ("matmul", "4", "x_,r"),
    ("matmul", "2x4", "r,_y"), ("matmul", "2x4", "x_,_y"), ("matmul", "4x2", "x_,_y"),
    ("matmul", "8", "_x,x_"), ("matmul", "2x4", "_x,x_"), ("matmul", "2", "_x,x_"), ("matmul", "1", "_x,x_"),
    ("matmul", "8", "_x,r"), ("matmul", "8", "r,x_"),
    ("matmul", "2x4", "xy,y_"), ("matmul", "4x2", "xy,y_"), ("matmul", "2x2x2", "xy,yz"),
    ("matmul", "8", "x_,_x"), ("matmul", "8", "x_,x_"), ("matmul", "8", "_x,_x"), ("matmul", "2x4", "_x,y_"),
    ("matmul", "2x4", "xy,x_"), ("matmul", "2x4", "x_,y_"), ("bmm", "2x4", "x__,y__"),
    ("bmm", "2x4", "x__,x__"), ("bmm", "2x4", "x_y,xy_"), ("bmm", "2x4", "xy_,x__"), ("bmm", "2x2x2", "xyz,xz_"),
    ("matvec", "8", "_x,x"), ("matvec", "2x4", "xy,y"), ("vecmat", "8", "x,x_"), ("vecvec", "8", "x,x"),
    ("scaled_matmul", "2x4", "xy,y_"),
    # composed
    ("layer", "8", "x_,r,r"), ("layer", "2x4", "x_,_y,y"), ("layer", "8", "_x,x_,r"), ("layer", "2x4", "xy,y_,r"),
    ("layer", "2", "x_,r,r"), ("layer", "1", "x_,r,r"), ("layer", "2x4", "x_,_y,x"), ("sigmoid_layer", "8", "x_,r,r"),
    ("softmax0", "2x4", "xy"), ("softmax0", "8", "x_"), ("softmax0", "8", "_x"),
    ("softmax1", "2x4", "xy"), ("softmax1", "8", "x_"),
    ("center0", "2x4", "xy"),
]

# Cases where tessera's Auto-axis rule deliberately picks another output sharding than XLA's
# propagation (docs/global-view.md, "Sharding rules"; docs/matmul-and-partial-sums.md): on a
# conflict XLA replicates the clashing dimensions, tessera reshards one operand (the one of lower
# rank, else the right one; for matmul, b) and keeps the other's sharding. The golden keeps JAX's
# answer; the C++ check asserts tessera's.
DIFFERENCES = {
    "add@2x4:xy,yx": "auto_conflict_keeps_left_operand",
    "add@2x4:x_,y_": "auto_conflict_keeps_left_operand",
    "add@4x2:yx,xy": "auto_conflict_keeps_left_operand",
    "mulsub@2x2x2:x_,_y,z_": "auto_conflict_keeps_left_operand",
    "bmm@2x4:x__,y__": "auto_conflict_matmul_b_gives_way",
}


def main():
    c = common.Cases()
    meshes = {k: make_mesh(k) for k in MESHES}
    for prog, mesh_key, specs in CASES:
        fn, shapes, rtol = PROGRAMS[prog]
        mesh = meshes[mesh_key]
        spec_list = specs.split(",")
        assert len(spec_list) == len(shapes), (prog, specs)
        inputs, args = [], []
        for i, (shape, s) in enumerate(zip(shapes, spec_list)):
            spec = common.parse_spec(s)
            host = values(shape, i)
            args.append(jax.device_put(host, NamedSharding(mesh, spec)))
            inputs.append({"shape": list(shape), "spec": common.spec_json(spec, len(shape)),
                           "values": host.reshape(-1).tolist()})
        out = jax.jit(fn)(*args)
        assert out.dtype == jnp.float32, (prog, out.dtype)
        assert isinstance(out.sharding, NamedSharding), (prog, out.sharding)
        name = f"{prog}@{mesh_key}:{specs}"
        extra = {"difference": DIFFERENCES[name]} if name in DIFFERENCES else {}
        c.add(name, mesh=list(MESHES[mesh_key][0]), axis_names=list(MESHES[mesh_key][1]),
              program=prog, inputs=inputs, out_shape=list(out.shape),
              out_values=np.asarray(out).reshape(-1).astype(float).tolist(),
              out_spec=common.spec_json(out.sharding.spec, out.ndim), rtol=rtol, **extra)
    assert set(DIFFERENCES) <= set(c.cases), set(DIFFERENCES) - set(c.cases)
    c.write("jax_jit.json", "tools/jax_reference/gen_jit.py")


if __name__ == "__main__":
    main()
