// shard_map's collectives between processes against the raw MPI call moving the same bytes
// (issue 15): psum, all_gather (tiled) and all_to_all (tiled) of a float32 block of 4 KiB and of
// 4 MiB per device, in a shard_map over a 1-D mesh "X" of every device. Run with
//   mpirun -np 2 bench_shard_map_collectives [K [checked|unchecked [funneled|serialized|multiple]]]
// (bench/run_mpi.sh). K: devices per process (default 1); "checked": set_checked_collectives(true)
// (the benchmark is built with NDEBUG, so unchecked otherwise); a thread level: the benchmark
// initialises MPI itself at that level before the runtime, which then uses it as a program's
// own MPI (the runtime asks for MPI_THREAD_SERIALIZED when it initialises MPI; table 5 of
// bench/run_mpi.sh compares the levels). The peers run on their own duplicate of
// MPI_COMM_WORLD, one rank per process with the process's K blocks: MPI_Allreduce,
// MPI_Allgather and MPI_Alltoall, and the same calls nonblocking (MPI_Iallreduce, ... waited on
// by polling MPI_Test, as tessera waits). Every time is seconds per call, the slowest
// process's, the median of 5 timings, every case of one size timed in turn in each of 5
// rounds (bench/mpi/mpi_timing.hpp). It prints one line per collective and size:
//   "<op> <bytes per device> <processes> <MPI> <one> <one/MPI> <empty> <(one-empty)/MPI>
//    <looped> <looped/MPI> <reps> <MPI nonblocking> <devices per process>"
//   one     a shard_map whose body is the one collective (what a user calls)
//   empty   a shard_map of the same block whose body returns it (dispatch, the result array):
//           the cost without the collective
//   looped  a shard_map whose body makes the collective `reps` times, per collective (the
//           shard_map's own cost spread over reps)
// With K > 1 the MPI columns are 2 ranks moving K blocks each (bench_collectives_mpi with one
// rank per device is the flat peer: bench/run_mpi.sh's table 4).
// Each shard_map's result is checked once against the values it must have.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "mpi_timing.hpp"

using tessera::P;

namespace {

/// This process's first block of a's result, flat, against expect(i); the job ends if it differs.
template <class A, class Expect>
void check(A const& a, Expect expect, char const* what, MPI_Comm comm) {
  auto const block = a.addressable_shards().front().data;
  std::size_t i = 0;
  for (float v : block) {
    // Exact up to 2^24; a sum of 8 devices' larger integers is rounded in MPI's order.
    if (std::abs(static_cast<double>(v) - static_cast<double>(expect(i))) > 1e-6 * std::abs(static_cast<double>(expect(i)))) {
      std::fprintf(stderr, "bench_shard_map_collectives: %s: element %zu is %g, expected %g\n", what, i,
                   static_cast<double>(v), static_cast<double>(expect(i)));
      MPI_Abort(comm, 1);
    }
    ++i;
  }
}

/// Waits for a nonblocking MPI call as tessera does (runtime/mpi_collectives.hpp's mpi_wait).
void poll(MPI_Request& req) {
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (spins > (1u << 16)) std::this_thread::yield();
  }
}

void run(int argc, char** argv, int k, bool checked);

