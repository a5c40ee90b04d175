// Asynchronous dispatch (JAX's async dispatch, docs/async.md): evaluation and jit return
// futures at once, chains queue without waiting, readers wait, device errors surface at the
// next wait naming the operation, inputs dropped by the host stay alive for the queued work,
// and the synchronous mode (set_async_dispatch(false), TESSERA_ASYNC_DISPATCH=0) runs and
// throws at the call. The devices are held by a "gate" task queued first, so that what was
// queued behind it cannot have run yet; no test depends on timing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using tessera::none;
using tessera::P;
using tessera_test::same_array;
using Catch::Matchers::Contains;

namespace {

/// Holds every device of `pool` until open() (queued first, so everything after it waits).
struct gate {
  struct task {
    std::atomic<bool> open{false};
    void operator()(int) const {
      while (!open.load(std::memory_order_acquire)) std::this_thread::yield();
    }
  };
  std::shared_ptr<task> t = std::make_shared<task>();
  std::shared_ptr<tessera::detail::dispatch_completion> done;
  explicit gate(tessera::detail::device_pool& pool) {
    std::vector<int> ids;
    for (int d = 0; d < pool.size(); ++d) ids.push_back(pool.first_id() + d);
    done = pool.enqueue(std::span<int const>(ids), "gate", t);
  }
  void open() { t->open.store(true, std::memory_order_release); }
  ~gate() { open(); }
  gate(gate const&) = delete;
  gate& operator=(gate const&) = delete;
};

/// Restores the dispatch mode a test changed.
struct dispatch_mode {
  bool before;
  explicit dispatch_mode(bool on) : before(tessera::set_async_dispatch(on)) {}
  ~dispatch_mode() { tessera::set_async_dispatch(before); }
};

using S4 = tessera::named_sharding<tessera::mesh<"x">, P<"x">>;

/// An array of 8 floats over the 4 devices of `s` (device d's block: 2d, 2d + 1), made by a
/// dispatch named `what` queued on rt's pool, whose task on device d first calls before(d)
/// (which may hold the device, or throw as a failing kernel would).
template <class Before>
tessera::array<float, 1, S4> queued_pairs(tessera::runtime& rt, S4 const& s, char const* what, Before before) {
  using storage = tessera::detail::array_storage<float, 1, S4>;
  auto st = std::make_shared<storage>(storage{s, {8}, tessera::detail::pool_for(s, "test"), {}});
  st->buffers.resize(4);
  struct producer {
    std::shared_ptr<storage> st;
    Before before;
    void operator()(int d) {
      before(d);
      tessera::device_buffer<float> b(2, &st->pool->memory(d));
      b.data()[0] = static_cast<float>(2 * d);
      b.data()[1] = static_cast<float>(2 * d + 1);
      st->buffers[static_cast<std::size_t>(d)] = std::move(b);
    }
  };
  std::vector<int> const ids{0, 1, 2, 3};
  return tessera::array<float, 1, S4>(
      st, rt.pool().enqueue(std::span<int const>(ids), what, std::make_shared<producer>(producer{st, std::move(before)})));
}

xt::xtensor<float, 2> iota(std::size_t r, std::size_t c, float from) {
  xt::xtensor<float, 2> h = xt::zeros<float>({r, c});
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = from + static_cast<float>(i % 97) * 0.25f;
  return h;
}

/// a @ b on the host, in double (the inputs' products and sums are exact in float here).
xt::xtensor<float, 2> host_matmul(xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  xt::xtensor<float, 2> c = xt::zeros<float>({a.shape()[0], b.shape()[1]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t j = 0; j < b.shape()[1]; ++j) {
      double sum = 0;
      for (std::size_t k = 0; k < a.shape()[1]; ++k) sum += double(a(i, k)) * double(b(k, j));
      c(i, j) = static_cast<float>(sum);
    }
  return c;
}

}  // namespace

TEST_CASE("evaluation returns a future at once; a chain queues without waiting; readers wait", "[async]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const s = tessera::named_sharding(mesh, P<"x", none>{});
  auto const ha = iota(16, 8, 1.0f), hb = iota(16, 8, -3.0f);
  auto const a = tessera::device_put(ha, s);
  auto const b = tessera::device_put(hb, s);
  a.block_until_ready();
  b.block_until_ready();
  REQUIRE(a.is_ready());

  gate g(rt.pool());
  tessera::array c = a + b;  // queued behind the gate: cannot have run
  tessera::array d = c * 2.0f - a;
  tessera::array e = tessera::sin(d) + c;
  CHECK_FALSE(c.is_ready());
  CHECK_FALSE(d.is_ready());
  CHECK_FALSE(e.is_ready());
  CHECK(e.shape() == tessera::shape_t<2>{16, 8});  // shape and sharding are known at once, as JAX's are
  g.open();
  xt::xtensor<float, 2> const want_c = ha + hb;
  xt::xtensor<float, 2> const want_d = want_c * 2.0f - ha;
  xt::xtensor<float, 2> const want_e = xt::sin(want_d) + want_c;
  CHECK(xt::amax(xt::abs(tessera::to_host(e) - want_e))() < 1e-5f);  // to_host waits
  CHECK(e.is_ready());
  CHECK(same_array(tessera::to_host(d), want_d));
  tessera::block_until_ready(std::make_tuple(c, std::make_tuple(d)));
  for (auto const& sh : c.addressable_shards())
    for (std::size_t i = 0; i < sh.data.shape()[0]; ++i)
      CHECK(sh.data(i, 0) == want_c(sh.index[0].start + i, 0));
}

TEST_CASE("a matrix product and an einsum queue too; their partial sums wait for them", "[async][matmul]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const rows = tessera::named_sharding(mesh, P<"x", none>{});
  auto const ha = iota(16, 8, 1.0f), hw = iota(8, 8, -3.0f);
  auto const a = tessera::device_put(ha, rows);
  auto const w = tessera::device_put(hw, tessera::named_sharding(mesh, P<none, none>{}));
  a.block_until_ready();
  w.block_until_ready();
  xt::xtensor<float, 2> const want = host_matmul(ha, hw);
  std::optional<decltype(tessera::eval(tessera::matmul(a, w) * 2.0f))> product;
  std::optional<decltype(tessera::eval(tessera::einsum<"ij,jk->ik">(a, w)))> contracted;
  std::optional<tessera::array<float, 3, tessera::named_sharding<tessera::mesh<"x">, P<"x", none, none>>>> split;
  {
    gate g(rt.pool());
    // A reshape that keeps each device's rows (no communication) is queued as well.
    split.emplace(tessera::reshape(a, {16, 2, 4}, P<"x", none, none>{}));
    CHECK_FALSE(split->is_ready());
    // Row-parallel: each device its own rows, no sum; the product and what reads it are queued.
    product.emplace(tessera::eval(tessera::matmul(a, w) * 2.0f));
    contracted.emplace(tessera::eval(tessera::einsum<"ij,jk->ik">(a, w)));
    CHECK_FALSE(product->is_ready());
    CHECK_FALSE(contracted->is_ready());
  }  // the gate opens
  CHECK(same_array(tessera::to_host(*product), xt::xtensor<float, 2>(want * 2.0f)));
  CHECK(same_array(tessera::to_host(*contracted), want));
  CHECK(same_array(tessera::to_host(*split), xt::xtensor<float, 3>(xt::reshape_view(ha, {16, 2, 4}))));
  // Contracting over 'x' (partial sums, then their all-reduce): the sum reads the queued products.
  tessera::array g = tessera::matmul(tessera::transpose(a), a * 0.5f);
  xt::xtensor<float, 2> const gram = host_matmul(xt::xtensor<float, 2>(xt::transpose(ha)), xt::xtensor<float, 2>(ha * 0.5f));
  CHECK(xt::amax(xt::abs(tessera::to_host(g) - gram))() < 1e-3f);
}

TEST_CASE("reductions queue, with the all-reduce over sharded axes; the bits of the synchronous mode", "[async][reduction]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 2});
  auto const s = tessera::named_sharding(mesh, P<"x", "y">{});
  auto const h = iota(16, 8, -7.3f);
  // Each reduction in one mode (the other mode's results are compared bit for bit below).
  auto reduce_all = [&](bool async) {
    dispatch_mode mode(async);
    auto const a = tessera::device_put(h, s);
    a.block_until_ready();
    std::optional<gate> g;
    if (async) g.emplace(rt.pool());
    tessera::array s0 = tessera::sum<0>(a * 1.5f);         // over 'x': queued partial sums, then their sum
    tessera::array m1 = tessera::mean<1>(a);               // over 'y': the mean divides after the sum
    tessera::array mx = tessera::max<0, 1>(a);             // to a scalar, over both axes
    tessera::array p0 = tessera::prod<0>(a * 0.01f + 1.0f);
    tessera::array mk = tessera::mean<0>(a, tessera::keepdims);
    if (async) {
      CHECK_FALSE(s0.is_ready());
      CHECK_FALSE(m1.is_ready());
      CHECK_FALSE(mx.is_ready());
      CHECK_FALSE(p0.is_ready());
      CHECK_FALSE(mk.is_ready());
      g->open();
    }
    return std::make_tuple(tessera::to_host(s0), tessera::to_host(m1), tessera::to_host(mx), tessera::to_host(p0),
                           tessera::to_host(mk));
  };
  auto const [qs, qm, qx, qp, qk] = reduce_all(true);
  auto const [ss, sm, sx, sp, sk] = reduce_all(false);
  CHECK(same_array(qs, ss));
  CHECK(same_array(qm, sm));
  CHECK(same_array(qx, sx));
  CHECK(same_array(qp, sp));
  CHECK(same_array(qk, sk));
  // Against the host's reductions (double sums; the values are exact enough for float).
  xt::xtensor<float, 1> const want_s = xt::sum(xt::xtensor<double, 2>(xt::cast<double>(h) * 1.5), {0});
  xt::xtensor<float, 1> const want_m = xt::mean(xt::xtensor<double, 2>(xt::cast<double>(h)), {1});
  CHECK(xt::amax(xt::abs(qs - want_s))() < 1e-4f);
  CHECK(xt::amax(xt::abs(qm - want_m))() < 1e-5f);
  CHECK(qx() == xt::amax(h)());
  xt::xtensor<float, 1> const want_p = xt::prod(xt::xtensor<double, 2>(xt::cast<double>(h) * 0.01 + 1.0), {0});
  CHECK(xt::amax(xt::abs(qp - want_p) / xt::abs(want_p))() < 1e-5f);
  CHECK(qk.shape()[0] == 1);
}

TEST_CASE("a reshard queues, reading the source blocks on the devices after the work that writes them",
          "[async][reshard]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 2});
  xt::xtensor<float, 2> const h = iota(8, 6, -3.0f);
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"x", "y">{}));
  gate g(rt.pool());
  tessera::array const y = x * 2.0f;  // queued behind the gate
  // Every layout change of y: rows over "y" instead of "x", transposed axes, replicated.
  auto const a = tessera::device_put(y, tessera::named_sharding(mesh, P<"y", "x">{}));
  auto const b = tessera::device_put(y, tessera::named_sharding(mesh, P<none, "x">{}));
  auto const c = tessera::device_put(y, tessera::named_sharding(mesh, P<>{}));
  tessera::array const d = c + 1.0f;  // and a chain on a reshard's future
  CHECK_FALSE(a.is_ready());
  CHECK_FALSE(b.is_ready());
  CHECK_FALSE(c.is_ready());
  CHECK_FALSE(d.is_ready());
  g.open();
  xt::xtensor<float, 2> const want = h * 2.0f;
  CHECK(same_array(tessera::to_host(a), want));
  CHECK(same_array(tessera::to_host(b), want));
  CHECK(same_array(tessera::to_host(c), want));
  CHECK(same_array(tessera::to_host(d), xt::xtensor<float, 2>(want + 1.0f)));
  for (std::size_t p = 0; p < 4; ++p)  // every device holds the whole array
    CHECK(std::equal(want.begin(), want.end(), c.addressable_shards()[p].data.data()));
}

