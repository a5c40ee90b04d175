"""JAX 0.12 + Flax 0.12 + optax reference for examples/transformer_layers.cpp: issue 31's
transformer (tools/jax_reference/transformer.py) written with flax.linen layers whose parameters
carry logical axis names, trained for 20 steps of optax.adam through flax.training's TrainState,
on a 2x4 mesh ("data", "model") of 8 CPU devices, once under each of three logical axis rule sets
(data, tensor and FSDP parallelism) and once on one device.

Run with the pinned JAX and Flax (tools/jax_reference/setup_venv.sh; pip install flax optax):
    build/jax-venv/bin/python tools/jax_reference/transformer_flax.py      (about 20 s)

Writes transformer_flax_losses.json next to this script: the losses of each run ("losses" per rule
set, float32 values as Python floats, repr-exact), the parameters' logical names and specs per rule
set, and a few initial values per parameter (its sum and first elements) for debugging.

The program (the C++ example mirrors it; all float32, tokens int32):

  Config   L=2 layers, D=64, H=4 heads of 16, S=32, V=256, B=16, F=4*D=256; LayerNorm epsilon 1e-5;
           optax.adam(LR=3e-3); 20 steps.

  Model    Transformer (the root module):
             tok_embed  nn.Embed(V, D), embedding_init default_embed_init,  names ('vocab', 'embed')
             pos_embed  self.param, initializers.normal(0.02), shape (S, D), names ('length', 'embed')
             block_0, block_1 (Block, below)
             ln_f       nn.LayerNorm(1e-5), scale and bias named ('norm',)
             head       nn.Dense(V), kernel lecun_normal ('embed', 'vocab'), bias zeros ('vocab',)
           Block:
             ln1        nn.LayerNorm(1e-5), ('norm',)
             attn       nn.MultiHeadDotProductAttention(H), mask nn.make_causal_mask(tokens):
                        query/key/value kernels lecun_normal ('embed', 'heads', 'kv'), biases ('heads', 'kv'),
                        out kernel lecun_normal ('heads', 'kv', 'embed'), out bias ('embed',)
             ln2        nn.LayerNorm(1e-5), ('norm',)
             mlp_in     nn.Dense(F), kernel ('embed', 'mlp'), bias ('mlp',); then nn.gelu (tanh form)
             mlp_out    nn.Dense(D), kernel ('mlp', 'embed'), bias ('embed',)
           h = tok_embed(inputs) + pos_embed[None]; per block h = h + attn(ln1(h)); h = h + mlp(ln2(h));
           logits = head(ln_f(h)); loss = -mean_{b,s} sum_v one_hot(targets, V) * log_softmax(logits).
           Parameters: model.init(jax.random.key(0), inputs) under jax.jit with out_shardings from
           the logical names (nn.get_partition_spec, nn.logical_to_mesh_sharding).

  Data     tokens = jax.random.randint(jax.random.key(1), (B, S+1), 0, V, jnp.int32) (issue 31's);
           inputs = tokens[:, :S], targets = tokens[:, 1:], placed by the names ('batch', 'length').

  Rules    dp    batch -> ('data', 'model'); every other name -> None (parameters replicated)
           tp    batch -> 'data'; vocab, heads, mlp -> 'model'; embed, kv, length, norm -> None (Megatron)
           fsdp  batch -> ('data', 'model'); embed -> ('data', 'model'); the rest None (ZeRO-3:
                 every weight sharded over all 8 devices along its 'embed' dimension)

  Train    state = TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(LR));
           step: loss, grads = jax.value_and_grad(loss_fn)(state.params); state.apply_gradients(grads=grads);
           jitted. The loss printed for step i is the loss of the parameters before update i.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402,F401  (8 CPU devices, before anything else touches jax)

import flax  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax.training import train_state  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

L, D, H, HD, S, V, B, F = 2, 64, 4, 16, 32, 256, 16, 256
EPS, LR, STEPS = 1e-5, 3e-3, 20

wlp = nn.with_logical_partitioning
lecun = nn.initializers.lecun_normal()


def layer_norm(name):
    return nn.LayerNorm(EPS, scale_init=wlp(nn.initializers.ones, ("norm",)),
                        bias_init=wlp(nn.initializers.zeros, ("norm",)), name=name)


class Block(nn.Module):
    @nn.compact
    def __call__(self, h, mask):
        a = layer_norm("ln1")(h)
        h = h + nn.MultiHeadDotProductAttention(
            H, kernel_init=wlp(lecun, ("embed", "heads", "kv")), bias_init=wlp(nn.initializers.zeros, ("heads", "kv")),
            out_kernel_init=wlp(lecun, ("heads", "kv", "embed")),
            out_bias_init=wlp(nn.initializers.zeros, ("embed",)), name="attn")(a, mask=mask)
        m = layer_norm("ln2")(h)
        u = nn.gelu(nn.Dense(F, kernel_init=wlp(lecun, ("embed", "mlp")), bias_init=wlp(nn.initializers.zeros, ("mlp",)),
                             name="mlp_in")(m))
        return h + nn.Dense(D, kernel_init=wlp(lecun, ("mlp", "embed")), bias_init=wlp(nn.initializers.zeros, ("embed",)),
                            name="mlp_out")(u)


class Transformer(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        embed_init = nn.initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)  # Flax's default
        h = nn.Embed(V, D, embedding_init=wlp(embed_init, ("vocab", "embed")), name="tok_embed")(tokens)
        pos = self.param("pos_embed", wlp(nn.initializers.normal(0.02), ("length", "embed")), (S, D))
        h = h + pos[None]
        mask = nn.make_causal_mask(tokens)
        for i in range(L):
            h = Block(name=f"block_{i}")(h, mask)
        h = layer_norm("ln_f")(h)
        return nn.Dense(V, kernel_init=wlp(lecun, ("embed", "vocab")), bias_init=wlp(nn.initializers.zeros, ("vocab",)),
                        name="head")(h)


RULES = {
    "dp": [("batch", ("data", "model")), ("vocab", None), ("embed", None), ("length", None), ("heads", None),
           ("kv", None), ("mlp", None), ("norm", None)],
    "tp": [("batch", "data"), ("vocab", "model"), ("heads", "model"), ("mlp", "model"), ("embed", None),
           ("length", None), ("kv", None), ("norm", None)],
    "fsdp": [("batch", ("data", "model")), ("embed", ("data", "model")), ("vocab", None), ("length", None),
             ("heads", None), ("kv", None), ("mlp", None), ("norm", None)],
}


def make_data():
    tokens = jax.random.randint(jax.random.key(1), (B, S + 1), 0, V, jnp.int32)
    return tokens[:, :S], tokens[:, 1:]


def loss_fn(params, apply_fn, inputs, targets):
    logits = apply_fn({"params": params}, inputs)
    ll = jax.nn.one_hot(targets, V) * jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.sum(ll, axis=-1))


def train_step(state, inputs, targets):
    loss, grads = jax.value_and_grad(loss_fn)(state.params, state.apply_fn, inputs, targets)
    return state.apply_gradients(grads=grads), loss


def path_name(path):
    return "/".join(str(getattr(k, "key", k)) for k in path)


def run(model, inputs, targets, rules=None, mesh=None):
    """The 20 losses; with rules, on the mesh with every parameter and the data in the sharding
    its logical names resolve to."""
    key = jax.random.key(0)
    info, placed = {}, {}
    if rules is None:
        params = nn.meta.unbox(model.init(key, inputs)["params"])
    else:
        # The rules are applied to the names here, not as a context around init: under
        # nn.logical_axis_rules, Flax 0.12's DenseGeneral constrains its kernel while it is still
        # flattened to 2-D (a rank error for the 3-D attention kernels).
        abstract = jax.eval_shape(model.init, key, inputs)
        logical = nn.get_partition_spec(abstract)
        shardings = nn.logical_to_mesh_sharding(logical, mesh, rules)
        params = nn.meta.unbox(jax.jit(model.init, out_shardings=shardings)(key, inputs)["params"])
        data = nn.logical_to_mesh_sharding(P("batch", "length"), mesh, rules)
        inputs, targets = jax.device_put(inputs, data), jax.device_put(targets, data)
        for path, a in jax.tree_util.tree_leaves_with_path(params):
            info[path_name(path)] = str(a.sharding.spec)
            placed[path_name(path)] = a.sharding
        info["inputs"] = str(inputs.sharding.spec)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(LR))
    if rules is None:
        step = jax.jit(train_step)
    else:  # the new state in the shardings of the old one (XLA would otherwise pick some leaves' own)
        replicated = NamedSharding(mesh, P())
        keep = jax.tree.map(lambda a: a.sharding if isinstance(getattr(a, "sharding", None), NamedSharding)
                            else replicated, state)
        step = jax.jit(train_step, out_shardings=(keep, replicated))
    losses = []
    for _ in range(STEPS):
        state, loss = step(state, inputs, targets)
        losses.append(float(loss))
    if rules is not None:  # the updated parameters kept their shardings
        for path, a in jax.tree_util.tree_leaves_with_path(state.params):
            assert a.sharding.is_equivalent_to(placed[path_name(path)], a.ndim), (path, a.sharding)
    return params, losses, info


def main():
    model = Transformer()
    inputs, targets = make_data()
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    params1, losses1, _ = run(model, inputs, targets)
    doc = {"generator": "tools/jax_reference/transformer_flax.py", "jax_version": jax.__version__,
           "flax_version": flax.__version__, "optax_version": optax.__version__, "devices": len(jax.devices()),
           "mesh": "2x4 ('data', 'model')",
           "config": {"layers": L, "d_model": D, "heads": H, "head_dim": HD, "seq": S, "vocab": V, "batch": B,
                      "mlp": F, "ln_eps": EPS, "optimizer": f"optax.adam({LR})", "steps": STEPS},
           "rules": {k: [[n, a] for n, a in r] for k, r in RULES.items()}, "losses": {}, "specs": {},
           "losses_one_device": losses1}
    for name, rules in RULES.items():
        _, losses, info = run(model, inputs, targets, rules, mesh)
        doc["losses"][name] = losses
        doc["specs"][name] = info
    doc["initial_params"] = {
        path_name(p): {"shape": list(a.shape), "sum": float(np.sum(np.asarray(a, np.float64))),
                       "head": [float(v) for v in np.asarray(a).reshape(-1)[:3]]}
        for p, a in jax.tree_util.tree_leaves_with_path(params1)}
    spread = max(abs(a - b) / abs(b) for ls in doc["losses"].values() for a, b in zip(ls, losses1))
    doc["note"] = (f"the three layouts' losses differ from the one-device run's by at most {spread:.2g} relative "
                   "(XLA's float32 reduction orders differ per layout)")
    with open(os.path.join(HERE, "transformer_flax_losses.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("step  " + "  ".join(f"{n:<20}" for n in list(RULES) + ["one device"]))
    for i in range(STEPS):
        print(f"{i:4d}  " + "  ".join(f"{doc['losses'][n][i]!r:<20}" for n in RULES) + f"  {losses1[i]!r}")
    print(doc["note"])
    for n, info in doc["specs"].items():
        print(n, {k: v for k, v in info.items() if k.startswith("block_0/attn/query") or k.startswith("tok")})


if __name__ == "__main__":
    main()
