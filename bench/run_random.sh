#!/usr/bin/env bash
# jax.random against its peers in one run (issue 16): tessera::random's normal, uniform and
# bits of 2^22 elements on 1, 2 and 4 devices (issue 32: also truncated_normal, and
# nn::initializers::lecun_normal of a 2048x2048 kernel against jax.nn.initializers'); std::mt19937 with the standard distributions on
# as many std::threads; and JAX itself (jit with an out sharding over CPU devices) when
# build/jax-venv exists (tools/jax_reference/setup_venv.sh). Prints a markdown table of times
# and ratios (peer time / tessera time: above 1, tessera is faster).
#
#   bash bench/run_random.sh [build-dir]      # default build/bench-random; a few minutes
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-random}
reps=${REPS:-5}
# BENCH_BIN=path runs a bench_random_bench built some other way (e.g. g++ -O3 -march=native
# bench/random_bench.cpp -lbenchmark) instead of configuring the project.
bin=${BENCH_BIN:-}
if [[ -z $bin ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
    -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
  cmake --build "$build" --target bench_random_bench -j "$(nproc)" >&2
  bin=$build/bench/bench_random_bench
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=false \
  --benchmark_out="$out/cpp.json" --benchmark_out_format=json >&2
jax_py="$root/build/jax-venv/bin/python"
if [[ -x $jax_py ]]; then
  REPS=$((reps * 2)) "$jax_py" "$here/jax/random_jax.py" > "$out/jax.jsonl"
  # truncated_normal and lecun_normal (issue 32), timed as random_jax.py times the others.
  REPS=$((reps * 2)) "$jax_py" - >> "$out/jax.jsonl" <<'PY'
import json, os, sys, time
import jax
jax.config.update("jax_num_cpu_devices", 4)
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
N, REPS, key = 1 << 22, int(os.environ["REPS"]), jax.random.key(1701)
for n in (1, 2, 4):
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    for name, fn, spec in (
            ("truncated_normal", lambda k: jax.random.truncated_normal(k, -2.0, 2.0, (N,), jnp.float32), P("x")),
            ("lecun_normal", lambda k: jax.nn.initializers.lecun_normal()(k, (2048, 2048), jnp.float32), P("x", None))):
        f = jax.jit(fn, out_shardings=NamedSharding(mesh, spec))
        f(key).block_until_ready()
        best = float("inf")
        for _ in range(REPS):
            t = time.perf_counter()
            f(key).block_until_ready()
            best = min(best, time.perf_counter() - t)
        print(json.dumps({"name": name, "devices": n, "ms": best * 1e3}))
        sys.stdout.flush()
PY
else
  : > "$out/jax.jsonl"
fi
python3 - "$out/cpp.json" "$out/jax.jsonl" <<'PY'
import json, sys, collections
best = collections.defaultdict(lambda: float("inf"))
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    name, arg = b["run_name"].split("/")[0], int(b["run_name"].split("/")[1])
    best[(name, arg)] = min(best[(name, arg)], b["real_time"])  # milliseconds
for line in open(sys.argv[2]):
    j = json.loads(line)
    best[("jax_" + j["name"], j["devices"])] = j["ms"]
def cell(peer, mine):
    return f"{best[peer]:.2f} ms ({best[peer] / best[mine]:.2f}x)" if peer in best and best[peer] < float("inf") else "-"
print("| sampler, 2^22 elements | devices | tessera | std::mt19937 threads | JAX jit |")
print("|---|---|---|---|---|")
for s in ("normal", "truncated_normal", "lecun_normal", "uniform", "bits"):
    for n in (1, 2, 4):
        mine = (f"BM_tessera_{s}", n)
        std_peer = "normal" if s in ("truncated_normal", "lecun_normal") else s  # std has no truncated normal
        print(f"| {s} | {n} | {best[mine]:.2f} ms | {cell((f'BM_std_mt19937_{std_peer}', n), mine)} | {cell((f'jax_{s}', n), mine)} |")
PY
