"""Writes tests/golden/jax_grad.json: jax.value_and_grad of small programs of sharded arrays, for
tests/jax/grad_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_grad.py

Every case puts its inputs (float32, stored in the case) on a mesh of 1, 2, 4 or 8 CPU devices
with a NamedSharding each, and runs jax.value_and_grad(program, argnums) on them, inside
jax.set_mesh(mesh). It records the value and, for each differentiated argument, the gradient's
values (flat, row-major), str(jax.typeof(gradient)) and its sharding spec, normalised as in
common.spec_json: a list with one entry per dimension (null, "X", or ["X", "Y"]), trailing nulls
dropped. Most meshes have Explicit axes, where JAX's rule is that a cotangent has its primal's
type (sharding in types); the "a" meshes have Auto axes, where the gradient's sharding is what
XLA's propagation gives. JAX 0.12 cannot differentiate prod of an array sharded on Explicit axes
(its rule slices the operand: "slicing on sharded dims ... is not implemented"), so the prod cases
use Auto meshes.

Case names are "<program>@<mesh>:<spec>,<spec>,...", a spec written one character per dimension
("_" for None, "r" for P()); the mesh key is "e" (Explicit) or "a" (Auto) and its shape.

Everything is float32, as in the other generators (jax_enable_x64 stays off). Inputs are exact in
float32 (multiples of 1/8 and small integers), chosen per program: with ties
for max, min, maximum, minimum and clip (JAX shares the cotangent among ties), zeros for abs,
relu and pow, one and two zeros per reduced group for prod. `rtol` is the case's tolerance
(relative to max(1, |value|)): 0 where every value is exact in float32, 1e-6 where a division
or a sum of rounded terms may round differently, 1e-5 where exp, tanh, sin or log (XLA's and the
C++ library's) are involved. A gradient value that is not finite is written as the string "nan",
"inf" or "-inf" (JSON has no such numbers; only pow_zero_zero has one).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P, reshard  # noqa: E402

MESHES = {
    "e1": ((1,), ("X",), AxisType.Explicit),
    "e2": ((2,), ("X",), AxisType.Explicit),
    "e4": ((4,), ("X",), AxisType.Explicit),
    "e8": ((8,), ("X",), AxisType.Explicit),
    "e2x2": ((2, 2), ("X", "Y"), AxisType.Explicit),
    "e2x4": ((2, 4), ("X", "Y"), AxisType.Explicit),
    "a4": ((4,), ("X",), AxisType.Auto),
    "a8": ((8,), ("X",), AxisType.Auto),
    "a2x4": ((2, 4), ("X", "Y"), AxisType.Auto),
}


def make_mesh(key):
    shape, names, kind = MESHES[key]
    return common.make_mesh(shape, names, kind)


# ---- input values: exact in float32 -------------------------------------------------------------

def ties(shape, i):
    """Small integers in [-2, 2]: many ties within every row, column and device block."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((((np.arange(n) * (i + 2) + i) % 5) - 2)).astype(np.float32).reshape(shape)


def positive(shape, i):
    """Multiples of 1/8 in [0.5, 1.75]."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((((np.arange(n) * (2 * i + 3) + 7 * i) % 11) + 4) / 8).astype(np.float32).reshape(shape)


def with_zeros(base, zeros):
    def make(shape, i):
        v = base(shape, i)
        for idx in zeros:
            v[idx] = 0
        return v
    return make


def fixed(*values):
    def make(shape, i):
        return np.array(values, dtype=np.float32).reshape(shape)
    return make


def clip_ties(shape, i):
    """Multiples of 1/4 in [-1, 1]: some exactly at clip's bounds -0.5 and 0.5."""
    n = int(np.prod(shape, dtype=np.int64))
    return ((((np.arange(n) * 5 + 1) % 9) - 4) / 4).astype(np.float32).reshape(shape)


def pow_base(shape, i):
    """Bases for pow: multiples of 1/4 in [0, 2], zeros included."""
    n = int(np.prod(shape, dtype=np.int64))
    return (((np.arange(n) * 5 + 2) % 9) / 4).astype(np.float32).reshape(shape)


def pow_exponent(shape, i):
    """Exponents for pow: multiples of 1/2 in [-1, 3], 0 included; 2 or 3 where the base is 0."""
    n = int(np.prod(shape, dtype=np.int64))
    v = (((np.arange(n) * 3 + 1) % 9) - 2) / 2
    b = pow_base(shape, 0).reshape(-1)
    zeros = np.flatnonzero(b == 0)
    v[zeros] = np.array([2.0, 3.0])[np.arange(len(zeros)) % 2]
    return v.astype(np.float32).reshape(shape)


# ---- the programs ---------------------------------------------------------------------------------

