"""Writes tests/golden/jax_einsum.json: jnp.einsum on Explicit meshes, for
tests/jax/einsum_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_einsum.py

A sweep of subscripts (matmul, batched matmul, attention scores and values, outer products,
sums of indices, transposes, several contracting indices) x operand specs x meshes of 1, 2 and
3 axes. Each case records jax.typeof of the arguments and of the result, and for the first mesh
of each spec pair the values; a program JAX refuses records its error (the C++ test checks that
tessera's rule refuses it too, with the same kind of error). The grad_ cases record jax.grad of
sum(einsum(s, a, b) * c) with respect to both operands.

Specs are written one character per dimension: "_" None, "0"/"1"/"2" the mesh's first, second
and third axis ("X", "Y", "Z"); a spec naming an axis the mesh lacks is skipped on that mesh.
Every sharded dimension has size 8, so each spec divides evenly on every mesh.
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
    "m8": common.make_mesh((8,), ("X",), E),
    "m24": common.make_mesh((2, 4), ("X", "Y"), E),
    "m222": common.make_mesh((2, 2, 2), ("X", "Y", "Z"), E),
}
AXES = "XYZ"


def spec_of(text):
    return P(*[None if ch == "_" else AXES[int(ch)] for ch in text])


def fits(mesh, *specs):
    n = len(MESHES[mesh].axis_names)
    return all(ch == "_" or int(ch) < n for s in specs for ch in s)


# (tag, subscripts, shapes, [spec per operand, ...] alternatives)
SWEEP = [
    ("mm", "ij,jk->ik", [(8, 8), (8, 8)], ["0_,_1", "_0,__", "0_,0_", "01,_1", "__,_0", "_0,0_", "_0,1_", "0_,_0"]),
    ("mm_t", "ij,jk->ki", [(8, 8), (8, 8)], ["0_,_1", "01,__"]),
    ("bmm", "bij,bjk->bik", [(8, 8, 8), (8, 8, 8)], ["0__,0__", "01_,0_2", "0_1,0__", "0__,___", "0__,1__"]),
    ("scores", "bqhd,bkhd->bhqk", [(8, 8, 8, 8), (8, 8, 8, 8)], ["0_1_,0_1_", "0__1,0___", "01__,0___", "0_1_,0___"]),
    ("values", "bhqk,bkhd->bqhd", [(8, 8, 8, 8), (8, 8, 8, 8)], ["01__,0_1_", "0_1_,0___", "0__1,0___"]),
    ("outer", "i,j->ij", [(8,), (8,)], ["0,1", "0,_", "0,0"]),
    ("matvec", "ij,j->i", [(8, 8), (8,)], ["01,_", "_0,_", "0_,0"]),
    ("dot", "i,i->", [(8,), (8,)], ["0,_", "0,0"]),
    ("multi", "ijk,jkl->il", [(8, 8, 8), (8, 8, 8)], ["_01,___", "0__,_1_", "_0_,_1_"]),
    ("rowdot", "ij,ij->i", [(8, 8), (8, 8)], ["0_,0_", "0_,__", "01,0_"]),
    ("unique", "ij,kl->ik", [(8, 8), (8, 8)], ["01,1_", "_0,__"]),
    ("implicit", "ji,jk", [(8, 8), (8, 8)], ["0_,_1", "_0,_1"]),
    ("sum_rows", "ij->i", [(8, 8)], ["01", "_0"]),
    ("sum_all", "ijk->", [(8, 8, 8)], ["012", "0__"]),
    ("sum_mid", "ijk->ik", [(8, 8, 8)], ["_01", "01_"]),
    ("transpose", "ij->ji", [(8, 8)], ["01", "0_"]),
    ("transpose3", "ijk->kij", [(8, 8, 8)], ["012", "_10"]),
]
VALUE_MESH = "m24"

c = common.Cases()


def inputs(shapes):
    return [common.smooth(s, i) for i, s in enumerate(shapes)]


for tag, subs, shapes, alternatives in SWEEP:
    for alt in alternatives:
        specs = alt.split(",")
        for mesh in MESHES:
            if not fits(mesh, *specs):
                continue
            hosts = inputs(shapes)
            xs = [jax.device_put(h, NamedSharding(MESHES[mesh], spec_of(s))) for h, s in zip(hosts, specs)]
            name = f"{tag}__{'__'.join(specs)}__{mesh}"
            rec = {"mesh": mesh, "subscripts": subs, "shapes": [list(s) for s in shapes], "specs": specs,
                   "args": [str(jax.typeof(x)) for x in xs]}
            try:
                r = jnp.einsum(subs, *xs)
            except Exception as e:  # noqa: BLE001 -- JAX's refusal is the answer
                rec.update(rejected=True, jax_error=str(e).strip().splitlines()[0], error_type=type(e).__name__)
            else:
                rec["typeof"] = str(jax.typeof(r))
                if mesh == VALUE_MESH:
                    rec["values"] = common.flat(r)
            c.add(name, **rec)

# out_sharding settles what JAX refuses without it.
for tag, subs, shapes, specs, out in (
    ("out_contracting_both", "ij,jk->ik", [(8, 8), (8, 8)], ["_0", "0_"], "_1"),
    ("out_batch", "ij,ij->i", [(8, 8), (8, 8)], ["0_", "__"], "1"),
    ("out_scores", "bqhd,bkhd->bhqk", [(8, 8, 8, 8), (8, 8, 8, 8)], ["0__1", "0__1"], "01__"),
):
    mesh = "m24"
    hosts = inputs(shapes)
    xs = [jax.device_put(h, NamedSharding(MESHES[mesh], spec_of(s))) for h, s in zip(hosts, specs)]
    with jax.set_mesh(MESHES[mesh]):
        r = jnp.einsum(subs, *xs, out_sharding=NamedSharding(MESHES[mesh], spec_of(out)))
    c.add(tag, mesh=mesh, subscripts=subs, shapes=[list(s) for s in shapes], specs=specs, out=out,
          args=[str(jax.typeof(x)) for x in xs], typeof=str(jax.typeof(r)), values=common.flat(r))

# grad of sum(einsum(s, a, b) * c) with respect to a and b.
for tag, subs, shapes, specs in (
    ("grad_scores", "bqhd,bkhd->bhqk", [(8, 8, 8, 8), (8, 8, 8, 8)], ["0__1", "0___"]),
    ("grad_mm", "ij,jk->ik", [(8, 8), (8, 8)], ["01", "_1"]),
    ("grad_unique", "ijk,kl->li", [(8, 8, 8), (8, 8)], ["0_1", "__"]),
):
    mesh = "m24"
    hosts = inputs(shapes)
    xs = [jax.device_put(h, NamedSharding(MESHES[mesh], spec_of(s))) for h, s in zip(hosts, specs)]
    with jax.set_mesh(MESHES[mesh]):
        out_shape = jax.eval_shape(lambda a, b: jnp.einsum(subs, a, b), *xs).shape
        cw = common.smooth(out_shape, 7)
        ga, gb = jax.grad(lambda a, b: jnp.sum(jnp.einsum(subs, a, b) * cw), argnums=(0, 1))(*xs)
    c.add(tag, mesh=mesh, subscripts=subs, shapes=[list(s) for s in shapes], specs=specs,
          args=[str(jax.typeof(x)) for x in xs], grad_types=[str(jax.typeof(ga)), str(jax.typeof(gb))],
          grads=[common.flat(ga), common.flat(gb)])

c.write("jax_einsum.json", "tools/jax_reference/gen_einsum.py")

# The C++ test's case list (tests/jax/einsum_golden_test.cpp), printed for keeping it in step.
if os.environ.get("TESSERA_PRINT_CASES"):
    for name, case in c.cases.items():
        if "__" in name:
            print(name)
