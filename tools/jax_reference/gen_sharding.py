"""Writes tests/golden/jax_sharding.json: how JAX prints meshes, PartitionSpecs and
NamedShardings, and which block of an array each device holds, for tests/jax/sharding_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_sharding.py

Case names are keyed by how the objects are built (the Python source of the spec, the mesh's
shape), so the C++ test can name the same case without reading the answer. Kinds of case:
  repr spec/mesh/sharding <...>: str() of the object as JAX 0.12 prints it.
  layout <mesh> <spec> rank<N>: devices_indices_map, shard_shape, replica ids, mesh device order.
  uneven <mesh> <spec> <shape>: JAX refuses the shape (recorded); tessera cuts ceil(n/k) blocks,
    which is JAX's answer for the shape padded up to a multiple of k, clipped to n (recorded too).
  make_mesh default axis_types: JAX 0.12 makes Explicit axes; tessera's make_mesh makes Auto ones.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (sets up 8 CPU devices before jax is used)

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

A, E, M = AxisType.Auto, AxisType.Explicit, AxisType.Manual
c = common.Cases()


def spec_source(entries):
    """The Python spelling of P(*entries): the case key, not JAX's answer."""
    def one(e):
        if e is None:
            return "None"
        if isinstance(e, tuple):
            return "(" + ", ".join(f"'{a}'" for a in e) + ")"
        return f"'{e}'"
    return "P(" + ", ".join(one(e) for e in entries) + ")"


def make_mesh(shape, names, types, ndev=8, ids=None):
    """jax.make_mesh over the first `ndev` devices (tessera's make_mesh takes devices 0..n-1 in
    row-major order; the generator checks JAX does the same), or a Mesh over an explicit id grid."""
    if ids is None:
        m = jax.make_mesh(shape, names, axis_types=types, devices=jax.devices()[:ndev])
        got = [d.id for d in m.devices.flat]
        assert got == list(range(int(np.prod(shape)))), f"jax.make_mesh{shape} reordered devices: {got}"
        return m
    devs = np.array([jax.devices()[i] for i in ids]).reshape(shape)
    return Mesh(devs, names, axis_types=types)


# ---------------------------------------------------------------------------------------------
# Reprs. tessera's operator<< is str(): for Mesh that is the `Mesh('X': 2, ...)` form that
# NamedSharding's repr shows, not repr(mesh)'s `Mesh(axis_sizes=..., axis_names=...)`.

SPECS_FOR_REPR = [
    (), (None,), (None, None), ("X",), ("X", None), (None, "X"), ("X", "Y"), ("Y", "X"),
    (("X", "Y"),), (("Y", "X"),), (("X", "Y"), None), (None, ("X", "Y")), (("X", "Y"), "Z"),
    ("X", None, "Z"), ("X", "Y", "Z"), (("X", "Y", "Z"),), (("Z", "Y", "X"), None), (None, None, "Z"),
    ("X", None, None), ("data",), (("X",),), (None, ("Y", "Z"), "X"), ("batch", "model"),
]
for entries in SPECS_FOR_REPR:
    assert repr(P(*entries)) == str(P(*entries))
    c.add(f"repr spec {spec_source(entries)}", repr=str(P(*entries)))


def type_key(types):
    return "(" + ", ".join(str(t).split(".")[-1] for t in types) + ")"


MESHES_FOR_REPR = [
    ((8,), ("X",), (A,), 8), ((8,), ("X",), (E,), 8), ((8,), ("X",), (M,), 8),
    ((2, 4), ("X", "Y"), (A, A), 8), ((2, 4), ("X", "Y"), (E, E), 8), ((2, 4), ("X", "Y"), (M, M), 8),
    ((2, 4), ("X", "Y"), (E, A), 8), ((2, 4), ("X", "Y"), (A, M), 8), ((2, 4), ("X", "Y"), (M, E), 8),
    ((4, 2), ("X", "Y"), (A, A), 8), ((1, 8), ("X", "Y"), (E, E), 8),
    ((2, 2, 2), ("X", "Y", "Z"), (A, A, A), 8), ((2, 2, 2), ("X", "Y", "Z"), (E, E, E), 8),
    ((2, 2, 2), ("X", "Y", "Z"), (M, M, M), 8), ((2, 2, 2), ("X", "Y", "Z"), (A, E, M), 8),
    ((2, 2, 2), ("X", "Y", "Z"), (E, E, A), 8),
    ((4,), ("X",), (A,), 4), ((2,), ("X",), (E,), 2), ((2, 2), ("X", "Y"), (E, M), 4),
    ((2, 4), ("x", "y"), (A, A), 8), ((2, 4), ("data", "model"), (E, E), 8), ((8,), ("devices",), (A,), 8),
]


