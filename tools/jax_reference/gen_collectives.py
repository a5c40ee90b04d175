"""Writes tests/golden/jax_collectives.json: what every shard_map collective returns in JAX, for
tests/jax/collectives_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_collectives.py

Each collective case runs one jax.shard_map on a mesh of the 8 CPU devices. The input is sharded
along dimension 0 over every mesh axis, so each device holds its own block (`block_shape`), and
the body's result is laid out the same way (out_specs over every axis), so the global output is
every device's result in mesh order: `values` (row-major) and `shape`; a rank-0 result is
reshaped to (1,) first. `input` names the global input's values (see input_values): small
integers in float32, so sums compare exactly. A case JAX refuses records JAX's message under
`error` instead. A case where tessera differs from JAX on purpose says so under `difference`.

The typeof cases record str(jax.typeof(v)) of values inside a body, taken at trace time: JAX
prints the mesh axes a value varies over as `{V:x}` or `{V:(x,y)}` (in mesh order), and nothing
for a value that is the same on every device.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402,F401  (8 CPU devices)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

MESHES = {
    "m8": ((8,), ("x",)),
    "m24": ((2, 4), ("x", "y")),
    "m42": ((4, 2), ("x", "y")),
    "m222": ((2, 2, 2), ("x", "y", "z")),
}
_mesh_cache = {}


def mesh_of(key):
    if key not in _mesh_cache:
        shape, names = MESHES[key]
        _mesh_cache[key] = jax.make_mesh(shape, names, axis_types=(AxisType.Explicit,) * len(names))
    return _mesh_cache[key]


def group_size(mesh_key, axes):
    shape, names = MESHES[mesh_key]
    return int(np.prod([shape[names.index(a)] for a in axes]))


def input_values(n, pattern):
    """Element i of the global input: "arange" is i; "mixed" (for pmax and pmin, whose maximum then
    moves between devices) is (7 i + 3) mod 17 - 8. The C++ test makes the same values."""
    i = np.arange(n)
    if pattern == "arange":
        return i.astype(np.float32)
    return ((i * 7 + 3) % 17 - 8).astype(np.float32)


def run(mesh_key, block_shape, body, pattern="arange", in_axes=None):
    """The global output of body over the mesh, each device with its own block (or, with in_axes,
    the block of its index along those axes); or JAX's error."""
    mesh = mesh_of(mesh_key)
    names = MESHES[mesh_key][1]
    spec = P(names)
    in_spec = spec if in_axes is None else P(tuple(in_axes))
    groups = 8 if in_axes is None else group_size(mesh_key, in_axes)
    in_shape = (groups * block_shape[0],) + tuple(block_shape[1:])
    x = input_values(int(np.prod(in_shape)), pattern).reshape(in_shape)
    xs = jax.device_put(jnp.asarray(x), NamedSharding(mesh, in_spec))

    def f(a):
        r = body(a)
        return r.reshape(1) if r.ndim == 0 else r

    case = {"mesh": mesh_key, "mesh_shape": list(MESHES[mesh_key][0]), "mesh_axes": list(names),
            "block_shape": list(block_shape), "in_shape": list(in_shape), "input": pattern}
    try:
        out = np.asarray(jax.shard_map(f, mesh=mesh, in_specs=in_spec, out_specs=spec)(xs))
    except Exception as e:  # noqa: BLE001  (recorded: the C++ side must refuse it too)
        case["error"] = str(e).splitlines()[0]
        return case
    case["shape"] = list(out.shape)
    case["dtype"] = str(out.dtype)
    case["values"] = [v.item() for v in out.reshape(-1)]
    return case


c = common.Cases()


def add(name, mesh_key, axes, op, block_shape, body, pattern="arange", in_axes=None, **params):
    case = run(mesh_key, block_shape, body, pattern, in_axes)
    if in_axes is not None:
        params.update(family="on_invariant", in_axes=list(in_axes))
    c.add(name, op=op, axes=list(axes), **params, **case)


def axes_text(axes):
    return ",".join(axes)


def ax(axes):
    return axes[0] if len(axes) == 1 else tuple(axes)


