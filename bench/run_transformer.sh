#!/usr/bin/env bash
# The transformer's training step (issue 31): tessera (bench/transformer_bench.cpp) against JAX
# 0.12's jitted step (bench/jax/transformer_step.py, 8 CPU devices of one process), in one run,
# with the ratio tessera / JAX (target: at most 1.0). Then (issue 32) the same step written with
# tessera::nn's layers against the hand-written one (bench/transformer_layers_bench.cpp, both in
# one binary, their repetitions interleaved at random), with the ratio layered / hand-written
# (target: at most 1.05) and each one's spread over the repetitions (the noise). Prints the
# machine and the load average.
#
#   bash bench/run_transformer.sh [build-dir]     # default build/bench-transformer
#
# Needs build/jax-venv (tools/jax_reference/setup_venv.sh) for the JAX side; without it, only
# tessera's figure is printed. REPS (default 5) repetitions of each, the medians compared.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build/bench-transformer}
reps=${REPS:-5}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_transformer_bench bench_transformer_layers_bench -j "${JOBS:-1}" >&2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
t=$("$build/bench/bench_transformer_bench" --benchmark_repetitions="$reps" --benchmark_format=json \
      --benchmark_min_time=0.3 | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([b["real_time"] for b in d["benchmarks"] if b.get("aggregate_name") == "median"][0])')
echo "tessera: $t ms per step (median of $reps)"
py=$root/build/jax-venv/bin/python
if [[ -x $py ]]; then
  j=$("$py" "$root/bench/jax/transformer_step.py" --reps "$reps" --filter B16_S32 | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print([r["ms"] for r in rows if r.get("name") == "transformer_step"][0])')
  echo "JAX 0.12 jit: $j ms per step"
  python3 -c "print(f'ratio tessera / JAX: {$t / $j:.2f}')"
fi
echo "layers (issue 32), $reps interleaved repetitions each, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/bench_transformer_layers_bench" --benchmark_repetitions="$reps" --benchmark_format=json \
    --benchmark_min_time=0.3 --benchmark_enable_random_interleaving=true \
    --benchmark_filter='_step' | python3 -c '
import json, statistics, sys
d = json.load(sys.stdin)
runs = {}
for b in d["benchmarks"]:
    if b.get("run_type") == "iteration":
        runs.setdefault(b["run_name"].split("/")[0], []).append(b["real_time"])
med = {k: statistics.median(v) for k, v in runs.items()}
for k, v in runs.items():
    print(f"{k}: median {med[k]:.2f} ms, min {min(v):.2f}, max {max(v):.2f} (spread {max(v) / min(v):.2f}x)")
hw, ly, la = "hand_written_step", "layered_step", "layered_adam_step"
print(f"ratio layered / hand-written: {med[ly] / med[hw]:.3f} (medians), "
      f"{min(runs[ly]) / min(runs[hw]):.3f} (minima); target at most 1.05")
print(f"ratio layered with biases and adam / hand-written: {med[la] / med[hw]:.3f} (medians)")'
echo "paired (the two steps alternately, 40 pairs a repetition; the median of the per-pair ratios):"
"$build/bench/bench_transformer_layers_bench" --benchmark_repetitions="$reps" --benchmark_format=json \
    --benchmark_filter='^paired' | python3 -c '
import json, statistics, sys
d = json.load(sys.stdin)
reps = [b for b in d["benchmarks"] if b.get("run_type") == "iteration"]
for b in reps:
    print("  hand-written %.2f ms, layered %.2f ms, ratio %.3f (quartiles %.3f-%.3f)"
          % (b["hand_written_ms"], b["layered_ms"], b["ratio"], b["ratio_q1"], b["ratio_q3"]))
print("ratio layered / hand-written, paired: %.3f (median of the repetitions; target at most 1.05)"
      % statistics.median(b["ratio"] for b in reps))'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
