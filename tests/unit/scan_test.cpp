// cumsum, cumprod, cummax and cummin against plain xtensor references (xt::cumsum, xt::cumprod,
// running max/min loops in double): over meshes of 1, 2 and 3 axes, the scanned dimension
// unsharded (a local scan) or sharded over Auto axes (block totals all-gathered), forward and
// reversed, float and integer; their collectives as explain() lists them; gradients against
// central finite differences.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xaccumulator.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "grad_support.hpp"

using tessera::none;
using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

namespace {

template <class E>
auto host(E const& e) {
  return tessera::to_host(tessera::eval(e));
}

/// The running op of x along `axis` in double (reverse: from the end), by plain loops.
template <std::size_t N, class F>
xt::xtensor<double, N> running(xt::xtensor<double, N> const& x, std::size_t axis, bool reverse, F f) {
  xt::xtensor<double, N> out = x;
  std::size_t const len = x.shape()[axis];
  std::size_t inner = 1, outer = 1;
  for (std::size_t d = 0; d < N; ++d) (d < axis ? outer : inner) *= d == axis ? 1 : x.shape()[d];
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t j = 0; j < inner; ++j)
      for (std::size_t s = 1; s < len; ++s) {
        std::size_t const i = reverse ? len - 1 - s : s, p = reverse ? i + 1 : i - 1;
        out.flat((o * len + i) * inner + j) = f(out.flat((o * len + p) * inner + j), x.flat((o * len + i) * inner + j));
      }
  return out;
}

double add(double a, double b) { return a + b; }
double mul(double a, double b) { return a * b; }
double mx(double a, double b) { return std::max(a, b); }
double mn(double a, double b) { return std::min(a, b); }

/// Every scan of x (sharded as it is) along Axis, forward and reversed, against the references.
template <int Axis, class X, std::size_t N>
void check_all_scans(X const& x, xt::xtensor<double, N> const& h, double tol) {
  constexpr std::size_t a = Axis < 0 ? Axis + N : Axis;
  INFO("axis " << Axis << " of " << tessera::type_of(x));
  CHECK(max_abs_diff(host(tessera::cumsum<Axis>(x)), xt::xtensor<double, N>(xt::cumsum(h, a))) <= tol);
  CHECK(max_abs_diff(host(tessera::cumprod<Axis>(x)), xt::xtensor<double, N>(xt::cumprod(h, a))) <= tol);
  CHECK(max_abs_diff(host(tessera::cummax<Axis>(x)), running(h, a, false, mx)) == 0);
  CHECK(max_abs_diff(host(tessera::cummin<Axis>(x)), running(h, a, false, mn)) == 0);
  CHECK(max_abs_diff(host(tessera::cumsum<Axis, true>(x)), running(h, a, true, add)) <= tol);
  CHECK(max_abs_diff(host(tessera::cumprod<Axis, true>(x)), running(h, a, true, mul)) <= tol);
  CHECK(max_abs_diff(host(tessera::cummax<Axis, true>(x)), running(h, a, true, mx)) == 0);
  CHECK(max_abs_diff(host(tessera::cummin<Axis, true>(x)), running(h, a, true, mn)) == 0);
  // The result keeps the operand's sharding (JAX's rule; on Auto axes, its layout).
  CHECK(tessera::type_of(tessera::cumsum<Axis>(x)) == tessera::type_of(x));
}

}  // namespace

