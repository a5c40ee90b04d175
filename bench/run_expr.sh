#!/usr/bin/env bash
# Runs the expression benchmarks of issue 4 in one go and prints markdown tables:
# tessera's fused expressions on 1, 2 and 4 devices against xtensor (one thread, with
# and without XTENSOR_USE_XSIMD), hand-written std::thread loops, OpenMP loops and
# Eigen's Tensor module with a ThreadPoolDevice, as ratios (peer time / tessera time
# at the same thread count: above 1, tessera is faster); then the compile times of
# the tour example and of a small file that uses expressions.
#
#   bash bench/run_expr.sh [build-dir]      # default build/bench-expr; about 10 minutes
#
# It configures and builds the two benchmark programs in a Release build directory
# (tests and examples off). Environment: REPS (benchmark repetitions, the best is
# kept; repetitions are interleaved at random so that drifts of the machine hit
# every implementation alike; default 3), COMPILE_REPS (compiles per file and
# compiler, the fastest is kept; default 3), SKIP_COMPILE=1 to leave the compile times out, FILTER (a
# --benchmark_filter regex). OpenMP and Eigen (Debian: libeigen3-dev) are optional;
# without them their columns stay empty.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-build/bench-expr}
reps=${REPS:-3}
compile_reps=${COMPILE_REPS:-3}
filter=${FILTER:-.}
# The compile-time reference includes Boost.Hana (tessera itself does not need Boost).
source "$root/scripts/lib-deps.sh"
tessera_ensure_packages libboost-dev >&2

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_BENCH=ON >&2
cmake --build "$build" --target bench_expr_bench bench_expr_bench_xtensor_xsimd -j "$(nproc)" >&2

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
for bin in bench_expr_bench bench_expr_bench_xtensor_xsimd; do
  "$build/bench/$bin" --benchmark_filter="$filter" --benchmark_repetitions="$reps" \
    --benchmark_enable_random_interleaving=true \
    --benchmark_out="$out/$bin.json" --benchmark_out_format=json >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------------------
# Compile times: the tour example, a small file with expressions, and the issue's
# reference (a file that includes only xtensor and Hana), at the Release flags.
# ---------------------------------------------------------------------------
: > "$out/compile.txt"
if [[ ${SKIP_COMPILE:-0} != 1 ]]; then
  cat > "$out/xtensor_hana.cpp" <<'EOF'
#include <iostream>
#include <boost/hana.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xio.hpp>
int main() {
  xt::xtensor<float, 1> x = {1, 2, 3};
  xt::xtensor<float, 1> y = 2 * xt::sin(x) + 1;
  std::cout << y << boost::hana::size(boost::hana::make_tuple(1, 2)) << "\n";
}
EOF
  cat > "$out/expressions.cpp" <<'EOF'
// 2*sin(x)+1 and a sum over a sharded dimension, printed (a user's first expression file).
#include <iostream>
#include <tessera/tessera.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xio.hpp>
int main() {
  tessera::runtime rt{2};
  auto mesh = tessera::make_mesh<"x">({2});
  auto x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(32)),
                               tessera::named_sharding(mesh, tessera::P<"x">{}));
  tessera::array y = 2 * tessera::sin(x) + 1;
  auto s = tessera::eval(tessera::sum<0>(y));
  std::cout << tessera::typeof(y) << "\n" << tessera::to_host(y) << "\n" << tessera::to_host(s) << "\n";
}
EOF
  flags=(-std=c++20 -O3 -DNDEBUG -I"$root/include" -c -o /dev/null)
  for cxx in g++ clang++; do
    command -v "$cxx" >/dev/null || continue
    for src in "$root/examples/data_sharding.cpp" "$out/expressions.cpp" "$out/xtensor_hana.cpp"; do
      ver=$("$cxx" --version | head -1 | grep -o '[0-9][0-9.]*' | head -1)
      for ((i = 0; i < compile_reps; ++i)); do
        /usr/bin/time -f "%e %M" -o "$out/time.txt" "$cxx" "${flags[@]}" "$src"
        echo "$cxx $ver $(basename "$src") $(tail -1 "$out/time.txt")" >> "$out/compile.txt"
      done
    done
  done
fi

echo "$started; load average before: $load_before (near 0, or other work skews both sides)," \
  "after: $load_after; best of $reps repetitions"
echo

python3 - "$out/bench_expr_bench.json" "$out/bench_expr_bench_xtensor_xsimd.json" "$out/compile.txt" <<'EOF'
import json, re, sys

