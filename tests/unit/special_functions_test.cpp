// tessera::erf, erfc, gelu (both forms), silu/swish and softplus (expr/special_functions.hpp):
// values against the C library's formulas in double on sharded arrays (Auto and Explicit 2x4
// meshes), the edge values (+-inf, NaN, overflow), one fused node with no communication, and
// gradients against central finite differences in double: on the global view, and through a
// shard_map body on blocks (local tracers). JAX's own values: tests/jax/special_functions_golden_test.cpp.

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include "tessera/tessera.hpp"

#include "grad_support.hpp"

namespace {

using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

/// The independent references, in double with the C library.
double ref(std::string const& f, double x) {
  double const pi = 3.14159265358979323846;
  if (f == "erf") return std::erf(x);
  if (f == "erfc") return std::erfc(x);
  if (f == "gelu") return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
  if (f == "gelu_exact") return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  if (f == "silu") return x / (1 + std::exp(-x));
  return std::log1p(std::exp(-std::abs(x))) + std::max(x, 0.0);  // softplus
}

/// Calls fn(name, f) for each function under test, f taking any operand.
template <class Fn>
void each_function(Fn fn) {
  fn("erf", [](auto const& v) { return tessera::erf(v); });
  fn("erfc", [](auto const& v) { return tessera::erfc(v); });
  fn("gelu", [](auto const& v) { return tessera::gelu(v); });
  fn("gelu_exact", [](auto const& v) { return tessera::gelu<false>(v); });
  fn("silu", [](auto const& v) { return tessera::swish(v); });
  fn("softplus", [](auto const& v) { return tessera::softplus(v); });
}

template <class Mesh>
void values_and_gradients(Mesh const& mesh) {
  xt::xtensor<double, 2> const xh = values<2>({8, 12}, 0.4) * 4.0;
  xt::xtensor<double, 2> const wh = values<2>({8, 12}, 1.9);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"x", "y">{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"x", "y">{}));
  each_function([&](std::string const& name, auto f) {
    INFO(name);
    tessera::collective_counter counter;
    auto const y = tessera::eval(f(x));
    CHECK(counter.count() == 0);  // element-wise: each device its own block
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, std::remove_cvref_t<decltype(x)>>);
    xt::xtensor<double, 2> want = xh;
    for (auto& v : want) v = ref(name, v);
    CHECK(max_abs_diff(tessera::to_host(y), want) < 1e-14);

    auto const host_loss = [&](xt::xtensor<double, 2> const& v) {
      double s = 0;
      for (std::size_t i = 0; i < v.size(); ++i) s += ref(name, v.flat(i)) * wh.flat(i);
      return s;
    };
    auto const ng = numeric_gradient(host_loss, xh);
    auto const g = tessera::grad([&](auto const& v) { return tessera::sum(f(v) * w); })(x);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(x)>>);
    CHECK(max_abs_diff(tessera::to_host(g), ng) < 1e-8);

    // The same body in a shard_map: blocks without grad, local tracers under grad.
    auto const body = [&](auto const& xb, auto const& wb) { return tessera::psum<"x", "y">(tessera::sum(f(xb) * wb)); };
    auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"x", "y">{}, P<"x", "y">{}),
                                       tessera::out_specs(P<>{}));
    CHECK(std::abs(tessera::to_host(sm(x, w))() - host_loss(xh)) < 1e-12);
    auto const gs = tessera::grad([&](auto const& v) { return sm(v, w); })(x);
    CHECK(max_abs_diff(tessera::to_host(gs), ng) < 1e-8);
  });
}

}  // namespace

TEST_CASE("special functions: values and gradients on an Auto 2x4 mesh, in the global view and in shard_map",
          "[special]") {
  tessera::runtime rt{8};
  values_and_gradients(tessera::make_mesh<"x", "y">({2, 4}));
}

TEST_CASE("special functions: values and gradients on an Explicit 2x4 mesh, in the global view and in shard_map",
          "[special]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  values_and_gradients(mesh);
  xt::xtensor<float, 2> const h = xt::xtensor<float, 2>({{1, 2, 3, 4}, {5, 6, 7, 8}});
  auto const a = tessera::device_put(h, tessera::named_sharding(mesh, P<"x", "y">{}));
  CHECK(tessera::type_of(tessera::eval(tessera::gelu(a))) == "float32[2@x,4@y]");
}