TEST_CASE("scans along unsharded and sharded dimensions match xtensor on 1, 2 and 3 axis meshes", "[scan]") {
  tessera::runtime rt{8};
  SECTION("one axis, long lines scanned in tiles (with a remainder), uneven blocks") {
    auto const mesh = tessera::make_mesh<"x">({8});
    // 8 * 8192 + 13 elements: blocks of 8194 (the last 8155): 4 tiles of 2048 and a rest each.
    auto const h = values<1>({8 * 8192 + 13}, 0.3);
    xt::xtensor<double, 1> const hp = 1.0 + h * 1e-4;  // products of many factors stay finite
    auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"x">{}));
    auto const xp = tessera::device_put(hp, tessera::named_sharding(mesh, P<"x">{}));
    check_all_scans<0>(x, h, 1e-9);
    check_all_scans<-1>(xp, hp, 1e-9);
    auto const r = tessera::device_put(h, tessera::named_sharding(mesh, P<>{}));
    check_all_scans<0>(r, h, 1e-9);
  }
  SECTION("two axes: every dimension sharded, one, or none; uneven blocks") {
    auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
    auto const h = values<2>({8, 12}, 0.7);
    auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
    check_all_scans<0>(x, h, 1e-12);
    check_all_scans<1>(x, h, 1e-12);
    check_all_scans<-1>(x, h, 1e-12);
    auto const t = tessera::device_put(h, tessera::named_sharding(mesh, P<"Y", "X">{}));
    check_all_scans<0>(t, h, 1e-12);
    check_all_scans<1>(t, h, 1e-12);
    auto const both = tessera::device_put(h, tessera::named_sharding(mesh, P<tessera::axes<"X", "Y">, none>{}));
    check_all_scans<0>(both, h, 1e-12);
    check_all_scans<1>(both, h, 1e-12);
    // 6 rows over 4 devices: blocks of 2, 2, 2 and 0.
    auto const u = values<2>({6, 5}, 1.1);
    auto const xu = tessera::device_put(u, tessera::named_sharding(mesh, P<"Y", "X">{}));
    check_all_scans<0>(xu, u, 1e-12);
    check_all_scans<1>(xu, u, 1e-12);
  }
  SECTION("three axes") {
    auto const mesh = tessera::make_mesh<"a", "b", "c">({2, 2, 2});
    auto const h = values<3>({4, 6, 8}, 0.2);
    auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"a", "b", "c">{}));
    check_all_scans<0>(x, h, 1e-12);
    check_all_scans<1>(x, h, 1e-12);
    check_all_scans<2>(x, h, 1e-12);
    auto const y = tessera::device_put(h, tessera::named_sharding(mesh, P<none, tessera::axes<"c", "a">, "b">{}));
    check_all_scans<1>(y, h, 1e-12);
    check_all_scans<-3>(y, h, 1e-12);
  }
}

TEST_CASE("scans of integers and booleans: jnp's types, wrap-around, exact values", "[scan]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  xt::xtensor<std::int8_t, 2> h({8, 8});
  xt::xtensor<bool, 2> hb({8, 8});
  for (std::size_t i = 0; i < h.size(); ++i) {
    h.flat(i) = static_cast<std::int8_t>(static_cast<int>(i * 37 % 29) - 9);
    hb.flat(i) = i % 3 != 0;
  }
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"Y", none>{}));
  tessera::array const s = tessera::cumsum<1>(x);  // int8, wrapping as jnp.cumsum does
  CHECK(tessera::type_of(s) == "int8[8@X,8@Y]");
  tessera::array const sb = tessera::cumsum<0>(b);
  CHECK(tessera::type_of(sb) == "int32[8@Y,8]");
  tessera::array const pb = tessera::cumprod<0, true>(b);
  CHECK(tessera::type_of(pb) == "int32[8@Y,8]");
  auto const hs = host(s);
  auto const hsb = host(sb);
  auto const hpb = host(pb);
  auto const hm = host(tessera::cummax<0>(x));
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 8; ++j) {
      int acc = 0, cnt = 0, prod = 1, mx = -128;
      for (std::size_t k = 0; k <= j; ++k) acc += h(i, k);
      for (std::size_t k = 0; k <= i; ++k) cnt += hb(k, j), mx = std::max<int>(mx, h(k, j));
      for (std::size_t k = i; k < 8; ++k) prod *= hb(k, j);
      CHECK(hs(i, j) == static_cast<std::int8_t>(static_cast<std::uint8_t>(acc & 0xFF)));
      CHECK(hsb(i, j) == cnt);
      CHECK(hpb(i, j) == prod);
      CHECK(hm(i, j) == mx);
    }
}

