// Asynchronous collectives across processes (issue 33; bench/run_async.sh), 2 processes x K
// devices under mpirun (K: the argument, 1 unless given; with K > 1 the async collectives take
// the gathered path, parallel/async_gathered.hpp):
//   1. seed 003's pattern: all_gather_async + local work + wait against all_gather then the
//      same work, the work calibrated to take about as long as the all-gather alone;
//   2. the collective matmul of examples/collective_matmul.hpp, 2048x2048 float32: the
//      all-gather form against all_gather then matmul, the reduce-scatter form against matmul
//      then psum_scatter.
// Each line: the medians of interleaved timings (bench/mpi/mpi_timing.hpp), the slowest process's.
// TESSERA_ASYNC_PROGRESS=wait (run_async.sh's second run) turns the progress thread off.
#include <tessera/distributed.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include <tessera/tessera.hpp>

#include "../../examples/collective_matmul.hpp"
#include "mpi_timing.hpp"

using tessera::none;
using tessera::P;

namespace {
/// Local work that does not touch the collective's memory: `iters` rounds of a dependent chain
/// of multiply-adds on a few registers' worth of floats (compute-bound, as a matmul block is).
float local_work(float seed, long iters) {
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = seed + static_cast<float>(j);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 8; ++j) a[j] = a[j] * 0.999999f + 0.5f;
  float s = 0;
  for (float v : a) s += v;
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  int const k = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  tessera::distributed::runtime rt{argc, argv, k};
  MPI_Comm const comm = rt.communicator();
  bool const root = rt.process_index() == 0;
  int const n = rt.device_count();
  auto const mesh = tessera::make_mesh<"i">({n});
  char const* progress = std::getenv("TESSERA_ASYNC_PROGRESS");
  if (root)
    std::printf("%d processes x %d device(s), progress: %s\n", rt.process_count(), k,
                progress && std::string(progress) == "wait" ? "none (MPI only inside wait)" : "progress thread");

