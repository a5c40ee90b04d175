#!/usr/bin/env bash
# tessera across processes against the MPI call moving the same bytes (issue 15), under mpirun
# with 2 processes of 1 device: process_allgather and a reshard against MPI_Allgather, a sum
# against MPI_Allreduce; prints the machine line and one table. Builds the benchmark in
# build/bench-mpi (Release) first.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$ROOT/build/bench-mpi}
cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF > /dev/null
cmake --build "$build" --target bench_process_allgather -j 2 > /dev/null
flags=(--oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && flags+=(--allow-run-as-root)
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs; $(mpirun --version | head -1); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| operation | bytes per process | processes | tessera | MPI | tessera/MPI |"
echo "|---|---|---|---|---|---|"
for np in ${NPS:-2}; do
  OMPI_MCA_mpi_yield_when_idle=1 mpirun "${flags[@]}" -np "$np" "$build/bench/bench_process_allgather" |
    awk '{ printf "| %s | %s | %s | %s s | %s s | %s |\n", $1, $2, $3, $4, $5, $6 }'
done
