#!/usr/bin/env bash
# tessera against JAX itself (issue 19): the workloads of bench/jax_peer_bench.cpp and
# bench/jax_peer.py (2*sin(x)+1 and x + y on 16 Mi float32, a sum over the sharded axis, a
# 2048² matmul with rows sharded, seed 004's 4000² x @ x sharded and on one device, psum of
# 4 KiB and 4 MiB per device in shard_map, seed 002's training step), on 2 and 8 devices: tessera
# with TESSERA_NUM_DEVICES=n, JAX with jax_num_cpu_devices=n (one process per count, since JAX
# fixes its device count when its CPU backend starts). Prints a markdown table of both medians
# and the ratio tessera/JAX (below 1: tessera is faster).
#
#   bash bench/run_jax.sh [build-dir]      # default build/bench-jax; about 5 minutes on 2 cores
#
# It configures and builds bench_jax_peer_bench in a Release build directory (tests and examples
# off) and needs JAX in build/jax-venv (tools/jax_reference/setup_venv.sh). Environment: REPS
# (repetitions on each side; the median is reported; default 5), MIN_TIME (seconds each
# repetition lasts at least, on both sides; default 0.3), DEVICES (default "2 8"), FILTER (a
# regex on the workload names, e.g. 'sin|add'), QUICK=1 (small sizes, 2 repetitions: checks the
# scripts, measures nothing). OPENBLAS_CORETYPE is left as the caller set it and printed: it
# picks the kernels of the OpenBLAS that tessera's products call (JAX's XLA does not use it).
# The tessera and JAX runs of each device count follow each other, so a drift of the machine
# shows in both.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-jax}
quick=${QUICK:-0}
if [[ $quick != 0 ]]; then
  export TESSERA_JAX_PEER_QUICK=1
  reps=${REPS:-2}
  min_time=${MIN_TIME:-0.05}
else
  unset TESSERA_JAX_PEER_QUICK
  reps=${REPS:-5}
  min_time=${MIN_TIME:-0.3}
fi
devices=${DEVICES:-2 8}
filter=${FILTER:-.}
jax_py=$root/build/jax-venv/bin/python
[[ -x $jax_py ]] || { echo "run_jax.sh: no $jax_py; make it with tools/jax_reference/setup_venv.sh" >&2; exit 2; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_jax_peer_bench -j "$(nproc)" >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
t0=$SECONDS
for n in $devices; do
  echo "tessera, TESSERA_NUM_DEVICES=$n" >&2
  TESSERA_NUM_DEVICES=$n "$build/bench/bench_jax_peer_bench" --benchmark_filter="BM_($filter)" \
    --benchmark_repetitions="$reps" --benchmark_min_time="$min_time" \
    --benchmark_out="$out/tessera_$n.json" --benchmark_out_format=json >&2
  echo "JAX, jax_num_cpu_devices=$n" >&2
  "$jax_py" "$here/jax_peer.py" --devices "$n" --reps "$reps" --min-time "$min_time" --filter "$filter" \
    > "$out/jax_$n.jsonl"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
note=""
[[ $quick != 0 ]] && note="; QUICK: small sizes, not a measurement"
echo "$started; $(nproc) CPUs ($cpu); $(g++ --version | head -1); load average before: $load_before," \
  "after: $load_after (near 0, or other work skews both sides); OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-(unset)};" \
  "median of $reps repetitions of at least ${min_time} s each; $((SECONDS - t0)) s of benchmarks$note"
echo

python3 - "$out" $devices <<'EOF'
import json, os, statistics, sys

out, counts = sys.argv[1], [int(n) for n in sys.argv[2:]]
unit = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
titles = {
    "sin": "`2*sin(x)+1`, `P('x')`",
    "add": "`x + y`, both `P('x')`",
    "sum0": "`sum(a, axis=0)`, a `P('x', None)` (the sharded axis: an all-reduce)",
    "mm": "`a @ b`, a `P('x', None)`, b replicated",
    "seed_single": "seed 004 `x @ x`, x on one device",
    "seed_sharded": "seed 004 `x @ x`, x `P('x', None)`",
    "psum_4k": "`shard_map(psum)`, 4 KiB per device",
    "psum_4m": "`shard_map(psum)`, 4 MiB per device",
    "train": "seed 002 train step (B = 128 per device, D = 32)",
}
rows, ctx = {}, {}
for n in counts:
    path = os.path.join(out, f"tessera_{n}.json")
    if os.path.exists(path):
        data = json.load(open(path))
        ctx["tessera"] = data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            w = b.get("run_name", b["name"]).split("/")[0].removeprefix("BM_")
            r = rows.setdefault((w, n), {"t": [], "j": [], "size": None, "jsize": None, "err": None})
            if b.get("error_occurred"):
                r["err"] = "tessera: " + b.get("error_message", "error")
                continue
            r["t"].append(b["real_time"] * unit[b["time_unit"]])
            r["size"] = b.get("label")
    path = os.path.join(out, f"jax_{n}.jsonl")
    if os.path.exists(path):
        for line in open(path):
            j = json.loads(line)
            if "context" in j:
                ctx["jax"] = j["context"]
                continue
            r = rows.setdefault((j["workload"], n), {"t": [], "j": [], "size": None, "jsize": None, "err": None})
            r["j"], r["jsize"] = j["ms_reps"], j["size"]

def cell(ts):
    if not ts:
        return "-"
    m = statistics.median(ts)
    s = f"{m:.3g} ms" if m < 1000 else f"{m / 1e3:.3g} s"
    if len(ts) > 1:
        s += f" ±{(max(ts) - min(ts)) / m / 2 * 100:.0f}%"
    return s

print("| workload | size | devices | tessera | JAX | tessera/JAX |")
print("|---|---|---|---|---|---|")
for w in titles:
    for n in counts:
        r = rows.get((w, n))
        if r is None:
            continue
        ratio = f"{statistics.median(r['t']) / statistics.median(r['j']):.2f}" if r["t"] and r["j"] else "-"
        size = r["size"] or r["jsize"] or ""
        if r["size"] and r["jsize"] and r["size"] != r["jsize"]:
            size = f"tessera {r['size']}, JAX {r['jsize']} (differ!)"
        dev = f"1 (of {n})" if w == "seed_single" else str(n)
        print(f"| {titles[w]} | {size} | {dev} | {cell(r['t'])} | {cell(r['j'])} | {ratio}{' ' + r['err'] if r['err'] else ''} |")
print()
print("Median of the repetitions, per call; ± is half the spread (max - min) of the repetitions, relative "
      "to the median. Each call makes a new result, on both sides.")
t, j = ctx.get("tessera", {}), ctx.get("jax", {})
print(f"tessera: matmul backend {t.get('matmul_backend')}, {t.get('num_cpus')} CPUs at {t.get('mhz_per_cpu')} MHz; "
      f"JAX {j.get('jax')} (jaxlib {j.get('jaxlib')}), XLA_FLAGS={j.get('XLA_FLAGS')}.")
EOF
