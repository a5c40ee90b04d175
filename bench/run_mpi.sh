#!/usr/bin/env bash
# tessera across processes against the MPI call moving the same bytes (issue 15), under mpirun.
# Builds the benchmarks in build/bench-mpi (Release, -O3 -march=native, one target at a time)
# first, then prints the machine line and three tables:
#   1. 2 processes of 1 device: process_allgather and a reshard against MPI_Allgather, a sum
#      against MPI_Allreduce, broadcast_one_to_all against MPI_Bcast
#      (bench/mpi/process_allgather_bench.cpp);
#   2. 2 processes of 1 device: a shard_map over both devices whose body is one psum,
#      all_gather or all_to_all (tiled) of 4 KiB and 4 MiB per device, against MPI_Allreduce,
#      MPI_Allgather and MPI_Alltoall, with an empty shard_map to tell the shard_map's own cost
#      from the collective's (bench/mpi/shard_map_collectives_bench.cpp);
#      Twice: unchecked (the default of a build with NDEBUG, as here) and in checked mode
#      (distributed::runtime::set_checked_collectives(true)); the MPI peers also nonblocking
#      (MPI_Iallreduce, ... polled with MPI_Test, as tessera waits);
#   3. examples/mpi/training.cpp's training step on 8 devices as 1 process x 8 and as
#      2 processes x 4 (bench/mpi/training_step_bench.cpp);
#   4. table 2's collectives on 8 devices: tessera as 2 processes x 4 devices (and as 1 process
#      x 8, no MPI) against 8 flat MPI ranks (bench/mpi/collectives_mpi.cpp), 4-fold
#      oversubscribed on 2 cores;
#   5. MPI's thread level: table 2's 4 KiB and 4 MiB collectives (unchecked) with MPI
#      initialised by the program at FUNNELED, SERIALIZED (what the runtime asks for) and
#      MULTIPLE, 2 processes x 1 device and x 4 devices (FUNNELED: x 1 only, since a shard_map
#      between processes with several devices each needs SERIALIZED).
# Environment: BUILD (the build folder), NPS (process counts of table 1, default 2),
# TABLES (which tables, default "1 2 3 4"; 5 on request). OpenMPI settings: mpi_yield_when_idle=1 (the 2 cores
# are shared), and btl_vader_single_copy_mechanism=none unless set (containers without CMA).
set -euo pipefail
# shellcheck source=bench/openblas_coretype.sh
source "$(dirname "${BASH_SOURCE[0]}")/openblas_coretype.sh"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$ROOT/build/bench-mpi}
tables=${TABLES:-1 2 3 4}
cmake -S "$ROOT" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON -DTESSERA_BUILD_TESTS=OFF \
  -DTESSERA_BUILD_EXAMPLES=OFF > /dev/null
# One target at a time; the compiler's output (g++ 12 warns inside avx512fintrin.h with
# -march=native) goes to a log, shown if the build fails.
for target in bench_process_allgather bench_shard_map_collectives bench_training_step bench_collectives_mpi; do
  cmake --build "$build" --target "$target" -j 1 > "$build/$target.log" 2>&1 || { cat "$build/$target.log"; exit 1; }
done
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
flags=(--oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && flags+=(--allow-run-as-root)
run() { mpirun "${flags[@]}" -np "$@"; }
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nproc) CPUs; $(mpirun --version | head -1);" \
  "btl_vader_single_copy_mechanism=$OMPI_MCA_btl_vader_single_copy_mechanism; load before: $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ " $tables " == *" 1 "* ]]; then
  echo
  echo "| operation | bytes per process | processes | tessera | MPI | tessera/MPI |"
  echo "|---|---|---|---|---|---|"
  for np in ${NPS:-2}; do
    run "$np" "$build/bench/bench_process_allgather" |
      awk '{ printf "| %s | %s | %s | %s s | %s s | %s |\n", $1, $2, $3, $4, $5, $6 }'
  done
fi