TEST_CASE("a scan along a sharded Auto dimension all-gathers the block totals, not the operand", "[scan]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const h = values<2>({8, 16}, 0.4);
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
  // Along Y (4 blocks of 4 columns): one total per row and device, 4 per row after the gather.
  auto const plan = tessera::explain(tessera::cumsum<1>(x));
  REQUIRE(plan.count() == 1);
  CHECK(plan.collectives[0].kind == "all-gather");
  CHECK(plan.collectives[0].axes == std::vector<std::string>{"Y"});
  CHECK(plan.collectives[0].bytes_per_device == 4 * 4 * sizeof(double));  // 4 rows x 4 totals
  CHECK(tessera::explain(tessera::cumsum<0>(tessera::reshard(x, P<none, "Y">{}))).count("all-gather") == 1);
  CHECK(tessera::explain(tessera::cummax<1>(tessera::reshard(x, P<"X", none>{}) * 2.0)).count() == 1);
  CHECK(tessera::explain(tessera::cummax<0>(x * 2.0)).count() == 1);
  // A fused operand is evaluated once, in its own layout; the counter sees the plan's collectives.
  tessera::collective_counter counter;
  auto const y = tessera::eval(tessera::cumprod<0>(x * 0.5 + 1.0));
  CHECK(counter.count("all-gather") == 1);
  CHECK(max_abs_diff(tessera::to_host(y), xt::xtensor<double, 2>(xt::cumprod(h * 0.5 + 1.0, 0))) <= 1e-12);
  // Along an unsharded dimension nothing moves.
  CHECK(tessera::explain(tessera::cumsum<0>(tessera::device_put(h, tessera::named_sharding(mesh, P<none, "Y">{})))).count() == 0);
}

TEST_CASE("scan gradients against finite differences, sharded or not, with zeros and ties", "[scan][grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto h = values<2>({4, 16}, 0.9);
  // The weights make every element matter; the loss is sum(w * scan(x)).
  auto const wh = values<2>({4, 16}, 2.3);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto check = [&](auto scan, auto host_scan, auto spec, char const* name) {
    INFO(name);
    auto const x = tessera::device_put(h, tessera::named_sharding(mesh, spec));
    auto const g = tessera::to_host(tessera::grad([&](auto const& v) { return tessera::sum(w * scan(v)); })(x));
    auto const fd = numeric_gradient([&](auto const& v) { return xt::sum(wh * host_scan(v))(); }, h);
    CHECK(max_abs_diff(g, fd) <= 1e-6);
  };
  auto cs = [](auto const& v) { return tessera::cumsum<1>(v); };
  auto cs_h = [](auto const& v) { return xt::xtensor<double, 2>(xt::cumsum(v, 1)); };
  auto csr = [](auto const& v) { return tessera::cumsum<-1, true>(v); };
  auto csr_h = [](auto const& v) { return running(xt::xtensor<double, 2>(v), 1, true, add); };
  auto cp = [](auto const& v) { return tessera::cumprod<1>(v); };
  auto cp_h = [](auto const& v) { return xt::xtensor<double, 2>(xt::cumprod(v, 1)); };
  auto cpr0 = [](auto const& v) { return tessera::cumprod<0, true>(v); };
  auto cpr0_h = [](auto const& v) { return running(xt::xtensor<double, 2>(v), 0, true, mul); };
  auto cm = [](auto const& v) { return tessera::cummax<1>(v); };
  auto cm_h = [](auto const& v) { return running(xt::xtensor<double, 2>(v), 1, false, mx); };
  auto cn = [](auto const& v) { return tessera::cummin<1, true>(v); };
  auto cn_h = [](auto const& v) { return running(xt::xtensor<double, 2>(v), 1, true, mn); };
  for (int layout = 0; layout < 2; ++layout) {
    auto run = [&](auto spec) {
      check(cs, cs_h, spec, "cumsum");
      check(csr, csr_h, spec, "cumsum reverse");
      check(cp, cp_h, spec, "cumprod");
      check(cpr0, cpr0_h, spec, "cumprod reverse, axis 0");
      check(cm, cm_h, spec, "cummax");
      check(cn, cn_h, spec, "cummin reverse");
    };
    if (layout == 0) run(P<"X", "Y">{});  // the scanned dimension sharded (Auto axes)
    else run(P<"X", none>{});
  }
  // A zero in a product: the gradient of the elements before it still flows (no division by x).
  h(1, 5) = 0.0;
  check(cp, cp_h, P<"X", "Y">{}, "cumprod with a zero");
  h(2, 9) = 0.0;
  h(2, 3) = 0.0;
  check(cp, cp_h, P<none, "Y">{}, "cumprod with two zeros in a row's line");
}

