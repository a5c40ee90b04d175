#!/usr/bin/env bash
# An Adam step of 100 M float32 parameters over 8 devices (issue 32), in one run: tessera's
# tx.update_and_apply (bench/optim_bench.cpp) against the memory-bandwidth floor (a plain stream of
# the same bytes on the same devices) and against optax.adam jitted in JAX with the params and
# state donated (bench/jax/optim_adam.py, when build/jax-venv has optax). Prints a markdown table
# of times and ratios (above 1: tessera is slower than the reference).
#
#   bash bench/run_optim.sh [build-dir]      # default build/bench-optim; about a minute
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-optim}
reps=${REPS:-5}
# BENCH_BIN=path runs a bench_optim_bench built some other way (e.g. g++ -std=gnu++20 -O3
# -march=native -DNDEBUG -Iinclude bench/optim_bench.cpp -lbenchmark -lpthread).
bin=${BENCH_BIN:-}
if [[ -z $bin ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
    -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
  cmake --build "$build" --target bench_optim_bench -j "$(nproc)" >&2
  bin=$build/bench/bench_optim_bench
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" --benchmark_repetitions="$reps" --benchmark_out="$out/cpp.json" --benchmark_out_format=json >&2
jax_py="$root/build/jax-venv/bin/python"
if [[ -x $jax_py ]] && "$jax_py" -c "import optax" 2>/dev/null; then
  REPS=$((reps * 2)) "$jax_py" "$here/jax/optim_adam.py" > "$out/jax.jsonl"
else
  : > "$out/jax.jsonl"
fi
python3 - "$out/cpp.json" "$out/jax.jsonl" <<'PY'
import json, sys, collections
best = collections.defaultdict(lambda: float("inf"))
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") == "aggregate":
        continue
    name = b["name"].split("/")[0].removeprefix("BM_")
    best[name] = min(best[name], b["real_time"])
for line in open(sys.argv[2]):
    j = json.loads(line)
    best["optax " + j["name"].removeprefix("optax_")] = j["ms"]
# Each step against the floor that writes as it does: new blocks, or the donated blocks in place.
jax = best.get("optax adam_update_and_apply")
print("| step (100 M float32, 8 devices) | ms | / floor | / optax (donated) |")
print("|---|---:|---:|---:|")
for name, ms in best.items():
    floor = best["stream_floor_in_place"] if "donated" in name or "in_place" in name or "optax" in name else best["stream_floor"]
    r = f"{ms / jax:.2f}" if jax else "-"
    print(f"| {name} | {ms:.0f} | {ms / floor:.2f} | {r} |")
PY
