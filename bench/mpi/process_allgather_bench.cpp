// tessera::process_allgather against the raw MPI call moving the same bytes (issue 15):
// MPI_Allgather of float32, 4 KiB and 4 MiB per process, in one run of one binary. Run with
//   mpirun -np 2 bench_process_allgather      (bench/run_mpi.sh)
// It prints one line per size: "<bytes per process> <processes> <tessera s/call> <MPI s/call> <ratio>".
// tessera's call adds what JAX's does: the processes agree on element type and shape first (one
// small allgather), and the result is a fresh host array.
#include <tessera/distributed.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include <xtensor/xbuilder.hpp>

namespace {

/// Seconds per call, the slowest process's, after a warm-up; repetitions grow to min_seconds.
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

/// The median of a few timings: the machine is shared with the other processes.
template <class Call>
double median_per_call(MPI_Comm comm, Call call) {
  std::vector<double> t;
  for (int i = 0; i < 5; ++i) t.push_back(per_call(comm, call, 0.2));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  tessera::distributed::runtime rt{argc, argv, 1};
  MPI_Comm const comm = rt.communicator();
  int const n = rt.process_count();
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{4} << 20}) {
    std::size_t const count = bytes / sizeof(float);
    xt::xtensor<float, 1> mine = xt::arange<float>(static_cast<float>(count));
    std::vector<float> all(count * static_cast<std::size_t>(n));
    double const t_tessera = median_per_call(comm, [&] { auto r = tessera::process_allgather(mine, true); (void)r; });
    double const t_mpi = median_per_call(comm, [&] {
      MPI_Allgather(mine.data(), static_cast<int>(count), MPI_FLOAT, all.data(), static_cast<int>(count), MPI_FLOAT, comm);
    });
    if (rt.process_index() == 0)
      std::printf("%zu %d %.3g %.3g %.2f\n", bytes, n, t_tessera, t_mpi, t_tessera / t_mpi);
  }
}