def load(path, suffix=""):
    runs = {}
    with open(path) as f:
        data = json.load(f)
    for b in data["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        m = re.match(r"BM_([a-z0-9]+)_(.+?)/(\d+)(/.*)?$", b["run_name"] if "run_name" in b else b["name"])
        if not m:
            continue
        group, impl, n = m.group(1), m.group(2) + suffix, int(m.group(3))
        t = b["real_time"] * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        key = (group, impl, n)
        rec = runs.setdefault(key, {"t": t, "items": b.get("items_per_second", 0) * t, "bytes": b.get("bytes_per_second", 0) * t})
        rec["t"] = min(rec["t"], t)
    return runs, data.get("context", {})

runs, ctx = load(sys.argv[1])
xs, _ = load(sys.argv[2], "+xsimd")
runs.update({k: v for k, v in xs.items() if k[1].startswith("xtensor")})

titles = {
    "sin": "`y = 2*sin(x)+1`, 16 Mi float32, `P('x')`",
    "add": "`a + c`, both [4096,4096] `P('x', None)` (STREAM add: the reference for the broadcasts)",
    "brow": "`a + b`, b [1,4096] replicated (row broadcast)",
    "bcol": "`a + b`, b [4096,1] replicated (stride 0 along the rows)",
    "chain": "`((a + b) * c - a) * 0.5 + b`, 16 Mi float32 each, `P('x')` (5 ops, fused)",
    "sum1": "`sum<1>(a)`, a [4096,4096] `P('x', None)` (row sums, no communication)",
    "sum0": "`sum<0>(a)` (column sums, then an all-reduce over 'x')",
}
order = ["tessera", "tessera_unfused", "thread_xsimd", "thread", "omp_xsimd", "omp", "eigen",
         "xtensor_noalias", "xtensor_noalias+xsimd", "xtensor", "xtensor+xsimd",
         "xtensor_immediate", "xtensor_immediate+xsimd", "xtensor_temps", "xtensor_temps+xsimd"]
label = {
    "tessera": "**tessera** (n devices)",
    "tessera_unfused": "tessera, each op into an array",
    "thread_xsimd": "std::thread, xsimd loop",
    "thread": "std::thread, plain loop",
    "omp_xsimd": "OpenMP, xsimd loop",
    "omp": "OpenMP `parallel for simd`",
    "eigen": "Eigen Tensor, ThreadPoolDevice",
    "xtensor_noalias": "xtensor `noalias(y) =` (1 thread)",
    "xtensor_noalias+xsimd": "xtensor+XSIMD `noalias(y) =` (1 thread)",
    "xtensor": "xtensor, new result (1 thread)",
    "xtensor+xsimd": "xtensor+XSIMD, new result (1 thread)",
    "xtensor_immediate": "xtensor `sum(.., immediate)` (1 thread)",
    "xtensor_immediate+xsimd": "xtensor+XSIMD `sum(.., immediate)` (1 thread)",
    "xtensor_temps": "xtensor, each op into a tensor (1 thread)",
    "xtensor_temps+xsimd": "xtensor+XSIMD, each op into a tensor (1 thread)",
}
ns = [1, 2, 4]

def fmt_t(t):
    return f"{t*1e3:.3g} ms" if t >= 1e-3 else f"{t*1e6:.3g} us"

print("Times are the best of the repetitions; ratio = peer time / tessera time at the same")
print("thread count (above 1: tessera is faster). 2 cores: 4 threads are oversubscribed.")
print()
for g in titles:
    impls = [i for i in order if any((g, i, n) in runs for n in ns)]
    if not impls:
        continue
    print(f"#### {g}: {titles[g]}")
    print()
    print("| implementation | 1 thread | 2 | 4 | ratio at 1 | ratio at 2 | ratio at 4 | 2 vs 1 |")
    print("|---|---|---|---|---|---|---|---|")
    for i in impls:
        row = [label.get(i, i)]
        for n in ns:
            r = runs.get((g, i, n))
            cell = fmt_t(r["t"]) if r else ""
            if r and i.startswith("tessera") and r["items"]:
                cell += f" ({r['items'] / r['t'] / 1e9:.2f} Gelem/s)"
            row.append(cell)
        for n in ns:
            r, t = runs.get((g, i, n)), runs.get((g, "tessera", n))
            row.append(f"{r['t'] / t['t']:.2f}" if r and t and i != "tessera" else "")
        r1, r2 = runs.get((g, i, 1)), runs.get((g, i, 2))
        row.append(f"{r1['t'] / r2['t']:.2f}x" if r1 and r2 else "")
        print("| " + " | ".join(row) + " |")
    print()

print("Context:", ", ".join(f"{k} {ctx[k]}" for k in ("xsimd_batch_float", "openmp", "eigen") if k in ctx),
      "; CPU", ctx.get("num_cpus"), "x", ctx.get("mhz_per_cpu"), "MHz")
print()

best = {}
for l in open(sys.argv[3]):
    if l.strip():
        cxx, ver, f, sec, kib = l.split()
        if (cxx, f) not in best or float(sec) < float(best[(cxx, f)][3]):
            best[(cxx, f)] = (cxx, ver, f, sec, kib)
lines = list(best.values())
if lines:
    ref = {c: float(l[3]) for l in lines for c in [l[0]] if l[2] == "xtensor_hana.cpp"}
    print("| compiler | file | wall time | peak memory | vs xtensor + Hana only |")
    print("|---|---|---|---|---|")
    for cxx, ver, f, sec, kib in lines:
        rel = f"{float(sec) / ref[cxx]:.2f}x" if cxx in ref else ""
        print(f"| {cxx} {ver} | `{f}` | {float(sec):.1f} s | {int(kib) // 1024} MiB | {rel} |")
EOF
