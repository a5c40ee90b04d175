// Asynchronous collectives across processes, under mpirun with P processes of K devices (the
// argument; ctest: 2x1, where each is one nonblocking MPI call of its own,
// parallel/async_across_processes.hpp, and 2x2, where the last local device to start posts one
// MPI_Iallgatherv for the process, parallel/async_gathered.hpp): every *_async's wait() gives
// what the blocking call gives, on a 1-D mesh and on a mesh of processes x devices, with several
// in flight and waited on in another order on each device, checked and unchecked; a future
// dropped unwaited completes for the others; unchecked, a start does not wait for a late
// process; checked mode turns processes, or devices of one process, in different async
// collectives into collective_mismatch everywhere. Argument "uneven": processes of 1, 2, ... devices.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "mpi_expect.hpp"

namespace {

using tessera_mpi_test::failures;
using tessera_mpi_test::me;

using tessera::none;
using tessera::P;

template <class A, class B>
bool same(A const& a, B const& b) {
  static_assert(std::is_same_v<A, B>, "wait() gives the blocking call's type");
  if constexpr (std::is_arithmetic_v<decltype(+a)>) return a == b;
  else return a.shape() == b.shape() && std::equal(a.begin(), a.end(), b.begin());
}

void check_values(std::size_t n) {
  auto const mesh = tessera::make_mesh<"i">({static_cast<int>(n)});
  xt::xtensor<float, 2> host = xt::reshape_view(xt::arange<float>(static_cast<float>(n * 12 * 12)) * 0.5f - 3.0f,
                                                {n * 12, std::size_t{12}});
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"i", none>{}));
  std::atomic<int> bad{0};
  auto f = tessera::shard_map(
      [&](auto blk) {
        int const idx = tessera::axis_index<"i">();
        int const k = tessera::axis_size<"i">();
        std::vector<std::pair<int, int>> shift;
        for (int j = 0; j < k; ++j) shift.emplace_back(j, (j + 1) % k);
        auto f1 = tessera::all_gather_async<"i">(blk, 0, tessera::tiled);
        auto f2 = tessera::all_gather_async<"i">(blk, 1);  // blocks not contiguous in the result
        auto f3 = tessera::psum_async<"i">(blk);
        auto f4 = tessera::pmean_async<"i">(blk);
        auto f5 = tessera::pmax_async<"i">(blk);
        auto f6 = tessera::psum_scatter_async<"i">(xt::xtensor<float, 2>(xt::view(blk, xt::range(0, 2), xt::all())), 1,
                                                   tessera::tiled);
        auto f7 = tessera::ppermute_async<"i">(blk, shift);
        auto f8 = tessera::ppermute_async<"i">(blk, {{0, k - 1}});
        auto dropped = tessera::psum_async<"i">(blk * 2.0f);
        auto f9 = tessera::all_to_all_async<"i">(blk, 0, 1, tessera::tiled);
        auto f10 = tessera::pmin_async<"i">(1.5 * idx);
        // all_to_all's other layouts: pieces packed before MPI_Ialltoall (split 1), and untiled.
        auto f11 = tessera::all_to_all_async<"i">(blk, 1, 0, tessera::tiled);
        xt::xtensor<float, 2> const rows = xt::view(blk, xt::range(0, k), xt::all());
        auto f12 = tessera::all_to_all_async<"i">(rows, 0, -1);
        // Above 32 KiB in all, over groups of whole processes: MPI_Iallreduce of the local sum (2 x 2).
        xt::xtensor<float, 1> const big = xt::arange<float>(4096.0f) * static_cast<float>(idx + 1) - 100.0f;
        auto f13 = tessera::psum_async<"i">(big);
        auto f14 = tessera::pmax_async<"i">(big * static_cast<float>(idx % 2 == 0 ? 1 : -1));
        auto f15 = tessera::pmean_async<"i">(big);
        auto const b13 = tessera::psum<"i">(big);
        auto const b14 = tessera::pmax<"i">(big * static_cast<float>(idx % 2 == 0 ? 1 : -1));
        auto const b15 = tessera::pmean<"i">(big);
        auto const b1 = tessera::all_gather<"i">(blk, 0, tessera::tiled);
        auto const b2 = tessera::all_gather<"i">(blk, 1);
        auto const b3 = tessera::psum<"i">(blk);
        auto const b4 = tessera::pmean<"i">(blk);
        auto const b5 = tessera::pmax<"i">(blk);
        auto const b6 = tessera::psum_scatter<"i">(xt::xtensor<float, 2>(xt::view(blk, xt::range(0, 2), xt::all())), 1,
                                                   tessera::tiled);
        auto const b7 = tessera::ppermute<"i">(blk, shift);
        auto const b8 = tessera::ppermute<"i">(blk, {{0, k - 1}});
        auto const b9 = tessera::all_to_all<"i">(blk, 0, 1, tessera::tiled);
        auto const b10 = tessera::pmin<"i">(1.5 * idx);
        auto const b11 = tessera::all_to_all<"i">(blk, 1, 0, tessera::tiled);
        auto const b12 = tessera::all_to_all<"i">(rows, 0, -1);
        auto check = [&](auto& fut, auto const& want) { bad += same(fut.wait(), want) ? 0 : 1; };
        if (idx % 2 == 0) {
          check(f1, b1), check(f2, b2), check(f3, b3), check(f4, b4), check(f5, b5);
          check(f6, b6), check(f7, b7), check(f8, b8), check(f9, b9), check(f10, b10);
          check(f11, b11), check(f12, b12), check(f13, b13), check(f14, b14), check(f15, b15);
        } else {
          check(f15, b15), check(f14, b14), check(f13, b13), check(f12, b12), check(f11, b11);
          check(f10, b10), check(f9, b9), check(f8, b8), check(f7, b7), check(f6, b6);
          check(f5, b5), check(f4, b4), check(f3, b3), check(f2, b2), check(f1, b1);
        }
        return blk;
      },
      mesh, tessera::in_specs(P<"i", none>{}), tessera::out_specs(P<"i", none>{}));
  (void)f(x);
  EXPECT(bad.load() == 0);
}

