// Unit tests of tessera's runtime: the device pool (one persistent thread per
// device), dispatch and its errors, the current-runtime stack, device buffers,
// and first touch (blocks are written on their device's own thread).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera_test::same_array;
using tessera::none;
using tessera::P;
using tessera::runtime;

namespace {

std::vector<std::thread::id> device_threads(tessera::detail::device_pool& pool) {
  std::vector<std::thread::id> ids(static_cast<std::size_t>(pool.size()));
  pool.run_all([&](int d) { ids[static_cast<std::size_t>(d)] = std::this_thread::get_id(); });
  return ids;
}

bool aligned64(void const* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }

struct device_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sets an environment variable for one scope, restoring the old value after.
class scoped_env {
 public:
  scoped_env(char const* name, char const* value) : name_(name) {
    if (char const* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  scoped_env(scoped_env const&) = delete;
  scoped_env& operator=(scoped_env const&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace

// ---------------------------------------------------------------------------
// device_pool dispatch
// ---------------------------------------------------------------------------

TEST_CASE("run_all runs once per device, each on its own thread", "[runtime][pool]") {
  runtime rt{8};
  auto& pool = rt.pool();
  REQUIRE(pool.size() == 8);
  std::array<std::atomic<int>, 8> runs{};
  std::vector<std::thread::id> ids(8);
  pool.run_all([&](int d) {
    runs[static_cast<std::size_t>(d)].fetch_add(1);
    ids[static_cast<std::size_t>(d)] = std::this_thread::get_id();
  });
  for (auto const& r : runs) CHECK(r.load() == 1);
  std::set<std::thread::id> distinct(ids.begin(), ids.end());
  CHECK(distinct.size() == 8);
  CHECK(distinct.count(std::this_thread::get_id()) == 0);
  CHECK(distinct.count(std::thread::id{}) == 0);
}

TEST_CASE("run on a subset runs exactly the listed devices, on the same threads as before", "[runtime][pool]") {
  runtime rt{8};
  auto& pool = rt.pool();
  auto const threads = device_threads(pool);
  std::vector<int> const subset{5, 1, 3};
  std::array<std::atomic<int>, 8> runs{};
  std::vector<std::thread::id> seen(8);
  pool.run(std::span<int const>(subset), [&](int d) {
    runs[static_cast<std::size_t>(d)].fetch_add(1);
    seen[static_cast<std::size_t>(d)] = std::this_thread::get_id();
  });
  for (int d = 0; d < 8; ++d) {
    bool const listed = std::find(subset.begin(), subset.end(), d) != subset.end();
    CHECK(runs[static_cast<std::size_t>(d)].load() == (listed ? 1 : 0));
    if (listed) CHECK(seen[static_cast<std::size_t>(d)] == threads[static_cast<std::size_t>(d)]);
  }
  // The threads are persistent: a later dispatch finds the same ones.
  CHECK(device_threads(pool) == threads);

  // An empty list runs nothing and returns.
  std::atomic<int> calls{0};
  pool.run(std::span<int const>(), [&](int) { ++calls; });
  CHECK(calls.load() == 0);
}

TEST_CASE("thousands of back-to-back dispatches", "[runtime][pool]") {
  runtime rt{6};
  auto& pool = rt.pool();
  auto const threads = device_threads(pool);
  std::array<std::atomic<int>, 6> runs{};
  std::atomic<int> wrong_thread{0};
  std::vector<int> const evens{0, 2, 4};
  std::vector<int> const one{5};
  int const rounds = 2000;
  for (int i = 0; i < rounds; ++i) {
    auto body = [&](int d) {
      runs[static_cast<std::size_t>(d)].fetch_add(1, std::memory_order_relaxed);
      if (std::this_thread::get_id() != threads[static_cast<std::size_t>(d)]) wrong_thread.fetch_add(1);
    };
    switch (i % 3) {
      case 0: pool.run_all(body); break;
      case 1: pool.run(std::span<int const>(evens), body); break;
      default: pool.run(std::span<int const>(one), body); break;
    }
  }
  int const all = (rounds + 2) / 3, ev = (rounds + 1) / 3, on = rounds / 3;
  CHECK(runs[0].load() == all + ev);
  CHECK(runs[1].load() == all);
  CHECK(runs[2].load() == all + ev);
  CHECK(runs[3].load() == all);
  CHECK(runs[4].load() == all + ev);
  CHECK(runs[5].load() == all + on);
  CHECK(wrong_thread.load() == 0);
}

TEST_CASE("dispatch sees the caller's writes and the caller sees the devices' writes", "[runtime][pool]") {
  runtime rt{4};
  std::vector<long> data(4 * 1000, 0);
  for (int round = 1; round <= 200; ++round) {
    for (std::size_t i = 0; i < data.size(); i += 997) data[i] += 1;  // caller writes before the dispatch
    rt.pool().run_all([&](int d) {
      for (std::size_t i = static_cast<std::size_t>(d) * 1000; i < static_cast<std::size_t>(d + 1) * 1000; ++i)
        data[i] += 2;
    });
  }
  long expected_total = 0;
  for (std::size_t i = 0; i < data.size(); ++i) expected_total += 400 + (i % 997 == 0 ? 200 : 0);
  long total = 0;
  for (long v : data) total += v;
  CHECK(total == expected_total);
}

TEST_CASE("two host threads dispatching to one pool are serialized", "[runtime][pool]") {
  runtime rt{4};
  auto& pool = rt.pool();
  std::array<long, 4> counts{};  // plain longs: each device's slot is only touched by its own thread
  auto work = [&] {
    for (int i = 0; i < 300; ++i) pool.run_all([&](int d) { ++counts[static_cast<std::size_t>(d)]; });
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  for (long c : counts) CHECK(c == 600);
}

TEST_CASE("a device that throws surfaces as tessera::device_error naming it", "[runtime][pool][errors]") {
  runtime rt{8};
  auto& pool = rt.pool();
  std::array<std::atomic<int>, 8> runs{};
  try {
    pool.run_all([&](int d) {
      runs[static_cast<std::size_t>(d)].fetch_add(1);
      if (d == 3) throw device_failure("boom on 3");
    });
    FAIL("run_all did not throw");
  } catch (tessera::device_error const& e) {
    CHECK(e.device() == 3);
    CHECK_THAT(e.what(), Contains("device 3") && Contains("boom on 3"));
    REQUIRE(e.failures().size() == 1);
    CHECK(e.failures()[0].first == 3);
    // The original exception, with its own type.
    REQUIRE_THROWS_AS(e.rethrow_first(), device_failure);
    REQUIRE_THROWS_WITH(e.rethrow_first(), "boom on 3");
  }
  // The others still ran, exactly once.
  for (auto const& r : runs) CHECK(r.load() == 1);
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, tessera::device_error>);
}

TEST_CASE("several devices that throw are all reported, in device order", "[runtime][pool][errors]") {
  runtime rt{8};
  auto& pool = rt.pool();
  std::vector<int> const listed{7, 6, 4, 2, 1};
  try {
    pool.run(std::span<int const>(listed), [&](int d) {
      if (d == 6 || d == 2 || d == 4) throw device_failure("fail " + std::to_string(d));
    });
    FAIL("run did not throw");
  } catch (tessera::device_error const& e) {
    CHECK(e.device() == 2);
    REQUIRE(e.failures().size() == 3);
    CHECK(e.failures()[0].first == 2);
    CHECK(e.failures()[1].first == 4);
    CHECK(e.failures()[2].first == 6);
    std::vector<std::string> messages;
    for (auto const& f : e.failures()) {
      try {
        std::rethrow_exception(f.second);
      } catch (device_failure const& x) {
        messages.push_back(x.what());
      }
    }
    CHECK(messages == std::vector<std::string>{"fail 2", "fail 4", "fail 6"});
    std::string const what = e.what();
    auto const p2 = what.find("device 2 threw: fail 2");
    auto const p4 = what.find("device 4 threw: fail 4");
    auto const p6 = what.find("device 6 threw: fail 6");
    CHECK(p2 != std::string::npos);
    CHECK(p4 != std::string::npos);
    CHECK(p6 != std::string::npos);
    CHECK(p2 < p4);
    CHECK(p4 < p6);
  }
  // A non-std exception is reported too.
  REQUIRE_THROWS_WITH(pool.run_all([](int d) {
    if (d == 5) throw 42;
  }),
                      Contains("device 5") && Contains("a non-std::exception object"));

  // The pool is usable afterwards, and errors do not leak into the next dispatch.
  std::array<std::atomic<int>, 8> runs{};
  REQUIRE_NOTHROW(pool.run_all([&](int d) { runs[static_cast<std::size_t>(d)].fetch_add(1); }));
  for (auto const& r : runs) CHECK(r.load() == 1);
  std::vector<int> const two{2, 6};
  REQUIRE_NOTHROW(pool.run(std::span<int const>(two), [](int) {}));
}

TEST_CASE("a dispatch started from a device thread throws std::logic_error", "[runtime][pool][errors]") {
  runtime rt{4};
  auto& pool = rt.pool();
  std::vector<int> const two{2};
  try {
    pool.run(std::span<int const>(two), [&](int) { pool.run_all([](int) {}); });
    FAIL("nested dispatch did not throw");
  } catch (tessera::device_error const& e) {
    CHECK(e.device() == 2);
    REQUIRE_THROWS_AS(e.rethrow_first(), std::logic_error);
    REQUIRE_THROWS_WITH(e.rethrow_first(), Contains("device 2") && Contains("own thread"));
  }
  // The pool survives.
  std::atomic<int> calls{0};
  pool.run_all([&](int) { ++calls; });
  CHECK(calls.load() == 4);

  // Dispatching to *another* runtime's pool from a device thread is fine.
  runtime other{3};
  std::atomic<int> inner{0};
  std::vector<int> const zero{0};
  REQUIRE_NOTHROW(pool.run(std::span<int const>(zero), [&](int) { other.pool().run_all([&](int) { ++inner; }); }));
  CHECK(inner.load() == 3);
}

TEST_CASE("a runtime of one device runs its task on the calling thread, as that device", "[runtime][pool]") {
  runtime rt{1};
  auto& pool = rt.pool();
  std::thread::id ran_on{};
  int seen_device = -2;
  tessera::detail::device_pool const* seen_pool = nullptr;
  pool.run_all([&](int d) {
    seen_device = d;
    ran_on = std::this_thread::get_id();
    seen_pool = tessera::detail::this_device_thread.pool;
  });
  CHECK(seen_device == 0);
  CHECK(ran_on == std::this_thread::get_id());
  CHECK(seen_pool == &pool);
  // The calling thread is itself again afterwards: not a device, so it may dispatch.
  CHECK(tessera::detail::this_device_thread.pool == nullptr);
  CHECK(tessera::detail::this_inline_dispatch == nullptr);

  // While it runs the task it is the device: a dispatch on the same runtime is refused as from
  // a device thread, and a failure is a device_error naming device 0.
  try {
    pool.run_all([&](int) { pool.run_all([](int) {}); });
    FAIL("nested dispatch did not throw");
  } catch (tessera::device_error const& e) {
    CHECK(e.device() == 0);
    REQUIRE_THROWS_WITH(e.rethrow_first(), Contains("device 0") && Contains("own thread"));
  }
  try {
    pool.run_all([](int) { throw device_failure("boom on the only device"); });
    FAIL("the failure did not surface");
  } catch (tessera::device_error const& e) {
    CHECK(e.device() == 0);
    CHECK_THAT(std::string(e.what()), Contains("boom on the only device"));
  }
  CHECK(tessera::detail::this_device_thread.pool == nullptr);
  CHECK(tessera::detail::this_inline_dispatch == nullptr);

  // Listing the device twice is refused as with more devices.
  std::vector<int> const twice{0, 0};
  REQUIRE_THROWS_WITH(pool.run(std::span<int const>(twice), [](int) {}), Contains("device id 0 is listed twice"));

  // One-device runtimes nesting on one thread: runtime a's task dispatches on b, whose task
  // dispatches on a again, which waits for b: refused at once with the cycle message, as when
  // the tasks run on device threads, instead of the thread waiting for itself.
  runtime other{1};
  std::atomic<int> inner{0};
  try {
    pool.run_all([&](int) {
      other.pool().run_all([&](int) {
        ++inner;
        pool.run_all([&](int) { ++inner; });
      });
    });
    FAIL("the dispatch closing the cycle was not refused");
  } catch (tessera::device_error const& e) {
    std::string const what = e.what();
    CHECK_THAT(what, Contains("would wait for the other forever"));
    CHECK_THAT(what, Contains("runtime " + std::to_string(rt.id()) + " (1 device)"));
  }
  CHECK(inner.load() == 1);
  // A chain that closes no cycle runs: a's task dispatches on b.
  pool.run_all([&](int) { other.pool().run_all([&](int) { ++inner; }); });
  CHECK(inner.load() == 2);
  CHECK(tessera::detail::this_inline_dispatch == nullptr);
}

TEST_CASE("dispatch to devices the pool does not have throws std::out_of_range", "[runtime][pool][errors]") {
  runtime rt{4};
  std::vector<int> const bad{1, 4};
  std::vector<int> const negative{-1};
  std::atomic<int> calls{0};
  REQUIRE_THROWS_AS(rt.pool().run(std::span<int const>(bad), [&](int) { ++calls; }), std::out_of_range);
  REQUIRE_THROWS_WITH(rt.pool().run(std::span<int const>(bad), [&](int) { ++calls; }),
                      Contains("device id 4 is out of range") && Contains("the runtime has 4 devices"));
  REQUIRE_THROWS_WITH(rt.pool().run(std::span<int const>(negative), [&](int) { ++calls; }),
                      Contains("device id -1 is out of range"));
  CHECK(calls.load() == 0);  // nothing ran
}

TEST_CASE("a dispatch listing a device twice is refused, naming the device", "[runtime][pool][errors]") {
  // Listing a device twice would wake it once and count it twice: a hang. It is refused up front.
  tessera::detail::device_pool pool(3);
  std::atomic<int> calls{0};
  std::vector<int> const twice{1, 2, 1};
  REQUIRE_THROWS_AS(pool.run(std::span<int const>(twice), [&](int) { calls.fetch_add(1); }), std::invalid_argument);
  REQUIRE_THROWS_WITH(pool.run(std::span<int const>(twice), [&](int) { calls.fetch_add(1); }),
                      Contains("device id 1 is listed twice"));
  CHECK(calls.load() == 0);  // nothing ran
  std::vector<int> const once{2, 0, 1};
  pool.run(std::span<int const>(once), [&](int) { calls.fetch_add(1); });
  CHECK(calls.load() == 3);  // the pool is still usable
}

TEST_CASE("device_pool and runtime reject fewer than one device", "[runtime][errors]") {
  REQUIRE_THROWS_AS(tessera::detail::device_pool(0), std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::detail::device_pool(0), Contains("at least 1, got 0"));
  REQUIRE_THROWS_WITH(runtime(-3), Contains("at least 1, got -3"));
}

// ---------------------------------------------------------------------------
// The current runtime
// ---------------------------------------------------------------------------

TEST_CASE("runtimes nest: the innermost live one is current", "[runtime][current]") {
  runtime outer{3};
  CHECK(outer.device_count() == 3);
  CHECK(tessera::device_count() == 3);
  CHECK(tessera::devices() == std::vector<int>{0, 1, 2});
  CHECK(tessera::detail::current_pool().get() == &outer.pool());
  {
    runtime inner{5};
    CHECK(tessera::device_count() == 5);
    CHECK(tessera::devices() == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(tessera::detail::current_pool().get() == &inner.pool());
    REQUIRE_NOTHROW(tessera::make_mesh<"x">({5}));
    {
      runtime innermost{2};
      CHECK(tessera::device_count() == 2);
      REQUIRE_THROWS((tessera::make_mesh<"x">({3})));
    }
    CHECK(tessera::device_count() == 5);
  }
  CHECK(tessera::device_count() == 3);
  CHECK(tessera::detail::current_pool().get() == &outer.pool());
  REQUIRE_THROWS_WITH(tessera::make_mesh<"x">({5}), Contains("need 5 devices but the runtime has 3"));

  // Destroyed out of order: the most recent live one stays current.
  auto a = std::make_unique<runtime>(6);
  auto b = std::make_unique<runtime>(7);
  CHECK(tessera::device_count() == 7);
  a.reset();
  CHECK(tessera::device_count() == 7);
  b.reset();
  CHECK(tessera::device_count() == 3);
}

TEST_CASE("arrays outlive the runtime object that made them", "[runtime][current]") {
  runtime keep{2};
  xt::xtensor<float, 2> const host = xt::reshape_view(xt::arange<float>(24.0f), {4, 6});
  std::optional<tessera::array<float, 2, tessera::named_sharding<tessera::mesh<"x", "y">, P<"x", "y">>>> a;
  std::weak_ptr<tessera::detail::device_pool> pool_of_a;
  {
    runtime rt{4};
    auto m = tessera::make_mesh<"x", "y">({2, 2});
    a = tessera::device_put(host, tessera::named_sharding(m, P<"x", "y">{}));
    pool_of_a = a->pool();
    CHECK(a->pool().get() == &rt.pool());
  }
  CHECK(tessera::device_count() == 2);  // rt is gone
  REQUIRE_FALSE(pool_of_a.expired());   // the array keeps its threads alive
  auto const back = tessera::to_host(*a);
  CHECK(same_array(back, host));
  auto const shards = a->addressable_shards();
  REQUIRE(shards.size() == 4);
  xt::xtensor<float, 2> const want = xt::view(host, xt::range(2, 4), xt::range(3, 6));
  CHECK(same_array(shards[3].data, want));
  // Resharding under the smaller current runtime reads the old blocks.
  auto b = tessera::device_put(*a, tessera::single_device_sharding(1));
  CHECK(b.pool().get() == &keep.pool());
  CHECK(same_array(tessera::to_host(b), host));
  a.reset();
  CHECK(pool_of_a.expired());  // the last array gone, so are its threads
}

TEST_CASE("TESSERA_NUM_DEVICES sets the default runtime size and is validated", "[runtime][env]") {
  {
    scoped_env env("TESSERA_NUM_DEVICES", "5");
    CHECK(tessera::detail::default_device_count() == 5);
    runtime rt;
    CHECK(rt.device_count() == 5);
    CHECK(tessera::device_count() == 5);
  }
  {
    scoped_env env("TESSERA_NUM_DEVICES", "4096");
    CHECK(tessera::detail::default_device_count() == 4096);
  }
  for (char const* garbage : {"abc", "0", "-2", "4097", "3x", "1e3", "4 "}) {
    INFO("TESSERA_NUM_DEVICES='" << garbage << "'");
    scoped_env env("TESSERA_NUM_DEVICES", garbage);
    REQUIRE_THROWS_AS(tessera::detail::default_device_count(), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::detail::default_device_count(),
                        Contains(std::string("TESSERA_NUM_DEVICES='") + garbage + "'") &&
                            Contains("not a device count between 1 and 4096"));
    REQUIRE_THROWS_AS(runtime(), std::invalid_argument);
  }
  {
    scoped_env env("TESSERA_NUM_DEVICES", nullptr);
    unsigned const hc = std::thread::hardware_concurrency();
    CHECK(tessera::detail::default_device_count() == (hc == 0 ? 1 : static_cast<int>(hc)));
  }
  {
    scoped_env env("TESSERA_NUM_DEVICES", "");  // empty: as if unset
    unsigned const hc = std::thread::hardware_concurrency();
    CHECK(tessera::detail::default_device_count() == (hc == 0 ? 1 : static_cast<int>(hc)));
  }
}

// ---------------------------------------------------------------------------
// Device buffers and first touch
// ---------------------------------------------------------------------------

TEST_CASE("device_buffer is 64-byte aligned and zero-filled", "[runtime][buffer]") {
  STATIC_REQUIRE(tessera::device_buffer<float>::alignment == 64);
  for (std::size_t n : {1u, 3u, 13u, 64u, 1000u, 4097u}) {
    tessera::device_buffer<float> f(n);
    tessera::device_buffer<std::uint8_t> u(n);
    tessera::device_buffer<double> d(n, tessera::device_buffer<double>::uninitialized);
    CHECK(f.size() == n);
    CHECK(u.size() == n);
    CHECK(d.size() == n);
    CHECK(aligned64(f.data()));
    CHECK(aligned64(u.data()));
    CHECK(aligned64(d.data()));
    CHECK(std::all_of(f.data(), f.data() + n, [](float x) { return x == 0.0f; }));
    CHECK(std::all_of(u.data(), u.data() + n, [](std::uint8_t x) { return x == 0; }));
  }
  tessera::device_buffer<int> empty(0);
  CHECK(empty.size() == 0);
  CHECK(empty.data() == nullptr);
  tessera::device_buffer<int> moved_from(10);
  int* const p = moved_from.data();
  p[9] = 7;
  tessera::device_buffer<int> moved(std::move(moved_from));
  CHECK(moved.data() == p);
  CHECK(moved.data()[9] == 7);
  CHECK(moved.size() == 10);
}

TEST_CASE("device_put's blocks are 64-byte aligned", "[runtime][buffer]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  for (std::size_t rows : {1u, 3u, 8u, 13u}) {
    for (std::size_t cols : {1u, 5u, 8u, 17u}) {
      xt::xtensor<std::uint8_t, 2> host = xt::ones<std::uint8_t>({rows, cols});
      auto a = tessera::device_put(host, tessera::named_sharding(m, P<"x", "y">{}));
      auto b = tessera::device_put(host, tessera::named_sharding(m, P<none, "y">{}));
      for (auto const& sh : a.addressable_shards())
        if (sh.data.size() != 0) CHECK(aligned64(sh.data.data()));
      for (auto const& sh : b.addressable_shards())
        if (sh.data.size() != 0) CHECK(aligned64(sh.data.data()));
      for (std::size_t p = 0; p < 8; ++p)
        if (a.addressable_shards()[p].data.size() != 0) CHECK(aligned64(a.block_data(p)));
    }
  }
}

TEST_CASE("first touch: each block is filled on its own device's thread", "[runtime][first_touch]") {
  runtime rt{8};
  auto const threads = device_threads(rt.pool());
  auto m = tessera::make_mesh<"x", "y">({2, 4}, std::vector<int>{6, 1, 7, 0, 3, 5, 2, 4});
  tessera::named_sharding s(m, P<"x", "y">{});
  tessera::shape_t<2> const shape{8, 8};
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(64), {8, 8});

  std::mutex mu;
  std::map<std::array<std::size_t, 4>, std::thread::id> where;  // block (row/col start, stop) -> thread
  auto a = tessera::make_array_from_callback(shape, s, [&](std::array<tessera::slice, 2> const& idx) {
    {
      std::lock_guard lock(mu);
      where[{idx[0].start, idx[0].stop, idx[1].start, idx[1].stop}] = std::this_thread::get_id();
    }
    xt::xtensor<int, 2> block = xt::view(host, xt::range(idx[0].start, idx[0].stop), xt::range(idx[1].start, idx[1].stop));
    return block;
  });
  REQUIRE(where.size() == 8);
  // Device at mesh position p = x*4 + y holds rows 4x:4x+4, cols 2y:2y+2 (re-derived here).
  std::vector<int> const ids{6, 1, 7, 0, 3, 5, 2, 4};
  for (std::size_t p = 0; p < 8; ++p) {
    std::size_t const x = p / 4, y = p % 4;
    std::array<std::size_t, 4> const key{4 * x, 4 * x + 4, 2 * y, 2 * y + 2};
    INFO("mesh position " << p << " device " << ids[p]);
    REQUIRE(where.count(key) == 1);
    CHECK(where[key] == threads[static_cast<std::size_t>(ids[p])]);
  }
  CHECK(same_array(tessera::to_host(a), host));
  // The pool's threads did not change.
  CHECK(device_threads(rt.pool()) == threads);
}

// ---------------------------------------------------------------------------
// Device memory: the per-device cache of freed blocks
// ---------------------------------------------------------------------------

TEST_CASE("device_memory size classes: 64-byte multiples with at most 25% slack", "[runtime][memory]") {
  using tessera::detail::device_memory;
  STATIC_REQUIRE(device_memory::alignment == 64);
  CHECK(device_memory::size_class(0) == 64);
  CHECK(device_memory::size_class(1) == 64);
  CHECK(device_memory::size_class(64) == 64);
  CHECK(device_memory::size_class(65) == 128);
  CHECK(device_memory::size_class(128) == 128);
  CHECK(device_memory::size_class(129) == 192);
  CHECK(device_memory::size_class(1000) == 1024);
  CHECK(device_memory::size_class(1025) == 1280);
  CHECK(device_memory::size_class(std::size_t{1} << 20) == std::size_t{1} << 20);
  std::size_t prev = 0;
  for (std::size_t b = 1; b < 300000; b += (b < 4096 ? 1 : 97)) {
    std::size_t const c = device_memory::size_class(b);
    INFO("bytes " << b << " class " << c);
    REQUIRE(c >= b);
    REQUIRE(c % 64 == 0);
    REQUIRE(c - b < std::max<std::size_t>(64, b / 4 + 1));
    REQUIRE(c >= prev);  // monotonic
    REQUIRE(device_memory::size_class(c) == c);  // a class is its own class
    prev = c;
  }
}

TEST_CASE("device_memory: blocks of 256 KiB or more start on a page, smaller ones on 64 bytes", "[runtime][memory]") {
  using tessera::detail::device_memory;
  STATIC_REQUIRE(device_memory::alignment_of(device_memory::page_aligned_from - 64) == 64);
  STATIC_REQUIRE(device_memory::alignment_of(device_memory::page_aligned_from) == 4096);
  device_memory mem;
  for (std::size_t bytes : {std::size_t{100}, std::size_t{4096}, (std::size_t{256} << 10) - 64, std::size_t{256} << 10,
                            (std::size_t{1} << 20) + 8, std::size_t{64} << 20}) {
    INFO(bytes << " bytes");
    std::size_t const want = bytes >= (std::size_t{256} << 10) ? 4096 : 64;
    // Fresh blocks, then the same blocks handed out again from the cache.
    void* a = mem.allocate(bytes);
    void* b = mem.allocate(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(a) % want == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(b) % want == 0);
    mem.release(a, bytes);
    void* c = mem.allocate(bytes);
    CHECK(c == a);
    mem.release(c, bytes);
    mem.release(b, bytes);
  }
  mem.trim();
  CHECK(mem.cached_bytes() == 0);
}

TEST_CASE("device_memory hands freed blocks out again, within its limit", "[runtime][memory]") {
  tessera::detail::device_memory mem;
  CHECK(mem.cached_bytes() == 0);
  void* a = mem.allocate(100);
  REQUIRE(a != nullptr);
  CHECK(aligned64(a));
  std::memset(a, 0xab, 100);  // the block really has (at least) the bytes asked for
  mem.release(a, 100);
  CHECK(mem.cached_bytes() == 128);
  void* b = mem.allocate(120);  // same class: the cached block comes back
  CHECK(b == a);
  CHECK(mem.cached_bytes() == 0);
  void* c = mem.allocate(300);  // another class: a fresh block
  CHECK(c != b);
  CHECK(aligned64(c));
  mem.release(b, 120);
  mem.release(c, 300);
  CHECK(mem.cached_bytes() == 128 + 320);
  mem.trim();
  CHECK(mem.cached_bytes() == 0);

  mem.set_cache_limit(256);
  void* p[3] = {mem.allocate(128), mem.allocate(128), mem.allocate(128)};
  for (void* q : p) mem.release(q, 128);
  CHECK(mem.cached_bytes() == 256);  // the third went back to the system
  mem.set_cache_limit(0);            // caching off, and the cache emptied
  CHECK(mem.cached_bytes() == 0);
  void* d = mem.allocate(64);
  mem.release(d, 64);
  CHECK(mem.cached_bytes() == 0);
}

TEST_CASE("device_buffer from a device's memory returns its block there", "[runtime][memory][buffer]") {
  tessera::detail::device_memory mem;
  float* first = nullptr;
  {
    tessera::device_buffer<float> buf(100, &mem);
    first = buf.data();
    CHECK(aligned64(first));
    CHECK(buf.size() == 100);
    CHECK(std::all_of(buf.data(), buf.data() + 100, [](float x) { return x == 0.0f; }));
    buf.data()[99] = 3.0f;
    CHECK(mem.cached_bytes() == 0);
  }
  REQUIRE(tessera::detail::device_memory::size_class(400) == tessera::detail::device_memory::size_class(440));
  CHECK(mem.cached_bytes() == tessera::detail::device_memory::size_class(400));
  tessera::device_buffer<float> again(110, tessera::device_buffer<float>::uninitialized, &mem);  // 440 bytes: same class as 400
  CHECK(again.data() == first);
  CHECK(mem.cached_bytes() == 0);
  // Moving hands the block over; only the last owner releases it.
  tessera::device_buffer<float> moved(std::move(again));
  CHECK(moved.data() == first);
  CHECK(again.data() == nullptr);
  CHECK(again.size() == 0);
  tessera::device_buffer<float> assigned;
  assigned = std::move(moved);
  CHECK(assigned.data() == first);
  CHECK(mem.cached_bytes() == 0);
  assigned = tessera::device_buffer<float>(8, &mem);  // the old block goes back to the cache
  CHECK(mem.cached_bytes() == tessera::detail::device_memory::size_class(440));
}

TEST_CASE("an array's blocks return to their devices' caches and are reused by the next array",
          "[runtime][memory]") {
  runtime rt{4};
  auto m = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{2, 0, 3, 1});
  tessera::named_sharding s(m, P<"x", "y">{});
  xt::xtensor<double, 2> const host1 = xt::reshape_view(xt::arange<double>(0.0, 96.0), {8, 12});
  xt::xtensor<double, 2> const host2 = host1 * 2.0 + 1.0;
  std::vector<double const*> blocks;
  {
    auto a = tessera::device_put(host1, s);
    for (auto const& sh : a.addressable_shards()) blocks.push_back(sh.data.data());
  }
  std::size_t const cls = tessera::detail::device_memory::size_class(4 * 6 * sizeof(double));
  for (int d = 0; d < 4; ++d) CHECK(rt.pool().memory(d).cached_bytes() == cls);
  auto b = tessera::device_put(host2, s);
  auto const shards = b.addressable_shards();
  for (std::size_t p = 0; p < 4; ++p) CHECK(shards[p].data.data() == blocks[p]);  // same device, same block
  for (int d = 0; d < 4; ++d) CHECK(rt.pool().memory(d).cached_bytes() == 0);
  CHECK(same_array(tessera::to_host(b), host2));  // reused memory holds the new values
}

// ---------------------------------------------------------------------------
// wait policy
// ---------------------------------------------------------------------------

TEST_CASE("wait policy: spin only while threads fit the cores; wait_word wakes sleepers", "[runtime][wait]") {
  unsigned const hc = std::thread::hardware_concurrency() == 0 ? 1 : std::thread::hardware_concurrency();
  CHECK(tessera::detail::spin_budget(1) > 0);
  CHECK(tessera::detail::spin_budget(hc) > 0);
  CHECK(tessera::detail::spin_budget(hc + 1) == 0);
  tessera::detail::wait_word w;
  CHECK(w.load() == 0);
  w.bump();
  CHECK(w.load() == 1);
  CHECK(w.wait_for_change(0, 0) == 1);       // already changed: returns at once
  CHECK(w.wait_for_change(0, 10000) == 1);
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    w.bump();
  });
  CHECK(w.wait_for_change(1, 0) == 2);  // sleeps until the bump
  t.join();
  std::thread u([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w.bump();
  });
  CHECK(w.wait_for_change(2, 1000000) == 3);  // spins, then sleeps
  u.join();
}

// ---------------------------------------------------------------------------
// Teams and the shared-memory collectives, below shard_map
// ---------------------------------------------------------------------------

namespace {

namespace td = tessera::detail;

/// The group `members` as seen from position `pos`.
td::group group_of_members(std::vector<std::size_t> members, std::size_t pos) {
  td::group g;
  g.rank = static_cast<std::size_t>(std::find(members.begin(), members.end(), pos) - members.begin());
  g.members = std::move(members);
  return g;
}

/// A signature for collective number `seq` over the axes `axes`, of `count` floats.
td::op_signature signature(std::uint32_t seq, std::uint64_t axes, std::size_t count) {
  td::op_signature s;
  s.seq = seq;
  s.kind = 1;
  s.axes = axes;
  s.count = count;
  s.dtype = 4;
  return s;
}

std::vector<int> iota_ids(int n) {
  std::vector<int> ids(static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) ids[static_cast<std::size_t>(d)] = d;
  return ids;
}

}  // namespace

TEST_CASE("team: the barriers of a group wait for its members only", "[runtime][team]") {
  // Pairs {0, 1} and {2, 3}; the second pair starts only once the first has finished all its
  // all-reduces. With barriers over the whole team the first pair would wait for the second: a hang.
  runtime rt{4};
  td::team t(4, iota_ids(4));
  std::atomic<int> first_pair_done{0};
  std::array<std::vector<float>, 4> last{};
  std::size_t const count = 20000;  // 80 KB: each member reduces its half and writes it to both outputs
  rt.pool().run_all([&](int d) {
    std::size_t const pos = static_cast<std::size_t>(d);
    auto const g = group_of_members(pos < 2 ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{2, 3}, pos);
    if (pos >= 2)
      while (first_pair_done.load() < 2) std::this_thread::yield();
    std::vector<float> in(count), out(count);
    for (std::uint32_t i = 0; i < 100; ++i) {
      for (std::size_t e = 0; e < count; ++e) in[e] = static_cast<float>(pos + i + e % 7);
      td::all_reduce(t, pos, g, signature(i, pos < 2 ? 1 : 2, count), in.data(), out.data(), count, td::reduce_op::sum);
    }
    last[pos] = out;
    if (pos < 2) first_pair_done.fetch_add(1);
  });
  for (std::size_t pos = 0; pos < 4; ++pos) {
    std::size_t const base = pos < 2 ? 0 : 2;
    bool all_right = true;
    for (std::size_t e = 0; e < count; ++e)
      all_right = all_right && last[pos][e] == static_cast<float>(2 * (99 + e % 7) + base + base + 1);
    CHECK(all_right);
  }
}

TEST_CASE("all_reduce: every member gets the same bits, below and above the split size", "[runtime][team]") {
  runtime rt{3};
  for (std::size_t count : {std::size_t{5}, std::size_t{1000}, std::size_t{30011}}) {  // 30011 floats: split, uneven
    for (auto op : {td::reduce_op::sum, td::reduce_op::max, td::reduce_op::min}) {
      td::team t(3, iota_ids(3));
      std::array<std::vector<float>, 3> ins, outs;
      for (std::size_t p = 0; p < 3; ++p) {
        ins[p].resize(count);
        outs[p].resize(count);
        for (std::size_t e = 0; e < count; ++e) ins[p][e] = 1.0f / static_cast<float>(1 + (e * 7 + p * 13) % 101);
      }
      rt.pool().run_all([&](int d) {
        std::size_t const pos = static_cast<std::size_t>(d);
        td::all_reduce(t, pos, group_of_members({0, 1, 2}, pos), signature(0, 1, count), ins[pos].data(),
                       outs[pos].data(), count, op);
      });
      std::vector<float> want(ins[0]);
      for (std::size_t p = 1; p < 3; ++p)
        for (std::size_t e = 0; e < count; ++e) {
          float const v = ins[p][e];
          want[e] = op == td::reduce_op::sum ? want[e] + v : op == td::reduce_op::max ? std::max(want[e], v)
                                                                                      : std::min(want[e], v);
        }
      INFO("count " << count << ", op " << static_cast<int>(op));
      for (std::size_t p = 0; p < 3; ++p) CHECK(std::memcmp(outs[p].data(), want.data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("team: a failure outside a group never frees buffers the group is still using", "[runtime][team][errors]") {
  // Device 3 fails while the pair {0, 1} runs large all-reduces that write into each other's
  // outputs. The pair may notice only at a barrier where nobody touches its buffers any more
  // (AddressSanitizer runs this too), and device 2, waiting for 3, is released.
  runtime rt{4};
  for (int delay_us : {0, 50, 300}) {
    td::team t(4, iota_ids(4));
    std::atomic<int> completed{0};
    try {
      rt.pool().run_all([&](int d) {
        std::size_t const pos = static_cast<std::size_t>(d);
        try {
          if (pos == 3) {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            throw std::runtime_error("device 3 failed");
          }
          auto const g = group_of_members(pos < 2 ? std::vector<std::size_t>{0, 1} : std::vector<std::size_t>{2, 3}, pos);
          std::size_t const count = 50000;
          for (std::uint32_t i = 0; i < 100000; ++i) {
            std::vector<float> in(count, static_cast<float>(pos)), out(count);  // fresh buffers, freed each round
            td::all_reduce(t, pos, g, signature(i, 1, count), in.data(), out.data(), count, td::reduce_op::sum);
            if (out[count - 1] != (pos < 2 ? 1.0f : 5.0f)) throw std::logic_error("wrong sum");
            completed.fetch_add(1);
          }
        } catch (...) {
          t.abort();
          throw;
        }
      });
      FAIL("no exception");
    } catch (tessera::device_error const& e) {
      INFO("delay " << delay_us << " us");
      REQUIRE(e.failures().size() == 4);  // 3 failed; 0, 1 and 2 abandoned their collectives
      CHECK(e.device() == 0);
      for (auto const& [dev, ex] : e.failures()) {
        if (dev == 3) REQUIRE_THROWS_WITH(std::rethrow_exception(ex), "device 3 failed");
        else REQUIRE_THROWS_AS(std::rethrow_exception(ex), tessera::collective_aborted);
      }
    }
  }
}

TEST_CASE("team: devices whose groups disagree get collective_mismatch, not a hang", "[runtime][team][errors]") {
  // A 2x2 mesh: device 0 reduces along 'y' ({0, 1}) while the others reduce along 'x'
  // ({0, 2} and {1, 3}). Devices 0 and 2 see the disagreement; 1 and 3 agree with each
  // other, finish their all-reduce and only then learn of the abort.
  runtime rt{4};
  td::team t(4, iota_ids(4));
  try {
    rt.pool().run_all([&](int d) {
      std::size_t const pos = static_cast<std::size_t>(d);
      try {
        bool const along_y = pos == 0;
        std::vector<std::size_t> members = along_y ? std::vector<std::size_t>{0, 1}
                                                   : std::vector<std::size_t>{pos % 2, pos % 2 + 2};
        std::vector<float> in(8, 1.0f), out(8);
        td::all_reduce(t, pos, group_of_members(members, pos), signature(0, along_y ? 2 : 1, 8), in.data(), out.data(),
                       8, td::reduce_op::sum);
      } catch (...) {
        t.abort();
        throw;
      }
    });
    FAIL("no exception");
  } catch (tessera::device_error const& e) {
    std::set<int> mismatched;
    for (auto const& [dev, ex] : e.failures()) {
      try {
        std::rethrow_exception(ex);
      } catch (tessera::collective_mismatch const& m) {
        mismatched.insert(dev);
        CHECK_THAT(m.what(), Contains("disagree on the collective"));
      } catch (tessera::collective_aborted const&) {
      }
    }
    CHECK(mismatched.count(0) + mismatched.count(2) >= 1);
    CHECK(mismatched.count(1) == 0);
    CHECK(mismatched.count(3) == 0);
  }
}
