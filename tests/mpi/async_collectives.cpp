// Asynchronous collectives across processes (parallel/async_across_processes.hpp), under mpirun
// with P processes of K devices (the argument; ctest: 2x1, where each is one nonblocking MPI call,
// and 2x2, where the blocking collective runs at the start): every *_async's wait() gives what
// the blocking call gives, with several in flight and waited on in another order on each
// process, checked and unchecked; a future dropped unwaited completes for the others; checked
// mode turns processes in different async collectives into collective_mismatch everywhere.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>

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
          check(f11, b11), check(f12, b12);
        } else {
          check(f12, b12), check(f11, b11);
          check(f10, b10), check(f9, b9), check(f8, b8), check(f7, b7), check(f6, b6);
          check(f5, b5), check(f4, b4), check(f3, b3), check(f2, b2), check(f1, b1);
        }
        return blk;
      },
      mesh, tessera::in_specs(P<"i", none>{}), tessera::out_specs(P<"i", none>{}));
  (void)f(x);
  EXPECT(bad.load() == 0);
}

void check_mismatch(tessera::distributed::runtime& rt, std::size_t n) {
  rt.set_checked_collectives(true);
  auto const mesh = tessera::make_mesh<"i">({static_cast<int>(n)});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(static_cast<float>(2 * n))),
                                     tessera::named_sharding(mesh, P<"i">{}));
  bool const last = rt.process_index() == rt.process_count() - 1;
  auto const sm = tessera::shard_map(
      [last](auto blk) {
        if (last) return xt::xtensor<float, 1>(tessera::pmax_async<"i">(blk).wait());
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

}  // namespace

int main(int argc, char** argv) {
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
    }
    if (size > 1) check_mismatch(rt, n);
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
    if (me == 0) std::printf("async_collectives: %d processes x %d devices, %d failures\n", size, k, total);
  }
  return total == 0 ? 0 : 1;
}
