"""Writes tests/golden/jax_flax.json: flax.linen layers (Flax from PyPI in the JAX venv), for
tests/jax/flax_golden_test.cpp.

Run with the pinned JAX and Flax:
    build/jax-venv/bin/pip install flax
    build/jax-venv/bin/python tools/jax_reference/gen_flax.py

Each case: a layer's init(jax.random.key(0), x) parameters (Flax's keys: fold_in of the module
path's SHA-1), the input x, the output of apply(params, x), and jax.grad of sum(out * c) with
respect to the parameters and x (c a fixed array, recorded). Parameters given to apply are the
initial ones, except for the norms, whose scale and bias are perturbed so that their gradients
are not trivial (the perturbed values are recorded).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import common  # noqa: E402  (8 CPU devices)

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

cases = common.Cases()


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float64).reshape(-1)]


def tree_json(t):
    return {k: (tree_json(v) if isinstance(v, dict) else {"shape": list(v.shape), "values": flat(v)})
            for k, v in t.items()}


def record(name, module, x, params=None, method=None, init_args=None, **kw):
    key = jax.random.key(0)
    init_params = module.init(key, *(init_args or (x,)), **kw)["params"]
    p = init_params if params is None else params(init_params)

    def run(p, x):
        return module.apply({"params": p}, x, method=method, **kw)

    out = run(p, x)
    c = jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape)
    case = {"init": tree_json(init_params), "params": tree_json(p),
            "x": {"shape": list(x.shape), "values": flat(x)},
            "out": {"shape": list(out.shape), "values": flat(out)}, "c": flat(c)}
    if jnp.issubdtype(x.dtype, jnp.floating):
        gp, gx = jax.grad(lambda p, x: jnp.sum(run(p, x) * c), argnums=(0, 1))(p, x)
        case["grad_x"] = flat(gx)
    else:
        gp = jax.grad(lambda p: jnp.sum(run(p, x) * c))(p)
    case["grads"] = tree_json(gp)
    cases.add(name, **case)


def normal(seed, shape):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32)


def perturbed(p):
    return {k: v + 0.1 * jnp.sin(jnp.arange(v.size, dtype=jnp.float32) + 1.0).reshape(v.shape) for k, v in p.items()}


record("dense", nn.Dense(6), normal(1, (4, 5)))
record("dense_3d", nn.Dense(3), normal(1, (2, 3, 4)))
record("dense_general", nn.DenseGeneral((2, 3)), normal(1, (2, 3, 4)))
record("dense_general_in2", nn.DenseGeneral(5, axis=(-2, -1)), normal(1, (2, 3, 2, 3)))
ids = jnp.array([[1, 2, 3], [9, 0, 4]], jnp.int32)
record("embed", nn.Embed(10, 4), ids)
record("embed_attend", nn.Embed(10, 4), normal(1, (2, 3, 4)), method="attend", init_args=(ids,))
record("layer_norm", nn.LayerNorm(), 2.0 * normal(1, (4, 6)) + 1.0, params=perturbed)
record("rms_norm", nn.RMSNorm(), 2.0 * normal(1, (4, 6)) + 1.0, params=perturbed)


class Causal(nn.Module):
    """MultiHeadDotProductAttention with Flax's causal mask (make_causal_mask), as tessera's causal option."""
    heads: int

    @nn.compact
    def __call__(self, x):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:-1]))
        return nn.MultiHeadDotProductAttention(num_heads=self.heads, name="attn")(x, mask=mask)


record("mha", nn.MultiHeadDotProductAttention(num_heads=2), normal(1, (2, 5, 8)))
record("mha_causal", Causal(heads=2), normal(1, (2, 5, 8)))
record("sequential", nn.Sequential([nn.Dense(8), nn.relu, nn.Dense(3)]), normal(1, (4, 5)))

# Dropout: the mask is bernoulli(key, 1 - rate) on the input's shape; kept values scaled by 1/(1-rate).
x = normal(1, (4, 8))
out = nn.Dropout(rate=0.25).apply({}, x, deterministic=False, rng=jax.random.key(2))
cases.add("dropout", x={"shape": list(x.shape), "values": flat(x)}, rate=0.25, out=flat(out))



class ParallelModel(nn.Module):
    """Seed 003's model, as written."""
    @nn.compact
    def __call__(self, x):
        kernel_init = nn.with_partitioning(nn.initializers.lecun_normal(), ('data', 'model'))
        x = nn.Dense(features=1024, kernel_init=kernel_init)(x)
        return x


mesh = common.make_mesh((2, 4), ("data", "model"), jax.sharding.AxisType.Auto)
x = jax.device_put(normal(1, (16, 256)), jax.NamedSharding(mesh, jax.P("data", None)))
model = ParallelModel()
shardings = nn.get_sharding(jax.eval_shape(model.init, jax.random.key(0), x), mesh)
params = jax.jit(model.init, out_shardings=shardings)(jax.random.key(0), x)
kernel = params["params"]["Dense_0"]["kernel"]
y = jax.jit(model.apply)(params, x)
loss, g = jax.value_and_grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
cases.add("parallel_model", kernel_spec=list(kernel.names), kernel_sharding=str(kernel.value.sharding.spec),
          kernel_head=flat(kernel.value[0, :4]), y_head=flat(y[0, :4]), y_sum=float(jnp.sum(y)),
          loss=float(loss), grad_kernel_head=flat(g["params"]["Dense_0"]["kernel"].value[0, :4]))
print("parallel_model:", cases.cases["parallel_model"])

cases.write("jax_flax.json", f"tools/jax_reference/gen_flax.py (flax {flax.__version__})")
