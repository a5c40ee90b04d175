"""JAX's peer of bench/scan_bench.cpp: jnp.cumsum of a 1-D float32 array sharded P('x') over 8 CPU
devices along the scanned axis, under jax.jit, on Auto axes (on Explicit axes JAX refuses a scan
along a sharded axis), against one pass that reads and writes every element (x * 1 + 0) and numpy's
copyto (the memcpy floor). Prints the median time in ms and whether the compiled program
all-gathers the operand along the sharded axis (it does).

JAX 0.12 on CPU lowers cumsum to a reduce_window whose window is the whole axis, and its time
grows with the square of the length (measured on 2 loaded cores: 64 Ki elements 155 ms, 256 Ki
3.1 s, 1 Mi 57 s), so the 64 MiB array of scan_bench (16 Mi elements) would take hours: the
default sizes stop at 256 Ki; pass element counts to try others.

    build/jax-venv/bin/python bench/jax/scan.py [n ...]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "jax_reference"))
import common  # noqa: E402  (8 CPU devices)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402


def median_ms(f, reps):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


sizes = [int(a) for a in sys.argv[1:]] or [1 << 16, 1 << 18]
mesh = common.make_mesh((8,), ("x",), AxisType.Auto)
cumsum = jax.jit(lambda v: jnp.cumsum(v, axis=0))
one_pass = jax.jit(lambda v: v * 1.0 + 0.0)
with jax.set_mesh(mesh):
    for n in sizes:
        x = jax.device_put(np.full(n, 1e-3, np.float32), NamedSharding(mesh, P("x")))
        gathers = "all-gather" in cumsum.lower(x).compile().as_text()
        reps = 3 if n > (1 << 17) else 9
        src = np.full(n, 1e-3, np.float32)
        dst = np.zeros_like(src)
        print(f"n={n} ({n * 4 / 2**20:.2f} MiB), jax {jax.__version__}, {os.cpu_count()} cores: "
              f"cumsum {median_ms(lambda: cumsum(x).block_until_ready(), reps):.2f} ms (all-gathers: {gathers}), "
              f"x*1+0 {median_ms(lambda: one_pass(x).block_until_ready(), 9):.3f} ms, "
              f"numpy copyto {median_ms(lambda: np.copyto(dst, src), 9):.3f} ms", flush=True)
