"""JAX's number for bench/joincut_bench.cpp: jnp.concatenate of two float32 arrays of 8 Mi elements
(32 MiB) each, sharded P('x') over 8 CPU devices, under jax.jit, on the same machine.

    build/jax-venv/bin/python bench/jax/concatenate.py
"""
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

N = 8 << 20
mesh = jax.make_mesh((8,), ("x",))
s = NamedSharding(mesh, P("x"))
a = jax.device_put(np.arange(N, dtype=np.float32), s)
b = jax.device_put(np.arange(N, dtype=np.float32), s)
f = jax.jit(lambda a, b: jnp.concatenate([a, b]), out_shardings=s)
f(a, b).block_until_ready()
times = []
for _ in range(20):
    t = time.perf_counter()
    f(a, b).block_until_ready()
    times.append(time.perf_counter() - t)
ms = 1e3 * np.median(times)
print(f"jax {jax.__version__} concatenate of 2 x 32 MiB over 8 devices: median {ms:.2f} ms "
      f"({2 * N * 4 / (ms / 1e3) / 2**30:.2f} GiB/s of output)")
