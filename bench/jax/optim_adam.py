"""JAX's side of bench/run_optim.sh: optax.adam's update and optax.apply_updates of 100 M float32
parameters (a tuple of 4 leaves of 25 M elements, each sharded P("x") over 8 CPU devices), jitted
as one training step with the params and the optimizer state donated (XLA fuses it into one loop
per leaf); best of REPS timed calls after a warm-up, in milliseconds, one JSON line on stdout."""
import json
import os
import time

import jax

jax.config.update("jax_num_cpu_devices", 8)
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

LEAF, LEAVES = 25_000_000, 4
REPS = int(os.environ.get("REPS", "5"))
mesh = jax.make_mesh((8,), ("x",))
s = NamedSharding(mesh, P("x"))
make = jax.jit(lambda v: (jnp.arange(LEAF, dtype=jnp.int32) % 977).astype(jnp.float32) * v / 977, out_shardings=s)
params = tuple(make(float(k + 1)) for k in range(LEAVES))
grads = tuple(make(0.1 * (k + 1)) for k in range(LEAVES))
tx = optax.adam(1e-3)
state = jax.jit(tx.init)(params)  # mu and nu come out sharded like the params


def train_step(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


step = jax.jit(train_step, donate_argnums=(0, 1))
params, state = step(params, state, grads)
jax.block_until_ready(params)
best = float("inf")
for _ in range(REPS):
    t = time.perf_counter()
    params, state = step(params, state, grads)
    jax.block_until_ready((params, state))
    best = min(best, time.perf_counter() - t)
print(json.dumps({"name": "optax_adam_update_and_apply", "devices": 8, "ms": best * 1e3}))