TEST_CASE("cummax's gradient splits ties as JAX's associative scan does", "[scan][grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  // jax.grad(lambda x: jax.lax.cummax(x).sum())(jnp.ones(5)), and 3 equal values.
  xt::xtensor<float, 1> const five = xt::ones<float>({5});
  auto const x = tessera::device_put(five, tessera::named_sharding(mesh, P<"x">{}));
  auto const g = tessera::to_host(tessera::grad([](auto const& v) { return tessera::sum(tessera::cummax<0>(v)); })(x));
  CHECK(max_abs_diff(g, xt::xtensor<float, 1>{2.125f, 1.125f, 0.875f, 0.375f, 0.5f}) == 0);
  xt::xtensor<float, 1> const three = xt::ones<float>({3});
  auto const x3 = tessera::device_put(three, tessera::named_sharding(mesh, P<>{}));
  auto const g3 = tessera::to_host(tessera::grad([](auto const& v) { return tessera::sum(tessera::cummin<0>(v)); })(x3));
  CHECK(max_abs_diff(g3, xt::xtensor<float, 1>{1.75f, 0.75f, 0.5f}) == 0);
  // cumprod with zeros: jax.grad(lambda x: jnp.cumprod(x).sum())([1, 0, 2, 0, 3]) = [1, 3, 0, 0, 0].
  xt::xtensor<float, 1> const z{1.f, 0.f, 2.f, 0.f, 3.f};
  auto const xz = tessera::device_put(z, tessera::named_sharding(mesh, P<>{}));
  auto const gz = tessera::to_host(tessera::grad([](auto const& v) { return tessera::sum(tessera::cumprod<0>(v)); })(xz));
  CHECK(max_abs_diff(gz, xt::xtensor<float, 1>{1.f, 3.f, 0.f, 0.f, 0.f}) == 0);
}

TEST_CASE("scans in shard_map bodies: blocks, and local tracers under grad", "[scan][shard_map]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const h = values<2>({8, 16}, 0.6);
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
  // Each device scans its own 4 x 4 block along its columns: the global view of the unsharded
  // row blocks scanned within each block.
  auto const body = [](auto const& blk) { return tessera::cumsum<1>(blk) * tessera::cummax<0, true>(blk); };
  auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"X", "Y">{}), tessera::out_specs(P<"X", "Y">{}));
  auto const got = tessera::to_host(sm(x));
  xt::xtensor<double, 2> want(h.shape());
  for (std::size_t bi = 0; bi < 2; ++bi)
    for (std::size_t bj = 0; bj < 4; ++bj) {
      xt::xtensor<double, 2> blk = xt::view(h, xt::range(4 * bi, 4 * bi + 4), xt::range(4 * bj, 4 * bj + 4));
      xt::view(want, xt::range(4 * bi, 4 * bi + 4), xt::range(4 * bj, 4 * bj + 4)) =
          xt::cumsum(blk, 1) * running(blk, 0, true, mx);
    }
  CHECK(max_abs_diff(got, want) <= 1e-12);
  // grad through the body (local tracers) against finite differences of the host computation.
  auto const loss_body = [](auto const& blk) {
    return tessera::psum<"X", "Y">(tessera::sum(tessera::cumprod<1>(blk) + tessera::cummin<0>(blk)));
  };
  auto const loss = tessera::shard_map(loss_body, mesh, tessera::in_specs(P<"X", "Y">{}), tessera::out_specs(P<>{}));
  auto const g = tessera::to_host(tessera::grad(loss)(x));
  auto const fd = numeric_gradient(
      [](xt::xtensor<double, 2> const& v) {
        double s = 0;
        for (std::size_t bi = 0; bi < 2; ++bi)
          for (std::size_t bj = 0; bj < 4; ++bj) {
            xt::xtensor<double, 2> blk = xt::view(v, xt::range(4 * bi, 4 * bi + 4), xt::range(4 * bj, 4 * bj + 4));
            s += xt::sum(xt::cumprod(blk, 1))() + xt::sum(running(blk, 0, false, mn))();
          }
        return s;
      },
      h);
  CHECK(max_abs_diff(g, fd) <= 1e-6);
}
