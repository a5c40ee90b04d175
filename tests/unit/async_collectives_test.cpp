// Asynchronous collectives (parallel/async_collectives.hpp): every *_async gives what its
// blocking collective gives (value, type and varying axes), with several in flight on a device
// and waited on in any order; a device goes on while its peers take part; mismatches, dropped
// futures and failing devices end in errors, not hangs; the trace shows the overlap.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::none;
using tessera::P;
using tessera::runtime;
using tessera_test::same_array;

namespace {

/// Whether two collective results are equal: same type and same elements.
template <class A, class B>
bool same_result(A const& a, B const& b) {
  static_assert(std::is_same_v<A, B>, "an async collective's wait() must give the blocking call's type");
  if constexpr (std::is_arithmetic_v<decltype(+a)>) return a == b;
  else return same_array(a, b);
}

/// Runs `body(blk, bad)` on a 2x4 ("x", "y") mesh over 8 values per device; `bad` counts mismatches.
template <class F>
int count_mismatches(F body) {
  std::atomic<int> bad{0};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto f = tessera::shard_map(
      [&](auto blk) {
        body(blk, bad);
        return blk;
      },
      m, tessera::in_specs(P<axes<"x", "y">, none>{}), tessera::out_specs(P<axes<"x", "y">, none>{}));
  (void)f(xt::xtensor<float, 2>(xt::reshape_view(xt::arange<float>(8 * 8 * 4) * 0.25f - 7.0f, {64, 4})));
  return bad.load();
}

}  // namespace

