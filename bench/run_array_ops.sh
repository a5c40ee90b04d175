#!/usr/bin/env bash
# Issue 31's operation targets: take from a vocabulary-sharded table (bench/take_bench.cpp),
# cumsum along a sharded axis (bench/scan_bench.cpp) and concatenate along a sharded axis
# (bench/joincut_bench.cpp), each against its memory-bandwidth floor in the same run, with JAX
# 0.12's number for the same program (bench/jax/take.py, scan.py, concatenate.py) alongside.
#
#   bash bench/run_array_ops.sh [build-dir]     # default build/bench-array-ops
#
# Built with g++ -O3 -march=native -DNDEBUG as the other benchmarks (no CMake: three files).
# REPS (default 5) repetitions each; min and median printed (on a shared machine the min is the
# run least disturbed). Needs build/jax-venv for the JAX side; without it only tessera's figures.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=${1:-$root/build/bench-array-ops}
reps=${REPS:-5}
cxx=${CXX:-g++}
mkdir -p "$build"
for b in take_bench scan_bench joincut_bench; do
  if [[ ! -x $build/$b || $here/$b.cpp -nt $build/$b ]]; then
    "$cxx" -std=gnu++20 -O3 -march=native -DNDEBUG -I"$root/include" "$here/$b.cpp" -o "$build/$b" -lbenchmark -lpthread
  fi
done
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
summary='
import collections, json, sys
d = json.load(sys.stdin)
t = collections.defaultdict(list)
for b in d["benchmarks"]:
    if b.get("run_type") == "iteration":
        t[b["run_name"].replace("/real_time", "")].append(b["real_time"])
for k, v in t.items():
    v.sort()
    print(f"  {k}: min {v[0]:.2f} ms, median {v[len(v) // 2]:.2f} ms")
'
for b in take_bench scan_bench joincut_bench; do
  echo "$b:"
  "$build/$b" --benchmark_repetitions="$reps" --benchmark_min_time=0.5 --benchmark_format=json 2>/dev/null | python3 -c "$summary"
done
py=$root/build/jax-venv/bin/python
if [[ -x $py ]]; then
  "$py" "$here/jax/take.py"
  "$py" "$here/jax/concatenate.py"
  "$py" "$here/jax/scan.py"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
