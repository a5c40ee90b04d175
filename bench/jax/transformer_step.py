"""JAX's side of the transformer benchmark: one jitted SGD training step (forward, backward, update)
of tools/jax_reference/transformer.py's model (2 layers, D=64, 4 heads, V=256, MLP 256), Megatron-
sharded on a 2x4 Auto mesh ("data", "model") of 8 CPU devices in one process. One JSON line per
configuration on stdout, as bench/jax/random_jax.py and bench/jax_peer.py write them:

    {"name": "transformer_step", "config": "B16_S32", "devices": 8, "ms": <median per step>, ...}

Configurations: B=16, S=32 (the reference run, dispatch-bound) and B=64, S=128 (more work per step).
Each is jit-compiled and called 3 times (compile, warm-up), then, as Google Benchmark does, the
number of calls k lasting at least --min-time seconds is found; each of --reps repetitions times k
calls (each followed by block_until_ready) and reports the mean per call; the median is the figure.
Every call starts from the same parameters (the update's result is dropped), so each call does the
same work.

    build/jax-venv/bin/python bench/jax/transformer_step.py [--reps 5] [--min-time 0.3] [--filter REGEX]
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
ap.add_argument("--reps", type=int, default=5, help="timed repetitions; the median is reported")
ap.add_argument("--min-time", type=float, default=0.3, help="seconds each repetition lasts at least")
ap.add_argument("--filter", default=".", help="regex on the configuration names (B16_S32, B64_S128)")
args = ap.parse_args()

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "jax_reference"))
import transformer as model  # noqa: E402  (sets up 8 CPU devices through common.py first)

import jax  # noqa: E402
from jax.sharding import AxisType  # noqa: E402
from jaxlib import version as _jaxlib_version  # noqa: E402

CONFIGS = {"B16_S32": (16, 32), "B64_S128": (64, 128)}


def calls(f, a, k):
    t0 = time.perf_counter()
    for _ in range(k):
        jax.block_until_ready(f(*a))
    return time.perf_counter() - t0


def measure(f, a):
    calls(f, a, 3)  # the compile, then two warm-up calls
    k = 1
    while True:
        dt = calls(f, a, k)
        if dt >= args.min_time:
            break
        k = min(k * 10, max(k + 1, int(k * 1.4 * args.min_time / max(dt, 1e-9))))
    return [calls(f, a, k) / k for _ in range(args.reps)], k


print(json.dumps({"context": {
    "jax": jax.__version__, "jaxlib": _jaxlib_version.__version__, "devices": len(jax.devices()),
    "python": platform.python_version(), "cpus": os.cpu_count(), "XLA_FLAGS": os.environ.get("XLA_FLAGS"),
    "reps": args.reps, "min_time": args.min_time}}))
sys.stdout.flush()
mesh = model.make_mesh(AxisType.Auto)
for name, (b, s) in CONFIGS.items():
    if not re.search(args.filter, name):
        continue
    p = model.init_params(s=s)
    inputs, targets = model.make_data(b=b, s=s)
    a = model.place(mesh, p, inputs, targets)
    f = jax.jit(model.make_step())
    per_call, k = measure(f, a)
    print(json.dumps({"name": "transformer_step", "config": name, "devices": len(jax.devices()),
                      "mesh": "2x4 data,model Auto", "batch": b, "seq": s,
                      "ms": statistics.median(per_call) * 1e3, "ms_reps": [t * 1e3 for t in per_call],
                      "calls_per_rep": k}))
    sys.stdout.flush()