TEST_CASE("join/cut, indexing and sharded scans queue too, with the synchronous mode's values",
          "[async][join_cut][indexing][scan]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const rows = tessera::named_sharding(mesh, P<"x", none>{});
  xt::xtensor<float, 2> const ha = iota(8, 3, 1.0f), hb = iota(4, 3, -2.0f);
  xt::xtensor<std::int32_t, 2> const hi = {{0, 7, 3, 3}, {5, 1, 6, 2}, {4, 4, 0, 7}, {2, 6, 1, 5}};
  auto const a = tessera::device_put(ha, rows);
  auto const b = tessera::device_put(hb, rows);
  auto const ids = tessera::device_put(hi, rows);
  auto run = [&] {
    tessera::array const a2 = a * 2.0f;  // queued: everything below reads a future
    return std::make_tuple(tessera::eval(tessera::concatenate<0>(a2, b)),      // along the sharded axis
                           tessera::eval(tessera::slice_in_dim<0>(a2, 1, -1)),  // a cut of it
                           tessera::eval(tessera::flip<0>(a2)),
                           tessera::eval(tessera::take(a2, ids)),  // the table sharded over its rows
                           tessera::eval(tessera::cumsum<0>(a2)));  // a scan along the sharded axis
  };
  gate g(rt.pool());
  auto const queued = run();
  auto pending = [](auto const& r) { CHECK_FALSE(r.is_ready()); };
  auto ready = [](auto const& r) { CHECK(r.is_ready()); };
  std::apply([&](auto const&... r) { (pending(r), ...); }, queued);
  g.open();
  tessera::set_async_dispatch(false);
  auto const synchronous = run();
  std::apply([&](auto const&... r) { (ready(r), ...); }, synchronous);
  auto same = [](auto const& x, auto const& y) { CHECK(same_array(tessera::to_host(x), tessera::to_host(y))); };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (same(std::get<I>(queued), std::get<I>(synchronous)), ...);
  }(std::make_index_sequence<5>{});
  // And against the host.
  xt::xtensor<float, 2> const a2 = ha * 2.0f;
  CHECK(same_array(tessera::to_host(std::get<0>(queued)), xt::xtensor<float, 2>(xt::concatenate(xt::xtuple(a2, hb), 0))));
  CHECK(same_array(tessera::to_host(std::get<1>(queued)), xt::xtensor<float, 2>(xt::view(a2, xt::range(1, 7)))));
  CHECK(same_array(tessera::to_host(std::get<2>(queued)), xt::xtensor<float, 2>(xt::flip(a2, 0))));
  xt::xtensor<float, 3> taken = xt::zeros<float>({4, 4, 3});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t k = 0; k < 3; ++k) taken(i, j, k) = a2(static_cast<std::size_t>(hi(i, j)), k);
  CHECK(same_array(tessera::to_host(std::get<3>(queued)), taken));
  CHECK(same_array(tessera::to_host(std::get<4>(queued)), xt::xtensor<float, 2>(xt::cumsum(a2, 0))));
}

