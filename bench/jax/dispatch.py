"""JAX's side of bench/run_dispatch.sh (issue 33): a loop of STEPS calls of seed 002's jitted
train_step (bench/jax_peer.py's case_train: B = 128 per device, D = 32, jax.grad, in/out
shardings) on --devices CPU devices. Reports, per step: the loop with one block_until_ready at
its end ("loop"), the host's time until the loop returns, before that wait ("host": the per-step
host overhead of async dispatch), and the loop with block_until_ready after every step
("blocking"). The median of --reps repetitions; one JSON line on stdout.

    build/jax-venv/bin/python bench/jax/dispatch.py --devices 8 [--steps 1000] [--reps 5]
"""
import argparse
import json
import statistics
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--devices", type=int, default=8)
ap.add_argument("--steps", type=int, default=1000)
ap.add_argument("--reps", type=int, default=5)
args = ap.parse_args()

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", args.devices)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

N = args.devices
B, D, LR = 128 * N, 32, 0.01
mesh = jax.make_mesh((N,), ("x",), axis_types=(AxisType.Auto,))
key = jax.random.key(1701)
X = jax.random.normal(key, (B, D))
w_true = jax.random.normal(key, (D, 1))
y = (X @ w_true > 0).astype(jnp.float32)
data_sharding = NamedSharding(mesh, P("x", None))
params_sharding = NamedSharding(mesh, P())
Xs, ys = jax.device_put(X, data_sharding), jax.device_put(y, data_sharding)


def train_step(p, x, y):
    def loss_fn(p):
        preds = jax.nn.sigmoid(x @ p["w"] + p["b"])
        return jnp.mean((preds - y) ** 2)

    grad = jax.grad(loss_fn)(p)
    return jax.tree.map(lambda a, g: a - LR * g, p, grad)


f = jax.jit(train_step, in_shardings=(params_sharding, data_sharding, data_sharding), out_shardings=params_sharding)


def fresh():
    p = {"w": jnp.zeros((D, 1)), "b": jnp.zeros((1,))}
    p = jax.tree.map(lambda a: jax.device_put(a, params_sharding), p)
    for _ in range(20):
        p = f(p, Xs, ys)
    return jax.block_until_ready(p)


loop, host, blocking = [], [], []
for _ in range(args.reps):
    p = fresh()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        p = f(p, Xs, ys)
    t1 = time.perf_counter()
    jax.block_until_ready(p)
    t2 = time.perf_counter()
    loop.append((t2 - t0) / args.steps * 1e6)
    host.append((t1 - t0) / args.steps * 1e6)
    p = fresh()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        p = jax.block_until_ready(f(p, Xs, ys))
    blocking.append((time.perf_counter() - t0) / args.steps * 1e6)

print(json.dumps({"devices": N, "steps": args.steps, "reps": args.reps, "jax": jax.__version__,
                  "loop_us": statistics.median(loop), "host_us": statistics.median(host),
                  "blocking_us": statistics.median(blocking)}))
