"""JAX's side of bench/run_random.sh: jax.random.normal, uniform and bits of 2^22 float32 or
uint32 elements, jit-compiled with an out sharding over 1, 2 and 4 CPU devices; best of REPS
timed calls (after a warm-up) in milliseconds, one JSON line per case on stdout."""
import json
import os
import sys
import time

n_max = int(os.environ.get("JAX_DEVICES", "4"))
import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", n_max)
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

N = 1 << 22
REPS = int(os.environ.get("REPS", "10"))
key = jax.random.key(1701)
for n in (1, 2, 4):
    if n > n_max:
        continue
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    s = NamedSharding(mesh, P("x"))
    for name, fn in (("normal", lambda k: jax.random.normal(k, (N,), jnp.float32)),
                     ("uniform", lambda k: jax.random.uniform(k, (N,), jnp.float32)),
                     ("bits", lambda k: jax.random.bits(k, (N,), jnp.uint32))):
        f = jax.jit(fn, out_shardings=s)
        f(key).block_until_ready()
        best = float("inf")
        for _ in range(REPS):
            t = time.perf_counter()
            f(key).block_until_ready()
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"name": name, "devices": n, "ms": best * 1e3}))
        sys.stdout.flush()