TEST_CASE("inputs the host drops stay alive for the work queued on them", "[async]") {
  dispatch_mode mode(true);
  auto const h = iota(32, 4, 0.5f);
  std::optional<tessera::array<float, 2, tessera::named_sharding<tessera::mesh<"x">, P<"x", none>>>> out;
  {
    tessera::runtime rt{4};
    auto const mesh = tessera::make_mesh<"x">({4});
    auto const s = tessera::named_sharding(mesh, P<"x", none>{});
    auto zero = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({32, 4})), s);
    {
      auto x = tessera::device_put(h, s);
      auto y = tessera::device_put(h, s);
      gate g(rt.pool());  // (device_put itself waits for its devices: it comes before the gate)
      out.emplace(tessera::eval(x * y + 1.0f));
      x = zero;  // overwritten
      CHECK_FALSE(out->is_ready());
    }  // and dropped: the gate opens
  }  // the runtime object too: the array keeps its devices alive
  CHECK(same_array(tessera::to_host(*out), xt::xtensor<float, 2>(h * h + 1.0f)));
}

TEST_CASE("a device reads its own blocks of a queued array without waiting for its peers' parts", "[async]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  S4 const s(mesh);
  // A producer whose part on device 3 is held until `release`; the others write at once.
  auto release = std::make_shared<std::atomic<bool>>(false);
  struct releaser {
    std::shared_ptr<std::atomic<bool>> r;
    ~releaser() { r->store(true, std::memory_order_release); }  // also when a check below throws
  } on_exit{release};
  auto const a = queued_pairs(rt, s, "held on device 3", [release](int d) {
    if (d == 3)
      while (!release->load(std::memory_order_acquire)) std::this_thread::yield();
  });
  tessera::array c = a * 2.0f + 1.0f;  // queued behind the producer on every device
  // Then a probe on every device: devices 0 to 2 reach it only once they have run c's part,
  // which reads their own blocks of a, while device 3 is still held in the producer.
  struct probe {
    std::shared_ptr<std::atomic<int>> count = std::make_shared<std::atomic<int>>(0);
    void operator()(int) const { count->fetch_add(1, std::memory_order_acq_rel); }
  };
  auto const p = std::make_shared<probe>();
  std::vector<int> const ids{0, 1, 2, 3};
  auto const probed = rt.pool().enqueue(std::span<int const>(ids), "probe", p);
  auto const t0 = std::chrono::steady_clock::now();
  while (p->count->load(std::memory_order_acquire) < 3 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
    std::this_thread::yield();
  CHECK(p->count->load() == 3);  // devices 0 to 2 did not wait for device 3's part
  CHECK_FALSE(c.is_ready());
  release->store(true, std::memory_order_release);
  probed->check();
  CHECK(same_array(tessera::to_host(c), xt::xtensor<float, 1>{1, 3, 5, 7, 9, 11, 13, 15}));
}

TEST_CASE("a device's error surfaces at the next wait, naming the operation, and poisons what reads it", "[async][errors]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  S4 const s(mesh);
  // An array whose producing dispatch throws on device 2 (as a failing kernel would).
  auto const bad = queued_pairs(rt, s, "my_kernel", [](int d) {
    if (d == 2) throw std::runtime_error("the kernel ran out of registers");
  });
  tessera::array c = bad + 1.0f;  // queued: no error yet
  REQUIRE_THROWS_AS(bad.block_until_ready(), tessera::device_error);
  REQUIRE_THROWS_WITH(bad.block_until_ready(), Contains("my_kernel (dispatched asynchronously) failed") &&
                                                   Contains("device 2 threw: the kernel ran out of registers"));
  try {
    tessera::to_host(c);
    FAIL("reading an array computed from a failed one must throw");
  } catch (tessera::device_error const& e) {
    CHECK_THAT(e.what(), Contains("evaluate (dispatched asynchronously) failed") && Contains("my_kernel") &&
                             Contains("ran out of registers"));
    // Only device 2's block of c reads a failed block: the others read their own blocks, which
    // their parts of my_kernel wrote, without waiting for device 2's part.
    REQUIRE(e.failures().size() == 1);
    CHECK(e.failures().front().first == 2);
  }
  // A reshard of the failed array (queued) fails too, at its wait.
  auto const moved = tessera::device_put(bad, tessera::named_sharding(mesh, P<>{}));
  CHECK_THROWS_WITH(moved.block_until_ready(), Contains("device_put (dispatched asynchronously) failed") &&
                                                   Contains("ran out of registers"));
  // The devices are free again: new work runs.
  auto const ok = tessera::device_put(xt::xtensor<float, 1>{1, 2, 3, 4, 5, 6, 7, 8}, s);
  CHECK(same_array(tessera::to_host(tessera::eval(ok * 2.0f)), xt::xtensor<float, 1>{2, 4, 6, 8, 10, 12, 14, 16}));

  SECTION("synchronous mode: the call that dispatches throws") {
    dispatch_mode sync(false);
    CHECK_FALSE(tessera::async_dispatch());
    REQUIRE_THROWS_AS(tessera::eval(bad * 3.0f), tessera::device_error);
    auto const r = tessera::eval(ok + ok);
    CHECK(r.is_ready());
  }
}

TEST_CASE("synchronous mode, and one device: the result is ready when evaluation returns", "[async]") {
  auto const h = iota(8, 8, 2.0f);
  {
    dispatch_mode sync(false);
    tessera::runtime rt{4};
    auto const s = tessera::named_sharding(tessera::make_mesh<"x">({4}), P<"x", none>{});
    auto const x = tessera::device_put(h, s);
    tessera::array y = x * x;
    CHECK(y.is_ready());
    CHECK(same_array(tessera::to_host(y), xt::xtensor<float, 2>(h * h)));
  }
  {
    dispatch_mode on(true);
    tessera::runtime rt{1};
    auto const s = tessera::named_sharding(tessera::make_mesh<"x">({1}), P<"x", none>{});
    tessera::array y = tessera::device_put(h, s) - 1.0f;
    CHECK(y.is_ready());  // one device: its task runs on the calling thread
    CHECK(same_array(tessera::to_host(y), xt::xtensor<float, 2>(h - 1.0f)));
  }
}

TEST_CASE("TESSERA_ASYNC_DISPATCH is read as the default", "[async]") {
  char const* old = std::getenv("TESSERA_ASYNC_DISPATCH");
  std::string const saved = old ? old : "";
  ::setenv("TESSERA_ASYNC_DISPATCH", "0", 1);
  CHECK_FALSE(tessera::detail::async_dispatch_from_environment());
  ::setenv("TESSERA_ASYNC_DISPATCH", "on", 1);
  CHECK(tessera::detail::async_dispatch_from_environment());
  ::setenv("TESSERA_ASYNC_DISPATCH", "maybe", 1);
  CHECK_THROWS_WITH(tessera::detail::async_dispatch_from_environment(), Contains("'maybe' is not 0 or 1"));
  if (old) ::setenv("TESSERA_ASYNC_DISPATCH", saved.c_str(), 1);
  else ::unsetenv("TESSERA_ASYNC_DISPATCH");
}

TEST_CASE("jit steps give the synchronous loop's values; grad reads their futures", "[async][jit]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const data = tessera::named_sharding(mesh, P<"x", none>{});
  auto const rep = tessera::named_sharding(mesh, P<none, none>{});
  auto const hx = iota(32, 8, -1.0f) * 0.1f;
  auto const hy = iota(32, 1, 0.0f) * 0.01f;
  auto const x = tessera::device_put(xt::xtensor<float, 2>(hx), data);
  auto const y = tessera::device_put(xt::xtensor<float, 2>(hy), data);
  auto const step = tessera::jit(
      [](auto const& w, auto const& xs, auto const& ys) {
        auto const r = tessera::matmul(xs, w) - ys;
        return w - 0.002f * tessera::matmul(tessera::transpose(xs), r);
      },
      tessera::in_shardings(rep, data, data), tessera::out_shardings(rep));
  auto run = [&](bool async) {
    dispatch_mode mode(async);
    auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({8, 1})), rep);
    for (int i = 0; i < 20; ++i) w = step(w, x, y);
    // grad of a loss at the (possibly queued) weights
    auto const gw = tessera::grad([&](auto const& v) { return tessera::sum(tessera::matmul(x, v)); })(w);
    return std::make_pair(tessera::to_host(w), tessera::to_host(gw));
  };
  auto const [w_sync, g_sync] = run(false);
  auto const [w_async, g_async] = run(true);
  CHECK(same_array(w_async, w_sync));
  CHECK(same_array(g_async, g_sync));
  // The reference: the same loop on the host.
  xt::xtensor<float, 2> w = xt::zeros<float>({8, 1});
  for (int i = 0; i < 20; ++i) {
    xt::xtensor<float, 2> r = xt::zeros<float>({32, 1});
    for (std::size_t n = 0; n < 32; ++n) {
      for (std::size_t k = 0; k < 8; ++k) r(n, 0) += hx(n, k) * w(k, 0);
      r(n, 0) -= hy(n, 0);
    }
    xt::xtensor<float, 2> next = w;
    for (std::size_t k = 0; k < 8; ++k) {
      float acc = 0;
      for (std::size_t n = 0; n < 32; ++n) acc += hx(n, k) * r(n, 0);
      next(k, 0) = w(k, 0) - 0.002f * acc;
    }
    w = next;
  }
  for (std::size_t k = 0; k < 8; ++k) CHECK(std::fabs(w_async(k, 0) - w(k, 0)) < 1e-4f);
}

