// Reliability of the runtime under hostile use: device threads the system refuses, the
// current runtime per host thread, dispatches across runtimes that would wait for each
// other, arrays of two runtimes, several failing devices, throws that are not
// std::exceptions, a seeded fault soak, allocation failure, and several host threads at once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
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

/// Waits (bounded, so a broken runtime fails the test instead of hanging it) until `flag` is set.
bool wait_for(std::atomic<bool> const& flag, std::chrono::seconds limit = std::chrono::seconds(20)) {
  auto const until = std::chrono::steady_clock::now() + limit;
  while (!flag.load()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

/// The seed of a randomized test: TESSERA_TEST_SEED if set, else a fresh one; printed either way.
std::uint64_t test_seed(char const* what) {
  std::uint64_t seed = 0;
  if (char const* env = std::getenv("TESSERA_TEST_SEED"); env && *env) seed = std::strtoull(env, nullptr, 10);
  else seed = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  std::cout << what << " seed: " << seed << " (TESSERA_TEST_SEED=" << seed << " reproduces it)\n";
  return seed;
}

std::atomic<int> refuse_from{-1};
void refuse_start(int device) {
  if (device == refuse_from.load())
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "pthread_create refused (simulated)");
}
void refuse_with_bad_alloc(int device) {
  if (device == refuse_from.load()) throw std::bad_alloc();
}

}  // namespace

// ---------------------------------------------------------------------------
// 2. Device threads the system refuses
// ---------------------------------------------------------------------------

TEST_CASE("a device thread the system refuses: the started ones are joined and std::system_error names the count",
          "[reliability][threads]") {
  for (int at : {0, 1, 5, 7}) {
    INFO("refused at device " << at);
    refuse_from = at;
    try {
      tessera::detail::device_pool pool(8, &refuse_start);
      FAIL("no exception");
    } catch (std::system_error const& e) {
      CHECK(e.code() == std::errc::resource_unavailable_try_again);
      CHECK_THAT(e.what(), Contains("started " + std::to_string(at) + " of 8 device threads"));
      CHECK_THAT(e.what(), Contains("pthread_create refused (simulated)"));
    }
  }
  refuse_from = 3;
  REQUIRE_THROWS_AS(tessera::detail::device_pool(4, &refuse_with_bad_alloc), std::system_error);
  REQUIRE_THROWS_WITH(tessera::detail::device_pool(4, &refuse_with_bad_alloc), Contains("started 3 of 4"));
  refuse_from = -1;
  // Nothing was left behind: a new pool of the same size works.
  tessera::detail::device_pool pool(8, &refuse_start);
  std::atomic<int> calls{0};
  pool.run_all([&](int) { calls.fetch_add(1); });
  CHECK(calls.load() == 8);
}

// ---------------------------------------------------------------------------
// 3. The current runtime is per host thread
// ---------------------------------------------------------------------------

TEST_CASE("each host thread's runtime is current on that thread only; others fall back to the oldest live one",
          "[reliability][current]") {
  runtime main_rt{2};
  std::atomic<bool> made_a{false}, made_b{false}, done_a{false}, done_b{false};
  std::atomic<int> errors{0};
  auto worker = [&](int n, std::atomic<bool>& made, std::atomic<bool>& other_made, std::atomic<bool>& done,
                    std::atomic<bool>& other_done) {
    try {
      runtime rt{n};
      made = true;
      if (!wait_for(other_made)) ++errors;  // both runtimes live at once from here
      for (int it = 0; it < 20; ++it) {
        if (tessera::device_count() != n) ++errors;
        auto m = tessera::make_mesh<"X">({n});
        if (m.runtime_id() != rt.id()) ++errors;
        xt::xtensor<double, 1> h = xt::arange<double>(static_cast<double>(3 * n)) + it;
        auto a = tessera::device_put(h, tessera::named_sharding(m, P<"X">{}));
        if (a.pool().get() != &rt.pool()) ++errors;
        tessera::array r = a * 2.0 + a;
        if (r.pool().get() != &rt.pool()) ++errors;
        xt::xtensor<double, 1> want = 3.0 * h;
        if (!same_array(tessera::to_host(r), want)) ++errors;
      }
      done = true;
      if (!wait_for(other_done)) ++errors;  // keep rt alive until the other is done
    } catch (...) {
      ++errors;
      done = true;
    }
  };
  std::thread a(worker, 3, std::ref(made_a), std::ref(made_b), std::ref(done_a), std::ref(done_b));
  std::thread b(worker, 5, std::ref(made_b), std::ref(made_a), std::ref(done_b), std::ref(done_a));
  // A thread that made no runtime uses the process default: the oldest live runtime (main's).
  int seen = 0;
  std::thread c([&] { seen = tessera::device_count(); });
  c.join();
  a.join();
  b.join();
  CHECK(errors.load() == 0);
  CHECK(seen == 2);
  CHECK(tessera::device_count() == 2);
}

