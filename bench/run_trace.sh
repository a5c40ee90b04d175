#!/usr/bin/env bash
# What tessera::trace costs, in one run (issue 18): bench_trace_bench (the trace hooks compiled
# in) with no trace alive and with a trace recording, against bench_trace_bench_no_hooks (the
# same source with TESSERA_NO_TRACE). The two binaries run alternately, REPS times each, and
# the table gives the best time of each and the ratios. "Off" should cost nothing measurable.
#
#   bash bench/run_trace.sh [build-dir]      # default build/bench-trace; a few minutes
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-trace}
reps=${REPS:-5}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_trace_bench bench_trace_bench_no_hooks -j "$(nproc)" >&2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < reps; r++)); do
  "$build/bench/bench_trace_bench" --benchmark_out="$out/hooks.$r.json" --benchmark_out_format=json >/dev/null
  "$build/bench/bench_trace_bench_no_hooks" --benchmark_out="$out/none.$r.json" --benchmark_out_format=json >/dev/null
done
python3 - "$out" "$reps" <<'PY'
import json, sys, collections
out, reps = sys.argv[1], int(sys.argv[2])
best = collections.defaultdict(lambda: float("inf"))
for kind in ("hooks", "none"):
    for r in range(reps):
        for b in json.load(open(f"{out}/{kind}.{r}.json"))["benchmarks"]:
            name, arg = b["name"].split("/")[0], int(b["name"].split("/")[1])
            best[(kind, name, arg)] = min(best[(kind, name, arg)], b["real_time"])
print("| case (2 devices) | hooks compiled out | hooks in, no trace | ratio | tracing | ratio |")
print("|---|---|---|---|---|---|")
for name in ("BM_dispatch", "BM_expression", "BM_psum", "BM_put_get"):
    none, off, on = best[("none", name, 0)], best[("hooks", name, 0)], best[("hooks", name, 1)]
    print(f"| {name[3:]} | {none:.2f} us | {off:.2f} us | {off / none:.3f} | {on:.2f} us | {on / none:.2f} |")
PY