def mesh_key(shape, names, types, ndev):
    dims = "x".join(map(str, shape))
    on = "" if ndev == 8 else f" of {ndev}"
    return f"{dims}{on} {','.join(names)} {type_key(types)}"


for shape, names, types, ndev in MESHES_FOR_REPR:
    m = make_mesh(shape, names, types, ndev)
    c.add(f"repr mesh {mesh_key(shape, names, types, ndev)}", repr=str(m))

SHARDINGS_FOR_REPR = [
    (((2, 4), ("X", "Y"), (E, E), 8), ("X", None)),
    (((2, 4), ("X", "Y"), (E, E), 8), ("X", "Y")),
    (((2, 4), ("X", "Y"), (E, E), 8), ()),
    (((2, 4), ("X", "Y"), (E, E), 8), (("X", "Y"),)),
    (((2, 4), ("X", "Y"), (E, E), 8), ("Y",)),
    (((2, 4), ("X", "Y"), (A, A), 8), ("X", "Y")),
    (((2, 4), ("X", "Y"), (A, A), 8), (None, ("Y", "X"))),
    (((2, 4), ("X", "Y"), (A, A), 8), (None,)),
    (((2, 4), ("X", "Y"), (E, A), 8), ("X", None, "Y")),
    (((2, 4), ("X", "Y"), (M, M), 8), ("X",)),
    (((2, 4), ("X", "Y"), (A, M), 8), (None, "Y")),
    (((8,), ("X",), (A,), 8), ("X", None)),
    (((8,), ("X",), (E,), 8), (None, "X")),
    (((8,), ("X",), (M,), 8), ()),
    (((8,), ("devices",), (A,), 8), ("devices", None)),
    (((2, 2, 2), ("X", "Y", "Z"), (E, E, E), 8), (("X", "Y", "Z"),)),
    (((2, 2, 2), ("X", "Y", "Z"), (A, E, M), 8), ("X", ("Z", "Y"))),
    (((2, 2, 2), ("X", "Y", "Z"), (A, A, A), 8), ("Z", None, "X")),
    (((2, 2, 2), ("X", "Y", "Z"), (E, E, A), 8), (None, None)),
    (((4,), ("X",), (A,), 4), ("X",)),
    (((2,), ("X",), (E,), 2), (None, "X")),
    (((2, 2), ("X", "Y"), (E, M), 4), ("Y", "X")),
    (((1, 8), ("X", "Y"), (E, E), 8), (("Y", "X"), None)),
    (((2, 4), ("x", "y"), (A, A), 8), ("x", "y")),
    (((2, 4), ("data", "model"), (E, E), 8), ("data", "model")),
]
for (shape, names, types, ndev), entries in SHARDINGS_FOR_REPR:
    s = NamedSharding(make_mesh(shape, names, types, ndev), P(*entries))
    c.add(f"repr sharding {mesh_key(shape, names, types, ndev)} {spec_source(entries)}", repr=str(s))

# JAX 0.12's make_mesh makes Explicit axes when axis_types is left out; tessera's makes Auto ones.
for shape, names in [((2, 4), ("X", "Y")), ((8,), ("X",)), ((2, 2, 2), ("X", "Y", "Z"))]:
    m = jax.make_mesh(shape, names)
    c.add(f"make_mesh default axis_types {'x'.join(map(str, shape))}", repr=str(m),
          axis_types=[str(t).split(".")[-1] for t in m.axis_types], difference="make_mesh default axis types")

# ---------------------------------------------------------------------------------------------
# Layouts: which block each device holds. The meshes have Explicit axes (JAX 0.12's default);
# the axis types do not change the blocks.

LAYOUT_MESHES = {
    "8": ((8,), ("X",), 8, None),
    "2x4": ((2, 4), ("X", "Y"), 8, None),
    "4x2": ((4, 2), ("X", "Y"), 8, None),
    "2x2x2": ((2, 2, 2), ("X", "Y", "Z"), 8, None),
    "1x8": ((1, 8), ("X", "Y"), 8, None),
    "4 of 8": ((4,), ("X",), 4, None),
    "2 of 8": ((2,), ("X",), 2, None),
    "2x2 of 8": ((2, 2), ("X", "Y"), 4, None),
    # An explicit device grid, not row-major: the map is keyed by device id, not position.
    "2x4 ids 0,2,4,6,1,3,5,7": ((2, 4), ("X", "Y"), 8, [0, 2, 4, 6, 1, 3, 5, 7]),
}
LAYOUT_SPECS = {
    "8": [(), ("X",), (None, "X"), ("X", None), (None, None, "X")],
    "2x4": [(), ("X",), ("Y",), ("X", "Y"), ("Y", "X"), (("X", "Y"),), (("Y", "X"),), (None, ("X", "Y")),
            (None, "Y"), ("X", None, "Y"), (None, None, ("Y", "X"))],
    "4x2": [("X",), ("Y",), ("X", "Y"), (("X", "Y"),), (("Y", "X"),), (None, "X")],
    "2x2x2": [(), ("X",), ("Y",), ("Z",), ("X", "Y", "Z"), ("Z", "Y", "X"), (("X", "Y", "Z"),), (("Z", "Y", "X"),),
              (("X", "Z"), "Y"), (("Z", "X"), None, "Y"), (None, ("Y", "Z")), ("Y", None)],
    "1x8": [("X",), ("Y",), (("X", "Y"),), (("Y", "X"),), ("X", "Y")],
    "4 of 8": [(), ("X",), (None, "X")],
    "2 of 8": [("X",), (None, "X")],
    "2x2 of 8": [("X", "Y"), (("Y", "X"),), ("Y",)],
    "2x4 ids 0,2,4,6,1,3,5,7": [("X", "Y"), (("Y", "X"),), ("Y",), ()],
}