// Checked: devices at axis positions [first, last] in pmax_async while the others are in
// psum_async are a collective_mismatch in every process, whether those devices are a whole
// process (the processes disagree) or part of one (its devices disagree).
void check_mismatch(tessera::distributed::runtime& rt, std::size_t n, int first, int last) {
  rt.set_checked_collectives(true);
  auto const mesh = tessera::make_mesh<"i">({static_cast<int>(n)});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(static_cast<float>(2 * n))),
                                     tessera::named_sharding(mesh, P<"i">{}));
  auto const sm = tessera::shard_map(
      [first, last](auto blk) {
        int const idx = tessera::axis_index<"i">();
        if (idx >= first && idx <= last) return xt::xtensor<float, 1>(tessera::pmax_async<"i">(blk).wait());
        return xt::xtensor<float, 1>(tessera::psum_async<"i">(blk).wait());
      },
      mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<"i">{}), tessera::no_check_vma);
  std::string what;
  try {
    (void)sm(x);
  } catch (std::exception const& e) {
    what = e.what();
  }
  EXPECT(what.find("not in the same collective") != std::string::npos);
}

// A mesh of "p" across the processes and "l" inside them: with several devices per process every
// *_async takes the gathered path (parallel/async_gathered.hpp): over "p" (one member per
// process), "l" (no MPI call) and both, waited on in another order on odd devices.
void check_two_axes(std::size_t procs, std::size_t k) {
  auto const mesh = tessera::make_mesh<"p", "l">({static_cast<int>(procs), static_cast<int>(k)});
  std::size_t const n = procs * k;
  xt::xtensor<float, 2> host =
      xt::reshape_view(xt::arange<float>(static_cast<float>(n * 24)) * 0.25f - 5.0f, {procs * 4, k * 6});
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"p", "l">{}));
  std::atomic<int> bad{0};
  auto f = tessera::shard_map(
      [&](auto blk) {
        int const pi = tessera::axis_index<"p">();
        int const li = tessera::axis_index<"l">();
        int const np = tessera::axis_size<"p">();
        int const nl = tessera::axis_size<"l">();
        std::vector<std::pair<int, int>> next_p, back_l;
        for (int j = 0; j < np; ++j) next_p.emplace_back(j, (j + 1) % np);
        for (int j = 0; j < nl; ++j) back_l.emplace_back(j, (j + nl - 1) % nl);
        xt::xtensor<float, 2> w = xt::reshape_view(xt::arange<float>(static_cast<float>(2 * n * 3)), {2 * n, std::size_t{3}}) *
                                      static_cast<float>(1 + pi) +
                                  static_cast<float>(li);
        auto f1 = tessera::all_gather_async<"p">(blk, 0, tessera::tiled);
        auto f2 = tessera::psum_async<"l">(blk);
        auto f3 = tessera::psum_async<"p", "l">(blk);
        auto f4 = tessera::psum_scatter_async<"p", "l">(w, 0, tessera::tiled);
        auto f5 = tessera::all_to_all_async<"p">(w, 0, 1, tessera::tiled);
        auto f6 = tessera::ppermute_async<"p">(blk, next_p);
        auto f7 = tessera::ppermute_async<"l">(blk, back_l);
        auto f8 = tessera::pmax_async<"p", "l">(1.5 * pi - li);
        auto f9 = tessera::pmean_async<"p">(xt::xtensor<int, 1>{pi * 7, li - 3});  // integers: a float result
        auto f10 = tessera::all_gather_async<"l", "p">(blk, 1);
        auto dropped = tessera::psum_async<"p">(blk * 3.0f);
        auto const b1 = tessera::all_gather<"p">(blk, 0, tessera::tiled);
        auto const b2 = tessera::psum<"l">(blk);
        auto const b3 = tessera::psum<"p", "l">(blk);
        auto const b4 = tessera::psum_scatter<"p", "l">(w, 0, tessera::tiled);
        auto const b5 = tessera::all_to_all<"p">(w, 0, 1, tessera::tiled);
        auto const b6 = tessera::ppermute<"p">(blk, next_p);
        auto const b7 = tessera::ppermute<"l">(blk, back_l);
        auto const b8 = tessera::pmax<"p", "l">(1.5 * pi - li);
        auto const b9 = tessera::pmean<"p">(xt::xtensor<int, 1>{pi * 7, li - 3});
        auto const b10 = tessera::all_gather<"l", "p">(blk, 1);
        auto check = [&](auto& fut, auto const& want) { bad += same(fut.wait(), want) ? 0 : 1; };
        if ((pi + li) % 2 == 0) {
          check(f1, b1), check(f2, b2), check(f3, b3), check(f4, b4), check(f5, b5);
          check(f6, b6), check(f7, b7), check(f8, b8), check(f9, b9), check(f10, b10);
        } else {
          check(f10, b10), check(f9, b9), check(f8, b8), check(f7, b7), check(f6, b6);
          check(f5, b5), check(f4, b4), check(f3, b3), check(f2, b2), check(f1, b1);
        }
        return blk;
      },
      mesh, tessera::in_specs(P<"p", "l">{}), tessera::out_specs(P<"p", "l">{}));
  (void)f(x);
  EXPECT(bad.load() == 0);
}

