"""Writes tests/golden/jax_shard_map_grad.json: gradients through jax.shard_map, and jax.grad inside a
shard_map body, for tests/jax/shard_map_grad_golden_test.cpp.

Run with the pinned JAX (tools/jax_reference/setup_venv.sh):
    build/jax-venv/bin/python tools/jax_reference/gen_shard_map_grad.py

Each program is a shard_map body with its in_specs, out_specs and check_vma, and a transform:
  - "grad": jax.grad(f, argnums) with f(*args) = shard_map(body, ...)(*args) (or, for the programs
    with an `outer` function, outer(shard_map(body, ...)(*args))); the value f(*args) is recorded too;
  - "value_and_grad": jax.value_and_grad(f, argnums);
  - "vjp": jax.vjp(f, *args) with a non-scalar output, its vjp function called with a cotangent
    (stored in the case), every argument differentiated;
  - "call": the shard_map called once, for bodies that call jax.grad or jax.value_and_grad
    themselves (JAX 0.12: under check_vma=True an invariant argument's gradient is psummed over
    the axes its uses vary over, under check_vma=False it is not).
The mesh is one of the first 2, 4 or 8 CPU devices (axis X) or 2x4 (axes X, Y), with Explicit axes
(JAX 0.12's default); every argument is put on it with its in_spec's NamedSharding first, and
everything runs inside jax.set_mesh(mesh).

A case "<program>@<mesh>" records the mesh, the specs (as lists, common.spec_json), check_vma, the
transform and argnums, the inputs (shape, spec, str(jax.typeof), values flat and row-major), the
value or the outputs, the cotangent (vjp), and each gradient's values, str(jax.typeof) and spec.
Inputs are float32 and exact in float32 (common.smooth: multiples of 1/8; common.labels: 0 or 1);
input i of a program is maker(shape, i). Everything is float32 (jax_enable_x64 stays off, as in
gen_grad.py). `rtol` is relative to max(1, |value|): 1e-6 for polynomial programs (sums rounded
in another order), 1e-5 where sigmoid, tanh or sin are involved.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices, before anything else touches jax)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding  # noqa: E402

lax = jax.lax

# key -> (shape, axis names); every axis Explicit.
MESHES = {
    "e2": ((2,), ("X",)),
    "e4": ((4,), ("X",)),
    "e8": ((8,), ("X",)),
    "e2x4": ((2, 4), ("X", "Y")),
}


# ---- the bodies (each device's block) ---------------------------------------------------------------

def dp_logreg(w, b, x, y):
    """Seed 002's logistic regression, data-parallel: the batch sharded, the parameters replicated."""
    d = jax.nn.sigmoid(x @ w + b) - y
    return lax.pmean(jnp.mean(d * d), "X")


def dp_logreg_2d(w, b, x, y):
    """The same with the batch over both axes of a 2-D mesh, averaged over both."""
    d = jax.nn.sigmoid(x @ w + b) - y
    return lax.pmean(jnp.mean(d * d), ("X", "Y"))


def dp_mse(w, b, x, y):
    d = x @ w + b - y
    return lax.pmean(jnp.mean(d * d), "X")


def psum_invariant(w):
    """psum of a value that is the same on every device: k times it (an implicit pvary, then psum)."""
    return lax.psum(jnp.sum(jnp.tanh(w) * w), "X")


def fsdp(w, x):
    """FSDP: the parameter sharded along its rows, all-gathered (tiled) for the product."""
    full = lax.all_gather(w, "X", axis=0, tiled=True)
    z = jnp.tanh(x @ full)
    return lax.pmean(jnp.mean(z * z), "X")


def psum_scatter_tiled(x, c):
    s = lax.psum_scatter(jnp.tanh(x), "X", scatter_dimension=0, tiled=True)
    return lax.psum(jnp.sum(s * c), "X")


def all_to_all_tiled(x, c):
    t = lax.all_to_all(x, "X", 1, 0, tiled=True)
    return lax.psum(jnp.sum(jnp.sin(t) * c), "X")


def ppermute_cycle(x):
    k = 8
    p = lax.ppermute(x, "X", [(i, (i + 1) % k) for i in range(k)])
    return lax.psum(jnp.sum(jnp.sin(p) * x), "X")


def all_gather_stacked(axis):
    def body(w, x):
        g = lax.all_gather(w, "X", axis=axis)  # not tiled: a new dimension of size k at `axis`
        z = jnp.tanh(x @ g)
        return lax.pmean(jnp.mean(z * z), "X")
    return body


def layer(w, x):
    """A result that varies (out_specs P('X')): its rows are the devices' blocks."""
    return jnp.tanh(x @ w)


def invariant_layer(w):
    """A result the same on every device under out_specs P('X'): the devices' copies are stacked."""
    return jnp.tanh(w) * 2


def mse(w, x, y):
    d = x @ w - y
    return jnp.mean(d * d)