def logreg(x, y, w, b):
    """Seed 002's logistic regression loss."""
    p = jax.nn.sigmoid(x @ w + b)
    return jnp.mean((p - y) ** 2)


def mlp(x, y, w1, b1, w2, b2):
    h = jnp.tanh(x @ w1 + b1)
    out = jnp.matmul(h, w2, out_sharding=P("X", None))  # h's features and w2's rows are both on Y
    return jnp.mean((out + b2 - y) ** 2)


def mix(x):
    """Every element-wise function with a derivative rule of its own."""
    s = x * x
    return jnp.sum(jnp.exp(jnp.sin(x)) * jnp.log1p(s) / jnp.sqrt(s + 1) + jnp.tanh(x) * jax.nn.sigmoid(x)
                   - jnp.cos(x) / (2 + jnp.tan(x * 0.5)) + jax.lax.rsqrt(s + 2) - jnp.log(s + 0.5))


def where_prog(a, b):
    return jnp.sum(jnp.where(a > 0, a * b, b))


# name -> (function, input shapes, argnums, value makers (one per input), rtol)
S, T, labels = common.smooth, ties, common.labels
PROGRAMS = {
    "logreg": (logreg, [(16, 5), (16, 1), (5, 1), (1,)], (2, 3), [S, labels, S, S], 1e-5),
    "tanh_layer": (lambda x, w, b: jnp.sum(jnp.tanh(x @ w + b)), [(8, 6), (6, 4), (4,)], (0, 1, 2), [S, S, S], 1e-5),
    "mlp": (mlp, [(8, 6), (8, 2), (6, 4), (4,), (4, 2), (2,)], (2, 3, 4, 5), [S, S, S, S, S, S], 1e-5),
    "mix": (mix, [(8, 8)], (0,), [S], 1e-5),
    # reductions, weighted by a constant input c so that the cotangent differs per element
    "sum0": (lambda x, c: jnp.sum(jnp.sum(x, axis=0) * c), [(8, 8), (8,)], (0,), [S, S], 0.0),
    "sum1": (lambda x, c: jnp.sum(jnp.sum(x, axis=1) * c), [(8, 8), (8,)], (0,), [S, S], 0.0),
    "sum": (lambda x: jnp.sum(x), [(8, 8)], (0,), [S], 0.0),
    "mean0": (lambda x, c: jnp.sum(jnp.mean(x, axis=0) * c), [(8, 8), (8,)], (0,), [S, S], 1e-6),
    "mean1": (lambda x, c: jnp.sum(jnp.mean(x, axis=1) * c), [(8, 8), (8,)], (0,), [S, S], 1e-6),
    "mean": (lambda x: jnp.mean(x), [(8, 8)], (0,), [S], 1e-6),
    "max0": (lambda x, c: jnp.sum(jnp.max(x, axis=0) * c), [(8, 8), (8,)], (0,), [T, S], 1e-6),
    "max1": (lambda x, c: jnp.sum(jnp.max(x, axis=1) * c), [(8, 8), (8,)], (0,), [T, S], 1e-6),
    "max": (lambda x: jnp.max(x), [(8, 8)], (0,), [T], 1e-6),
    "min0": (lambda x, c: jnp.sum(jnp.min(x, axis=0) * c), [(8, 8), (8,)], (0,), [T, S], 1e-6),
    "min": (lambda x: jnp.min(x), [(8, 8)], (0,), [T], 1e-6),
    # prod: row/column 1 has one zero, 2 has two, 3 has one (at another place), 0 none
    "prod0": (lambda x, c: jnp.sum(jnp.prod(x, axis=0) * c), [(4, 4), (4,)], (0,),
              [with_zeros(positive, [(2, 1), (0, 2), (3, 2), (1, 3)]), S], 1e-6),
    "prod1": (lambda x, c: jnp.sum(jnp.prod(x, axis=1) * c), [(4, 4), (4,)], (0,),
              [with_zeros(positive, [(1, 2), (2, 0), (2, 3), (3, 1)]), S], 1e-6),
    "prod_one_zero": (lambda x: jnp.prod(x), [(4, 4)], (0,), [with_zeros(positive, [(2, 1)])], 1e-6),
    "prod_two_zeros": (lambda x: jnp.prod(x), [(4, 4)], (0,), [with_zeros(positive, [(0, 3), (2, 1)])], 0.0),
    # element-wise choices: ties, zeros, bounds
    "maximum": (lambda a, b, c: jnp.sum(jnp.maximum(a, b) * c), [(8, 4), (8, 4), (8, 4)], (0, 1), [T, T, S], 0.0),
    "minimum": (lambda a, b, c: jnp.sum(jnp.minimum(a, b) * c), [(8, 4), (8, 4), (8, 4)], (0, 1), [T, T, S], 0.0),
    "abs": (lambda x, c: jnp.sum(jnp.abs(x) * c), [(8, 4), (8, 4)], (0,), [T, S], 0.0),
    "relu": (lambda x, c: jnp.sum(jax.nn.relu(x) * c), [(8, 4), (8, 4)], (0,), [T, S], 0.0),
    "clip": (lambda x, c: jnp.sum(jnp.clip(x, -0.5, 0.5) * c), [(8, 4), (8, 4)], (0,), [clip_ties, S], 0.0),
    "where": (where_prog, [(8, 4), (8, 4)], (0, 1), [S, S], 0.0),
    "pow": (lambda a, b: jnp.sum(jnp.power(a, b)), [(8, 4), (8, 4)], (0, 1), [pow_base, pow_exponent], 1e-5),
    # 0 ** 0: JAX's rule for a float exponent, y * x ** (y - 1), gives 0 * inf = nan for the base
    "pow_zero_zero": (lambda a, b: jnp.sum(jnp.power(a, b)), [(8,), (8,)], (0, 1),
                      [fixed(0, 0, 1, 2, 0, 0.5, 1.5, 0), fixed(0, 1, 0, 0.5, 2, 0, -1, 3)], 1e-5),
    "pow3": (lambda x: jnp.sum(jnp.power(x, 3.0)), [(8, 4)], (0,), [S], 1e-6),
    # products: sum(sin(a @ b)), so that the result's cotangent is not uniform
    "matmul": (lambda a, b: jnp.sum(jnp.sin(a @ b)), [(8, 8), (8, 4)], (0, 1), [S, S], 1e-5),
    "matmul_out_r": (lambda a, b: jnp.sum(jnp.sin(jnp.matmul(a, b, out_sharding=P()))), [(8, 8), (8, 4)], (0, 1),
                     [S, S], 1e-5),
    "matmul_out_X_": (lambda a, b: jnp.sum(jnp.sin(jnp.matmul(a, b, out_sharding=P("X", None)))),
                      [(8, 8), (8, 4)], (0, 1), [S, S], 1e-5),
    "vecmat": (lambda v, b: jnp.sum(jnp.sin(v @ b)), [(8,), (8, 8)], (0, 1), [S, S], 1e-5),
    "matvec": (lambda a, v: jnp.sum(jnp.sin(a @ v)), [(8, 8), (8,)], (0, 1), [S, S], 1e-5),
    "vecvec": (lambda u, v: jnp.sin(jnp.matmul(u, v, out_sharding=P())), [(8,), (8,)], (0, 1), [S, S], 1e-5),
    "fsdp": (lambda x, w: jnp.sum(jnp.tanh(x @ reshard(w, P()))), [(8, 8), (8, 4)], (1,), [S, S], 1e-5),
    "fsdp_auto": (lambda x, w: jnp.sum(jnp.tanh(x @ w)), [(8, 8), (8, 4)], (1,), [S, S], 1e-5),
    # broadcasting: a bias of shape [N], [1, N], [M, 1] added to x [M, N]
    "bias_n": (lambda x, b: jnp.sum(jnp.sin(x + b)), [(8, 4), (4,)], (0, 1), [S, S], 1e-5),
    "bias_1n": (lambda x, b: jnp.sum(jnp.sin(x + b)), [(8, 4), (1, 4)], (0, 1), [S, S], 1e-5),
    "bias_m1": (lambda x, b: jnp.sum(jnp.sin(x + b)), [(8, 4), (8, 1)], (0, 1), [S, S], 1e-5),
    "transpose": (lambda x, c: jnp.sum(jnp.sin(x.T) * c), [(8, 4), (4, 8)], (0,), [S, S], 1e-5),
}

