#!/usr/bin/env bash
# Runs the collective benchmarks of issue 3 in one go and prints one table:
# tessera (bench_collectives_bench) against OpenMPI (bench_collectives_mpi under
# mpirun with 2, 4 and 8 ranks) and against the memory-traffic floor from the
# STREAM bandwidth measured in the same run (before and after the MPI runs).
# It builds nothing; build the two targets first, e.g.
#   cmake -S . -B build/bench -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON
#   cmake --build build/bench --target bench_collectives_bench bench_collectives_mpi
#   bash bench/run_collectives.sh build/bench
# bench_collectives_mpi is built only where CMake finds an MPI (Debian:
# openmpi-bin libopenmpi-dev); without it the OpenMPI columns stay empty.
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"

build=${1:-build/bench}
here=$(cd "$(dirname "$0")" && pwd)
tessera_bin=$build/bench/bench_collectives_bench
mpi_bin=$build/bench/bench_collectives_mpi
[[ -x $tessera_bin ]] || { echo "run_collectives.sh: $tessera_bin is not built (see the top of this script)" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$tessera_bin" --benchmark_out="$out/tessera.json" --benchmark_out_format=json >&2

: > "$out/mpi.txt"
if [[ -x $mpi_bin ]] && command -v mpirun >/dev/null; then
  root_flag=()
  [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
  for k in 2 4 8; do
    echo "mpirun -np $k $mpi_bin" >&2
    # --oversubscribe: more ranks than cores, as tessera runs more devices than cores.
    mpirun "${root_flag[@]}" --oversubscribe -np "$k" "$mpi_bin" | tee -a "$out/mpi.txt" >&2
  done
else
  echo "run_collectives.sh: no $mpi_bin or no mpirun; OpenMPI columns left empty" >&2
fi

# STREAM again: the machine's bandwidth drifts, and the table shows by how much.
"$tessera_bin" --benchmark_filter='BM_stream' --benchmark_out="$out/stream_after.json" \
  --benchmark_out_format=json >&2
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo "$(date -u '+%Y-%m-%d %H:%M UTC'); load average before: $load_before (near 0, or other work" \
  "skews both sides), after: $load_after (this run's own threads and ranks count there)"
echo

python3 "$here/collectives_table.py" "$out/tessera.json" "$out/mpi.txt" "$out/stream_after.json"