  // 1. Seed 003's pattern, per_device MiB per device.
  for (std::size_t mib : {4, 16}) {
    std::size_t const elems = mib * (std::size_t{1} << 20) / sizeof(float);
    auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::ones<float>({elems * static_cast<std::size_t>(n)})),
                                       tessera::named_sharding(mesh, P<"i">{}));
    auto gather_only = tessera::shard_map([](auto b) { return tessera::all_gather<"i">(b, 0, tessera::tiled); }, mesh,
                                          tessera::in_specs(P<"i">{}), tessera::out_specs(P<none>{}));
    double const t_comm = tessera_bench::median_per_call(comm, [&] { (void)gather_only(x); }, 0.2);
    // Calibrate the work to the communication's time (the same iterations everywhere).
    // The work timed as the communication is (medians of the slowest process), then scaled.
    long const iters0 = 1 << 20;
    double const t_work0 = tessera_bench::median_per_call(comm, [&] {
      volatile float sink = local_work(1.0f, iters0);
      (void)sink;
    }, 0.2);
    long const iters = std::max(1L, static_cast<long>(static_cast<double>(iters0) * t_comm / t_work0));
    auto blocking = tessera::shard_map(
        [iters](auto b) {
          auto g = tessera::all_gather<"i">(b, 0, tessera::tiled);
          float const w = local_work(g(0), iters);
          return xt::xtensor<float, 1>(g * (w * 0.0f + 1.0f));
        },
        mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<none>{}), tessera::no_check_vma);
    auto overlapped = tessera::shard_map(
        [iters](auto b) {
          auto future = tessera::all_gather_async<"i">(b, 0, tessera::tiled);
          float const w = local_work(b(0), iters);
          auto g = future.wait();
          return xt::xtensor<float, 1>(g * (w * 0.0f + 1.0f));
        },
        mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<none>{}), tessera::no_check_vma);
    auto work_only = [iters] {
      volatile float sink = local_work(1.0f, iters);
      (void)sink;
    };
    std::vector<std::function<void()>> calls{[&] { (void)blocking(x); }, [&] { (void)overlapped(x); },
                                             [&] { (void)gather_only(x); }, work_only};
    auto const t = tessera_bench::interleaved_medians(comm, calls, 0.3);
    if (root)
      std::printf("seed 003, all_gather of %zu MiB/device: comm alone %.2f ms, work alone %.2f ms, blocking+work "
                  "%.2f ms, async+work+wait %.2f ms, ratio %.2f (target <= 0.75; ideal max/sum %.2f)\n",
                  mib, t[2] * 1e3, t[3] * 1e3, t[0] * 1e3, t[1] * 1e3, t[1] / t[0],
                  std::max(t[2], t[3]) / (t[2] + t[3]));
    // The same with work that leaves the core free (a device waiting on I/O: a sleep as long as
    // the all-gather alone). On 2 cores shared by computing processes the transfer, whose copies
    // through shared memory need a core, has none to run on; here it has, so this line shows
    // whether it moves while the device is not in MPI (the progress thread), or only in wait().
    auto const nap = std::chrono::duration<double>(t[2]);
    auto blocking_io = tessera::shard_map(
        [nap](auto b) {
          auto g = tessera::all_gather<"i">(b, 0, tessera::tiled);
          std::this_thread::sleep_for(nap);
          return xt::xtensor<float, 1>(g);
        },
        mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<none>{}), tessera::no_check_vma);
    auto overlapped_io = tessera::shard_map(
        [nap](auto b) {
          auto future = tessera::all_gather_async<"i">(b, 0, tessera::tiled);
          std::this_thread::sleep_for(nap);
          return xt::xtensor<float, 1>(future.wait());
        },
        mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<none>{}), tessera::no_check_vma);
    std::vector<std::function<void()>> io_calls{[&] { (void)blocking_io(x); }, [&] { (void)overlapped_io(x); }};
    auto const u = tessera_bench::interleaved_medians(comm, io_calls, 0.3);
    if (root)
      std::printf("  the same with work that sleeps %.2f ms: blocking+sleep %.2f ms, async+sleep+wait %.2f ms, ratio "
                  "%.2f\n", t[2] * 1e3, u[0] * 1e3, u[1] * 1e3, u[1] / u[0]);
  }

  // 2. Collective matmul, 2048x2048 float32.
  std::size_t const m = 2048;
  xt::xtensor<float, 2> host = xt::ones<float>({m, m});
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < m; ++j) host(i, j) = static_cast<float>((i * 7 + j * 3) % 11) - 5.0f;
  auto const rows = tessera::named_sharding(mesh, P<"i", none>{});
  auto const cols = tessera::named_sharding(mesh, P<none, "i">{});
  auto const lhs = tessera::device_put(host, rows), rhs = tessera::device_put(host, rows);
  auto const lhs_c = tessera::device_put(host, cols);
  auto const ag_in = tessera::in_specs(P<"i", none>{}, P<"i", none>{});
  auto const rs_in = tessera::in_specs(P<none, "i">{}, P<"i", none>{});
  auto const out = tessera::out_specs(P<"i", none>{});
  auto naive_ag = tessera::shard_map(examples::matmul_allgather, mesh, ag_in, out);
  auto coll_ag = tessera::shard_map(examples::collective_matmul_allgather, mesh, ag_in, out);
  auto naive_rs = tessera::shard_map(examples::matmul_reduce_scatter, mesh, rs_in, out);
  auto coll_rs = tessera::shard_map(examples::collective_matmul_reduce_scatter, mesh, rs_in, out);
  std::vector<std::function<void()>> calls{[&] { (void)naive_ag(lhs, rhs); }, [&] { (void)coll_ag(lhs, rhs); },
                                           [&] { (void)naive_rs(lhs_c, rhs); }, [&] { (void)coll_rs(lhs_c, rhs); }};
  auto const t = tessera_bench::interleaved_medians(comm, calls, 0.5, 3);
  if (root) {
    std::printf("collective matmul 2048x2048 float32, all-gather form: all_gather+matmul %.1f ms, ppermute_async ring "
                "%.1f ms, speed-up %.2f (target >= 1.2)\n", t[0] * 1e3, t[1] * 1e3, t[0] / t[1]);
    std::printf("collective matmul 2048x2048 float32, reduce-scatter form: matmul+psum_scatter %.1f ms, "
                "ppermute_async ring %.1f ms, speed-up %.2f (target >= 1.2)\n", t[2] * 1e3, t[3] * 1e3, t[2] / t[3]);
  }
  return 0;
}