TEST_CASE("several host threads queue on one runtime at once", "[async][threads]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const s = tessera::named_sharding(tessera::make_mesh<"x">({4}), P<"x">{});
  std::vector<std::thread> threads;
  std::vector<int> ok(3, 0);
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&, t] {
      xt::xtensor<float, 1> h = xt::arange<float>(0.0f, 64.0f) + static_cast<float>(t);
      auto x = tessera::device_put(h, s);
      xt::xtensor<float, 1> want = h;
      for (int i = 0; i < 30; ++i) {
        x = tessera::eval(x * 0.5f + 1.0f);
        want = want * 0.5f + 1.0f;
      }
      ok[static_cast<std::size_t>(t)] = same_array(tessera::to_host(x), want) ? 1 : 0;
    });
  for (auto& th : threads) th.join();
  CHECK(ok == std::vector<int>{1, 1, 1});
}

TEST_CASE("shard_map and synchronous dispatches run after the queued work they read", "[async][shard_map]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const s = tessera::named_sharding(mesh, P<"x">{});
  xt::xtensor<float, 1> const h = xt::arange<float>(0.0f, 16.0f);
  auto const x = tessera::device_put(h, s);
  gate g(rt.pool());
  tessera::array y = x + 1.0f;  // queued
  CHECK_FALSE(y.is_ready());
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    g.open();
  });
  auto const total = tessera::shard_map([](auto const& b) { return tessera::psum<"x">(xt::sum(b)()); }, mesh,
                                        tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}))(y);
  opener.join();
  CHECK(tessera::to_host(total)() == Approx(xt::sum(h)() + 16.0f));
  CHECK(y.is_ready());
}

