#!/usr/bin/env bash
# tessera::grad against hand-written gradients and against libtorch's autograd (issue 17), in one
# run: bench_grad_bench (bench/grad_bench.cpp: seed 002's logistic regression and seed 004's
# linear model, one SGD step, hand-written and with tessera::grad, 2 and 8 devices) and, where
# CMake found Torch, bench_grad_torch (bench/torch/grad_torch.cpp: the same steps with
# torch::autograd, and hand-written, torch::set_num_threads(2)). Prints the machine, the load
# average before and after, markdown tables of the medians and ratios, and the memory counts.
# libtorch runs twice per round: as the environment has it, and with OMP_WAIT_POLICY=PASSIVE.
# Debian's libtorch parallelises with libgomp, whose idle threads spin, and calls the pthread
# OpenBLAS, whose threads spin too; on 2 shared cores the spinning threads take the cores from the
# ones working (seed 004's step: 0.65-20 ms by default, as the load goes, 0.3-1 ms with passive
# waiting). The ratio tessera / libtorch is taken against the faster of the two, the stronger peer.
#
#   bash bench/run_grad.sh [build-dir]      # default build/bench-grad; 2-3 minutes of benchmarks
#                                           # (the first build takes about 1.5 minutes more)
#
# It configures a Release build directory of its own (tests and examples off) and builds the two
# targets one after the other with JOBS jobs (default 1: the machine is shared). Environment:
# REPS (default 9): --benchmark_repetitions of each program, with
# --benchmark_enable_random_interleaving, so that the hand-written and grad repetitions alternate
# at random and a drift of the machine shows in both; the median of the repetitions is reported;
# MIN_TIME (seconds each repetition runs at least, default 0.3); ROUNDS (default 1): the programs
# run one after the other that many times, the repetitions of all rounds pooled; FILTER (a regex
# passed to both programs' --benchmark_filter, e.g. logistic). Ratios: grad / hand (issue 17's
# target: at most 1.15) and tessera grad / libtorch autograd (target: at most 1, tessera at least
# as fast). Measure on a quiet machine: the script prints the load average before and after.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build/bench-grad}
jobs=${JOBS:-1}
reps=${REPS:-9}
rounds=${ROUNDS:-1}
min_time=${MIN_TIME:-0.3}
filter=${FILTER:-.}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_grad_bench -j "$jobs" >&2
torch_bin=""
if [[ -d $build/bench/CMakeFiles/bench_grad_torch.dir ]]; then  # the target exists (bench/CMakeLists.txt)
  cmake --build "$build" --target bench_grad_torch -j "$jobs" >&2
  torch_bin=$build/bench/bench_grad_torch
else
  echo "run_grad.sh: no Torch found by CMake (Debian: apt-get install libtorch-dev); libtorch's column is left out" >&2
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$SECONDS
common=(--benchmark_filter="$filter" --benchmark_min_time="$min_time" --benchmark_repetitions="$reps"
        --benchmark_enable_random_interleaving=true --benchmark_out_format=json)
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds: bench_grad_bench" >&2
  "$build/bench/bench_grad_bench" "${common[@]}" --benchmark_out="$out/tessera_$r.json" >&2
  if [[ -n $torch_bin ]]; then
    echo "round $r of $rounds: bench_grad_torch" >&2
    "$torch_bin" "${common[@]}" --benchmark_out="$out/torch_$r.json" >&2
    echo "round $r of $rounds: bench_grad_torch, OMP_WAIT_POLICY=PASSIVE" >&2
    OMP_WAIT_POLICY=PASSIVE "$torch_bin" "${common[@]}" --benchmark_out="$out/torchpassive_$r.json" >&2
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "$started; $(nproc) CPUs ($cpu); $(g++ --version | head -1); load average before: $load_before," \
  "after: $load_after; median of $reps repetitions x $rounds round(s), randomly interleaved, of at least" \
  "${min_time} s each; $((SECONDS - t0)) s of benchmarks; OMP_WAIT_POLICY=${OMP_WAIT_POLICY-(unset)}," \
  "OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS-(unset)}"
echo