// ---------------------------------------------------------------------------
// 4. Dispatches across runtimes that would wait for each other
// ---------------------------------------------------------------------------

TEST_CASE("devices of two runtimes that dispatch on each other's runtime: one is refused at once, no hang",
          "[reliability][deadlock]") {
  runtime ra{2};
  runtime rb{2};
  auto& pa = ra.pool();
  auto& pb = rb.pool();
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    std::atomic<bool> a_in{false}, b_in{false};
    std::atomic<int> inner_runs{0};
    std::string error_a, error_b;
    auto outer = [&](tessera::detail::device_pool& mine, tessera::detail::device_pool& other,
                     std::atomic<bool>& me_in, std::atomic<bool>& other_in, std::string& error) {
      try {
        mine.run_all([&](int d) {
          if (d != 0) return;
          me_in = true;
          if (!wait_for(other_in)) throw std::runtime_error("the other dispatch never started");
          other.run_all([&](int) { inner_runs.fetch_add(1); });
        });
      } catch (tessera::device_error const& e) {
        error = e.what();
      }
    };
    std::thread ta(outer, std::ref(pa), std::ref(pb), std::ref(a_in), std::ref(b_in), std::ref(error_a));
    std::thread tb(outer, std::ref(pb), std::ref(pa), std::ref(b_in), std::ref(a_in), std::ref(error_b));
    ta.join();
    tb.join();
    // Exactly one of the two inner dispatches closed the cycle and was refused; the other ran.
    CHECK(error_a.empty() != error_b.empty());
    std::string const& e = error_a.empty() ? error_b : error_a;
    CHECK_THAT(e, Contains("would wait for the other forever"));
    CHECK_THAT(e, Contains("runtime " + std::to_string(ra.id()) + " (2 devices)"));
    CHECK_THAT(e, Contains("runtime " + std::to_string(rb.id()) + " (2 devices)"));
    CHECK(inner_runs.load() == 2);
  }
  // A device of one runtime may still dispatch on another runtime that is not waiting for it.
  std::atomic<int> nested{0};
  pa.run_all([&](int) { pb.run_all([&](int) { nested.fetch_add(1); }); });
  CHECK(nested.load() == 4);
}