# --- psum, pmean, pmax, pmin over one axis and several --------------------------------------
REDUCTION_GROUPS = [
    ("m8", ["x"]),
    ("m24", ["x"]), ("m24", ["y"]), ("m24", ["x", "y"]), ("m24", ["y", "x"]),
    ("m42", ["x"]), ("m42", ["y"]), ("m42", ["x", "y"]),
    ("m222", ["x"]), ("m222", ["y"]), ("m222", ["z"]), ("m222", ["x", "y"]), ("m222", ["x", "z"]),
    ("m222", ["y", "z"]), ("m222", ["x", "y", "z"]),
]
REDUCTIONS = {"psum": jax.lax.psum, "pmean": jax.lax.pmean, "pmax": jax.lax.pmax, "pmin": jax.lax.pmin}
for mesh_key, axes in REDUCTION_GROUPS:
    for op, fn in REDUCTIONS.items():
        add(f"{op}/{mesh_key}/{axes_text(axes)}", mesh_key, axes, op, (2, 3),
            lambda a, fn=fn, axes=axes: fn(a, ax(axes)), pattern="arange" if op in ("psum", "pmean") else "mixed")
# Rank-1 and rank-3 blocks.
for op, fn in REDUCTIONS.items():
    add(f"{op}/m24/y/r1", "m24", ["y"], op, (5,), lambda a, fn=fn: fn(a, "y"), pattern="mixed")
    add(f"{op}/m222/x,z/r3", "m222", ["x", "z"], op, (1, 2, 3), lambda a, fn=fn: fn(a, ("x", "z")), pattern="mixed")

# --- collectives over an axis the input does not vary over: the input is sharded over 'x' only,
# so the devices along 'y' hold the same block (psum then multiplies it by the axis size).
lax = jax.lax
ON_INVARIANT = {
    "psum": lambda a: lax.psum(a, "y"), "pmean": lambda a: lax.pmean(a, "y"), "pmax": lambda a: lax.pmax(a, "y"),
    "pmin": lambda a: lax.pmin(a, "y"), "all_gather": lambda a: lax.all_gather(a, "y", axis=1, tiled=True),
    "psum_scatter": lambda a: lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True),
    "ppermute": lambda a: lax.ppermute(a, "y", [(0, 1), (1, 2), (3, 0)]),
    "all_to_all": lambda a: lax.all_to_all(a, "y", 1, 0, tiled=True),
}
for op, fn in ON_INVARIANT.items():
    params = {"all_gather": {"tiled": True, "axis": 1}, "psum_scatter": {"tiled": True, "dim": 1},
              "ppermute": {"perm": [[0, 1], [1, 2], [3, 0]]},
              "all_to_all": {"tiled": True, "split_axis": 1, "concat_axis": 0}}.get(op, {})
    add(f"on_invariant/{op}/m24/y", "m24", ["y"], op, (1, 8), fn, pattern="mixed", in_axes=["x"], **params)

# --- all_gather, tiled and untiled, at every gather axis ------------------------------------
GATHER_BLOCKS = {1: (3,), 2: (2, 3), 3: (2, 1, 3)}
GATHER_GROUPS = [
    ("m8", ["x"], (1, 2, 3)), ("m24", ["y"], (1, 2, 3)), ("m24", ["x"], (2,)), ("m42", ["x"], (2,)),
    ("m42", ["y"], (2,)), ("m24", ["x", "y"], (2,)), ("m222", ["x"], (2,)), ("m222", ["y"], (3,)),
    ("m222", ["z"], (2,)), ("m222", ["x", "z"], (2,)),
]
for mesh_key, axes, ranks in GATHER_GROUPS:
    for r in ranks:
        for tiled in (False, True):
            for axis in range(r + (0 if tiled else 1)):
                add(f"all_gather/{mesh_key}/{axes_text(axes)}/r{r}/axis{axis}{'/tiled' if tiled else ''}", mesh_key,
                    axes, "all_gather", GATHER_BLOCKS[r],
                    lambda a, axes=axes, axis=axis, tiled=tiled: jax.lax.all_gather(a, ax(axes), axis=axis, tiled=tiled),
                    tiled=tiled, axis=axis)

# --- psum_scatter, tiled and untiled, at every scatter dimension ----------------------------
SCATTER_GROUPS = [("m8", ["x"], (1, 2, 3)), ("m24", ["y"], (1, 2, 3)), ("m42", ["x", "y"], (2,)),
                  ("m222", ["z"], (2,)), ("m222", ["y", "x"], (3,))]
for mesh_key, axes, ranks in SCATTER_GROUPS:
    k = group_size(mesh_key, axes)
    for r in ranks:
        for tiled in (False, True):
            for dim in range(r):
                block = [2, 3, 2][:r]
                block[dim] = 2 * k if tiled else k
                add(f"psum_scatter/{mesh_key}/{axes_text(axes)}/r{r}/dim{dim}{'/tiled' if tiled else ''}", mesh_key,
                    axes, "psum_scatter", tuple(block),
                    lambda a, axes=axes, dim=dim, tiled=tiled: jax.lax.psum_scatter(a, ax(axes), scatter_dimension=dim,
                                                                                   tiled=tiled),
                    tiled=tiled, dim=dim)