python3 - "$out" "$rounds" <<'EOF'
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
times, counters, errors, ctx = {}, {}, {}, {}
for prog in ("tessera", "torch", "torchpassive"):
    for r in range(1, rounds + 1):
        path = os.path.join(out, f"{prog}_{r}.json")
        if not os.path.exists(path):
            continue
        data = json.load(open(path))
        ctx[prog] = data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            name = b.get("run_name", b["name"]).removesuffix("/real_time")
            if prog == "torchpassive":
                name = name.replace("BM_torch_", "BM_torchpassive_")
            if b.get("error_occurred"):
                errors[name] = b.get("error_message", "error")
                continue
            times.setdefault(name, []).append(b["real_time"] * unit[b["time_unit"]])
            counters[name] = {k: v for k, v in b.items() if k in (
                "checksum", "collectives", "dispatches", "dev_peak_B", "host_peak_B", "dev_allocs", "host_allocs")}

def med(name):
    return statistics.median(times[name]) if name in times else None

def best(name):
    return min(times[name]) if name in times else None

def cell(name):
    if name in errors:
        return "error: " + errors[name]
    ts = times.get(name)
    if not ts:
        return "-"
    fmt = lambda v: f"{v:.1f} us" if v < 1000 else f"{v / 1000:.2f} ms"
    m = statistics.median(ts)
    s = fmt(m)
    if len(ts) > 1:
        s += f" ±{(max(ts) - min(ts)) / m / 2 * 100:.0f}% (best {fmt(min(ts))})"
    return s

def ratio(a, b):
    if not (med(a) and med(b)):
        return "-"
    return f"**{med(a) / med(b):.2f}** (best {best(a) / best(b):.2f})"

rows = [  # (title, tessera prefix, torch prefix)
    ("seed 002 logistic, B = 128/device, D = 32", "BM_logistic", "BM_torch_logistic"),
    ("seed 004 linear, W 1000x100 P('X', None), batch 32/device", "BM_linear_fsdp", "BM_torch_linear"),
    ("seed 004 linear, W 1000x100 replicated, batch 32/device", "BM_linear_dp", "BM_torch_linear"),
]
print("| model | devices | tessera hand-written | tessera::grad | grad / hand | libtorch autograd | libtorch autograd, passive OMP | tessera grad / libtorch (the faster) | libtorch hand-written (the faster) |")
print("|---|---|---|---|---|---|---|---|---|")
checks = []
def faster(a, b):
    return min((x for x in (a, b) if med(x) is not None), key=med, default=a)
for title, t, p in rows:
    for n in (2, 8):
        h, g = f"{t}_hand/{n}", f"{t}_grad/{n}"
        ta, tap = f"{p}_autograd/{n}", f"{p.replace('torch', 'torchpassive')}_autograd/{n}"
        th = faster(f"{p}_hand/{n}", f"{p.replace('torch', 'torchpassive')}_hand/{n}")
        if h not in times and g not in times and h not in errors and g not in errors:
            continue
        print(f"| {title} | {n} | {cell(h)} | {cell(g)} | {ratio(g, h)} | {cell(ta)} | {cell(tap)} | "
              f"{ratio(g, faster(ta, tap))} | {cell(th)} |")
        a, b = counters.get(h, {}).get("checksum"), counters.get(ta, {}).get("checksum")
        if a is not None and b is not None:
            checks.append(abs(a - b) <= 1e-4 * (1 + abs(b)))
print()
print("Median of the repetitions, per step; ± is half the spread (max - min) of the repetitions, relative to the median; "
      "best: the fastest repetition. Ratios: of the medians (in bold), and of the fastest repetitions. "
      "A step makes new parameters from the same ones each time. libtorch has no devices: its \"devices\" "
      "column is the batch of that many of tessera's devices, on 2 threads.")
if checks:
    print(f"The updated parameters' sums agree between tessera and libtorch (to 1e-4): {'yes' if all(checks) else 'NO'}.")
print()
print("One step under an allocation count (device caches off) and a trace:")
print()
print("| model | devices | way | device bytes, high-water | host bytes, high-water | device allocations | host allocations | dispatches | collectives |")
print("|---|---|---|---|---|---|---|---|---|")
for title, t, _ in rows:
    for n in (2, 8):
        for way in ("hand", "grad"):
            c = counters.get(f"{t}_{way}/{n}")
            if not c:
                continue
            print(f"| {title} | {n} | {way} | {c['dev_peak_B'] / 1024:.1f} KiB | {c['host_peak_B'] / 1024:.1f} KiB | "
                  f"{c['dev_allocs']:.0f} | {c['host_allocs']:.0f} | {c['dispatches']:.0f} | {c['collectives']:.0f} |")
t, p = ctx.get("tessera", {}), ctx.get("torch", {})
print()
print(f"tessera: matmul backend {t.get('matmul_backend')}; libtorch {p.get('torch_version', '-')} "
      f"on {p.get('torch_num_threads', '-')} threads.")
EOF
