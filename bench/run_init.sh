#!/usr/bin/env bash
# Initialising the layered transformer's parameters in their shardings (issue 32), in one run:
# tessera's model.init (bench/init_bench.cpp) against Flax's jax.jit(model.init, out_shardings=...)
# (bench/jax/init_flax.py, when build/jax-venv has flax), the same model and shardings on 8 devices,
# under the tensor-parallel and FSDP rules, at the example's size and a larger one. Prints a
# markdown table of the best times and their spread, and the ratio (below 1: tessera is faster).
#
#   bash bench/run_init.sh [build-dir]      # default build/bench-init; a few minutes
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-init}
reps=${REPS:-5}
# BENCH_BIN=path runs a bench_init_bench built some other way (e.g. g++ -std=gnu++20 -O3
# -march=native -DNDEBUG -Iinclude bench/init_bench.cpp -lbenchmark -lpthread).
bin=${BENCH_BIN:-}
if [[ -z $bin ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
    -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
  cmake --build "$build" --target bench_init_bench -j "$(nproc)" >&2
  bin=$build/bench/bench_init_bench
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bin" --benchmark_repetitions="$reps" --benchmark_out="$out/cpp.json" --benchmark_out_format=json >&2
jax_py="$root/build/jax-venv/bin/python"
if [[ -x $jax_py ]] && "$jax_py" -c "import flax" 2>/dev/null; then
  REPS=$((reps * 2)) "$jax_py" "$here/jax/init_flax.py" > "$out/jax.jsonl"
else
  : > "$out/jax.jsonl"
fi
python3 - "$out/cpp.json" "$out/jax.jsonl" <<'PY'
import json, sys, collections
cpp = collections.defaultdict(list)
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("run_type") == "aggregate":
        continue
    cpp[b["name"].split("/")[0].removeprefix("BM_")].append(b["real_time"])
jax = {}
for line in open(sys.argv[2]):
    j = json.loads(line)
    jax[j["name"]] = j["all_ms"]
def fmt(v):
    return f"{min(v):.2f} (max {max(v):.2f})"
print("| init, 8 devices (2 x 4) | tessera ms, best (max) | Flax jit(init, out_shardings) ms, best (max) | tessera / Flax |")
print("|---|---:|---:|---:|")
for name, v in cpp.items():
    j = jax.get(name)
    print(f"| {name} | {fmt(v)} | {fmt(j) if j else '-'} | {min(v) / min(j):.2f} |" if j else f"| {name} | {fmt(v)} | - | - |")
PY