TEST_CASE("a chain of three runtimes waiting in a circle is refused too", "[reliability][deadlock]") {
  runtime r0{1}, r1{1}, r2{1};
  tessera::detail::device_pool* pools[3] = {&r0.pool(), &r1.pool(), &r2.pool()};
  std::atomic<bool> in[3] = {false, false, false};
  std::atomic<int> refused{0}, inner{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&, i] {
      try {
        pools[i]->run_all([&](int) {
          in[i] = true;
          for (auto& f : in)
            if (!wait_for(f)) throw std::runtime_error("a dispatch never started");
          pools[(i + 1) % 3]->run_all([&](int) { inner.fetch_add(1); });
        });
      } catch (tessera::device_error const& e) {
        if (std::string(e.what()).find("forever") != std::string::npos) refused.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  CHECK(refused.load() == 1);
  CHECK(inner.load() == 2);
}

// ---------------------------------------------------------------------------
// 5. Arrays of two runtimes
// ---------------------------------------------------------------------------

TEST_CASE("arrays of two runtimes do not combine; each computes on its own runtime", "[reliability][runtimes]") {
  runtime ra{4};
  auto const ma = tessera::make_mesh<"X">({4});
  xt::xtensor<float, 1> const h = xt::arange<float>(8.0f);
  auto const a = tessera::device_put(h, tessera::named_sharding(ma, P<"X">{}));
  runtime rb{4};  // now current on this thread
  auto const mb = tessera::make_mesh<"X">({4});
  auto const b = tessera::device_put(h, tessera::named_sharding(mb, P<"X">{}));
  CHECK_FALSE(ma == mb);  // equal grids of different devices
  std::string const name_a = "of runtime " + std::to_string(ra.id());
  std::string const name_b = "of runtime " + std::to_string(rb.id());

  REQUIRE_THROWS_AS(a + b, std::invalid_argument);
  REQUIRE_THROWS_WITH(a + b, Contains("different meshes") && Contains(name_a) && Contains(name_b));
  auto const c2 = tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({8, 3})),
                                      tessera::named_sharding(mb, P<"X", none>{}));
  REQUIRE_THROWS_WITH(tessera::matmul(a, c2), Contains(name_a) && Contains(name_b));

  // A computation on a's arrays runs on a's runtime, whichever is current.
  tessera::array s = a * 3.0f;
  CHECK(s.pool().get() == &ra.pool());
  auto const total = tessera::eval(tessera::sum(a));
  CHECK(total.pool().get() == &ra.pool());
  CHECK(tessera::to_host(total)() == 28.0f);

  // shard_map and jit take their arguments on the mesh's runtime only; device_put moves them.
  auto f = tessera::shard_map([](auto blk) { return blk; }, mb, tessera::in_specs(P<"X">{}),
                              tessera::out_specs(P<"X">{}));
  REQUIRE_THROWS_WITH(f(a), Contains("argument 0 lives on runtime " + std::to_string(ra.id())) &&
                                Contains("runs on runtime " + std::to_string(rb.id())));
  auto g = tessera::jit([](auto x) { return x + 1.0f; }, tessera::in_shardings(tessera::named_sharding(mb, P<"X">{})),
                        tessera::out_shardings(tessera::named_sharding(mb, P<"X">{})));
  REQUIRE_THROWS_WITH(g(a), Contains("jit in_shardings") && Contains("argument 0 lives on runtime"));
  auto const moved = tessera::device_put(a, tessera::named_sharding(mb, P<"X">{}));
  CHECK(moved.pool().get() == &rb.pool());
  CHECK(same_array(tessera::to_host(f(moved)), h));
  CHECK(same_array(tessera::to_host(g(moved)), xt::xtensor<float, 1>(h + 1.0f)));
}

TEST_CASE("a mesh whose runtime is gone is refused with a message", "[reliability][runtimes]") {
  runtime keep{2};
  auto const m = [] {
    runtime gone{2};
    return tessera::make_mesh<"X">({2});
  }();
  REQUIRE_THROWS_WITH(tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({4})),
                                          tessera::named_sharding(m, P<"X">{})),
                      Contains("no longer exists"));
}

// ---------------------------------------------------------------------------
// 7. Smaller ones
// ---------------------------------------------------------------------------