# (program, mesh, input specs)
CASES = [
    ("logreg", "e1", "X_,X_,r,r"), ("logreg", "e2", "X_,X_,r,r"), ("logreg", "e4", "X_,X_,r,r"),
    ("logreg", "e8", "X_,X_,r,r"), ("logreg", "a8", "X_,X_,r,r"),
    ("tanh_layer", "e8", "X_,r,r"), ("tanh_layer", "e2x4", "X_,_Y,Y"),
    ("mlp", "e2x4", "X_,X_,_Y,Y,Y_,r"),
    ("mix", "e2x4", "XY"),
    ("sum0", "e2x4", "XY,Y"), ("sum1", "e2x4", "XY,X"), ("sum", "e2x4", "XY"),
    ("mean0", "e2x4", "XY,Y"), ("mean1", "e8", "X_,X"), ("mean", "e2x4", "XY"),
    ("max0", "e2x4", "XY,Y"), ("max1", "e2x4", "XY,X"), ("max", "e2x4", "XY"),
    ("min0", "e8", "X_,r"), ("min", "e8", "_X"),
    ("prod0", "a4", "X_,r"), ("prod1", "a4", "X_,X"), ("prod_one_zero", "a4", "X_"),
    ("prod_two_zeros", "a4", "_X"),
    ("maximum", "e4", "X_,r,X_"), ("minimum", "e2x2", "XY,XY,XY"),
    ("abs", "e4", "X_,X_"), ("relu", "e4", "X_,X_"), ("clip", "e2x2", "XY,XY"),
    ("where", "e2", "X_,X_"), ("pow", "e4", "X_,X_"), ("pow_zero_zero", "e2", "X,X"), ("pow3", "e2x2", "XY"),
    ("matmul", "e8", "X_,r"), ("matmul", "e2x4", "X_,_Y"), ("matmul", "e2x4", "r,_Y"),
    ("matmul_out_r", "e8", "_X,X_"), ("matmul_out_X_", "e2x4", "XY,Y_"), ("matmul", "a8", "_X,X_"),
    ("vecmat", "e8", "r,_X"), ("matvec", "e8", "X_,r"), ("vecvec", "e8", "X,X"),
    ("fsdp", "e4", "X_,X_"), ("fsdp_auto", "a4", "X_,X_"),
    ("bias_n", "e2x4", "XY,Y"), ("bias_1n", "e2x4", "XY,_Y"), ("bias_m1", "e2x4", "XY,X_"),
    ("bias_n", "a2x4", "XY,r"),
    ("transpose", "e2x4", "XY,YX"),
]

