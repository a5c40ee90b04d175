#!/usr/bin/env bash
# Runs the matrix-product and resharding benchmarks of issue 5 in one go and prints markdown
# tables: tessera's matmul on 1, 2 and 4 devices (rows sharded, contracting dimension sharded
# with an all-reduce or a reduce-scatter, and the phases of each) against OpenBLAS's
# cblas_sgemm on 1 and 2 threads; the seed-004 comparison (x @ x, [4000,4000], one device
# against x sharded on rows); resharding 64 MiB from P('X', None) to P(None, 'X') against
# memcpy on 1 and 2 threads; then the issue's targets, met or not.
#
#   bash bench/run_matmul.sh [build-dir]      # default build/bench-matmul; about 5 minutes
#
# It configures and builds bench_matmul_bench in a Release build directory (tests and
# examples off). Environment: REPS (benchmark repetitions, interleaved at random so that
# drifts of the machine hit every implementation alike; the median is reported; default 5),
# FILTER (a --benchmark_filter regex), NICE (e.g. -20, as root: the benchmark runs in a
# session, hence a scheduling autogroup, of its own at that nice value, so that other
# sessions' builds on the machine leave it the cores; the "cores" figures show whether it had
# them). OpenBLAS (Debian: libopenblas-dev) is optional: without it the OpenBLAS rows stay
# empty, and tessera uses its own kernel.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-matmul}
reps=${REPS:-5}
filter=${FILTER:-.}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_matmul_bench -j "$(nproc)" >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
run=("$build/bench/bench_matmul_bench" --benchmark_filter="$filter" --benchmark_repetitions="$reps"
     --benchmark_enable_random_interleaving=true
     --benchmark_out="$out/matmul.json" --benchmark_out_format=json)
sched="default scheduling"
if [[ -n ${NICE:-} ]]; then
  # A session of its own is an autogroup of its own; its nice value weighs it against the
  # other sessions' groups (a plain `nice` only weighs it inside its own group).
  setsid --wait bash -c 'echo "$0" > /proc/self/autogroup && exec "$@"' "$NICE" "${run[@]}" >&2
  sched="own scheduling group at nice $NICE"
else
  "${run[@]}" >&2
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "$started; $(nproc) CPUs ($cpu); load average before: $load_before, after: $load_after" \
  "(near 0, or other work skews both sides); $sched; median of $reps repetitions"
echo

python3 - "$out/matmul.json" <<'EOF'
import json, re, statistics, sys

with open(sys.argv[1]) as f:
    data = json.load(f)
ctx = data.get("context", {})
runs, labels = {}, {}
for b in data["benchmarks"]:
    if b.get("run_type") != "iteration" or b.get("error_occurred"):
        continue
    m = re.match(r"BM_([a-z]+)_([a-z]+)/(\d+)", b.get("run_name", b["name"]))
    if not m:
        continue
    key = (m.group(1), m.group(2), int(m.group(3)))
    t = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
    rec = runs.setdefault(key, {"t": [], "cores": [], "flop": 0.0, "bytes": 0.0})
    rec["t"].append(t)
    rec["cores"].append(b.get("cores", 0.0))
    if "GFLOP/s" in b:
        rec["flop"] = b["GFLOP/s"] * 1e9 * t
    if "bytes_per_second" in b:
        rec["bytes"] = b["bytes_per_second"] * t
    if b.get("label"):
        labels[key] = b["label"]

def med(key):
    r = runs.get(key)
    return statistics.median(r["t"]) if r else None

def cell(key):
    r = runs.get(key)
    if not r:
        return ""
    t = statistics.median(r["t"])
    s = f"{t*1e3:.3g} ms" if t < 1 else f"{t:.3g} s"
    if r["flop"]:
        s += f", {r['flop'] / t / 1e9:.1f} GFLOP/s"
    elif r["bytes"]:
        s += f", {r['bytes'] / t / 1e9:.1f} GB/s"
    if len(r["t"]) > 1:
        s += f", ±{(max(r['t']) - min(r['t'])) / t / 2 * 100:.0f}%"
    s += f", {statistics.median(r['cores']):.2f} cores"
    return s