// Unchecked, a start makes no exchange with the other processes: the last process's devices start
// a second late, and the others' starts return at once (their wait then takes the second).
void check_start_does_not_wait(tessera::distributed::runtime& rt, std::size_t n) {
  rt.set_checked_collectives(false);
  auto const mesh = tessera::make_mesh<"i">({static_cast<int>(n)});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(static_cast<float>(4 * n))),
                                     tessera::named_sharding(mesh, P<"i">{}));
  bool const late = rt.process_index() == rt.process_count() - 1;
  std::atomic<int> slow_starts{0}, bad{0};
  auto const sm = tessera::shard_map(
      [&](auto blk) {
        if (late) std::this_thread::sleep_for(std::chrono::seconds(2));
        auto const t0 = std::chrono::steady_clock::now();
        auto fut = tessera::psum_async<"i">(blk);
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(1)) ++slow_starts;
        auto const got = fut.wait();
        bad += same(got, tessera::psum<"i">(blk)) ? 0 : 1;
        return blk;
      },
      mesh, tessera::in_specs(P<"i">{}), tessera::out_specs(P<"i">{}));
  (void)sm(x);
  EXPECT(slow_starts.load() == 0);
  EXPECT(bad.load() == 0);
}

}  // namespace

/// Processes of 1, 2, ... devices (argument "uneven"): MPI_Iallgatherv of uneven shares; and with
/// MPI calls of at most 64 bytes, the blocking collective at the start.
int uneven(int argc, char** argv) {
  int rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &rank);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int total = 0, size = 1;
  {
    tessera::distributed::runtime rt{rank + 1};
    me = rt.process_index();
    size = rt.process_count();
    auto const n = static_cast<std::size_t>(rt.device_count());
    for (bool checked : {true, false}) {
      rt.set_checked_collectives(checked);
      check_values(n);
    }
    auto const keep = tessera::detail::mpi_max_bytes_per_call.load();
    tessera::detail::mpi_max_bytes_per_call.store(64);
    check_values(n);
    tessera::detail::mpi_max_bytes_per_call.store(keep);
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
  }
  MPI_Finalize();
  if (rank == 0) std::printf("async_collectives: %d processes of 1 to %d devices, %d failures\n", size, size, total);
  return total == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "uneven") return uneven(argc, argv);
  int const k = argc > 1 ? std::atoi(argv[1]) : 1;
  int total = 0, size = 1;
  {
    tessera::distributed::runtime rt{argc, argv, k};
    me = rt.process_index();
    size = rt.process_count();
    auto const n = static_cast<std::size_t>(rt.device_count());
    for (bool checked : {true, false}) {
      rt.set_checked_collectives(checked);
      check_values(n);
      check_two_axes(static_cast<std::size_t>(size), static_cast<std::size_t>(k));
    }
    if (size > 1) {
      int const last_first = (size - 1) * k;  // the last process's first device
      check_mismatch(rt, n, last_first, static_cast<int>(n) - 1);
      check_start_does_not_wait(rt, n);
      if (k > 1) check_mismatch(rt, n, last_first, last_first);
    }
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
    if (me == 0) std::printf("async_collectives: %d processes x %d devices, %d failures\n", size, k, total);
  }
  return total == 0 ? 0 : 1;
}
