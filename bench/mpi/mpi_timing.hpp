#pragma once
// How the benchmarks across processes time a call (bench/run_mpi.sh): every process runs the
// same repetitions between two barriers, the slowest process's time is the time, and the median
// of a few such timings is reported (the machine is shared with the other processes).
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

namespace tessera_bench {

/// Seconds per call, the slowest process's, after a warm-up; repetitions double until the
/// slowest process took min_seconds (the same decision in every process: it is all-reduced).
template <class Call>
double per_call(MPI_Comm comm, Call call, double min_seconds) {
  for (int i = 0; i < 3; ++i) call();
  for (int reps = 4;; reps *= 2) {
    MPI_Barrier(comm);
    double const t0 = MPI_Wtime();
    for (int i = 0; i < reps; ++i) call();
    double local = MPI_Wtime() - t0, slowest = 0;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (slowest >= min_seconds) return slowest / reps;
  }
}

/// The median of five timings of at least min_seconds each.
template <class Call>
double median_per_call(MPI_Comm comm, Call call, double min_seconds = 0.2) {
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(per_call(comm, call, min_seconds));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// The medians of several calls timed in turns: each of `rounds` rounds times every call once
/// (at least min_seconds each), so that a change in the machine's load falls on all of them
/// alike rather than on whichever was timed then.
inline std::vector<double> interleaved_medians(MPI_Comm comm, std::vector<std::function<void()>> const& calls,
                                               double min_seconds = 0.2, int rounds = 5) {
  std::vector<std::vector<double>> t(calls.size());
  for (int r = 0; r < rounds; ++r)
    for (std::size_t c = 0; c < calls.size(); ++c) t[c].push_back(per_call(comm, calls[c], min_seconds));
  std::vector<double> medians;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    medians.push_back(v[v.size() / 2]);
  }
  return medians;
}

}  // namespace tessera_bench
