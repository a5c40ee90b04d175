#!/usr/bin/env bash
# Asynchronous dispatch against synchronous, and tessera's per-step host overhead against JAX's
# (issue 33): bench/dispatch_bench.cpp (seed 002's jitted train step, a loop of STEPS steps, with
# tessera::set_async_dispatch on and off) and bench/jax/dispatch.py (the same loop in JAX), on
# DEVICES devices. Builds the benchmark with g++ -O3 -march=native -DNDEBUG into build/bench-dispatch.
#
#   bash bench/run_dispatch.sh                # DEVICES=8 STEPS=1000 REPS=5
#
# Needs build/jax-venv for JAX's side (tools/jax_reference/setup_venv.sh); without it, tessera's only.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$root/build/bench-dispatch
devices=${DEVICES:-8}
steps=${STEPS:-1000}
reps=${REPS:-5}
mkdir -p "$build"
${CXX:-g++} -std=gnu++20 -O3 -march=native -DNDEBUG -I"$root/include" "$here/dispatch_bench.cpp" \
  -o "$build/dispatch_bench" -lpthread
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1));" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg)"
TESSERA_NUM_DEVICES=$devices "$build/dispatch_bench" "$steps" "$reps"
jax_py=$root/build/jax-venv/bin/python
if [[ -x $jax_py ]]; then
  "$jax_py" "$here/jax/dispatch.py" --devices "$devices" --steps "$steps" --reps "$reps"
else
  echo "run_dispatch.sh: no $jax_py; JAX's side skipped" >&2
fi
