"""Flax's side of bench/run_init.sh: the layered transformer's parameters initialised in their
shardings, jax.jit(model.init, out_shardings=...) as tools/jax_reference/transformer_flax.py does,
on a 2 x 4 mesh ("data", "model") of 8 CPU devices, under the tensor-parallel and FSDP logical
axis rules. Two sizes, as bench/init_bench.cpp: "small" (the example: L=2, D=64, H=4, F=256, V=256)
and "large" (L=8, D=512, H=8, F=2048, V=1024), S=32, B=16. The jitted init is compiled and run
once (warm-up), then timed REPS times with jax.block_until_ready on the whole tree; one JSON line
per case on stdout: {"name": "init_<size>_<rules>", "ms": best, "all_ms": [...]}."""
import json
import os
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)
import flax.linen as nn  # noqa: E402
import jax.numpy as jnp  # noqa: E402

REPS = int(os.environ.get("REPS", "10"))
S, B, EPS = 32, 16, 1e-5
wlp = nn.with_logical_partitioning
lecun = nn.initializers.lecun_normal()
zeros, ones = nn.initializers.zeros, nn.initializers.ones


def layer_norm(name):
    return nn.LayerNorm(EPS, scale_init=wlp(ones, ("norm",)), bias_init=wlp(zeros, ("norm",)), name=name)


def make_model(L, D, H, F, V):
    class Block(nn.Module):
        @nn.compact
        def __call__(self, h, mask):
            a = layer_norm("ln1")(h)
            h = h + nn.MultiHeadDotProductAttention(
                H, kernel_init=wlp(lecun, ("embed", "heads", "kv")), bias_init=wlp(zeros, ("heads", "kv")),
                out_kernel_init=wlp(lecun, ("heads", "kv", "embed")), out_bias_init=wlp(zeros, ("embed",)),
                name="attn")(a, mask=mask)
            m = layer_norm("ln2")(h)
            u = nn.gelu(nn.Dense(F, kernel_init=wlp(lecun, ("embed", "mlp")), bias_init=wlp(zeros, ("mlp",)),
                                 name="mlp_in")(m))
            return h + nn.Dense(D, kernel_init=wlp(lecun, ("mlp", "embed")), bias_init=wlp(zeros, ("embed",)),
                                name="mlp_out")(u)

    class Transformer(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)
            h = nn.Embed(V, D, embedding_init=wlp(embed_init, ("vocab", "embed")), name="tok_embed")(tokens)
            h = h + self.param("pos_embed", wlp(nn.initializers.normal(0.02), ("length", "embed")), (S, D))[None]
            mask = nn.make_causal_mask(tokens)
            for i in range(L):
                h = Block(name=f"block_{i}")(h, mask)
            h = layer_norm("ln_f")(h)
            return nn.Dense(V, kernel_init=wlp(lecun, ("embed", "vocab")), bias_init=wlp(zeros, ("vocab",)),
                            name="head")(h)

    return Transformer()


SIZES = {"small": (2, 64, 4, 256, 256), "large": (8, 512, 8, 2048, 1024)}
RULES = {
    "tp": [("batch", "data"), ("vocab", "model"), ("heads", "model"), ("mlp", "model"), ("embed", None),
           ("length", None), ("kv", None), ("norm", None)],
    "fsdp": [("batch", ("data", "model")), ("embed", ("data", "model")), ("vocab", None), ("length", None),
             ("heads", None), ("kv", None), ("mlp", None), ("norm", None)],
}

mesh = jax.make_mesh((2, 4), ("data", "model"))
key = jax.random.key(0)
inputs = jax.random.randint(jax.random.key(1), (B, S), 0, 256, jnp.int32)
for size, dims in SIZES.items():
    model = make_model(*dims)
    for rname, rules in RULES.items():
        abstract = jax.eval_shape(model.init, key, inputs)
        shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(abstract), mesh, rules)
        init = jax.jit(model.init, out_shardings=shardings)
        jax.block_until_ready(init(key, inputs))  # compile and warm up
        times = []
        for _ in range(REPS):
            t = time.perf_counter()
            jax.block_until_ready(init(key, inputs))
            times.append((time.perf_counter() - t) * 1e3)
        n = sum(x.size for x in jax.tree_util.tree_leaves(abstract))
        print(json.dumps({"name": f"init_{size}_{rname}", "ms": min(times), "all_ms": times, "params": n}), flush=True)