TEST_CASE("each async collective gives the blocking call's value, type and varying axes", "[async]") {
  runtime rt{8};
  int const bad = count_mismatches([](auto blk, std::atomic<int>& bad) {
    // Started together, waited on in an order that depends on the device: any order completes.
    auto f1 = tessera::psum_async<"y">(blk);
    auto f2 = tessera::all_gather_async<"x", "y">(blk, 1);
    auto f3 = tessera::all_gather_async<"y">(blk, 0, tessera::tiled);
    auto f4 = tessera::psum_scatter_async<"y">(blk, 0, tessera::tiled);
    auto f5 = tessera::all_to_all_async<"y">(blk, 0, 1, tessera::tiled);
    auto f6 = tessera::ppermute_async<"y">(blk, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    auto f7 = tessera::pmean_async<"x">(blk);
    auto f8 = tessera::pmax_async<"x", "y">(blk);
    auto f9 = tessera::pmin_async<"y", "x">(blk);
    xt::xtensor<int, 1> const ints = xt::cast<int>(xt::flatten(blk));
    auto f10 = tessera::pmean_async<"y">(ints);  // integers: floating, as JAX's
    auto f11 = tessera::psum_async<"x">(3.5);    // a scalar
    auto f12 = tessera::all_to_all_async<"y">(xt::reshape_view(blk, {4, 2, 4}), 0, 2);  // untiled
    auto f13 = tessera::ppermute_async<"x">(blk, {{0, 1}});  // device 0 of each pair receives zeros
    auto f14 = tessera::psum_scatter_async<"y">(xt::reshape_view(blk, {4, 2, 4}), 0);
    // The blocking calls, in one order on every device (they are collectives too) ...
    auto const b1 = tessera::psum<"y">(blk);
    auto const b2 = tessera::all_gather<"x", "y">(blk, 1);
    auto const b3 = tessera::all_gather<"y">(blk, 0, tessera::tiled);
    auto const b4 = tessera::psum_scatter<"y">(blk, 0, tessera::tiled);
    auto const b5 = tessera::all_to_all<"y">(blk, 0, 1, tessera::tiled);
    auto const b6 = tessera::ppermute<"y">(blk, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
    auto const b7 = tessera::pmean<"x">(blk);
    auto const b8 = tessera::pmax<"x", "y">(blk);
    auto const b9 = tessera::pmin<"y", "x">(blk);
    auto const b10 = tessera::pmean<"y">(ints);
    auto const b11 = tessera::psum<"x">(3.5);
    auto const b12 = tessera::all_to_all<"y">(xt::reshape_view(blk, {4, 2, 4}), 0, 2);
    auto const b13 = tessera::ppermute<"x">(blk, {{0, 1}});
    auto const b14 = tessera::psum_scatter<"y">(xt::reshape_view(blk, {4, 2, 4}), 0);
    // ... and the waits in an order that depends on the device.
    auto check = [&](auto& fut, auto const& blocking) {
      if (!same_result(fut.wait(), blocking)) ++bad;
    };
    auto first = [&] {
      check(f1, b1), check(f2, b2), check(f3, b3), check(f4, b4), check(f5, b5), check(f6, b6), check(f7, b7);
    };
    auto second = [&] {
      check(f14, b14), check(f13, b13), check(f12, b12), check(f11, b11), check(f10, b10), check(f9, b9);
      check(f8, b8);
    };
    if (tessera::axis_index<"x", "y">() % 2 == 0) {
      first();
      second();
    } else {
      second();
      first();
    }
  });
  CHECK(bad == 0);
}

TEST_CASE("waits in any order, futures dropped unwaited, and a future waited twice", "[async]") {
  runtime rt{8};
  int const bad = count_mismatches([](auto blk, std::atomic<int>& bad) {
    int const me = tessera::axis_index<"x", "y">();
    std::vector<tessera::collective_future<decltype(tessera::psum<"y">(blk))>> fs;
    for (int i = 0; i < 6; ++i) fs.push_back(tessera::psum_async<"y">(blk * static_cast<float>(i)));
    auto const want = tessera::psum<"y">(blk);
    for (int j = 0; j < 6; ++j) {
      int const i = (j * (me + 1) + me) % 6;  // a different order on each device
      if (me == 3 && i == 4) continue;          // dropped: its peers still complete
      if (!fs[static_cast<std::size_t>(i)].valid()) continue;
      auto const got = fs[static_cast<std::size_t>(i)].wait();
      for (std::size_t e = 0; e < got.size(); ++e)
        if (got.data()[e] != want.data()[e] * static_cast<float>(i)) ++bad;
    }
    auto again = tessera::all_gather_async<"x">(blk);
    (void)again.wait();
    try {
      (void)again.wait();
      ++bad;
    } catch (std::logic_error const& e) {
      if (std::string(e.what()).find("waited on already") == std::string::npos) ++bad;
    }
  });
  CHECK(bad == 0);
}

TEST_CASE("a device that started a collective goes on computing while its peers complete it", "[async]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  std::atomic<int> peers_done{0};
  std::atomic<bool> saw_peers{false};
  auto f = tessera::shard_map(
      [&](auto blk) {
        auto fut = tessera::all_gather_async<"x">(blk, 0, tessera::tiled);
        if (tessera::axis_index<"x">() == 0) {
          // Device 0 does not wait until all three peers have their result (or 10 s pass: a failure).
          auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (peers_done.load() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          saw_peers = peers_done.load() == 3;
          return fut.wait();
        }
        auto r = fut.wait();
        ++peers_done;
        return r;
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<none>{}));
  auto const out = tessera::to_host(f(xt::xtensor<float, 1>(xt::arange<float>(8.0f))));
  CHECK(saw_peers.load());
  CHECK(same_array(out, xt::xtensor<float, 1>(xt::arange<float>(8.0f))));
}

TEST_CASE("devices that start different collectives get collective_mismatch, not a hang", "[async][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  auto run = [&](auto body) -> std::string {
    auto f = tessera::shard_map(body, m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}),
                                tessera::no_check_vma);
    try {
      (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
    } catch (tessera::device_error const& e) {
      for (auto const& [d, x] : e.failures()) {
        try {
          std::rethrow_exception(x);
        } catch (tessera::collective_mismatch const&) {
        } catch (...) {
          return "device " + std::to_string(d) + " failed with something else: " + e.what();
        }
      }
      return e.what();
    }
    return "no exception";
  };
  // Two async collectives of different kinds.
  std::string what = run([](auto blk) {
    xt::xtensor<float, 1> v = blk;
    if (tessera::axis_index<"x">() == 1) return xt::xtensor<float, 1>(tessera::psum_async<"x">(v).wait());
    return xt::xtensor<float, 1>(xt::view(tessera::all_gather_async<"x">(v, 0, tessera::tiled).wait(), xt::range(0, 2)));
  });
  CHECK_THAT(what, Contains("disagree on the collective") && Contains("psum over ('x',)") &&
                       Contains("all_gather over ('x',)"));
  // An async collective on one device, the blocking one on another.
  what = run([](auto blk) {
    xt::xtensor<float, 1> v = blk;
    if (tessera::axis_index<"x">() == 2) return xt::xtensor<float, 1>(tessera::psum<"x">(v));
    return xt::xtensor<float, 1>(tessera::psum_async<"x">(v).wait());
  });
  CHECK_THAT(what, Contains("started asynchronously") && Contains("without having started it"));
  // A device that ends its body while the others wait for an async collective it never started.
  what = run([](auto blk) {
    xt::xtensor<float, 1> v = blk;
    if (tessera::axis_index<"x">() == 3) return v;
    return xt::xtensor<float, 1>(tessera::pmax_async<"x">(v).wait());
  });
  CHECK_THAT(what, Contains("the end of the shard_map body"));
}

TEST_CASE("a device that throws with collectives in flight releases its peers", "[async][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  for (int when = 0; when < 3; ++when) {
    auto f = tessera::shard_map(
        [when](auto blk) {
          xt::xtensor<float, 1> v = blk;
          auto a = tessera::psum_async<"x">(v);
          if (tessera::axis_index<"x">() == 2 && when == 0) throw std::runtime_error("device 2 fails after a start");
          auto b = tessera::all_gather_async<"x">(v, 0, tessera::tiled);
          if (tessera::axis_index<"x">() == 2 && when == 1) throw std::runtime_error("device 2 fails with two in flight");
          auto r = b.wait();
          if (tessera::axis_index<"x">() == 2 && when == 2) throw std::runtime_error("device 2 fails after a wait");
          return xt::xtensor<float, 1>(a.wait() + xt::view(r, xt::range(0, 2)));
        },
        m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}), tessera::no_check_vma);
    try {
      (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
      FAIL("no exception");
    } catch (tessera::device_error const& e) {
      REQUIRE(e.failures().size() == 1);
      CHECK(e.device() == 2);
      CHECK_THAT(e.what(), Contains("device 2 fails"));
    }
  }
}

