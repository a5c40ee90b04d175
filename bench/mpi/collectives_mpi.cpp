// The OpenMPI peer of bench/collectives_bench.cpp: MPI_Allreduce (sum),
// MPI_Allgather and MPI_Alltoall of float32 with the same bytes per rank
// (4 KiB and 4 MiB), one rank per tessera device. Run it as
//   mpirun --allow-run-as-root --oversubscribe -np K bench_collectives_mpi
// It prints one line per operation, "mpi <op> <ranks> <bytes> <seconds per call>",
// which bench/collectives_table.py reads.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

/// Seconds per call of `call`, the slowest rank's average: a collective is done when every rank is.
template <class Call>
double time_per_call(Call call, double min_seconds) {
  for (int i = 0; i < 3; ++i) call();  // warm-up: first touch, connection set-up
  int reps = 1;
  for (;;) {
    MPI_Barrier(MPI_COMM_WORLD);
    double const t0 = MPI_Wtime();
    for (int i = 0; i < reps; ++i) call();
    double local = MPI_Wtime() - t0;
    double slowest = 0;
    MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (slowest >= min_seconds) return slowest / reps;
    reps = slowest <= 0 ? reps * 10 : std::max(reps * 2, static_cast<int>(reps * 1.4 * min_seconds / slowest));
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, k = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &k);
  double const min_seconds = 0.3;
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{4} << 20}) {
    int const count = static_cast<int>(bytes / sizeof(float));
    std::vector<float> in(static_cast<std::size_t>(count)), out(static_cast<std::size_t>(count)),
        gathered(static_cast<std::size_t>(count) * static_cast<std::size_t>(k));
    for (int i = 0; i < count; ++i) in[static_cast<std::size_t>(i)] = static_cast<float>(rank * count + i);
    double const allreduce = time_per_call(
        [&] { MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }, min_seconds);
    double const allgather = time_per_call(
        [&] { MPI_Allgather(in.data(), count, MPI_FLOAT, gathered.data(), count, MPI_FLOAT, MPI_COMM_WORLD); },
        min_seconds);
    double const alltoall = time_per_call(
        [&] { MPI_Alltoall(in.data(), count / k, MPI_FLOAT, out.data(), count / k, MPI_FLOAT, MPI_COMM_WORLD); },
        min_seconds);
    if (rank == 0) {
      std::printf("mpi psum %d %zu %.9g\n", k, bytes, allreduce);
      std::printf("mpi all_gather %d %zu %.9g\n", k, bytes, allgather);
      std::printf("mpi all_to_all %d %zu %.9g\n", k, bytes, alltoall);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
