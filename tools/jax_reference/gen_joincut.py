"""Writes tests/golden/jax_joincut.json: JAX 0.12's joining and cutting operations (jnp.concatenate,
jnp.stack, jnp.split, jax.lax.slice_in_dim, jax.lax.dynamic_slice, jax.lax.dynamic_update_slice,
jnp.pad, jnp.flip, jnp.roll) on Explicit meshes, for tests/jax/joincut_golden_test.cpp.

    build/jax-venv/bin/python tools/jax_reference/gen_joincut.py

Each case names one of four configurations (a mesh, an operand shape and its spec, fixed so that
the C++ test can name their types), the operation and its arguments, and records JAX's result:
jax.typeof (a list for split), the values, and the gradient of sum(op(x, y) * w) for the operands
(w a fixed pattern), or the first line of JAX's refusal.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding

from common import Cases, flat, make_mesh, smooth, spec_json

P = jax.P

CONFIGS = {
    # name: (mesh sizes, names, shape, spec)
    "x2": ((2,), ("x",), (8, 4), P("x", None)),
    "x2y2": ((2, 2), ("x", "y"), (8, 4), P("x", "y")),
    "x2y2z2": ((2, 2, 2), ("x", "y", "z"), (4, 8), P("z", "x")),
    "x2y4r": ((2, 4), ("x", "y"), (8, 4), P()),
}


def weights(shape):
    return jnp.asarray(smooth(shape, 5))


def record(c, name, cfg, op, args, fn, nops):
    sizes, names, shape, spec = CONFIGS[cfg]
    mesh = make_mesh(sizes, names, AxisType.Explicit)
    xs = [jax.device_put(smooth(shape, i), NamedSharding(mesh, spec)) for i in range(2)]
    rec = {"config": cfg, "op": op, "args": args}
    try:
        with jax.set_mesh(mesh):
            r = fn(*xs[:nops])
            if isinstance(r, (list, tuple)):
                rec["typeof"] = [str(jax.typeof(q)) for q in r]
                rec["values"] = [flat(q) for q in r]

                def loss(*v):
                    return sum(jnp.sum(q * weights(q.shape)) for q in fn(*v))
            else:
                rec["typeof"] = str(jax.typeof(r))
                rec["values"] = flat(r)

                def loss(*v):
                    return jnp.sum(fn(*v) * weights(r.shape))
            g = jax.grad(loss, argnums=tuple(range(nops)))(*xs[:nops])
            rec["grads"] = [flat(q) for q in g]
    except Exception as e:  # noqa: BLE001 - JAX's refusals are the data
        rec["error"] = type(e).__name__ + ": " + str(e).splitlines()[0]
    c.add(name, **rec)


def main():
    c = Cases()
    for cfg in CONFIGS:
        mesh_sizes, names, shape, spec = CONFIGS[cfg]
        for axis in (0, 1):
            record(c, f"{cfg}:concatenate:{axis}", cfg, "concatenate", {"axis": axis},
                   lambda x, y, a=axis: jnp.concatenate([x, y], axis=a), 2)
        if spec != P():
            # the second operand replicated: JAX refuses (a compile error in tessera)
            def differ(x, y, m=mesh_sizes, n=names):
                mesh = make_mesh(m, n, AxisType.Explicit)
                return jnp.concatenate([x, jax.sharding.reshard(y, NamedSharding(mesh, P()))], axis=0)
            record(c, f"{cfg}:concatenate_differ", cfg, "concatenate_differ", {"axis": 0}, differ, 2)
        for axis in (0, 1, 2):
            record(c, f"{cfg}:stack:{axis}", cfg, "stack", {"axis": axis},
                   lambda x, y, a=axis: jnp.stack([x, y], axis=a), 2)
        for axis in (0, 1):
            for n in (2, 4):
                record(c, f"{cfg}:split:{axis}:{n}", cfg, "split", {"axis": axis, "sections": n},
                       lambda x, a=axis, n=n: jnp.split(x, n, axis=a), 1)
            for idx in ([3], [1, 2], [2, 6]):
                record(c, f"{cfg}:split:{axis}:{idx}", cfg, "split", {"axis": axis, "indices": idx},
                       lambda x, a=axis, i=idx: jnp.split(x, i, axis=a), 1)
            for (s, e, st) in ((0, 2, 1), (1, 3, 1), (2, 4, 1), (0, 4, 2), (1, 4, 3), (0, 4, 4)):
                record(c, f"{cfg}:slice_in_dim:{axis}:{s}:{e}:{st}", cfg, "slice_in_dim",
                       {"axis": axis, "start": s, "stop": e, "step": st},
                       lambda x, a=axis, s=s, e=e, st=st: jax.lax.slice_in_dim(x, s, e, st, axis=a), 1)
            for shift in (3, -5):
                record(c, f"{cfg}:roll:{axis}:{shift}", cfg, "roll", {"axis": axis, "shift": shift},
                       lambda x, a=axis, s=shift: jnp.roll(x, s, axis=a), 1)
        for starts, sizes in (((1, 0), (4, 4)), ((6, 1), (4, 2)), ((-3, 2), (2, 2)), ((0, 0), (3, 4)), ((2, 2), (2, 4))):
            record(c, f"{cfg}:dynamic_slice:{starts}:{sizes}", cfg, "dynamic_slice",
                   {"starts": list(starts), "sizes": list(sizes)},
                   lambda x, st=starts, sz=sizes: jax.lax.dynamic_slice(x, st, sz), 1)
        for starts, ushape in (((1, 1), (2, 2)), ((7, 3), (2, 2)), ((0, 0), (4, 4)), ((3, -1), (2, 4))):
            def dus(x, y, st=starts, us=ushape):
                u = jax.lax.slice(y, (0, 0), us)
                return jax.lax.dynamic_update_slice(x, u, st)
            record(c, f"{cfg}:dynamic_update_slice:{starts}:{ushape}", cfg, "dynamic_update_slice",
                   {"starts": list(starts), "update_shape": list(ushape)}, dus, 2)
        for widths in (((1, 1), (0, 0)), ((2, 2), (1, 3)), ((2, 3), (0, 0)), ((0, 0), (2, 2)), ((4, 4), (2, 0))):
            record(c, f"{cfg}:pad:{widths}", cfg, "pad", {"widths": [list(w) for w in widths]},
                   lambda x, w=widths: jnp.pad(x, w), 1)
        for axes in ((0,), (1,), (0, 1)):
            record(c, f"{cfg}:flip:{axes}", cfg, "flip", {"axes": list(axes)},
                   lambda x, a=axes: jnp.flip(x, a), 1)
    c.write("jax_joincut.json", "tools/jax_reference/gen_joincut.py")


if __name__ == "__main__":
    main()