# Cases where tessera's answer differs from JAX's (the golden keeps JAX's; the C++ check asserts
# tessera's documented one).
#   auto_grad_keeps_primal_sharding: on Auto axes JAX's eager gradient is laid out as XLA's
#     propagation chose; tessera's has its primal's sharding (docs/autodiff.md), as on Explicit axes.
#   pow_zero_to_the_zero: d/da of a ** b at a = 0, b = 0 (a float exponent) is nan in JAX
#     (b * a ** (b - 1) = 0 * inf) and 0 in tessera (docs/autodiff.md, "Rules"). The value, 0 ** 0
#     = 1 as in JAX, is checked like any other (tessera's pow on SIMD batches gave 0 there until
#     c32d619).
DIFFERENCES = {
    name: "auto_grad_keeps_primal_sharding"
    for name in ("prod0@a4:X_,r", "prod_two_zeros@a4:_X", "fsdp_auto@a4:X_,X_", "bias_n@a2x4:XY,r")
}
DIFFERENCES["pow_zero_zero@e2:X,X"] = "pow_zero_to_the_zero"


def main():
    c = common.Cases()
    meshes = {k: make_mesh(k) for k in MESHES}
    for prog, mesh_key, specs in CASES:
        fn, shapes, argnums, makers, rtol = PROGRAMS[prog]
        mesh = meshes[mesh_key]
        spec_list = specs.split(",")
        assert len(spec_list) == len(shapes) == len(makers), (prog, specs)
        inputs, args = [], []
        for i, (shape, s, make) in enumerate(zip(shapes, spec_list, makers)):
            spec = common.parse_spec(s)
            host = make(shape, i)
            assert host.dtype == np.float32 and host.shape == tuple(shape), (prog, i)
            x = jax.device_put(host, NamedSharding(mesh, spec))
            args.append(x)
            inputs.append({"shape": list(shape), "spec": common.spec_json(spec, len(shape)),
                           "typeof": str(jax.typeof(x)), "values": host.reshape(-1).tolist()})
        with jax.set_mesh(mesh):
            value, grads = jax.value_and_grad(fn, argnums=argnums)(*args)
        assert value.dtype == jnp.float32 and value.shape == (), (prog, value)
        out = []
        for k, g in zip(argnums, grads):
            assert g.dtype == jnp.float32 and g.shape == args[k].shape, (prog, k, g.shape)
            assert isinstance(g.sharding, NamedSharding), (prog, g.sharding)
            out.append({"argnum": k, "typeof": str(jax.typeof(g)), "spec": common.spec_json(g.sharding.spec, g.ndim),
                        "values": common.flat(g)})
        name = f"{prog}@{mesh_key}:{specs}"
        extra = {"difference": DIFFERENCES[name]} if name in DIFFERENCES else {}
        shape, names, kind = MESHES[mesh_key]
        c.add(name, mesh=list(shape), axis_names=list(names),
              axis_type="Explicit" if kind == AxisType.Explicit else "Auto", program=prog, argnums=list(argnums),
              inputs=inputs, value=float(value), grads=out, rtol=rtol, **extra)
    assert set(DIFFERENCES) <= set(c.cases), set(DIFFERENCES) - set(c.cases)
    c.write("jax_grad.json", "tools/jax_reference/gen_grad.py")


if __name__ == "__main__":
    main()
