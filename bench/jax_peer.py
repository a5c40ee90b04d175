"""JAX's side of bench/run_jax.sh (issue 19): the workloads of bench/jax_peer_bench.cpp, run by
JAX itself on `--devices` CPU devices (jax_num_cpu_devices), one JSON line per workload on stdout.

Workloads (the same names, sizes and inputs as the C++ side; TESSERA_JAX_PEER_QUICK=1 shrinks
the sizes to check the scripts, not to measure):
  sin           2*sin(x)+1, x float32[16 Mi] P('x')                       (seed 002)
  add           x + y, both float32[16 Mi] P('x')
  sum0          jnp.sum(a, axis=0), a float32[4096,4096] P('x', None): the sharded axis, an all-reduce
  mm            a @ b, [2048,2048], a P('x', None), b replicated
  seed_single   x @ x, x float32[4000,4000] on one device (device 0)      (seed 004)
  seed_sharded  x @ x, x P('x', None)                                      (seed 004)
  psum_4k       shard_map(psum over 'x'), 4 KiB per device, out_specs P('x')
  psum_4m       the same, 4 MiB per device
  train         seed 002's train_step: B = 128 per device, D = 32, jit with in/out shardings

Every workload is jit-compiled and called once (the compile) and twice more (warm-up); then the
number of calls k that lasts at least --min-time seconds is found, as Google Benchmark finds its
iterations; each of --reps repetitions times k calls, each call followed by block_until_ready,
and reports the mean per call; the median of the repetitions is the figure. Meshes use Auto axes,
as seeds 002 and 004 do.

    build/jax-venv/bin/python bench/jax_peer.py --devices 8 [--reps 5] [--min-time 0.3] [--filter REGEX]
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--devices", type=int, required=True, help="jax_num_cpu_devices (one process per count)")
ap.add_argument("--reps", type=int, default=5, help="timed repetitions; the median is reported")
ap.add_argument("--min-time", type=float, default=0.3, help="seconds each repetition lasts at least")
ap.add_argument("--filter", default=".", help="regex on the workload names")
args = ap.parse_args()

import numpy as np  # noqa: E402
import jax  # noqa: E402
from jaxlib import version as _jaxlib_version  # noqa: E402

jaxlib_version = _jaxlib_version.__version__

# Must precede the first use of a backend: the device count is fixed when the CPU client starts.
jax.config.update("jax_num_cpu_devices", args.devices)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

assert len(jax.devices()) == args.devices, f"asked for {args.devices} CPU devices, JAX has {len(jax.devices())}"

QUICK = os.environ.get("TESSERA_JAX_PEER_QUICK", "0") not in ("", "0")
N = args.devices
LEN = (1 << 20) if QUICK else (1 << 24)  # sin, add
SUM = 1024 if QUICK else 4096  # sum0: [SUM, SUM]
MM = 256 if QUICK else 2048  # mm: [MM, MM]
SEED = 400 if QUICK else 4000  # seed 004: [SEED, SEED]
PSUM = {"psum_4k": 4 << 10, "psum_4m": 4 << 20}  # bytes per device
TRAIN_B, TRAIN_D, LEARNING_RATE = 128 * N, 32, 0.01  # seed 002: B = 128 * jax.device_count()


def value_at(count, seed):
    """bench/jax_peer_bench.cpp's value_at: a hash of the index, |v| < 8, so both sides read the same data."""
    h = np.arange(count, dtype=np.uint32) * np.uint32(2654435761) ^ np.uint32(seed)
    h ^= h >> np.uint32(15)
    h *= np.uint32(2246822519)
    h ^= h >> np.uint32(13)
    return ((h % np.uint32(16001)).astype(np.float32) / np.float32(1000.0) - np.float32(8.0))


def host(shape, seed):
    return value_at(int(np.prod(shape)), seed).reshape(shape)


mesh = jax.make_mesh((N,), ("x",), axis_types=(AxisType.Auto,))


def put(a, *spec):
    return jax.device_put(a, NamedSharding(mesh, P(*spec)))


def f32(shape):
    return "float32[" + ",".join(str(s) for s in shape) + "]"


def case_sin():
    x = put(host((LEN,), 1), "x")
    return jax.jit(lambda x: 2 * jnp.sin(x) + 1), (x,), f32((LEN,))