def grad_in_body(w, x, y):
    """Seed 004's distributed training step: each device's gradient, then pmean."""
    return lax.pmean(jax.grad(mse)(w, x, y), "X")


def value_and_grad_in_body(w, x, y):
    loss, g = jax.value_and_grad(mse)(w, x, y)
    return lax.pmean(loss, "X"), lax.pmean(g, "X")


def mean_of_square(o):
    return jnp.mean(o * o)


# name -> dict(body, in_specs, out_specs, check_vma, shapes, makers, transform, argnums, rtol[, outer])
S, L = common.smooth, common.labels
_dp = dict(in_specs="r,r,X_,X_", out_specs="r", shapes=[(5, 2), (2,), (16, 5), (16, 2)], makers=[S, S, S, L],
           argnums=(0, 1))
PROGRAMS = {
    "dp_logreg": dict(_dp, body=dp_logreg, check_vma=True, transform="grad", rtol=1e-5),
    "dp_logreg_no_check_vma": dict(_dp, body=dp_logreg, check_vma=False, transform="grad", rtol=1e-5),
    "dp_logreg_2d": dict(_dp, body=dp_logreg_2d, in_specs="r,r,(XY)_,(XY)_", check_vma=True, transform="grad",
                         rtol=1e-5),
    "dp_mse_value_and_grad": dict(_dp, body=dp_mse, check_vma=True, transform="value_and_grad", rtol=1e-6,
                                  makers=[S, S, S, S]),
    "psum_invariant": dict(body=psum_invariant, in_specs="r", out_specs="r", check_vma=True, shapes=[(3, 4)],
                           makers=[S], transform="grad", argnums=(0,), rtol=1e-5),
    "fsdp_all_gather_tiled": dict(body=fsdp, in_specs="X_,X_", out_specs="r", check_vma=True,
                                  shapes=[(8, 3), (16, 8)], makers=[S, S], transform="grad", argnums=(0, 1),
                                  rtol=1e-5),
    "psum_scatter_tiled": dict(body=psum_scatter_tiled, in_specs="X_,X_", out_specs="r", check_vma=True,
                               shapes=[(32, 3), (8, 3)], makers=[S, S], transform="grad", argnums=(0, 1), rtol=1e-5),
    "all_to_all_tiled": dict(body=all_to_all_tiled, in_specs="X_,_X", out_specs="r", check_vma=True,
                             shapes=[(16, 8), (16, 8)], makers=[S, S], transform="grad", argnums=(0, 1), rtol=1e-5),
    "ppermute_cycle": dict(body=ppermute_cycle, in_specs="X_", out_specs="r", check_vma=True, shapes=[(16, 3)],
                           makers=[S], transform="grad", argnums=(0,), rtol=1e-5),
    "all_gather_stacked0": dict(body=all_gather_stacked(0), in_specs="X,X_", out_specs="r", check_vma=True,
                                shapes=[(4,), (8, 2)], makers=[S, S], transform="grad", argnums=(0, 1), rtol=1e-5),
    "all_gather_stacked1": dict(body=all_gather_stacked(1), in_specs="X,X_", out_specs="r", check_vma=True,
                                shapes=[(8,), (16, 2)], makers=[S, S], transform="grad", argnums=(0, 1), rtol=1e-5),
    "vjp_layer": dict(body=layer, in_specs="r,X_", out_specs="X_", check_vma=True, shapes=[(3, 2), (16, 3)],
                      makers=[S, S], transform="vjp", argnums=(0, 1), rtol=1e-5),
    "outer_mean_of_layer": dict(body=layer, outer=mean_of_square, in_specs="r,X_", out_specs="X_", check_vma=True,
                                shapes=[(3, 2), (16, 3)], makers=[S, S], transform="grad", argnums=(0, 1), rtol=1e-5),
    "outer_mean_of_invariant_result": dict(body=invariant_layer, outer=mean_of_square, in_specs="r", out_specs="X_",
                                           check_vma=True, shapes=[(3, 2)], makers=[S], transform="grad",
                                           argnums=(0,), rtol=1e-5),
    "grad_in_body": dict(body=grad_in_body, in_specs="r,X_,X_", out_specs="r", check_vma=True,
                         shapes=[(3, 2), (8, 3), (8, 2)], makers=[S, S, S], transform="call", argnums=(), rtol=1e-6),
    "grad_in_body_no_check_vma": dict(body=grad_in_body, in_specs="r,X_,X_", out_specs="r", check_vma=False,
                                      shapes=[(3, 2), (8, 3), (8, 2)], makers=[S, S, S], transform="call",
                                      argnums=(), rtol=1e-6),
    "value_and_grad_in_body": dict(body=value_and_grad_in_body, in_specs="r,X_,X_", out_specs="r,r",
                                   check_vma=True, shapes=[(3, 2), (8, 3), (8, 2)], makers=[S, S, S],
                                   transform="call", argnums=(), rtol=1e-6),
    "value_and_grad_in_body_no_check_vma": dict(body=value_and_grad_in_body, in_specs="r,X_,X_", out_specs="r,r",
                                                check_vma=False, shapes=[(3, 2), (8, 3), (8, 2)], makers=[S, S, S],
                                                transform="call", argnums=(), rtol=1e-6),
}

