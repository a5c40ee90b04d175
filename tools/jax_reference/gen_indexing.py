"""Writes tests/golden/jax_indexing.json: JAX 0.12's jax.lax.broadcasted_iota / jnp.arange with out_sharding,
jnp.tril / jnp.triu, jax.nn.one_hot, jnp.take and jnp.take_along_axis on Explicit meshes: str(jax.typeof) of
the result, its values, and for take / take_along_axis / tril the gradient of a scalar loss and its typeof, for
tests/jax/indexing_golden_test.cpp.

    build/jax-venv/bin/python tools/jax_reference/gen_indexing.py

Where JAX refuses a program tessera runs (a take from a table sharded along the taken axis, or with sharded
indices; take_along_axis with indices sharded along the axis) the case records JAX's error ("error") and the
JAX program that computes what tessera computes ("jax_equivalent": `.at[ids].get(out_sharding=...)` with the
sharding tessera gives), whose typeof, values and gradient the test compares with tessera's.

Meshes: "m24" (2, 4) ("X", "Y") and "m222" (2, 2, 2) ("X", "Y", "Z"), every axis Explicit. Specs are written
as in common.parse_spec ("X_" is P("X", None), "r" replicated).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

from common import Cases, flat, parse_spec  # noqa: E402

cases = Cases()
M24 = common.make_mesh((2, 4), ("X", "Y"), AxisType.Explicit)
M222 = common.make_mesh((2, 2, 2), ("X", "Y", "Z"), AxisType.Explicit)
MESHES = {"m24": M24, "m222": M222}


def first_line(e):
    return str(e).splitlines()[0]


def put(mesh, x, spec):
    return jax.device_put(x, NamedSharding(mesh, parse_spec(spec)))


# ---- iota / arange ---------------------------------------------------------------------------------
with jax.set_mesh(M24):
    for spec in ["r", "X_", "_Y", "XY", "(XY)_", "Y_"]:
        for dim in (0, 1):
            y = jax.lax.broadcasted_iota(jnp.int32, (8, 8), dim, out_sharding=parse_spec(spec))
            cases.add(f"iota/{spec}/d{dim}", mesh="m24", shape=[8, 8], spec=spec, dim=dim, typeof=str(jax.typeof(y)),
                      values=flat(y))
    for spec in ["X", "(XY)", "Y"]:
        y = jnp.arange(16, dtype=jnp.int32, out_sharding=parse_spec(spec))
        cases.add(f"arange/{spec}", mesh="m24", n=16, spec=spec, typeof=str(jax.typeof(y)), values=flat(y))

# ---- tril / triu: values, typeof, and the gradient of sum(f(x)**2) ---------------------------------------
xs = common.smooth((8, 8), 1)
for mesh_name, shape, specs in (("m24", (8, 8), ["r", "X_", "_Y", "XY", "YX"]), ("m222", (4, 8, 8), ["ZXY", "_XY"])):
    mesh = MESHES[mesh_name]
    xh = common.smooth(shape, 2)
    with jax.set_mesh(mesh):
        for spec in specs:
            x = put(mesh, xh, spec)
            for k in (-1, 0, 2):
                for name, f in (("tril", jnp.tril), ("triu", jnp.triu)):
                    y = jax.jit(lambda v, f=f, k=k: f(v, k))(x)
                    g = jax.jit(jax.grad(lambda v, f=f, k=k: jnp.sum(f(v, k) ** 2)))(x)
                    cases.add(f"{name}/{mesh_name}/{spec}/k{k}", mesh=mesh_name, shape=list(shape), spec=spec, k=k,
                              x=flat(xh), typeof=str(jax.typeof(y)), values=flat(y), grad=flat(g),
                              grad_typeof=str(jax.typeof(g)))

# ---- one_hot -------------------------------------------------------------------------------------------
ids_h = (np.arange(32, dtype=np.int32).reshape(8, 4) * 5 % 9 - 1).astype(np.int32)  # -1 .. 7, classes 6
with jax.set_mesh(M24):
    for spec in ["r", "X_", "_Y", "XY", "Y_"]:
        x = put(M24, ids_h, spec)
        y = jax.nn.one_hot(x, 6)
        cases.add(f"one_hot/{spec}", mesh="m24", spec=spec, ids=flat(ids_h), classes=6, typeof=str(jax.typeof(y)),
                  values=flat(y))
    for spec, out in (("X_", "X_Y"), ("r", "__Y"), ("_Y", "_YX"), ("X_", "__Y"), ("XY", "X__")):
        x = put(M24, ids_h, spec)
        try:
            y = jax.nn.one_hot(x, 8, out_sharding=parse_spec(out))
            cases.add(f"one_hot_out/{spec}/{out}", mesh="m24", spec=spec, out=out, ids=flat(ids_h), classes=8,
                      typeof=str(jax.typeof(y)), values=flat(y))
        except Exception as e:  # noqa: BLE001
            cases.add(f"one_hot_out/{spec}/{out}", mesh="m24", spec=spec, out=out, error=first_line(e))

# ---- take ----------------------------------------------------------------------------------------------
table_h = common.smooth((16, 8), 3)
tids = np.array([[0, 15, 3, -1, 16, 7], [2, 2, 9, -16, 11, 4], [5, 13, 1, 8, -17, 6], [14, 10, 12, 0, 3, 3]], np.int32)
w_take = common.smooth((4, 6, 8), 4)
in_range = np.where((tids >= -16) & (tids < 16), tids, 0).astype(np.int32)  # the gradient's loss: no NaN


def take_loss(t, i, w):
    e = jnp.take(t, i, axis=0)
    return jnp.sum(e * w + e * e)


def at_loss(out):
    def f(t, i, w):
        e = t.at[i].get(mode="fill", out_sharding=out)
        return jnp.sum(e * w + e * e)
    return f


take_grad = jax.grad(take_loss)(table_h, in_range, w_take)  # the values do not depend on the layout
with jax.set_mesh(M24):
    for tspec, ispec, tessera_out in (("r", "r", "r"), ("_Y", "r", "__Y"), ("_(XY)", "r", "__(XY)"),
                                      ("X_", "r", "r"), ("Y_", "X_", "X"), ("XY", "r", "__Y"),
                                      ("_Y", "X_", "X_Y"), ("r", "X_", "X"), ("(XY)_", "r", "r")):
        t = put(M24, table_h, tspec)
        i = put(M24, tids, ispec)
        ig = put(M24, in_range, ispec)
        w = put(M24, w_take, tessera_out)
        case = dict(mesh="m24", table_spec=tspec, ids_spec=ispec, table=flat(table_h), ids=flat(tids),
                    grad_ids=flat(in_range), w=flat(w_take), w_spec=tessera_out, grad=flat(take_grad))
        out_spec = parse_spec(tessera_out)
        try:
            y = jax.jit(lambda a, b: jnp.take(a, b, axis=0))(t, i)
            case.update(typeof=str(jax.typeof(y)), values=flat(y))
            g = jax.jit(jax.grad(take_loss))(t, ig, w)
        except Exception as e:  # noqa: BLE001
            case.update(error=first_line(e))
            y = jax.jit(lambda a, b: a.at[b].get(mode="fill", out_sharding=out_spec))(t, i)
            g = jax.jit(jax.grad(at_loss(out_spec)))(t, ig, w)
            case.update(jax_equivalent=f".at[ids].get(mode=\"fill\", out_sharding={out_spec})", typeof=str(jax.typeof(y)),
                        values=flat(y))
        assert np.allclose(np.asarray(g), np.asarray(take_grad), rtol=1e-6)
        case.update(grad_typeof=str(jax.typeof(g)))
        cases.add(f"take/{tspec}/{ispec}", **case)

# ---- take_along_axis -------------------------------------------------------------------------------------
xa = common.smooth((8, 8), 5)
ia = ((np.arange(32, dtype=np.int32).reshape(8, 4) * 7) % 11 - 2).astype(np.int32)  # -2 .. 8 (8 fills)
ia_in = np.where(ia < 8, ia, 0).astype(np.int32)
wa = common.smooth((8, 4), 6)

def along_loss(a, b, c):
    return jnp.sum(jnp.take_along_axis(a, b, axis=1) ** 2 * c)


along_grad = jax.grad(along_loss)(xa, ia_in, wa)  # the values do not depend on the layout
with jax.set_mesh(M24):
    for xspec, ispec, tessera_out in (("X_", "X_", "X_"), ("r", "r", "r"), ("r", "X_", "X_"), ("X_", "r", "X_"),
                                      ("r", "_Y", "_Y"), ("X_", "_Y", "XY"), ("_Y", "r", None), ("XY", "X_", None)):
        x = put(M24, xa, xspec)
        i = put(M24, ia, ispec)
        ig = put(M24, ia_in, ispec)
        case = dict(mesh="m24", x_spec=xspec, ids_spec=ispec, x=flat(xa), ids=flat(ia), grad_ids=flat(ia_in),
                    w=flat(wa), w_spec=tessera_out, grad=flat(along_grad))
        try:
            y = jax.jit(lambda a, b: jnp.take_along_axis(a, b, axis=1))(x, i)
            case.update(typeof=str(jax.typeof(y)), values=flat(y))
        except Exception as e:  # noqa: BLE001
            case.update(error=first_line(e))
            if tessera_out is not None:
                out_spec = parse_spec(tessera_out)
                rows = jnp.arange(8)[:, None]
                y = jax.jit(lambda a, b: a.at[rows, b].get(mode="fill", out_sharding=out_spec))(x, i)
                case.update(jax_equivalent=f".at[rows, ids].get(mode=\"fill\", out_sharding={out_spec})", typeof=str(jax.typeof(y)),
                            values=flat(y))
        if tessera_out is not None and "error" not in case:
            try:
                g = jax.jit(jax.grad(along_loss))(x, ig, put(M24, wa, tessera_out))
                case.update(grad_typeof=str(jax.typeof(g)))
            except Exception as e:  # noqa: BLE001  (JAX 0.12's own transpose refuses some layouts)
                case.update(grad_error=first_line(e))
        cases.add(f"take_along_axis/{xspec}/{ispec}", **case)

cases.write("jax_indexing.json", "tools/jax_reference/gen_indexing.py")
