#!/usr/bin/env bash
# Builds and runs tessera's multi-process tests and example against MPICH 4.0 (Debian 12's
# libmpich-dev), next to the OpenMPI that CI uses, without installing it: the Debian packages
# are downloaded and unpacked under build/mpich, so the system's mpicxx and mpirun (OpenMPI's
# alternatives) stay as they are. Issue 15: "MPICH 4.0 must also compile, and should pass."
#
#   bash tools/mpich_check.sh        (needs apt-get download and g++; about two minutes)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$ROOT/build/mpich
M=$W/root
mkdir -p "$W/bin"
cd "$W"
if [[ ! -f $M/usr/include/x86_64-linux-gnu/mpich/mpi.h ]]; then
  apt-get download libmpich-dev libmpich12 mpich libslurm38
  for f in ./*.deb; do dpkg-deb -x "$f" "$M"; done
fi
INC=$M/usr/include/$(gcc -dumpmachine)/mpich
LIB=$M/usr/lib/$(gcc -dumpmachine)
export PATH=$M/usr/bin:$PATH LD_LIBRARY_PATH=$LIB:$LIB/slurm
build() {  # build SOURCE NAME
  g++ -std=c++20 -O1 -g0 -I"$ROOT/include" -I"$INC" -Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Werror \
    "$ROOT/$1" -o "$W/bin/$2" -L"$LIB" -l:libmpich.so.12 -lpthread
}
build tests/mpi/shard_map_processes.cpp shard_map_processes
build tests/mpi/distributed_test.cpp distributed_test
build tests/mpi/failing_process.cpp failing_process
build examples/mpi/training.cpp training
failed=0
run() {  # run NP ARGS...: the job must succeed within 120 s
  local np=$1; shift
  if timeout 120 mpiexec.hydra -n "$np" "$@" > "$W/out.txt" 2>&1; then echo "ok    -n $np $*"; else echo "FAIL  -n $np $*"; cat "$W/out.txt"; failed=1; fi
}
for pk in "1 8" "2 4" "4 2" "2 1"; do set -- $pk; run "$1" "$W/bin/shard_map_processes" "$2"; done
for np in 2 3; do for mode in user-init tessera-init; do run "$np" "$W/bin/distributed_test" "$mode"; done; done
timeout 120 mpiexec.hydra -n 2 "$W/bin/training" 4 > "$W/training.txt" 2>&1
if diff -q "$W/training.txt" "$ROOT/examples/mpi/training.expected" > /dev/null; then echo "ok    training 2 x 4 prints training.expected"; else echo "FAIL  training 2 x 4"; failed=1; fi
# A process that throws, and one that is killed, end the job (no hang).
for mode in throw kill; do
  if timeout 90 mpiexec.hydra -n 3 "$W/bin/failing_process" "$mode" > "$W/out.txt" 2>&1; then echo "FAIL  failing_process $mode: the job succeeded"; failed=1;
  elif [[ $? -eq 124 ]]; then echo "FAIL  failing_process $mode: the job hung"; failed=1; else echo "ok    failing_process $mode ends the job"; fi
done
echo "MPICH $(mpichversion | sed -n 's/MPICH Version:[[:space:]]*//p'): $([[ $failed == 0 ]] && echo all passed || echo failures)"
exit $failed
