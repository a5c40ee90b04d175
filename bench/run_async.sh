#!/usr/bin/env bash
# Asynchronous collectives across processes (issue 33): bench/mpi/async_bench.cpp under mpirun,
# 2 processes x 1 device, then 2 x 2 devices (DEVICES), each twice: with the progress thread (the default) and with
# TESSERA_ASYNC_PROGRESS=wait (MPI is called only inside wait(), so the transfer cannot overlap
# the local work). Lines: seed 003's all_gather_async + work + wait against all_gather + work,
# and the collective matmul (2048x2048 float32, both forms) against its plain form.
# Built here with mpicxx -O3 -march=native -DNDEBUG into build/bench-async (BUILD to change).
# OpenMPI settings as bench/run_mpi.sh: mpi_yield_when_idle=1 (2 shared cores) and
# btl_vader_single_copy_mechanism=none unless set (containers without CMA).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$ROOT/build/bench-async}
mkdir -p "$build"
mpicxx -std=gnu++20 -O3 -march=native -DNDEBUG -I"$ROOT/include" "$ROOT/bench/mpi/async_bench.cpp" \
  -o "$build/async_bench" -lpthread
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && flags+=(--allow-run-as-root)
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(mpirun --version | head -1)"
mpirun "${flags[@]}" -np 2 "$build/async_bench"
TESSERA_ASYNC_PROGRESS=wait mpirun "${flags[@]}" -x TESSERA_ASYNC_PROGRESS -np 2 "$build/async_bench"
# 2 processes x K devices (K=2 unless DEVICES is set): the gathered path (MPI_Iallgatherv posted by
# the last local device to start), with and without the progress thread.
k=${DEVICES:-2}
mpirun "${flags[@]}" -np 2 "$build/async_bench" "$k"
TESSERA_ASYNC_PROGRESS=wait mpirun "${flags[@]}" -x TESSERA_ASYNC_PROGRESS -np 2 "$build/async_bench" "$k"