# --- all_to_all for every split_axis/concat_axis pair ---------------------------------------
A2A_GROUPS = [("m8", ["x"], (2, 3)), ("m24", ["y"], (2,)), ("m222", ["x", "z"], (3,)), ("m42", ["x"], (2,))]
for mesh_key, axes, ranks in A2A_GROUPS:
    k = group_size(mesh_key, axes)
    for r in ranks:
        for tiled in (False, True):
            for split in range(r):
                for concat in range(r):
                    block = [2, 3, 2][:r]
                    block[split] = 2 * k if tiled else k
                    add(f"all_to_all/{mesh_key}/{axes_text(axes)}/r{r}/split{split}/concat{concat}"
                        f"{'/tiled' if tiled else ''}", mesh_key, axes, "all_to_all", tuple(block),
                        lambda a, axes=axes, s=split, cc=concat, tiled=tiled: jax.lax.all_to_all(
                            a, ax(axes), s, cc, tiled=tiled),
                        tiled=tiled, split_axis=split, concat_axis=concat)

# --- what JAX refuses: shapes the axis size does not fit ------------------------------------
add("refused/all_to_all/m8/x/untiled_size", "m8", ["x"], "all_to_all", (4, 3),
    lambda a: jax.lax.all_to_all(a, "x", 0, 1), tiled=False, split_axis=0, concat_axis=1)
add("refused/all_to_all/m8/x/tiled_indivisible", "m8", ["x"], "all_to_all", (12, 3),
    lambda a: jax.lax.all_to_all(a, "x", 0, 1, tiled=True), tiled=True, split_axis=0, concat_axis=1)
add("refused/psum_scatter/m24/y/untiled_size", "m24", ["y"], "psum_scatter", (2, 3),
    lambda a: jax.lax.psum_scatter(a, "y", scatter_dimension=1), tiled=False, dim=1)
add("refused/psum_scatter/m24/y/tiled_indivisible", "m24", ["y"], "psum_scatter", (2, 6),
    lambda a: jax.lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True), tiled=True, dim=1)

# --- ppermute: full permutations and partial ones (devices that receive nothing get zeros) ---
def perms(k):
    rng = np.random.default_rng(19 + k)
    out = {"shift": [(i, (i + 1) % k) for i in range(k)],
           "reverse": [(i, k - 1 - i) for i in range(k)],
           "random": [(i, int(j)) for i, j in enumerate(rng.permutation(k))],
           "partial_chain": [(i, i + 1) for i in range(k - 1)]}
    if k > 2:
        out["partial_pairs"] = [(0, k - 1), (k - 2, 1)]
    return out


PPERMUTE_GROUPS = [("m8", ["x"]), ("m24", ["y"]), ("m24", ["x"]), ("m42", ["x"]), ("m222", ["z"]),
                   ("m222", ["x", "y", "z"]), ("m222", ["x", "z"])]
for mesh_key, axes in PPERMUTE_GROUPS:
    for pname, perm in perms(group_size(mesh_key, axes)).items():
        add(f"ppermute/{mesh_key}/{axes_text(axes)}/{pname}", mesh_key, axes, "ppermute", (2, 3),
            lambda a, axes=axes, perm=perm: jax.lax.ppermute(a, ax(axes), perm), perm=[list(p) for p in perm])

# JAX refuses ppermute over axes out of mesh order (its check, raise_on_ppermute_sort_diff); tessera
# accepts them, so the case also records what JAX computes with that check off.
for pname, perm in perms(4).items():
    name = f"ppermute/m222/z,x/{pname}"
    body = lambda a, perm=perm: jax.lax.ppermute(a, ("z", "x"), perm)  # noqa: E731
    refused = run("m222", (2, 3), body)
    assert "error" in refused, "JAX now accepts ppermute over axes out of mesh order: drop the difference"
    jax.config.update("jax_raise_on_ppermute_sort_diff", False)
    case = run("m222", (2, 3), body)
    jax.config.update("jax_raise_on_ppermute_sort_diff", True)
    c.add(name, op="ppermute", axes=["z", "x"], perm=[list(p) for p in perm], difference="ppermute_axis_order",
          jax_error=refused["error"], **case)