if [[ " $tables " == *" 2 "* ]]; then
  echo
  echo "shard_map over 2 processes x 1 device, seconds per call (slowest process, median of 5 interleaved rounds);"
  echo "one: a shard_map whose body is the collective; empty: a shard_map returning its block;"
  echo "looped: a shard_map making the collective reps times, per collective"
  echo
  echo "| mode | collective | bytes per device | MPI | shard_map, one | one/MPI | empty shard_map | (one - empty)/MPI | looped | looped/MPI | MPI nonblocking | looped/nonblocking |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for mode in unchecked checked; do
    run 2 "$build/bench/bench_shard_map_collectives" 1 "$mode" |
      awk -v mode="$mode" '{ printf "| %s | %s | %s | %s s | %s s | **%s** | %s s | %s | %s s (%s per shard_map) | **%s** | %s s | %.2f |\n", mode, $1, $2, $4, $5, $6, $7, $8, $9, $11, $10, $12, $9 / $12 }'
  done
fi

if [[ " $tables " == *" 3 "* ]]; then
  echo
  echo "examples/mpi/training.cpp's step on 8 devices, seconds per step (slowest process, median of 5)"
  echo
  r18=$(run 1 "$build/bench/bench_training_step" 8)
  r24=$(run 2 "$build/bench/bench_training_step" 4)
  echo "| 1 process x 8 devices | 2 processes x 4 devices | 2x4 / 1x8 | collectives per step |"
  echo "|---|---|---|---|"
  echo "$r18 $r24" | awk '{ printf "| %s s | %s s | **%.2f** | %s, %s |\n", $4, $9, $9 / $4, $5, $10 }'
fi

if [[ " $tables " == *" 4 "* ]]; then
  echo
  echo "8 devices, seconds per collective (slowest process, median of 5); tessera one: a shard_map of the one"
  echo "collective; looped: per collective of a shard_map making it reps times; MPI: 8 ranks, one per device"
  echo "(bench_collectives_mpi, median of 3 runs of 1 timing of at least 0.3 s); 2 cores, so 4-fold oversubscribed"
  echo
  t24=$(run 2 "$build/bench/bench_shard_map_collectives" 4)
  t18=$(run 1 "$build/bench/bench_shard_map_collectives" 8)
  # The flat peer times each call once per run: the median of 3 runs.
  m8=$(for i in 1 2 3; do run 8 "$build/bench/bench_collectives_mpi"; done |
    awk '$1 == "mpi" { key = $2 " " $3 " " $4; v[key] = v[key] " " $5; if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
         END { for (i = 1; i <= n; ++i) { split(v[order[i]], a, " "); lo = a[1]; hi = a[1]
                                          for (j = 2; j <= 3; ++j) { if (a[j] < lo) lo = a[j]; if (a[j] > hi) hi = a[j] }
                                          print "mpi " order[i] " " a[1] + a[2] + a[3] - lo - hi } }')
  echo "| collective | bytes per device | 8 MPI ranks | tessera 2x4, one | MPI/(2x4 one) | tessera 2x4, looped | MPI/(2x4 looped) | tessera 1x8, one | tessera 1x8, looped |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk 'FNR == 1 { file++ } file == 1 { one[$1 " " $2] = $5; loop[$1 " " $2] = $9 } file == 2 { one8[$1 " " $2] = $5; loop8[$1 " " $2] = $9 }
       file == 3 && $1 == "mpi" { key = $2 " " $4; printf "| %s | %s | %s s | %s s | **%.2f** | %s s | **%.2f** | %s s | %s s |\n", $2, $4, $5 + 0, one[key], $5 / one[key], loop[key], $5 / loop[key], one8[key], loop8[key] }' \
    <(echo "$t24") <(echo "$t18") <(echo "$m8")
fi

if [[ " $tables " == *" 5 "* ]]; then
  echo
  echo "MPI's thread level (MPI initialised by the program, unchecked): seconds per call, the raw MPI call"
  echo "and tessera's collective in a looped shard_map (slowest process, median of 5 interleaved rounds)"
  echo
  echo "| processes x devices | level | collective | bytes per device | MPI | tessera looped | looped/MPI |"
  echo "|---|---|---|---|---|---|---|"
  for k in 1 4; do
    for level in funneled serialized multiple; do
      [[ $k != 1 && $level == funneled ]] && continue
      run 2 "$build/bench/bench_shard_map_collectives" "$k" unchecked "$level" |
        awk -v k="$k" -v level="$level" '{ printf "| 2 x %s | %s | %s | %s | %s s | %s s | %s |\n", k, level, $1, $2, $4, $9, $10 }'
    done
  done
fi

echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
