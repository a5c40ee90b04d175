"""JAX's peer of bench/scan_bench.cpp: jnp.cumsum of a 64 MiB float32 array (16 Mi elements, 1-D,
P('x')) sharded over 8 CPU devices along the scanned axis, under jax.jit, on Auto axes (on
Explicit axes JAX refuses a scan along a sharded axis), against a copy of the same bytes
(jnp.copy under jit, and numpy's copyto: the memcpy floor). Also [4096, 4096] P('x', None) along
axis 0 (sharded) and axis 1 (unsharded). Prints the median of `reps` runs in ms and what the
compiled program does along the sharded axis (JAX all-gathers the operand).

    build/jax-venv/bin/python bench/jax/scan.py
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


def median_ms(f, x, reps=15):
    f(x).block_until_ready()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f(x).block_until_ready()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


mesh = common.make_mesh((8,), ("x",), AxisType.Auto)
n = 16 << 20
with jax.set_mesh(mesh):
    x = jax.device_put(np.full(n, 1e-3, np.float32), NamedSharding(mesh, P("x")))
    a = jax.device_put(np.full((4096, 4096), 1e-3, np.float32), NamedSharding(mesh, P("x", None)))
    cumsum0 = jax.jit(lambda v: jnp.cumsum(v, axis=0))
    cumsum1 = jax.jit(lambda v: jnp.cumsum(v, axis=1))
    copy = jax.jit(lambda v: v * 1.0 + 0.0)  # a pass that reads and writes every element
    hlo = cumsum0.lower(x).compile().as_text()
    print(f"jax {jax.__version__}, {os.cpu_count()} cores; cumsum along the sharded axis all-gathers the operand: "
          f"{'all-gather' in hlo}")
    rows = [
        ("cumsum 1-D P('x') axis 0 (sharded)", median_ms(cumsum0, x)),
        ("cumsum [4096,4096] P('x',None) axis 0 (sharded)", median_ms(cumsum0, a)),
        ("cumsum [4096,4096] P('x',None) axis 1 (unsharded)", median_ms(cumsum1, a)),
        ("x * 1 + 0 (one read, one write)", median_ms(copy, x)),
    ]
src = np.full(n, 1e-3, np.float32)
dst = np.zeros_like(src)
times = []
for _ in range(15):
    t = time.perf_counter()
    np.copyto(dst, src)
    times.append((time.perf_counter() - t) * 1e3)
rows.append(("numpy copyto (memcpy of 64 MiB)", float(np.median(times))))
for name, ms in rows:
    print(f"{name:52s} {ms:8.2f} ms")