TEST_CASE("device id INT_MAX: the message names it and asks for a positive runtime size", "[reliability][errors]") {
  runtime rt{2};
  xt::xtensor<float, 1> const h = xt::zeros<float>({3});
  try {
    (void)tessera::device_put(h, INT_MAX);
    FAIL("no exception");
  } catch (std::invalid_argument const& e) {
    std::string const what = e.what();
    CHECK_THAT(what, Contains("uses device 2147483647"));
    CHECK_THAT(what, Contains("tessera::runtime{2147483648}"));
    CHECK(what.find("runtime{-") == std::string::npos);
  }
  std::array<int, 3> const huge{INT_MAX, INT_MAX, INT_MAX};
  REQUIRE_THROWS_WITH((tessera::make_mesh<"X", "Y", "Z">(huge)), Contains("need more than 2^63 devices"));
  std::vector<int> const ids{INT_MAX, 0};
  REQUIRE_THROWS_WITH((tessera::make_mesh<"X">({2}, ids)), Contains("device id 2147483647"));
}

TEST_CASE("collective_mismatch on element type or permutation names what differs", "[reliability][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  auto dtype = tessera::shard_map(
      [](auto blk) {
        if (tessera::axis_index<"x">() == 1) {
          xt::xtensor<double, 1> d = blk;
          return xt::xtensor<float, 1>(tessera::psum<"x">(d));
        }
        return xt::xtensor<float, 1>(tessera::psum<"x">(xt::xtensor<float, 1>(blk)));
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}), tessera::no_check_vma);
  try {
    (void)dtype(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    CHECK_THAT(e.what(), Contains("of 2 float32 elements per device") && Contains("of 2 float64 elements per device"));
  }
  auto perm = tessera::shard_map(
      [](auto blk) {
        std::vector<std::pair<int, int>> p{{0, 1}, {1, 2}, {2, 3}, {3, 0}};
        if (tessera::axis_index<"x">() == 2) p = {{0, 3}, {1, 0}, {2, 1}, {3, 2}};
        return tessera::ppermute<"x">(blk, p);
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
  try {
    (void)perm(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    std::string const what = e.what();
    INFO(what);
    // The two descriptions differ, in the arguments the shared text leaves out.
    auto const at = what.find(" is in ");
    auto const but = what.find(" but device ");
    auto const second = what.find(" is in ", but);
    REQUIRE(at != std::string::npos);
    REQUIRE(second != std::string::npos);
    std::string const mine = what.substr(at + 7, but - at - 7);
    std::string const theirs = what.substr(second + 7, what.find("; every device", second) - second - 7);
    CHECK(mine != theirs);
    CHECK_THAT(what, Contains("arguments (shape, dimensions, permutation) hashed to"));
  }
}

// ---------------------------------------------------------------------------
// Several failing devices, non-std::exception throws, the seeded fault soak
// ---------------------------------------------------------------------------

TEST_CASE("several devices failing right after a collective are all reported, lowest id first, every time",
          "[reliability][faults]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  struct boom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  auto f = tessera::shard_map(
      [](auto blk) {
        int const x = tessera::axis_index<"x">(), y = tessera::axis_index<"y">();
        // A sub-group collective (each row), then one of the whole mesh: every device finishes
        // it before any throws, so which devices fail never depends on timing.
        auto s = tessera::psum<"y">(xt::sum(blk)());
        auto t = tessera::psum<"x", "y">(s);
        if ((x == 0 && y == 3) || (x == 1 && y == 0) || (x == 1 && y == 2))
          throw boom("failed at (" + std::to_string(x) + ", " + std::to_string(y) + ")");
        return tessera::psum<"x", "y">(t);
      },
      m, tessera::in_specs(P<axes<"x", "y">>{}), tessera::out_specs(P<>{}));
  xt::xtensor<float, 1> const h = xt::arange<float>(16.0f);
  for (int i = 0; i < 200; ++i) {
    try {
      (void)f(h);
      FAIL("no exception");
    } catch (tessera::device_error const& e) {
      std::vector<int> ids;
      for (auto const& [d, _] : e.failures()) ids.push_back(d);
      REQUIRE(ids == std::vector<int>{3, 4, 6});
      CHECK(e.device() == 3);
      CHECK_THAT(e.what(), Contains("device 3 threw: failed at (0, 3); device 4 threw: failed at (1, 0); "
                                    "device 6 threw: failed at (1, 2)"));
    }
  }
}

TEST_CASE("a failure inside one group of a 2-D mesh: the other groups' collectives finish, no hang",
          "[reliability][faults]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({4, 2});
  auto f = tessera::shard_map(
      [](auto blk) {
        int const x = tessera::axis_index<"x">();
        auto v = xt::xtensor<float, 1>(blk);
        for (int i = 0; i < 20; ++i) {
          if (x == 2 && i == 7) throw std::runtime_error("row 2 fails at step 7");
          v = tessera::psum<"y">(v) * 0.5f;  // groups along 'y': rows other than 2 do not wait for it
        }
        return tessera::all_gather<"x">(v, 0, tessera::tiled);
      },
      m, tessera::in_specs(P<axes<"x", "y">>{}), tessera::out_specs(P<none>{}), tessera::no_check_vma);
  try {
    (void)f(xt::xtensor<float, 1>(xt::arange<float>(16.0f)));
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    std::vector<int> ids;
    for (auto const& [d, _] : e.failures()) ids.push_back(d);
    CHECK(ids == std::vector<int>{4, 5});
  }
}

TEST_CASE("bodies that throw something other than a std::exception are reported and rethrown as thrown",
          "[reliability][faults]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  auto f = tessera::shard_map(
      [](auto blk) {
        if (tessera::axis_index<"x">() == 1) throw 42;
        if (tessera::axis_index<"x">() == 3) throw std::string("a string");
        return tessera::psum<"x">(xt::sum(blk)());
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  try {
    (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    REQUIRE(e.failures().size() == 2);
    CHECK(e.failures()[0].first == 1);
    CHECK(e.failures()[1].first == 3);
    CHECK_THAT(e.what(), Contains("device 1 threw: a non-std::exception object"));
    REQUIRE_THROWS_AS(e.rethrow_first(), int);
    REQUIRE_THROWS_AS(std::rethrow_exception(e.failures()[1].second), std::string);
  }
  auto g = tessera::shard_map([](auto blk) { return tessera::psum<"x">(xt::sum(blk)()); }, m,
                              tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  CHECK(tessera::to_host(g(xt::xtensor<float, 1>(xt::arange<float>(8.0f))))() == 28.0f);
}

namespace {

constexpr int soak_steps = 6;

/// The fault soak's body over every axis of its mesh (whole-mesh collectives, so the devices
/// that fail are exactly those whose fault comes first). Each step is a collective that leaves
/// the values as they were: an all-reduce, a cycle of ppermutes there and back, an all-gather.
template <tessera::axis_name... A, class Mesh, class Spec>
auto fault_soak_fn(Mesh const& mesh, Spec spec, std::vector<int> const& fail_at) {
  int const k = static_cast<int>(mesh.num_devices());
  return tessera::shard_map(
      [&fail_at, k](auto blk) {
        int const me = static_cast<int>(tessera::axis_index<A...>());  // the mesh position
        std::vector<std::pair<int, int>> there, back;
        for (int j = 0; j < k; ++j) {
          there.emplace_back(j, (j + 1) % k);
          back.emplace_back((j + 1) % k, j);
        }
        auto v = xt::xtensor<std::int64_t, 1>(blk);
        for (int s = 0; s < soak_steps; ++s) {
          if (fail_at[static_cast<std::size_t>(me)] == s) throw std::runtime_error("fault at step " + std::to_string(s));
          switch (s % 3) {
            case 0: v = tessera::psum<A...>(v) - tessera::psum<A...>(v) + v; break;
            case 1: v = tessera::ppermute<A...>(tessera::ppermute<A...>(v, there), back); break;
            default: {
              xt::xtensor<std::int64_t, 1> all = tessera::all_gather<A...>(v, 0, tessera::tiled);
              v = xt::view(all, xt::range(2 * me, 2 * me + 2));
            }
          }
        }
        return v;
      },
      mesh, tessera::in_specs(spec), tessera::out_specs(spec), tessera::no_check_vma);
}

}  // namespace

TEST_CASE("fault soak: hundreds of random fault points, seeded; the failing devices of the first failing step "
          "are exactly the ones reported",
          "[reliability][faults][soak]") {
  std::uint64_t const seed = test_seed("fault soak");
  std::mt19937_64 rng(seed);
  runtime rt{8};
  auto const m1 = tessera::make_mesh<"x">({8});
  auto const m2 = tessera::make_mesh<"x", "y">({2, 4});
  // fail_at[d]: the step at which the device at mesh position d throws (steps: never).
  std::vector<int> fail_at(8, soak_steps);
  auto f1 = fault_soak_fn<"x">(m1, P<"x">{}, fail_at);
  auto f2 = fault_soak_fn<"x", "y">(m2, P<axes<"x", "y">>{}, fail_at);
  xt::xtensor<std::int64_t, 1> const h = xt::arange<std::int64_t>(16);
  int runs = 0, failed_runs = 0;
  for (int i = 0; i < 300; ++i) {
    std::fill(fail_at.begin(), fail_at.end(), soak_steps);
    int const faults = static_cast<int>(rng() % 4);  // 0 to 3 failing devices
    for (int k = 0; k < faults; ++k) fail_at[rng() % 8] = static_cast<int>(rng() % soak_steps);
    int const first = *std::min_element(fail_at.begin(), fail_at.end());
    std::vector<int> expected;
    for (int d = 0; d < 8; ++d)
      if (fail_at[static_cast<std::size_t>(d)] == first && first < soak_steps) expected.push_back(d);
    bool const two_d = rng() % 2 == 0;
    INFO("iteration " << i << ", seed " << seed << ", mesh " << (two_d ? "2x4" : "8") << ", first fault step "
                      << first);
    ++runs;
    try {
      auto const r = two_d ? tessera::to_host(f2(h)) : tessera::to_host(f1(h));
      CHECK(expected.empty());
      CHECK(same_array(r, h));
    } catch (tessera::device_error const& e) {
      ++failed_runs;
      std::vector<int> ids;
      for (auto const& [d, _] : e.failures()) ids.push_back(d);
      CHECK(ids == expected);
    }
  }
  CHECK(runs == 300);
  CHECK(failed_runs > 100);
}

// ---------------------------------------------------------------------------
// Allocation failure
// ---------------------------------------------------------------------------

namespace {
// The sanitizers' operator new reports an allocation it cannot satisfy as a fatal error
// instead of throwing std::bad_alloc, so under them the failure is thrown by hand.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool real_allocation_failure = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool real_allocation_failure = false;
#else
constexpr bool real_allocation_failure = true;
#endif
#else
constexpr bool real_allocation_failure = true;
#endif
}  // namespace

TEST_CASE("an allocation that fails on the devices is a device_error wrapping std::bad_alloc; the runtime goes on",
          "[reliability][memory]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  // 2^44 floats: 16 TiB per device, more than this machine can give.
  tessera::shape_t<1> const huge{std::size_t{1} << 44};
  if (real_allocation_failure) try {
    (void)tessera::make_array_from_callback(huge, tessera::named_sharding(m, P<"X">{}),
                                            [](auto const&) -> xt::xtensor<float, 1> { return {}; });
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    CHECK(e.failures().size() == 4);
    REQUIRE_THROWS_AS(e.rethrow_first(), std::bad_alloc);
  }
  auto f = tessera::shard_map(
      [](auto blk) {
        if (tessera::axis_index<"X">() == 2) {
          if (!real_allocation_failure) throw std::bad_alloc();
          std::vector<char> v(std::size_t{1} << 46);  // 64 TiB
          v[0] = 1;
        }
        return tessera::psum<"X">(xt::sum(blk)());
      },
      m, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  try {
    (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    REQUIRE(e.failures().size() == 1);
    CHECK(e.device() == 2);
    REQUIRE_THROWS_AS(e.rethrow_first(), std::bad_alloc);
  }
  // Still usable, with the same devices and caches.
  xt::xtensor<float, 1> const h = xt::arange<float>(8.0f);
  auto const a = tessera::device_put(h, tessera::named_sharding(m, P<"X">{}));
  CHECK(same_array(tessera::to_host(tessera::eval(a + a)), xt::xtensor<float, 1>(2.0f * h)));
  auto g = tessera::shard_map([](auto blk) { return tessera::psum<"X">(xt::sum(blk)()); }, m,
                              tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  CHECK(tessera::to_host(g(a))() == 28.0f);
}

// ---------------------------------------------------------------------------
// Several host threads at once
// ---------------------------------------------------------------------------

namespace {

/// One host thread's work: shard_map, jit, device_put and matmul on mesh `m`, values checked.
template <class Mesh>
int host_thread_work(Mesh const& m, int seed, int iterations) {
  int errors = 0;
  int const n = static_cast<int>(m.num_devices());
  for (int it = 0; it < iterations; ++it) {
    double const base = seed * 100 + it;
    xt::xtensor<double, 2> const h = xt::reshape_view(xt::arange<double>(4.0 * n * 3) + base, {4 * n, 3});
    auto const s = tessera::named_sharding(m, P<"X", none>{});
    auto const a = tessera::device_put(h, s);
    if (!same_array(tessera::to_host(a), h)) ++errors;
    // jit: element-wise and a reduction
    auto const j = tessera::jit([](auto x) { return tessera::sum<0>(x * 2.0); })(a);
    xt::xtensor<double, 1> const want_sum = xt::sum(h, {0}) * 2.0;
    if (!same_array(tessera::to_host(j), want_sum)) ++errors;
    // matmul: (4n x 3) @ (3 x 2)
    xt::xtensor<double, 2> const w = {{1, 2}, {3, 4}, {5, 6}};
    auto const wd = tessera::device_put(w, tessera::named_sharding(m, P<none, none>{}));
    tessera::array prod = tessera::matmul(a, wd);
    auto const got = tessera::to_host(prod);
    for (std::size_t r = 0; r < h.shape()[0]; ++r)
      for (std::size_t c = 0; c < 2; ++c) {
        double ref = 0;
        for (std::size_t k = 0; k < 3; ++k) ref += h(r, k) * w(k, c);
        if (got(r, c) != ref) ++errors;
      }
    // shard_map with a psum
    auto f = tessera::shard_map([](auto blk) { return tessera::psum<"X">(xt::sum(blk)()); }, m,
                                tessera::in_specs(P<"X", none>{}), tessera::out_specs(P<>{}));
    if (tessera::to_host(f(a))() != xt::sum(h)()) ++errors;
  }
  return errors;
}

}  // namespace

TEST_CASE("several host threads run shard_map, jit, device_put and matmul at once on one runtime",
          "[reliability][threads]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  std::vector<int> errors(4, -1);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) ts.emplace_back([&, t] { errors[static_cast<std::size_t>(t)] = host_thread_work(m, t, 10); });
  for (auto& t : ts) t.join();
  CHECK(errors == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("several host threads, each with its own runtime, run at once and never exchange work",
          "[reliability][threads]") {
  std::vector<int> errors(3, -1);
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&, t] {
      try {
        runtime rt{t + 1};
        auto const m = tessera::make_mesh<"X">({t + 1});
        errors[static_cast<std::size_t>(t)] = host_thread_work(m, t, 10);
      } catch (std::exception const& e) {
        std::cout << "host thread " << t << ": " << e.what() << "\n";
        errors[static_cast<std::size_t>(t)] = 1000;
      }
    });
  for (auto& t : ts) t.join();
  CHECK(errors == std::vector<int>{0, 0, 0});
}
