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
  SECTION("one axis, a long line cut into chains") {
    auto const mesh = tessera::make_mesh<"x">({8});
    // 8 * 8192 elements: each device's part is long enough to be scanned as 8 chains.
    auto const h = values<1>({8 * 8192}, 0.3);
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