groups = {
    "mm": ("`a @ b`, a and b float32 [2048,2048]", [
        ("openblas", "OpenBLAS `cblas_sgemm`, n threads"),
        ("kernel", "tessera's own xsimd kernel (`gemm_kernel`), 1 thread"),
        ("rows", "**tessera** a `P('X', None)`, b replicated"),
        ("k", "**tessera** a `P(None, 'X')`, b `P('X', None)` (all-reduce)"),
        ("kscatter", "**tessera** the same under `P('X', None)` (reduce-scatter)"),
        ("klocal", "phase: the local products alone (`.partial()`)"),
        ("ksum", "phase: the all-reduce alone (`sum_partials`)"),
        ("ksumrs", "phase: the reduce-scatter alone (`sum_partials`)"),
    ]),
    "seed": ("seed 004: `x @ x`, x float32 [4000,4000]", [
        ("openblas", "OpenBLAS `cblas_sgemm`, n threads"),
        ("single", "**tessera** x on one device"),
        ("sharded", "**tessera** x `P('X', None)` (b = x all-gathered)"),
        ("gather", "phase: the all-gather of x alone"),
        ("local", "phase: the local products alone (x times a replicated copy)"),
    ]),
    "rs": ("64 MiB float32 [4096,4096] from `P('X', None)` to `P(None, 'X')`", [
        ("tessera", "**tessera** `device_put(x, P(None, 'X'))`"),
        ("memcpy", "`memcpy` of 64 MiB, n threads (each 1/n)"),
    ]),
}
ns = [1, 2, 4]
print("Median of the repetitions; ± is half the spread (max - min) of the repetitions, relative to")
print("the median; cores = the process's CPU time over the wall time of the timed loop (median):")
print("about n for n busy threads on an idle machine, less when other work takes the cores.")
print()
for g, (title, impls) in groups.items():
    if not any((g, i, n) in runs for i, _ in impls for n in ns):
        continue
    print(f"#### {g}: {title}")
    print()
    print("| implementation | 1 device/thread | 2 | 4 | collectives on 2 devices (explain) |")
    print("|---|---|---|---|---|")
    for i, name in impls:
        if not any((g, i, n) in runs for n in ns):
            continue
        print("| " + " | ".join([name] + [cell((g, i, n)) for n in ns] + [next((labels[(g, i, n)] for n in (2, 1, 4) if (g, i, n) in labels), "")]) + " |")
    print()

def ratio(num, den):
    a, b = med(num), med(den)
    return a / b if a and b else None

def verdict(r, target):
    return "" if r is None else ("**met**" if r >= target else "**not met**")

print("#### Targets (2 devices)")
print()
print("| target | measured | ratio | |")
print("|---|---|---|---|")
r = ratio(("mm", "openblas", 2), ("mm", "rows", 2))
print(f"| 2048² rows-sharded matmul >= 0.9 x OpenBLAS 2 threads | {cell(('mm', 'rows', 2))} vs {cell(('mm', 'openblas', 2))} | "
      f"{'' if r is None else f'{r:.2f}'} | {verdict(r, 0.9)} |")
r = ratio(("seed", "single", 1), ("seed", "sharded", 2))
print(f"| seed 004: sharded 4000² matmul >= 1.8x one device | {cell(('seed', 'sharded', 2))} vs {cell(('seed', 'single', 1))} | "
      f"{'' if r is None else f'{r:.2f}x'} | {verdict(r, 1.8)} |")
for n in (1, 2):
    r = ratio(("rs", "memcpy", n), ("rs", "tessera", 2))
    print(f"| reshard 64 MiB rows -> columns >= 0.5 x memcpy on {n} thread{'s' if n > 1 else ''} | "
          f"{cell(('rs', 'tessera', 2))} vs {cell(('rs', 'memcpy', n))} | {'' if r is None else f'{r:.2f}'} | {verdict(r, 0.5)} |")
print()
print("Other ratios: ", end="")
parts = []
for a, b, what in [(("mm", "openblas", 1), ("mm", "rows", 1), "mm 1 device vs OpenBLAS 1 thread"),
                   (("mm", "rows", 1), ("mm", "rows", 2), "mm rows 2 vs 1 device"),
                   (("mm", "openblas", 2), ("mm", "k", 2), "mm k (all-reduce) vs OpenBLAS 2 threads"),
                   (("mm", "openblas", 2), ("mm", "kscatter", 2), "mm k (reduce-scatter) vs OpenBLAS 2 threads"),
                   (("mm", "openblas", 1), ("mm", "kernel", 1), "tessera's kernel vs OpenBLAS, 1 thread"),
                   (("seed", "openblas", 1), ("seed", "single", 1), "seed 1 device vs OpenBLAS 1 thread"),
                   (("seed", "openblas", 2), ("seed", "sharded", 2), "seed sharded vs OpenBLAS 2 threads"),
                   (("seed", "openblas", 1), ("seed", "openblas", 2), "OpenBLAS seed 2 vs 1 thread")]:
    r = ratio(a, b)
    if r is not None:
        parts.append(f"{what} {r:.2f}")
print("; ".join(parts) + ".")
print()
print("Context: matmul_backend", ctx.get("matmul_backend"), "; CPU", ctx.get("num_cpus"), "x", ctx.get("mhz_per_cpu"), "MHz")
EOF
