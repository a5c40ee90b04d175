"""Writes tests/golden/jax_typeof.json: jax.typeof of results on Explicit meshes, for
tests/jax/typeof_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_typeof.py

Each case builds one small program on an Explicit mesh (element-wise operations, reductions,
transpose, matmul/dot in every form, reshard; JAX's own tests/pjit_test.py dot_general cases) and
records jax.typeof of its arguments and of its result, e.g. `float32[8@X,4]`, and for some the
values. A program JAX refuses records {"rejected": true, "jax_error": <first line of the error>};
the C++ test then requires tests/compile_fail/<name>.cpp, where tessera refuses it too, unless
the case names a deliberate "difference".

Arguments are jnp.arange(n, dtype=float32) reshaped and device_put with the case's spec; a spec
is written compactly: "X,-" is P('X', None), "(X,Y),-" is P(('X', 'Y'), None), "" is P().
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

E = AxisType.Explicit
MESHES = {
    "m8": jax.make_mesh((8,), ("X",), axis_types=(E,)),
    "m24": jax.make_mesh((2, 4), ("X", "Y"), axis_types=(E, E)),
    "m222": jax.make_mesh((2, 2, 2), ("X", "Y", "Z"), axis_types=(E, E, E)),
    "m22": jax.make_mesh((2, 2), ("x", "y"), axis_types=(E, E)),  # pjit_test's dot_general mesh
    "m42": jax.make_mesh((4, 2), ("rows", "cols"), axis_types=(E, E)),
}


def parse_spec(text):
    """'X,-' -> P('X', None); '(X,Y),-' -> P(('X', 'Y'), None); '' -> P()."""
    entries, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            entries.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    if text:
        entries.append(cur)
    out = []
    for e in entries:
        e = e.strip()
        if e == "-":
            out.append(None)
        elif e.startswith("("):
            out.append(tuple(a.strip() for a in e[1:-1].split(",")))
        else:
            out.append(e)
    return P(*out)


def red(fn, axes):
    return lambda x: fn(x, axis=axes)


OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "maximum": jnp.maximum,
    "mul_add": lambda a, b: a * b + a,
    "scale": lambda a: 2.0 * a,
    "sin": jnp.sin,
    "exp": jnp.exp,
    "neg": lambda a: -a,
    "matmul": jnp.matmul,
    "dot": jnp.dot,
    "T": lambda a: a.T,
    "put": lambda a: a,
}
for name, fn in (("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("mean", jnp.mean)):
    OPS[name] = red(fn, None)
    for axes in ((0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)):
        OPS[name + "".join(map(str, axes))] = red(fn, axes)
for perm in ((1, 0, 2), (2, 0, 1), (1, 2, 0), (0, 2, 1)):
    OPS["transpose" + "".join(map(str, perm))] = (lambda p: lambda a: jnp.transpose(a, p))(perm)


def make_args(mesh, args):
    out = []
    for shape, spec in args:
        n = int(np.prod(shape))
        host = np.arange(n, dtype=np.float32).reshape(shape)
        out.append(jax.device_put(host, NamedSharding(MESHES[mesh], parse_spec(spec))))
    return out


def first_line(e):
    return str(e).strip().splitlines()[0]


c = common.Cases()


def case(name, mesh, op, *args, values=False, difference=None, fn=None):
    """One program: `op` applied to the arguments (shape, spec) on `mesh`."""
    xs = make_args(mesh, args)
    rec = {"mesh": mesh, "op": op, "args": [{"shape": list(s), "spec": sp, "typeof": str(jax.typeof(x))}
                                           for (s, sp), x in zip(args, xs)]}
    f = fn or OPS[op]
    try:
        r = f(*xs)
    except Exception as e:  # noqa: BLE001 -- JAX's refusal is the answer
        rec.update(rejected=True, jax_error=first_line(e), error_type=type(e).__name__)
    else:
        rec["typeof"] = str(jax.typeof(r))
        if values:
            rec["values"] = np.asarray(r).reshape(-1).tolist()
    if difference:
        rec["difference"] = difference
    c.add(name, **rec)
    return rec


def reject(name, mesh, op, *args, fn=None):
    rec = case(name, mesh, op, *args, fn=fn)
    assert rec.get("rejected"), f"{name}: JAX accepted it: {rec.get('typeof')}"


def accept(name, mesh, op, *args, **kw):
    rec = case(name, mesh, op, *args, **kw)
    assert not rec.get("rejected"), f"{name}: JAX refused it: {rec.get('jax_error')}"


# ---- device_put: the arguments' own types ---------------------------------------------------
accept("put_m8_X", "m8", "put", ((16,), "X"))
accept("put_m8_2d_none_X", "m8", "put", ((4, 8), "-,X"))
accept("put_m24_XY", "m24", "put", ((8, 4), "X,Y"))
accept("put_m24_YX", "m24", "put", ((8, 8), "Y,X"))
accept("put_m24_tuple_XY", "m24", "put", ((8, 4), "(X,Y),-"))
accept("put_m24_tuple_YX", "m24", "put", ((4, 8), "-,(Y,X)"))
accept("put_m24_replicated", "m24", "put", ((8, 4), ""))
accept("put_m24_rank3", "m24", "put", ((2, 8, 4), "X,-,Y"))
accept("put_m222_XYZ", "m222", "put", ((2, 4, 8), "X,Y,Z"))
accept("put_m222_tuple", "m222", "put", ((8, 2), "(X,Y,Z),-"))
accept("put_m222_tuple_ZX", "m222", "put", ((4, 2), "(Z,X),Y"))
accept("put_m42_rows_cols", "m42", "put", ((8, 4), "rows,cols"))

# ---- element-wise ---------------------------------------------------------------------------
accept("ew_same_XY_add", "m24", "add", ((8, 4), "X,Y"), ((8, 4), "X,Y"), values=True)
accept("ew_X_vs_replicated_add", "m24", "add", ((8, 4), "X,-"), ((8, 4), ""))
accept("ew_replicated_vs_X_mul", "m24", "mul", ((8, 4), ""), ((8, 4), "X,-"), values=True)
accept("ew_X_vs_Y_add", "m24", "add", ((8, 4), "X,-"), ((8, 4), "-,Y"), values=True)
accept("ew_Y_vs_X_sub", "m24", "sub", ((8, 8), "Y,-"), ((8, 8), "-,X"))
accept("ew_XY_vs_none_Y_mul", "m24", "mul", ((8, 4), "X,Y"), ((8, 4), "-,Y"))
accept("ew_rank1_right", "m24", "add", ((8, 4), "X,-"), ((4,), "Y"), values=True)
accept("ew_rank1_right_replicated", "m24", "add", ((8, 4), "X,Y"), ((4,), ""))
accept("ew_rank1_left", "m24", "mul", ((4,), "Y"), ((8, 4), "X,-"))
accept("ew_rank1_left_replicated", "m24", "sub", ((4,), ""), ((8, 4), "-,Y"))
accept("ew_size1_row", "m24", "add", ((8, 4), "X,-"), ((1, 4), "-,Y"), values=True)
accept("ew_size1_col", "m24", "add", ((8, 4), "-,Y"), ((8, 1), "X,-"), values=True)
accept("ew_size1_both", "m24", "mul", ((1, 4), "-,Y"), ((8, 1), "X,-"))
accept("ew_tuple_same", "m24", "add", ((8, 4), "(X,Y),-"), ((8, 4), "(X,Y),-"))
accept("ew_tuple_vs_replicated", "m24", "add", ((8, 4), "(X,Y),-"), ((8, 4), ""))
accept("ew_tuple_YX_vs_none", "m24", "mul", ((8, 4), "-,-"), ((8, 4), "(Y,X),-"))
accept("ew_tuple_col_rank1", "m24", "add", ((4, 8), "-,(X,Y)"), ((8,), "(X,Y)"))
accept("ew_rank3_vs_rank2", "m24", "add", ((2, 8, 4), "X,-,Y"), ((8, 4), ""))
accept("ew_rank3_vs_rank2_sharded", "m24", "add", ((2, 8, 4), "X,-,-"), ((8, 4), "-,Y"), values=True)
accept("ew_rank3_size1", "m24", "mul", ((2, 1, 4), "X,-,Y"), ((2, 8, 4), ""))
accept("ew_maximum", "m24", "maximum", ((8, 4), "X,-"), ((8, 4), "-,Y"))
accept("ew_mul_add", "m24", "mul_add", ((8, 4), "X,-"), ((8, 4), "-,Y"), values=True)
accept("ew_scale", "m24", "scale", ((8, 4), "X,Y"))
accept("ew_sin", "m24", "sin", ((8, 4), "Y,X"))
accept("ew_exp_tuple", "m24", "exp", ((8, 8), "-,(X,Y)"))
accept("ew_neg", "m24", "neg", ((2, 8, 4), "-,X,Y"))
accept("ew_m8_vector", "m8", "add", ((16,), "X"), ((16,), ""), values=True)
accept("ew_m8_rows", "m8", "add", ((8, 4), "X,-"), ((8, 4), ""))
accept("ew_m8_cols_rank1", "m8", "add", ((4, 8), "-,X"), ((8,), "X"))
accept("ew_m8_size1", "m8", "mul", ((8, 4), "X,-"), ((1, 4), ""))
accept("ew_m8_replicated_both", "m8", "sub", ((8, 4), ""), ((8, 4), ""))
accept("ew_m222_same", "m222", "add", ((2, 4, 8), "X,Y,Z"), ((2, 4, 8), "X,Y,Z"))
accept("ew_m222_merge", "m222", "add", ((4, 4, 4), "X,-,-"), ((4, 4, 4), "-,Y,Z"), values=True)
accept("ew_m222_tuple3", "m222", "mul", ((8, 4), "(X,Y,Z),-"), ((8, 4), ""))
accept("ew_m222_tuple_rank1", "m222", "add", ((4, 8), "Z,(X,Y)"), ((8,), "(X,Y)"))
accept("ew_m222_rank3_rank1", "m222", "add", ((2, 4, 4), "X,Y,-"), ((4,), "Z"))
accept("ew_m222_size1", "m222", "add", ((2, 1, 4), "X,-,Z"), ((1, 4, 4), "-,Y,-"))
accept("ew_m42_names", "m42", "add", ((8, 4), "rows,-"), ((8, 4), "-,cols"))

# ---- reductions -----------------------------------------------------------------------------
for op in ("sum0", "sum1", "sum", "max0", "max1", "min0", "min1", "mean0", "mean1", "mean"):
    accept(f"reduce_XY_{op}", "m24", op, ((8, 4), "X,Y"), values=op in ("sum0", "max1", "mean"))
for op in ("sum0", "sum1", "max0"):
    accept(f"reduce_X_none_{op}", "m24", op, ((8, 4), "X,-"))
for op in ("sum0", "sum1", "max1", "mean01"):
    accept(f"reduce_tuple_{op}", "m24", op, ((8, 8), "(X,Y),-"), values=op == "sum1")
for op in ("sum0", "sum1", "sum2", "sum02", "sum12", "mean01", "max2", "min012", "sum"):
    accept(f"reduce_rank3_{op}", "m24", op, ((2, 8, 4), "X,-,Y"), values=op in ("sum02", "max2"))
for op in ("sum", "max0", "min"):
    accept(f"reduce_m8_vector_{op}", "m8", op, ((16,), "X"), values=op == "sum")
for op in ("sum0", "sum1", "mean1"):
    accept(f"reduce_m8_cols_{op}", "m8", op, ((4, 8), "-,X"))
for op in ("sum0", "sum1", "sum2", "sum02", "mean12", "max", "min01"):
    accept(f"reduce_m222_{op}", "m222", op, ((2, 4, 8), "X,Y,Z"), values=op == "sum02")
for op in ("sum0", "sum1", "max01"):
    accept(f"reduce_m222_tuple_{op}", "m222", op, ((8, 4), "(X,Y),Z"))

# ---- transpose ------------------------------------------------------------------------------
accept("transpose_XY", "m24", "T", ((8, 4), "X,Y"), values=True)
accept("transpose_X_none", "m24", "T", ((8, 4), "X,-"))
accept("transpose_tuple", "m24", "T", ((8, 4), "(X,Y),-"))
accept("transpose_rank3_default", "m24", "T", ((2, 8, 4), "X,-,Y"))
accept("transpose_rank3_102", "m24", "transpose102", ((2, 8, 4), "X,-,Y"), values=True)
accept("transpose_rank3_201", "m24", "transpose201", ((2, 8, 4), "X,-,Y"))
accept("transpose_m8", "m8", "T", ((8, 4), "X,-"))
accept("transpose_m222_default", "m222", "T", ((2, 4, 8), "X,Y,Z"))
accept("transpose_m222_120", "m222", "transpose120", ((2, 4, 8), "X,Y,Z"))
accept("transpose_m222_021", "m222", "transpose021", ((4, 4, 8), "(X,Z),Y,-"))

# ---- matmul and dot -------------------------------------------------------------------------
# 2-D @ 2-D on (2, 4)
accept("mm_rows", "m24", "matmul", ((8, 8), "X,-"), ((8, 8), ""), values=True)
accept("mm_cols", "m24", "matmul", ((8, 8), ""), ((8, 8), "-,Y"))
accept("mm_rows_cols", "m24", "matmul", ((8, 8), "X,-"), ((8, 8), "-,Y"), values=True)
accept("mm_rows_cols_YX", "m24", "matmul", ((8, 8), "Y,-"), ((8, 8), "-,X"))
accept("mm_k_left", "m24", "matmul", ((8, 8), "-,X"), ((8, 8), ""), values=True)
accept("mm_k_right", "m24", "matmul", ((8, 8), ""), ((8, 8), "Y,-"), values=True)
accept("mm_rows_k_left", "m24", "matmul", ((8, 8), "X,Y"), ((8, 8), ""), values=True)
accept("mm_rows_k_right", "m24", "matmul", ((8, 8), "X,-"), ((8, 8), "Y,-"))
accept("mm_fsdp", "m24", "matmul", ((8, 8), "X,-"), ((8, 8), "X,-"), values=True)
accept("mm_half_tp", "m24", "matmul", ((8, 8), "-,Y"), ((8, 8), "-,Y"), values=True)
accept("mm_k_left_cols_same", "m24", "matmul", ((8, 8), "X,Y"), ((8, 8), "-,Y"), values=True)
accept("mm_tuple_rows", "m24", "matmul", ((8, 8), "(X,Y),-"), ((8, 8), ""))
accept("mm_tuple_cols", "m24", "matmul", ((8, 8), ""), ((8, 8), "-,(X,Y)"))
accept("mm_tuple_k_left", "m24", "matmul", ((8, 8), "-,(X,Y)"), ((8, 8), ""), values=True)
accept("mm_tuple_fsdp", "m24", "matmul", ((8, 8), "(X,Y),-"), ((8, 8), "(X,Y),-"), values=True)
accept("mm_replicated", "m24", "matmul", ((8, 8), ""), ((8, 8), ""))
accept("mm_rect", "m24", "matmul", ((4, 8), "-,X"), ((8, 16), "-,Y"))
# 1-D @ 2-D, 2-D @ 1-D, 1-D @ 1-D
accept("vm_cols", "m24", "matmul", ((8,), ""), ((8, 8), "-,Y"), values=True)
accept("vm_k_left", "m24", "matmul", ((8,), "X"), ((8, 8), ""), values=True)
accept("vm_k_right_cols", "m24", "matmul", ((8,), ""), ((8, 8), "X,Y"))
accept("vm_k_left_cols_same", "m24", "matmul", ((8,), "X"), ((8, 8), "-,X"), values=True)
accept("mv_rows", "m24", "matmul", ((8, 8), "X,-"), ((8,), ""), values=True)
accept("mv_k_left", "m24", "matmul", ((8, 8), "-,Y"), ((8,), ""))
accept("mv_k_right", "m24", "matmul", ((8, 8), "X,-"), ((8,), "Y"), values=True)
accept("mv_k_right_rows_same", "m24", "matmul", ((8, 8), "X,-"), ((8,), "X"))
accept("vv_k_left", "m24", "matmul", ((8,), "X"), ((8,), ""), values=True)
accept("vv_replicated", "m24", "matmul", ((8,), ""), ((8,), "Y"))
accept("vv_tuple", "m24", "matmul", ((8,), "(X,Y)"), ((8,), ""))
# batched
accept("bmm_batch", "m24", "matmul", ((2, 8, 8), "X,-,-"), ((2, 8, 8), "X,-,-"), values=True)
accept("bmm_batch_rows", "m24", "matmul", ((2, 8, 8), "X,Y,-"), ((2, 8, 8), "X,-,-"))
accept("bmm_batch_cols", "m24", "matmul", ((2, 8, 8), "X,-,-"), ((2, 8, 8), "X,-,Y"), values=True)
accept("bmm_batch_k_left", "m24", "matmul", ((2, 8, 8), "X,-,Y"), ((2, 8, 8), "X,-,-"), values=True)
accept("bmm_batch_k_right", "m24", "matmul", ((2, 8, 8), "-,X,-"), ((2, 8, 8), "-,Y,-"))
accept("bmm_3d_2d", "m24", "matmul", ((2, 8, 8), "X,-,-"), ((8, 8), "-,Y"), values=True)
accept("bmm_2d_3d", "m24", "matmul", ((8, 8), "Y,-"), ((2, 8, 8), "X,-,-"), values=True)
accept("bmm_3d_1d", "m24", "matmul", ((2, 8, 8), "X,Y,-"), ((8,), ""))
accept("bmm_1d_3d", "m24", "matmul", ((8,), ""), ((2, 8, 8), "X,-,Y"))
accept("bmm_3d_1d_k", "m24", "matmul", ((2, 8, 8), "X,-,-"), ((8,), "Y"))
accept("bmm_size1_left", "m24", "matmul", ((1, 8, 8), ""), ((2, 8, 8), "X,-,-"), values=True)
accept("bmm_size1_right", "m24", "matmul", ((2, 8, 8), "X,-,Y"), ((1, 8, 8), ""))
accept("bmm_replicated_batch", "m24", "matmul", ((2, 8, 8), "-,X,-"), ((2, 8, 8), "-,-,Y"))
accept("bmm_m222_batch_rows_cols", "m222", "matmul", ((2, 8, 8), "X,Y,-"), ((2, 8, 8), "X,-,Z"), values=True)
accept("bmm_m222_4d_broadcast", "m222", "matmul", ((2, 1, 4, 4), "X,-,-,-"), ((1, 2, 4, 4), "-,Y,-,-"))
accept("bmm_m222_4d_k", "m222", "matmul", ((2, 2, 4, 4), "X,Y,-,Z"), ((2, 2, 4, 4), "X,Y,-,-"))
# other meshes
accept("mm_m8_rows", "m8", "matmul", ((8, 8), "X,-"), ((8, 8), ""))
accept("mm_m8_seed_x_at_W", "m8", "matmul", ((32,), "X"), ((32, 4), ""), values=True)
accept("mm_m8_fsdp", "m8", "matmul", ((8, 8), "X,-"), ((8, 8), "X,-"))
accept("mm_m222_rows_k_cols", "m222", "matmul", ((8, 8), "X,Y"), ((8, 8), "-,Z"), values=True)
accept("mm_m222_tuple_rows", "m222", "matmul", ((8, 8), "(X,Y),-"), ((8, 8), "-,Z"))
accept("mm_m222_k_right_tuple", "m222", "matmul", ((8, 8), "Z,-"), ((8, 8), "(X,Y),-"))
accept("mm_m42_names", "m42", "matmul", ((8, 8), "rows,-"), ((8, 8), "-,cols"))
# jnp.dot of ranks 1 and 2
accept("dot_2d_2d", "m24", "dot", ((8, 8), "X,-"), ((8, 8), "-,Y"), values=True)
accept("dot_2d_2d_k", "m24", "dot", ((8, 8), "-,Y"), ((8, 8), ""))
accept("dot_1d_2d", "m24", "dot", ((8,), ""), ((8, 8), "-,(X,Y)"))
accept("dot_2d_1d", "m24", "dot", ((8, 8), "(Y,X),-"), ((8,), ""))
accept("dot_1d_1d", "m24", "dot", ((8,), "Y"), ((8,), ""), values=True)
accept("dot_fsdp", "m24", "dot", ((8, 8), "X,-"), ((8, 8), "X,-"))

# ---- reshard --------------------------------------------------------------------------------
for name, mesh, shape, src, dst in (
    ("reshard_rows_to_cols", "m24", (8, 4), "X,-", "-,Y"),
    ("reshard_to_replicated", "m24", (8, 4), "X,Y", ""),
    ("reshard_to_tuple", "m24", (8, 4), "", "(X,Y),-"),
    ("reshard_swap", "m24", (8, 8), "X,Y", "Y,X"),
    ("reshard_tuple_cols", "m24", (8, 8), "X,-", "-,(X,Y)"),
    ("reshard_short_spec", "m24", (2, 8, 4), "-,-,Y", "X"),
    ("reshard_m8", "m8", (16,), "", "X"),
    ("reshard_m222", "m222", (4, 4, 4), "X,Y,Z", "(X,Y),Z,-"),
    ("reshard_m222_tuple3", "m222", (8, 2), "X,Y", "(Z,Y,X),-"),
):
    target = NamedSharding(MESHES[mesh], parse_spec(dst))
    accept(name, mesh, "reshard", (shape, src), fn=lambda x, t=target: jax.sharding.reshard(x, t),
           values=name == "reshard_swap")
    c.cases[name]["to"] = dst

# ---- JAX's tests/pjit_test.py, test_dot_general and test_dot_general_error ----------------
# np_inp1 = arange(16.).reshape(8, 2) with spec1, np_inp1.T with spec2, on an explicit (2, 2)
# mesh ('x', 'y'); out = x @ y.
for name, s1, s2 in (("x_y", "x,-", "-,y"), ("x_None", "x,-", "-,-"), ("contracting2", "x,y", "-,-"),
                     ("fsdp", "x,-", "x,-"), ("half_tp", "-,y", "-,y")):
    accept(f"pjit_dot_general_{name}", "m22", "matmul", ((8, 2), s1), ((2, 8), s2), values=True)

# ---- programs JAX refuses on Explicit axes, and tessera too (tests/compile_fail/<name>.cpp) --
reject("jax_reject_elementwise_different_axes", "m24", "add", ((8, 4), "X,-"), ((8, 4), "Y,-"))
reject("jax_reject_elementwise_swapped_axes", "m22", "mul", ((8, 2), "x,y"), ((8, 2), "y,x"))  # pjit_test
reject("jax_reject_elementwise_tuple_vs_axis", "m22", "mul", ((8, 2), "x,y"), ((8, 2), "(x,y),-"))  # pjit_test
reject("jax_reject_elementwise_broadcast_different_axes", "m24", "add", ((8, 4), "-,X"), ((4,), "Y"))
reject("jax_reject_elementwise_result_uses_axis_twice", "m24", "add", ((8, 8), "X,-"), ((8, 8), "-,X"))
reject("jax_reject_elementwise_tuple_axis_twice", "m24", "add", ((8, 8), "(X,Y),-"), ((8, 8), "-,Y"))
reject("jax_reject_matmul_result_uses_axis_twice", "m22", "matmul", ((8, 2), "x,-"), ((2, 8), "-,x"))  # fail1
reject("jax_reject_matmul_contracting_on_different_axes", "m22", "matmul", ((8, 2), "x,y"), ((2, 8), "x,y"))  # fail2
reject("jax_reject_vector_contracting_on_different_axes", "m24", "matmul", ((8,), "X"), ((8,), "Y"))
reject("jax_reject_matmul_batch_on_different_axes", "m222", "matmul", ((8, 4, 2), "X,Y,Z"), ((8, 2, 4), "Y,Z,X"))
reject("jax_reject_matmul_batch_result_uses_axis_twice", "m24", "matmul", ((2, 8, 8), "X,-,-"), ((8, 8), "-,X"))
reject("jax_reject_transpose_not_a_permutation", "m24", "transpose", ((8, 4), "X,Y"),
       fn=lambda a: jnp.transpose(a, (0, 0)))
reject("jax_reject_reduction_axis_out_of_range", "m24", "sum", ((8, 4), "X,Y"), fn=lambda a: jnp.sum(a, axis=2))
reject("jax_reject_reduction_axis_repeated", "m24", "sum", ((8, 4), "X,Y"), fn=lambda a: jnp.sum(a, axis=(0, 0)))
reject("jax_reject_matmul_operand_of_rank_0", "m24", "matmul", ((8,), "X"),
       fn=lambda a: jnp.matmul(a, jnp.sum(a)))
reject("jax_reject_elementwise_different_meshes", "m24", "add", ((8, 4), "X,Y"),
       fn=lambda a: a + jax.device_put(np.ones((8, 4), np.float32),
                                       NamedSharding(MESHES["m42"], P("rows", None))))


# Specs JAX refuses before any operation (device_put of an invalid sharding).
def reject_spec(name, shape, spec_fn):
    def run():
        return jax.device_put(np.zeros(shape, np.float32), NamedSharding(MESHES["m24"], spec_fn()))
    rec = case(name, "m24", "put", fn=run)
    assert rec.get("rejected"), name


reject_spec("jax_reject_spec_uses_axis_twice", (8, 8), lambda: P("X", "X"))
reject_spec("jax_reject_spec_axis_not_in_mesh", (8, 8), lambda: P("Z", None))
reject_spec("jax_reject_spec_longer_than_rank", (8,), lambda: P("X", None))

# ---- programs JAX 0.12 refuses and tessera accepts on purpose ----------------------------------
# Each records JAX's refusal and, as "jax_equivalent", the typeof and values of the JAX program
# that computes what tessera does, so that tessera's answer is still checked against JAX.
def differs(name, mesh, difference, a, b, equivalent):
    rec = case(name, mesh, "matmul", a, b, difference=difference)
    assert rec.get("rejected"), name
    r = equivalent(*make_args(mesh, (a, b)))
    c.cases[name]["jax_equivalent"] = {"typeof": str(jax.typeof(r)), "values": np.asarray(r).reshape(-1).tolist()}


# A contracting dimension sharded alike on both sides: JAX asks for an out_sharding ("ambiguous");
# tessera sums the partial products into the free dimensions' layout, which is what JAX gives
# with that layout as out_sharding.
for name, mesh, a, b, out in (
    ("pjit_dot_general_contracting1", "m22", ((8, 2), "x,y"), ((2, 8), "y,-"), "x,-"),
    ("pjit_dot_general_other_half_tp", "m22", ((8, 2), "-,y"), ((2, 8), "y,-"), "-,-"),
    ("mm_k_both_alike", "m24", ((8, 8), "-,X"), ((8, 8), "X,-"), "-,-"),
    ("mm_k_both_alike_tuple", "m24", ((8, 8), "-,(X,Y)"), ((8, 8), "(X,Y),-"), "-,-"),
    ("mm_k_both_alike_rows", "m24", ((8, 8), "X,Y"), ((8, 8), "Y,-"), "X,-"),
    ("vv_k_both_alike", "m8", ((16,), "X"), ((16,), "X"), ""),
    ("mv_k_both_alike", "m8", ((4, 16), "-,X"), ((16,), "X"), "-"),
    ("bmm_k_both_alike", "m24", ((2, 8, 8), "X,-,Y"), ((2, 8, 8), "X,Y,-"), "X,-,-"),
):
    out_sharding = NamedSharding(MESHES[mesh], parse_spec(out))
    differs(name, mesh, "contracting_sharded_alike", a, b,
            lambda x, y, s=out_sharding: jnp.matmul(x, y, out_sharding=s))

# A batch dimension sharded in one operand and replicated (size > 1) in the other: jnp.matmul
# refuses; tessera combines batch dimensions as element-wise ones: the replicated operand is
# sliced in place, as JAX computes after resharding it to the other's batch sharding.
for name, mesh, a, b, moved, to in (
    ("bmm_batch_one_side_left", "m24", ((2, 8, 8), "X,-,-"), ((2, 8, 8), ""), 1, "X,-,-"),
    ("bmm_batch_one_side_right", "m222", ((2, 8, 8), "-,Y,-"), ((2, 8, 8), "Z,-,-"), 0, "Z,Y,-"),
):
    target = NamedSharding(MESHES[mesh], parse_spec(to))

    def equivalent(x, y, moved=moved, target=target):
        if moved == 0:
            x = jax.sharding.reshard(x, target)
        else:
            y = jax.sharding.reshard(y, target)
        return jnp.matmul(x, y)

    differs(name, mesh, "matmul_batch_sharded_one_side", a, b, equivalent)

# ---- matmul and dot with out_sharding: JAX checks nothing and lays the result out as asked ----
# (jax/_src/lax/lax.py, _dot_general_sharding_rule returns out_sharding as it is). Among them the
# programs JAX refuses without one (pjit_test's test_jnp_matmul: P('x', 'y') @ P('x', 'y')).
for name, mesh, op, a, b, out in (
    ("out_mm_contracting_different_axes", "m22", "matmul", ((8, 2), "x,y"), ((2, 8), "x,y"), "x,-"),
    ("out_mm_contracting_different_axes_to_y", "m22", "matmul", ((8, 2), "x,y"), ((2, 8), "x,y"), "-,y"),
    ("out_mm_result_uses_axis_twice", "m22", "matmul", ((8, 2), "x,-"), ((2, 8), "-,x"), "x,-"),
    ("out_mm_k_alike_replicated", "m24", "matmul", ((8, 8), "-,X"), ((8, 8), "X,-"), "-,-"),
    ("out_mm_k_alike_reduce_scatter_rows", "m24", "matmul", ((8, 8), "-,X"), ((8, 8), "X,-"), "X,-"),
    ("out_mm_k_alike_reduce_scatter_cols", "m24", "matmul", ((8, 8), "-,X"), ((8, 8), "X,-"), "-,X"),
    ("out_mm_k_alike_tuple_to_XY", "m24", "matmul", ((8, 8), "-,(X,Y)"), ((8, 8), "(X,Y),-"), "(X,Y),-"),
    ("out_mm_k_alike_rows_kept", "m24", "matmul", ((8, 8), "X,Y"), ((8, 8), "Y,-"), "X,-"),
    ("out_mm_k_alike_rows_and_cols", "m24", "matmul", ((8, 8), "X,Y"), ((8, 8), "Y,-"), "X,Y"),
    ("out_mm_plain_resharded", "m24", "matmul", ((8, 8), "X,-"), ((8, 8), "-,Y"), "Y,X"),
    ("out_vv_k_alike", "m8", "matmul", ((16,), "X"), ((16,), "X"), ""),
    ("out_vv_contracting_different_axes", "m24", "matmul", ((8,), "X"), ((8,), "Y"), ""),
    ("out_mv_k_alike_to_X", "m8", "matmul", ((16, 16), "-,X"), ((16,), "X"), "X"),
    ("out_dot_k_alike", "m24", "dot", ((8, 8), "-,Y"), ((8, 8), "Y,-"), "Y,-"),
    ("out_dot_vm", "m24", "dot", ((8,), "X"), ((8, 8), "Y,X"), "X"),
):
    s_out = NamedSharding(MESHES[mesh], parse_spec(out))
    f = jnp.matmul if op == "matmul" else jnp.dot
    accept(name, mesh, op + "_out", a, b, values=True,
           fn=lambda x, y, f=f, s_out=s_out: f(x, y, out_sharding=s_out))
    c.cases[name]["out_sharding"] = out

# ---- every spec pair of matmul's 1-D and 2-D forms on pjit_test's (2, 2) mesh -----------------
# Named rule_<a>_<b>, a spec's entries joined by '.' with n for None, xy for ('x', 'y') and yx for
# ('y', 'x'); operands of size 4 in every dimension. tests/jax/typeof_golden_test.cpp enumerates
# the same pairs and checks tessera's contraction rule against each answer.
ENTRIES = {"n": "-", "x": "x", "y": "y", "xy": "(x,y)", "yx": "(y,x)"}


def valid(spec):
    used = [a for e in spec for a in (e if len(e) > 1 else e.replace("n", ""))]
    return len(used) == len(set(used))


SPECS = {1: [(a,) for a in ENTRIES], 2: [(a, b) for a in ENTRIES for b in ENTRIES if valid((a, b))]}
for ra, rb in ((2, 2), (1, 2), (2, 1), (1, 1)):
    for sa in SPECS[ra]:
        for sb in SPECS[rb]:
            name = "rule_" + ".".join(sa) + "_" + ".".join(sb)
            a = ((4,) * ra, ",".join(ENTRIES[e] for e in sa))
            b = ((4,) * rb, ",".join(ENTRIES[e] for e in sb))
            rec = case(name, "m22", "matmul", a, b)
            ka, kb = sa[-1], sb[0]  # the contracting entries
            if rec.get("rejected") and ka != "n" and ka == kb:
                # Sharded alike on both sides: what tessera computes is JAX's product with the
                # free dimensions' sharding as out_sharding (when that sharding is valid).
                free = ([ENTRIES[sa[0]]] if ra == 2 else []) + ([ENTRIES[sb[1]]] if rb == 2 else [])
                used = [x for f in free for x in f.strip("()").split(",") if x != "-"]
                if len(used) == len(set(used)):
                    out = NamedSharding(MESHES["m22"], parse_spec(",".join(free)))
                    xs = make_args("m22", (a, b))
                    r = jnp.matmul(*xs, out_sharding=out)
                    c.cases[name]["difference"] = "contracting_sharded_alike"
                    c.cases[name]["jax_equivalent"] = {"typeof": str(jax.typeof(r))}

c.write("jax_typeof.json", "tools/jax_reference/gen_typeof.py")