TEST_CASE("a shard_map called again with its argument shapes is queued, with the first call's result shapes",
          "[async][shard_map]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 2});
  auto const s = tessera::named_sharding(mesh, P<"x", "y">{});
  xt::xtensor<float, 2> const h = iota(8, 6, 1.0f);
  auto const x = tessera::device_put(h, s);
  // Two results: each block doubled (P("x", "y")), and the row sums of the whole array
  // (psum over "y" of the block's row sums, gathered over "x": P()).
  auto const f = tessera::shard_map(
      [](auto const& b) {
        xt::xtensor<float, 1> rows = xt::sum(b, {1});
        return std::make_tuple(b * 2.0f, tessera::all_gather<"x">(tessera::psum<"y">(rows), 0, tessera::tiled));
      },
      mesh, tessera::in_specs(P<"x", "y">{}), tessera::out_specs(P<"x", "y">{}, P<>{}));
  xt::xtensor<float, 2> const twice = h * 2.0f;
  xt::xtensor<float, 1> const rows = xt::sum(h, {1});
  auto const [a0, r0] = f(x);  // the first call with these shapes runs at once (JAX traces it)
  CHECK(a0.is_ready());
  CHECK(r0.is_ready());
  CHECK(same_array(tessera::to_host(a0), twice));
  CHECK(same_array(tessera::to_host(r0), rows));

  gate g(rt.pool());
  auto const [a1, r1] = f(x);  // queued behind the gate: returned before any device has run it
  CHECK_FALSE(a1.is_ready());
  CHECK_FALSE(r1.is_ready());
  CHECK(a1.shape() == tessera::shape_t<2>{8, 6});  // known at once, as in JAX
  CHECK(r1.shape() == tessera::shape_t<1>{8});
  tessera::array const y = a1 + 1.0f;  // a chain queued on it, no wait in between
  CHECK_FALSE(y.is_ready());
  g.open();
  CHECK(same_array(tessera::to_host(a1), twice));
  CHECK(same_array(tessera::to_host(r1), rows));
  CHECK(same_array(tessera::to_host(y), xt::xtensor<float, 2>(twice + 1.0f)));

  // Other argument shapes: a first call again, run at once.
  auto const x2 = tessera::device_put(xt::xtensor<float, 2>(iota(4, 2, 0.5f)), s);
  auto const [a2, r2] = f(x2);
  CHECK(a2.is_ready());
  CHECK(same_array(tessera::to_host(r2), xt::xtensor<float, 1>(xt::sum(iota(4, 2, 0.5f), {1}))));

  // A copy of the shard_map shares what the first call learned; synchronous mode runs at once.
  auto const f2 = f;
  gate g2(rt.pool());
  auto const [a3, r3] = f2(x);
  CHECK_FALSE(a3.is_ready());
  g2.open();
  CHECK(same_array(tessera::to_host(r3), rows));
  tessera::set_async_dispatch(false);
  auto const [a4, r4] = f(x);
  CHECK(a4.is_ready());
  CHECK(same_array(tessera::to_host(a4), twice));
}