TEST_CASE("special functions: float32 gradients in a shard_map body are the global view's bits", "[special]") {
  // The local tracers' rules call the global rules' derivatives (JAX's steps), so a gradient
  // through shard_map equals the global view's bit for bit (softplus's was sigmoid: 1-ulp apart).
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  xt::xtensor<float, 2> const xh = xt::cast<float>(values<2>({8, 12}, 0.4) * 4.0);
  xt::xtensor<float, 2> const wh = xt::cast<float>(values<2>({8, 12}, 1.9));
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"x", "y">{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"x", "y">{}));
  each_function([&](std::string const& name, auto f) {
    INFO(name);
    auto const global = tessera::to_host(tessera::grad([&](auto const& v) { return tessera::sum(f(v) * w); })(x));
    auto const body = [&](auto const& xb, auto const& wb) { return tessera::psum<"x", "y">(tessera::sum(f(xb) * wb)); };
    auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"x", "y">{}, P<"x", "y">{}),
                                       tessera::out_specs(P<>{}));
    auto const local = tessera::to_host(tessera::grad([&](auto const& v) { return sm(v, w); })(x));
    std::size_t differ = 0;
    for (std::size_t i = 0; i < global.size(); ++i)
      differ += std::bit_cast<std::uint32_t>(global.flat(i)) != std::bit_cast<std::uint32_t>(local.flat(i));
    CHECK(differ == 0);
  });
}

TEST_CASE("special functions: integers compute in float32, edges, one fused node", "[special]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  float const inf = std::numeric_limits<float>::infinity();
  float const nan = std::numeric_limits<float>::quiet_NaN();
  xt::xtensor<float, 1> const h = {-inf, -100.f, -4.f, -0.f, 0.f, 1e-30f, 4.f, 100.f, inf, nan, 3.9f, -3.9f, 90.f, -90.f,
                                   0.5f, -0.5f};
  auto const a = tessera::device_put(h, tessera::named_sharding(mesh, P<"y">{}));
  auto const e = tessera::to_host(tessera::eval(tessera::erf(a)));
  CHECK(e(0) == -1.f);
  CHECK(e(8) == 1.f);
  CHECK(std::isnan(e(9)));
  CHECK(e(10) == 1.f);  // XLA's select: +-1 from |x| >= 3.8325
  CHECK(std::signbit(e(3)));
  CHECK(e(5) == 1.1283791f * 1e-30f);
  auto const s = tessera::to_host(tessera::eval(tessera::softplus(a)));
  CHECK(s(0) == 0.f);
  CHECK(s(8) == inf);
  CHECK(s(7) == 100.f);  // no overflow of exp(100)
  CHECK(s(12) == 90.f);
  CHECK(std::isnan(s(9)));
  auto const g = tessera::to_host(tessera::eval(tessera::gelu(a)));
  CHECK(g(7) == 100.f);
  CHECK(g(1) == 0.f);
  CHECK(std::isnan(g(9)));

  xt::xtensor<int, 1> const ih = {-2, -1, 0, 1, 2, 3, 4, 5};
  auto const ia = tessera::device_put(ih, tessera::named_sharding(mesh, P<"x">{}));
  auto const ie = tessera::eval(tessera::erf(ia));
  STATIC_REQUIRE(std::is_same_v<typename std::remove_cvref_t<decltype(ie)>::value_type, float>);
  CHECK(tessera::type_of(ie) == "float32[8@x]");

  // One expression: erf and gelu fuse with their neighbours; evaluating it moves nothing.
  auto const expr = tessera::gelu(a) * 2.f + tessera::erf(a) - tessera::silu(a);
  tessera::collective_counter counter;
  auto const v = tessera::to_host(tessera::eval(expr));
  CHECK(counter.count() == 0);
  for (std::size_t i = 0; i < 9; ++i) {
    if (i == 0 || i == 8) continue;  // +-inf: inf - inf
    double const x = h(i);
    CHECK(v(i) == Approx(ref("gelu", x) * 2 + ref("erf", x) - ref("silu", x)).margin(1e-5));
  }
}