/// MPI's thread level named `s`, or -1 (the runtime initialises MPI itself).
int thread_level(char const* s) {
  if (std::strcmp(s, "funneled") == 0) return MPI_THREAD_FUNNELED;
  if (std::strcmp(s, "serialized") == 0) return MPI_THREAD_SERIALIZED;
  if (std::strcmp(s, "multiple") == 0) return MPI_THREAD_MULTIPLE;
  std::fprintf(stderr, "bench_shard_map_collectives: unknown thread level '%s'\n", s);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int const k = argc > 1 ? std::atoi(argv[1]) : 1;
  bool const checked = argc > 2 && std::strcmp(argv[2], "checked") == 0;
  int const level = argc > 3 ? thread_level(argv[3]) : -1;
  if (level >= 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, level, &provided);
    if (provided != level) {
      std::fprintf(stderr, "bench_shard_map_collectives: asked MPI for thread level %d, granted %d\n", level, provided);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  run(argc, argv, k, checked);
  if (level >= 0) MPI_Finalize();  // the runtime finalises only what it initialised
}

namespace {

void run(int argc, char** argv, int k, bool checked) {
  tessera::distributed::runtime rt{argc, argv, k};
  rt.set_checked_collectives(checked);
  MPI_Comm peer = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &peer);
  int const n = rt.process_count();
  int const me = rt.process_index();
  int const devices = rt.device_count();
  auto const np = static_cast<std::size_t>(devices);
  auto const local = static_cast<std::size_t>(k);
  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const sharded = tessera::named_sharding(mesh, P<"X">{});

  for (std::size_t bytes : {std::size_t{4} << 10, std::size_t{4} << 20}) {
    std::size_t const count = bytes / sizeof(float);
    std::size_t const chunk = count / np;  // all_to_all's piece for each device
    int const reps = bytes < (std::size_t{1} << 20) ? 64 : 4;
    // Device d holds elements [d count, (d + 1) count) of arange(devices count); this process's
    // devices are d = first_device_id() ... + k - 1.
    auto const first = static_cast<std::size_t>(rt.first_device_id());
    xt::xtensor<float, 1> const mine =
        xt::arange<float>(static_cast<float>(local * count)) + static_cast<float>(count * first);
    auto const x = tessera::make_array_from_process_local_data(sharded, mine, {count * np});
    std::vector<float> out(local * count * static_cast<std::size_t>(n));

    auto const empty = tessera::shard_map([](auto const& v) { return v; }, mesh, tessera::in_specs(P<"X">{}),
                                          tessera::out_specs(P<"X">{}));
    check(empty(x), [&](std::size_t i) { return mine(i); }, "empty", peer);
    // The shard_map that makes `op` reps times; its result is one element per device.
    auto looped = [&](auto op) {
      return tessera::shard_map(
          [op, reps](auto const& v) {
            for (int i = 0; i < reps; ++i) {
              auto r = op(v);
              (void)r;
            }
            return xt::xtensor<float, 1>{0.0f};
          },
          mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{}));
    };

    // psum: element i is the sum over devices d of d count + i.
    auto const psum = [](auto const& v) { return tessera::psum<"X">(v); };
    auto const psum_one = tessera::shard_map(psum, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
    auto const psum_many = looped(psum);
    float const offset = static_cast<float>(count * np * (np - 1) / 2);
    check(psum_one(x), [&](std::size_t i) { return static_cast<float>(np * i) + offset; }, "psum", peer);
    // all_gather, tiled: every device holds arange(n count).
    auto const gather = [](auto const& v) { return tessera::all_gather<"X">(v, 0, tessera::tiled); };
    auto const gather_one = tessera::shard_map(gather, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
    auto const gather_many = looped(gather);
    check(gather_one(x), [](std::size_t i) { return static_cast<float>(i); }, "all_gather", peer);
    // all_to_all, tiled (split and concatenate along the block's one dimension): device d's
    // piece s is piece d of device s's block.
    auto const a2a = [](auto const& v) { return tessera::all_to_all<"X">(v, 0, 0, tessera::tiled); };
    auto const a2a_one = tessera::shard_map(a2a, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{}));
    auto const a2a_many = looped(a2a);
    auto const d = first;
    check(a2a_one(x), [&](std::size_t i) { return static_cast<float>((i / chunk) * count + d * chunk + i % chunk); },
          "all_to_all", peer);

    // The peers move this process's k blocks (count elements each) between the n ranks.
    int const c = static_cast<int>(local * count), p = static_cast<int>(local * count / static_cast<std::size_t>(n));
    MPI_Request req{};
    std::vector<std::function<void()>> const calls = {
        [&] { auto r = empty(x); (void)r; },
        [&] { MPI_Allreduce(mine.data(), out.data(), c, MPI_FLOAT, MPI_SUM, peer); },
        [&] { auto r = psum_one(x); (void)r; },
        [&] { auto r = psum_many(x); (void)r; },
        [&] { MPI_Allgather(mine.data(), c, MPI_FLOAT, out.data(), c, MPI_FLOAT, peer); },
        [&] { auto r = gather_one(x); (void)r; },
        [&] { auto r = gather_many(x); (void)r; },
        [&] { MPI_Alltoall(mine.data(), p, MPI_FLOAT, out.data(), p, MPI_FLOAT, peer); },
        [&] { auto r = a2a_one(x); (void)r; },
        [&] { auto r = a2a_many(x); (void)r; },
        [&] { MPI_Iallreduce(mine.data(), out.data(), c, MPI_FLOAT, MPI_SUM, peer, &req); poll(req); },
        [&] { MPI_Iallgather(mine.data(), c, MPI_FLOAT, out.data(), c, MPI_FLOAT, peer, &req); poll(req); },
        [&] { MPI_Ialltoall(mine.data(), p, MPI_FLOAT, out.data(), p, MPI_FLOAT, peer, &req); poll(req); },
    };
    auto const t = tessera_bench::interleaved_medians(peer, calls);
    double const t_empty = t[0];
    char const* const names[] = {"psum", "all_gather", "all_to_all"};
    for (std::size_t op = 0; op < 3; ++op) {
      double const t_mpi = t[1 + 3 * op], t_one = t[2 + 3 * op], t_looped = t[3 + 3 * op] / reps;
      if (me == 0)
        std::printf("%s %zu %d %.3g %.3g %.2f %.3g %.2f %.3g %.2f %d %.3g %d\n", names[op], bytes, n, t_mpi, t_one,
                    t_one / t_mpi, t_empty, (t_one - t_empty) / t_mpi, t_looped, t_looped / t_mpi, reps,
                    t[10 + op], k);
    }
  }
  MPI_Comm_free(&peer);
}

}  // namespace