def case_add():
    x, y = put(host((LEN,), 1), "x"), put(host((LEN,), 2), "x")
    return jax.jit(lambda x, y: x + y), (x, y), f32((LEN,))


def case_sum0():
    a = put(host((SUM, SUM), 4), "x", None)
    return jax.jit(lambda a: jnp.sum(a, axis=0)), (a,), f32((SUM, SUM))


def case_mm():
    a, b = put(host((MM, MM), 4), "x", None), put(host((MM, MM), 5))
    return jax.jit(jnp.matmul), (a, b), f32((MM, MM))


def case_seed_single():
    # Seed 004's unsharded x: committed to one device, as jax.device_put(x, devices[0]) leaves it.
    x = jax.device_put(host((SEED, SEED), 6) / np.float32(SEED), jax.devices()[0])
    return jax.jit(lambda x: x @ x), (x,), f32((SEED, SEED))


def case_seed_sharded():
    x = put(host((SEED, SEED), 6) / np.float32(SEED), "x", None)
    return jax.jit(lambda x: x @ x), (x,), f32((SEED, SEED))


def case_psum(name):
    count = PSUM[name] // 4
    x = put(np.arange(N * count, dtype=np.float32), "x")
    f = jax.jit(jax.shard_map(lambda b: jax.lax.psum(b, "x"), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
    return f, (x,), f32((N * count,))


def case_train():
    key = jax.random.key(1701)
    X = jax.random.normal(key, (TRAIN_B, TRAIN_D))
    w_true = jax.random.normal(key, (TRAIN_D, 1))
    y = (X @ w_true > 0).astype(jnp.float32)
    data_sharding = NamedSharding(mesh, P("x", None))
    params_sharding = NamedSharding(mesh, P())
    X_sharded, y_sharded = jax.device_put(X, data_sharding), jax.device_put(y, data_sharding)
    params = {"w": jnp.zeros((TRAIN_D, 1)), "b": jnp.zeros((1,))}
    params_sharded = jax.tree.map(lambda a: jax.device_put(a, params_sharding), params)

    def train_step(p, x, y):
        def loss_fn(p):
            preds = jax.nn.sigmoid(x @ p["w"] + p["b"])
            return jnp.mean((preds - y) ** 2)

        grad = jax.grad(loss_fn)(p)
        return jax.tree.map(lambda a, g: a - LEARNING_RATE * g, p, grad)

    f = jax.jit(train_step, in_shardings=(params_sharding, data_sharding, data_sharding),
                out_shardings=params_sharding)
    return f, (params_sharded, X_sharded, y_sharded), f32((TRAIN_B, TRAIN_D))


CASES = {
    "sin": case_sin,
    "add": case_add,
    "sum0": case_sum0,
    "mm": case_mm,
    "seed_single": case_seed_single,
    "seed_sharded": case_seed_sharded,
    "psum_4k": lambda: case_psum("psum_4k"),
    "psum_4m": lambda: case_psum("psum_4m"),
    "train": case_train,
}


def calls(f, a, k):
    t0 = time.perf_counter()
    for _ in range(k):
        jax.block_until_ready(f(*a))
    return time.perf_counter() - t0


def measure(f, a):
    calls(f, a, 3)  # the compile, then two warm-up calls
    k = 1
    while True:  # the iteration count of one repetition, as Google Benchmark grows it
        dt = calls(f, a, k)
        if dt >= args.min_time:
            break
        k = min(k * 10, max(k + 1, int(k * 1.4 * args.min_time / max(dt, 1e-9))))
    per_call = [calls(f, a, k) / k for _ in range(args.reps)]
    return per_call, k


print(json.dumps({"context": {
    "jax": jax.__version__, "jaxlib": jaxlib_version,
    "devices": N, "python": platform.python_version(), "cpus": os.cpu_count(), "quick": QUICK,
    "XLA_FLAGS": os.environ.get("XLA_FLAGS"), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
    "reps": args.reps, "min_time": args.min_time}}))
sys.stdout.flush()
for name, make in CASES.items():
    if not re.search(args.filter, name):
        continue
    f, a, size = make()
    per_call, k = measure(f, a)
    print(json.dumps({"workload": name, "devices": N, "size": size, "ms": statistics.median(per_call) * 1e3,
                      "ms_reps": [t * 1e3 for t in per_call], "calls_per_rep": k}))
    sys.stdout.flush()
    del f, a
