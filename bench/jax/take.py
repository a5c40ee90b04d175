"""JAX's number for bench/take_bench.cpp: jnp.take(table, ids, axis=0) of a float32 table [32768, 256]
(32 MiB) sharded P('x', None) over 8 CPU devices (the vocabulary), ids [4096] int32 replicated, the
result [4096, 256] replicated, under jax.jit on Auto axes; the compiled program's collectives (XLA
also looks the ids up in each device's rows and all-reduces the partial results); and numpy's
copyto of the result's bytes on all 8 devices (8 x 4 MiB), the floor bench/take_bench.cpp uses.

    build/jax-venv/bin/python bench/jax/take.py
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "jax_reference"))
import common  # noqa: E402  (8 CPU devices)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

V, D, B = 32768, 256, 4096


def median_ms(f, reps=20):
    f()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times)), float(np.min(times))


mesh = common.make_mesh((8,), ("x",), AxisType.Auto)
s = np.uint32(12345)
ids_h = np.empty(B, np.int32)
for i in range(B):  # the ids of take_bench.cpp
    s = np.uint32((int(s) * 1664525 + 1013904223) & 0xFFFFFFFF)
    ids_h[i] = (int(s) >> 8) % V
with jax.set_mesh(mesh):
    table = jax.device_put(np.ones((V, D), np.float32), NamedSharding(mesh, P("x", None)))
    ids = jax.device_put(ids_h, NamedSharding(mesh, P()))
    f = jax.jit(lambda t, i: jnp.take(t, i, axis=0), out_shardings=NamedSharding(mesh, P()))
    hlo = f.lower(table, ids).compile().as_text()
    collectives = sorted(set(re.findall(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(", hlo)))
    med, best = median_ms(lambda: f(table, ids).block_until_ready())
    src = np.ones((B, D), np.float32)
    dst = np.zeros((8, B, D), np.float32)

    def copies():
        for d in range(8):
            np.copyto(dst[d], src)

    cmed, cbest = median_ms(copies)
    print(f"jax {jax.__version__}, {os.cpu_count()} cores: take of {B} rows from a [{V}, {D}] float32 table "
          f"sharded over 8 devices: median {med:.2f} ms (min {best:.2f}), collectives {collectives}; "
          f"numpy copyto of the result on 8 devices (8 x 4 MiB): median {cmed:.2f} ms (min {cbest:.2f})", flush=True)