# --- axis_index over each axis and tuples of them ---------------------------------------------
AXIS_INDEX_GROUPS = [
    ("m8", ["x"]), ("m24", ["x"]), ("m24", ["y"]), ("m24", ["x", "y"]), ("m24", ["y", "x"]),
    ("m42", ["x"]), ("m42", ["y"]), ("m42", ["x", "y"]),
    ("m222", ["x"]), ("m222", ["y"]), ("m222", ["z"]), ("m222", ["x", "y"]), ("m222", ["y", "z"]),
    ("m222", ["z", "x"]), ("m222", ["x", "y", "z"]), ("m222", ["z", "y", "x"]),
]
for mesh_key, axes in AXIS_INDEX_GROUPS:
    add(f"axis_index/{mesh_key}/{axes_text(axes)}", mesh_key, axes, "axis_index", (1,),
        lambda a, axes=axes: jax.lax.axis_index(ax(axes)))


# --- jax.typeof inside a body: the axes a value varies over -----------------------------------
def typeof_cases(mesh_key, arrays, specs, body):
    """Records str(jax.typeof(v)) for each (name, v) the body reports, at trace time."""
    mesh = mesh_of(mesh_key)
    seen = []

    def f(*blocks):
        for name, v in body(*blocks):
            seen.append((name, str(jax.typeof(v))))
        return blocks[0]

    args = [jax.device_put(x, NamedSharding(mesh, s)) for x, s in zip(arrays, specs)]
    jax.shard_map(f, mesh=mesh, in_specs=tuple(specs), out_specs=specs[0])(*args)
    for name, text in seen:
        extra = {"difference": TYPEOF_DIFFERENCES[name]} if name in TYPEOF_DIFFERENCES else {}
        c.add(f"typeof/{mesh_key}/{name}", op="typeof", mesh=mesh_key, type=text, **extra)


# tessera's all_gather is the same on every device along its axes: JAX's all_gather(..., to="invarying").
TYPEOF_DIFFERENCES = {"all_gather_x_a": "all_gather_invariant"}


def body24(a, b):
    s = jax.lax.psum(a, "x")
    lax = jax.lax
    return [
        ("a", a), ("b", b), ("a_plus_b", a + b), ("literal_times_a", 2.0 * a + 1.0),
        ("psum_x_a", s), ("psum_y_a", lax.psum(a, "y")), ("psum_xy_a_plus_b", lax.psum(a + b, ("x", "y"))),
        ("pmean_xy_a_plus_b", lax.pmean(a + b, ("x", "y"))), ("pmax_x_a", lax.pmax(a, "x")),
        ("pmin_y_b", lax.pmin(b, "y")), ("psum_x_b", lax.psum(b, "x")),
        ("psum_scatter_y_a", lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True)),
        ("all_to_all_x_psum", lax.all_to_all(s, "x", 0, 1, tiled=True)),
        ("ppermute_y_psum", lax.ppermute(s, "y", [(0, 1), (1, 0)])),
        ("axis_index_y", lax.axis_index("y")), ("axis_index_yx", lax.axis_index(("y", "x"))),
        ("zeros", jnp.zeros(3, jnp.float32)), ("transpose_a", a.T), ("row_of_a", a[0]),
        ("b_plus_psum", b + s), ("psum_times_axis_index", s * lax.axis_index("x")),
        ("all_gather_x_a", lax.all_gather(a, "x", axis=0, tiled=True)),
        ("all_gather_invarying_x_a", lax.all_gather(a, "x", axis=0, tiled=True, to="invarying")),
    ]


typeof_cases("m24", [jnp.arange(32.0).reshape(4, 8), jnp.arange(32.0)], [P("x"), P("y")], body24)


def body222(a, b):
    lax = jax.lax
    s = lax.psum(a + b, ("x", "y", "z"))
    return [
        ("a", a), ("b", b), ("a_plus_b", a + b), ("psum_z_a", lax.psum(a, "z")),
        ("pmax_zx_a", lax.pmax(a, ("z", "x"))), ("psum_xyz", s),
        ("axis_index_zx", lax.axis_index(("z", "x"))), ("axis_index_zyx", lax.axis_index(("z", "y", "x"))),
        ("ppermute_xy_psum", lax.ppermute(s, ("x", "y"), [(0, 1), (1, 2), (2, 3), (3, 0)])),
        ("psum_scatter_z_b", lax.psum_scatter(b, "z", scatter_dimension=1, tiled=True)),
    ]


typeof_cases("m222", [jnp.arange(16.0).reshape(4, 4), jnp.arange(8.0).reshape(1, 8)], [P(("z", "x")), P(None, "y")],
             body222)

c.write("jax_collectives.json", "tools/jax_reference/gen_collectives.py")