TEST_CASE("a queued shard_map's failures surface at the next wait, naming the device that failed",
          "[async][shard_map]") {
  dispatch_mode mode(true);
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(0.0f, 8.0f)),
                                     tessera::named_sharding(mesh, P<"x">{}));
  SECTION("a body whose result shape changes between calls with the same argument shapes") {
    std::size_t keep = 2;
    auto const f = tessera::shard_map([&](auto const& b) { return xt::xtensor<float, 1>(xt::view(b, xt::range(0, keep))); },
                                      mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    CHECK(same_array(tessera::to_host(f(x)), xt::xtensor<float, 1>{0, 1, 2, 3, 4, 5, 6, 7}));
    keep = 1;  // the queued call runs after this line
    auto const y = f(x);
    CHECK(y.shape() == tessera::shape_t<1>{8});
    CHECK_THROWS_WITH(y.block_until_ready(),
                      Contains("shard_map (dispatched asynchronously) failed") &&
                          Contains("result 0 has shape (1,) on device 0, but the first call with arguments of these "
                                   "shapes returned blocks of shape (2,)") &&
                          Contains("TESSERA_ASYNC_DISPATCH=0"));
  }
  SECTION("a device that throws in a collective's body releases its peers; only it is named") {
    bool fail = false;
    auto const f = tessera::shard_map(
        [&](auto const& b) {
          if (fail && tessera::axis_index<"x">() == 2) throw std::runtime_error("device two gives up");
          return tessera::psum<"x">(b);
        },
        mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
    CHECK(same_array(tessera::to_host(f(x)), xt::xtensor<float, 1>{12, 16}));
    fail = true;
    auto const y = f(x);
    try {
      y.block_until_ready();
      FAIL("no error");
    } catch (tessera::device_error const& e) {
      REQUIRE(e.failures().size() == 1);
      CHECK(e.failures()[0].first == 2);
      CHECK_THAT(e.what(), Contains("device two gives up"));
    }
    fail = false;
    CHECK(same_array(tessera::to_host(f(x)), xt::xtensor<float, 1>{12, 16}));  // the devices go on
  }
}