TEST_CASE("the trace shows an async collective's span and a compute span at once on one device", "[async][trace]") {
  runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  auto f = tessera::shard_map(
      [](auto blk) {
        auto fut = tessera::all_gather_async<"x">(blk, 0, tessera::tiled);
        {
          tessera::trace_annotation work("local work");
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return fut.wait();
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<none>{}));
  tessera::trace tr;
  (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
  tr.stop();
  int overlaps = 0;
  auto const ev = tr.events();
  for (auto const& c : ev)
    for (auto const& w : ev)
      if (c.category == "collective" && c.name == "all-gather" && w.category == "compute" && w.name == "local work" &&
          c.device == w.device && c.start_ns <= w.start_ns && w.start_ns + w.duration_ns <= c.start_ns + c.duration_ns) {
        CHECK_THAT(c.detail, Contains("async"));
        ++overlaps;
      }
  CHECK(overlaps == 2);  // on each device
}

TEST_CASE("collective_matmul on global arrays: both forms equal tessera::matmul exactly", "[async][matmul]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"i">({4});
  auto ints = [](std::size_t r, std::size_t c, std::size_t salt) {
    xt::xtensor<float, 2> x = xt::zeros<float>({r, c});
    for (std::size_t i = 0; i < r; ++i)
      for (std::size_t j = 0; j < c; ++j) x(i, j) = static_cast<float>(static_cast<int>((i * 7 + j * 3 + salt) % 11) - 5);
    return x;
  };
  auto const lh = ints(16, 8, 1), rh = ints(8, 12, 4);
  auto const rows = tessera::named_sharding(m, P<"i", none>{});
  auto const lhs = tessera::device_put(lh, rows), rhs = tessera::device_put(rh, rows);
  auto const lhs_cols = tessera::device_put(lh, tessera::named_sharding(m, P<none, "i">{}));
  auto const want = tessera::to_host(tessera::matmul(lhs, rhs).evaluate());
  auto const gathered = tessera::collective_matmul<"i">(lhs, rhs);
  auto const scattered = tessera::collective_matmul<"i">(lhs_cols, rhs);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(gathered.sharding().spec())>, P<"i", none>>);
  CHECK(same_array(tessera::to_host(gathered), want));
  CHECK(same_array(tessera::to_host(scattered), want));
  // The same as an option of matmul.
  auto const windowed = tessera::matmul(lhs_cols, rhs, tessera::windowed<"i">);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(windowed)>, std::remove_cvref_t<decltype(scattered)>>);
  CHECK(same_array(tessera::to_host(windowed), want));
  CHECK(same_array(tessera::to_host(tessera::matmul(lhs, rhs, tessera::windowed<"i">)), want));
  auto const odd = tessera::device_put(ints(16, 6, 2), rows);
  CHECK_THROWS_WITH(tessera::collective_matmul<"i">(odd, tessera::device_put(ints(6, 12, 3), rows)),
                    Contains("does not divide into 4 blocks"));
}
