// tessera across processes against the raw MPI call moving the same bytes (issue 15), float32,
// 4 KiB and 4 MiB per process, in one run of one binary. Run with
//   mpirun -np 2 bench_process_allgather      (bench/run_mpi.sh)
// It prints one line per operation and size:
//   "<operation> <bytes per process> <processes> <tessera s/call> <MPI s/call> <ratio>"
//   allgather  tessera::process_allgather of host data   against MPI_Allgather
//   reshard    device_put of a global array, P("X") -> P(): its blocks gathered on every
//              process (one exchange, after the processes compare a signature) against MPI_Allgather
//   sum        tessera::sum<0> of a [processes, n] array with a row per process, replicated
//              result (each process's row to the others, summed in process order) against MPI_Allreduce
//   broadcast  tessera::broadcast_one_to_all of host data from process 0 against MPI_Bcast
// Each row times the tessera call and the MPI call in turns (five rounds, the medians), so a
// change in the machine's load falls on both. tessera's calls add what JAX's do: the processes agree first (one small allgather), and the
// result is a fresh array.
#include <tessera/distributed.hpp>

#include <cstdio>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "mpi_timing.hpp"

using tessera_bench::interleaved_medians;

int main(int argc, char** argv) {
  tessera::distributed::runtime rt{argc, argv, 1};
  MPI_Comm const comm = rt.communicator();
  int const n = rt.process_count();
  auto const np = static_cast<std::size_t>(n);
  auto const mesh = tessera::make_mesh<"X">({n});
  auto report = [&](char const* what, std::size_t bytes, double t_tessera, double t_mpi) {
    if (rt.process_index() == 0)
      std::printf("%s %zu %d %.3g %.3g %.2f\n", what, bytes, n, t_tessera, t_mpi, t_tessera / t_mpi);
  };
  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{4} << 20}) {
    std::size_t const count = bytes / sizeof(float);
    xt::xtensor<float, 1> mine = xt::arange<float>(static_cast<float>(count));
    std::vector<float> all(count * np);
    auto const mpi_gather = [&] {
      MPI_Allgather(mine.data(), static_cast<int>(count), MPI_FLOAT, all.data(), static_cast<int>(count), MPI_FLOAT, comm);
    };
    auto t = interleaved_medians(comm, {[&] { auto r = tessera::process_allgather(mine, true); (void)r; }, mpi_gather});
    report("allgather", bytes, t[0], t[1]);
    // A global array with `count` elements per process, sharded over the processes.
    auto const x = tessera::make_array_from_process_local_data(tessera::named_sharding(mesh, tessera::P<"X">{}), mine,
                                                                {count * np});
    auto const everywhere = tessera::named_sharding(mesh, tessera::P<>{});
    t = interleaved_medians(comm, {[&] { auto r = tessera::device_put(x, everywhere); (void)r; }, mpi_gather});
    report("reshard", bytes, t[0], t[1]);
    // Rows of a [processes, count] array, one per process: their sum, replicated.
    xt::xtensor<float, 2> row = xt::reshape_view(mine, {std::size_t{1}, count});
    auto const rows = tessera::make_array_from_process_local_data(
        tessera::named_sharding(mesh, tessera::P<"X", tessera::none>{}), row, {np, count});
    std::vector<float> sum(count);
    t = interleaved_medians(comm, {[&] { auto r = tessera::eval(tessera::sum<0>(rows)); (void)r; }, [&] {
                              MPI_Allreduce(mine.data(), sum.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
                            }});
    report("sum", bytes, t[0], t[1]);
    // Process 0's data on every process (multihost_utils.broadcast_one_to_all); MPI_Bcast in place.
    std::vector<float> buf(mine.begin(), mine.end());
    t = interleaved_medians(comm, {[&] { auto r = tessera::broadcast_one_to_all(mine); (void)r; },
                                   [&] { MPI_Bcast(buf.data(), static_cast<int>(count), MPI_FLOAT, 0, comm); }});
    report("broadcast", bytes, t[0], t[1]);
  }
}