CASES = [
    ("dp_logreg", "e2"), ("dp_logreg", "e4"), ("dp_logreg", "e8"), ("dp_logreg_no_check_vma", "e4"),
    ("dp_logreg_2d", "e2x4"), ("dp_mse_value_and_grad", "e8"), ("psum_invariant", "e4"),
    ("fsdp_all_gather_tiled", "e4"), ("psum_scatter_tiled", "e4"), ("all_to_all_tiled", "e4"),
    ("ppermute_cycle", "e8"), ("all_gather_stacked0", "e2"), ("all_gather_stacked1", "e4"), ("vjp_layer", "e4"),
    ("outer_mean_of_layer", "e8"), ("outer_mean_of_invariant_result", "e4"),
    ("grad_in_body", "e4"), ("grad_in_body_no_check_vma", "e4"), ("value_and_grad_in_body", "e4"),
    ("value_and_grad_in_body_no_check_vma", "e4"),
]


def array_json(x, spec=None):
    d = {"shape": list(x.shape)}
    if spec is not None:
        d["spec"] = common.spec_json(spec, x.ndim)
    d["typeof"] = str(jax.typeof(x))
    d["values"] = common.flat(x)
    return d


def main():
    c = common.Cases()
    meshes = {k: common.make_mesh(*MESHES[k], AxisType.Explicit) for k in MESHES}
    for prog, mesh_key in CASES:
        p = PROGRAMS[prog]
        mesh = meshes[mesh_key]
        in_specs = [common.parse_spec(s) for s in p["in_specs"].split(",")]
        out_specs = [common.parse_spec(s) for s in p["out_specs"].split(",")]
        assert len(in_specs) == len(p["shapes"]) == len(p["makers"]), prog
        inputs, args = [], []
        for i, (shape, spec, make) in enumerate(zip(p["shapes"], in_specs, p["makers"])):
            host = make(shape, i)
            assert host.dtype == np.float32 and host.shape == tuple(shape), (prog, i)
            x = jax.device_put(host, NamedSharding(mesh, spec))
            args.append(x)
            inputs.append({"shape": list(shape), "spec": common.spec_json(spec, len(shape)),
                           "typeof": str(jax.typeof(x)), "values": host.reshape(-1).tolist()})
        sm = jax.shard_map(p["body"], mesh=mesh, in_specs=tuple(in_specs),
                           out_specs=out_specs[0] if len(out_specs) == 1 else tuple(out_specs),
                           check_vma=p["check_vma"])
        outer = p.get("outer")
        f = sm if outer is None else (lambda *a: outer(sm(*a)))
        argnums = p["argnums"]
        transform = p["transform"]
        extra = {}
        with jax.set_mesh(mesh):
            if transform == "grad":
                value = f(*args)
                grads = jax.grad(f, argnums=argnums)(*args)
            elif transform == "value_and_grad":
                value, grads = jax.value_and_grad(f, argnums=argnums)(*args)
            elif transform == "vjp":
                assert argnums == tuple(range(len(args))), prog
                out, fn = jax.vjp(f, *args)
                ct_host = common.smooth(out.shape, len(args))
                ct = jax.device_put(ct_host, out.sharding)
                grads = fn(ct)
                extra["outputs"] = [array_json(out, out.sharding.spec)]
                extra["cotangent"] = {"shape": list(ct_host.shape), "values": ct_host.reshape(-1).tolist()}
            else:
                assert transform == "call" and argnums == (), prog
                outs = f(*args)
                outs = outs if isinstance(outs, tuple) else (outs,)
                extra["outputs"] = [array_json(o, o.sharding.spec) for o in outs]
                grads = ()
        if transform in ("grad", "value_and_grad"):
            assert value.dtype == jnp.float32 and value.shape == (), (prog, value)
            extra["value"] = float(value)
        out = []
        for k, g in zip(argnums, grads):
            assert g.dtype == jnp.float32 and g.shape == args[k].shape, (prog, k, g.shape)
            assert isinstance(g.sharding, NamedSharding), (prog, g.sharding)
            out.append({"argnum": k, **array_json(g, g.sharding.spec)})
        shape, names = MESHES[mesh_key]
        c.add(f"{prog}@{mesh_key}", mesh=list(shape), axis_names=list(names), axis_type="Explicit", program=prog,
              in_specs=[common.spec_json(s, len(sh)) for s, sh in zip(in_specs, p["shapes"])],
              out_specs=[common.spec_json(s, len(s)) for s in out_specs], check_vma=p["check_vma"],
              transform=transform, argnums=list(argnums), inputs=inputs, **extra, grads=out, rtol=p["rtol"])
    c.write("jax_shard_map_grad.json", "tools/jax_reference/gen_shard_map_grad.py")


if __name__ == "__main__":
    main()