def layout_mesh(key):
    shape, names, ndev, ids = LAYOUT_MESHES[key]
    return make_mesh(shape, names, (E,) * len(names), ndev, ids)


def shards_per_dim(mesh, entries, rank):
    out = []
    for i in range(rank):
        e = entries[i] if i < len(entries) else None
        axes = () if e is None else (e if isinstance(e, tuple) else (e,))
        out.append(int(np.prod([mesh.shape[a] for a in axes])) if axes else 1)
    return out


def block_ranges(idx, shape):
    """A tuple of slices as [[start, stop], ...] (slice(None) is the whole dimension)."""
    return [list(s.indices(n)[:2]) for s, n in zip(idx, shape)]


def layout_fields(mesh, sharding, shape):
    x = jax.device_put(np.zeros(shape, np.float32), sharding)
    replica = {str(sh.device.id): sh.replica_id for sh in x.addressable_shards}
    for sh in x.addressable_shards:  # the array's shards agree with the sharding's own map
        assert block_ranges(sh.index, shape) == block_ranges(sharding.devices_indices_map(shape)[sh.device], shape)
    return dict(
        indices={str(d.id): block_ranges(idx, shape) for d, idx in sharding.devices_indices_map(shape).items()},
        shard_shape=list(sharding.shard_shape(shape)),
        replica_ids=replica,
        is_fully_replicated=sharding.is_fully_replicated,
        num_devices=len(sharding.device_set),
    )


FACTORS = (2, 3, 1)  # elements per block along each dimension: several, odd, and one
for key, specs in LAYOUT_SPECS.items():
    mesh = layout_mesh(key)
    for entries in specs:
        s = NamedSharding(mesh, P(*entries))
        for rank in range(max(len(entries), 1), 4):
            shape = tuple(k * f for k, f in zip(shards_per_dim(mesh, entries, rank), FACTORS))
            c.add(f"layout {key} {spec_source(entries)} rank{rank}", spec=str(P(*entries)), shape=list(shape),
                  mesh_shape=list(mesh.devices.shape), device_ids=[d.id for d in mesh.devices.flat],
                  **layout_fields(mesh, s, shape))

# Uneven shapes: JAX refuses them; tessera's blocks are JAX's blocks of the padded shape, clipped.
UNEVEN = [
    ("2x4", ("Y",), (6,)), ("2x4", ("Y",), (5, 3)), ("2x4", ("Y",), (3,)), ("8", ("X",), (10,)),
    ("8", ("X",), (7,)), ("2x2x2", (("X", "Y", "Z"),), (12, 4)), ("2x4", ("X", "Y"), (3, 10)),
    ("4x2", (None, "X"), (2, 7)),
]
for key, entries, shape in UNEVEN:
    mesh = layout_mesh(key)
    s = NamedSharding(mesh, P(*entries))
    try:
        s.devices_indices_map(shape)
        raise AssertionError(f"JAX accepted the uneven shape {shape} for {s}")
    except ValueError as e:
        err = str(e)
    k = shards_per_dim(mesh, entries, len(shape))
    padded = tuple(-(-n // kk) * kk for n, kk in zip(shape, k))
    fields = layout_fields(mesh, s, padded)
    c.add(f"uneven {key} {spec_source(entries)} {'x'.join(map(str, shape))}", spec=str(P(*entries)),
          shape=list(shape), mesh_shape=list(mesh.devices.shape), device_ids=[d.id for d in mesh.devices.flat],
          difference="uneven shapes", jax_error=err, padded_shape=list(padded), padded_indices=fields["indices"],
          padded_shard_shape=fields["shard_shape"], padded_replica_ids=fields["replica_ids"])

c.write("jax_sharding.json", "tools/jax_reference/gen_sharding.py")
