// Forward values computed in the prelude of the pass that first reads them (expr/evaluate.hpp's
// pass_prelude, autodiff/tracer.hpp's node::schedule): an element-wise result under grad costs
// no dispatch of its own. These tests check the gradients where such values are read by
// element-wise passes, by products and by reductions, on devices whose block of the reading pass
// is empty, and that the seed's step no longer pays a dispatch per element-wise node.

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include "tessera/tessera.hpp"

#include "grad_support.hpp"

namespace {

using tessera::none;
using tessera::P;

using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

/// The round trips to the devices that `f()` makes (one "dispatch" span per dispatch).
template <class F>
long dispatches(F const& f) {
  tessera::trace tr;
  f();
  tr.stop();
  long n = 0;
  for (auto const& e : tr.events()) n += (e.category == "dispatch" && e.name == "dispatch") ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("values in a pass's prelude: the seed's logistic gradient makes no more dispatches than the hand-written one", "[grad]") {
  tessera::runtime rt{4};
  int const devices = GENERATE(1, 2, 4);
  std::size_t const B = 4 * static_cast<std::size_t>(devices) + 4, D = 6;
  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const ds = tessera::named_sharding(mesh, P<"X", none>{});
  auto const rep = tessera::named_sharding(mesh, P<>{});
  auto const xh = values<2>({B, D}, 0.4);
  xt::xtensor<double, 2> yh = xt::zeros<double>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) yh(i, 0) = (i % 2 == 0) ? 1.0 : 0.0;
  auto const x = tessera::device_put(xh, ds);
  auto const y = tessera::device_put(yh, ds);
  auto const w = tessera::device_put(values<2>({D, 1}, 1.5), rep);
  auto const b = tessera::device_put(values<1>({1}, 2.5), rep);
  double const scale = 2.0 / static_cast<double>(B);

  auto loss = [&](auto const& w_, auto const& b_) {
    auto const d = tessera::sigmoid(tessera::matmul(x, w_) + b_) - y;
    return tessera::mean(d * d);
  };
  // examples/training.cpp's train_step: the gradients written out, and the same step with grad.
  auto const hand = tessera::jit(
      [&](auto const& w_, auto const& b_) {
        auto const p = tessera::sigmoid(tessera::matmul(x, w_) + b_);
        auto const g = scale * (p - y) * p * (1.0 - p);
        return std::make_tuple(w_ - 0.1 * tessera::matmul(tessera::transpose(x), g), b_ - 0.1 * tessera::sum<0>(g));
      },
      tessera::in_shardings(rep, rep), tessera::out_shardings(rep, rep));
  auto const with_grad = tessera::jit(
      [&](auto const& w_, auto const& b_) {
        auto const [gw, gb] = tessera::grad<0, 1>(loss)(w_, b_);
        return std::make_tuple(w_ - 0.1 * gw, b_ - 0.1 * gb);
      },
      tessera::in_shardings(rep, rep), tessera::out_shardings(rep, rep));

  auto const [hw, hb] = hand(w, b);
  auto const [gw, gb] = with_grad(w, b);
  CHECK(max_abs_diff(tessera::to_host(gw), tessera::to_host(hw)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(gb), tessera::to_host(hb)) < 1e-12);
  long const by_hand = dispatches([&] { return hand(w, b); });
  long const by_grad = dispatches([&] { return with_grad(w, b); });
  INFO("hand-written: " << by_hand << " dispatches, grad: " << by_grad);
  // value_and_grad computes the loss in one more pass, whose prelude makes the values the
  // gradient reads (before, they cost a dispatch each there too).
  auto const plain_grad = [&] { return tessera::grad<0, 1>(loss)(w, b); };
  auto const with_value = [&] { return tessera::value_and_grad<0, 1>(loss)(w, b); };
  CHECK(dispatches(with_value) <= dispatches(plain_grad) + 1);
  // Before the prelude grad made 3 more: the forward `x @ w + b`, `sigmoid` and `- y` each in a pass.
  CHECK(by_grad <= by_hand);
}

TEST_CASE("values in a pass's prelude: long chains, values read by products, reductions and element-wise passes",
          "[grad]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 2});
  auto const xs = tessera::named_sharding(mesh, P<"X", "Y">{});
  std::size_t const M = 5, K = 4, N = 3;
  auto const xh = values<2>({M, K}, 0.2);
  auto const wh = values<2>({K, N}, 1.1);
  auto const x = tessera::device_put(xh, xs);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));

  SECTION("x^16 by repeated squaring") {
    auto f = [](auto const& v) {
      auto const a = v * v;
      auto const b2 = a * a;
      auto const c = b2 * b2;
      auto const d = c * c;
      return tessera::sum(d);
    };
    auto const g = tessera::to_host(tessera::grad(f)(x));
    auto const host_f = [](xt::xtensor<double, 2> const& v) { return double(xt::sum(xt::pow(v, 16))()); };
    CHECK(max_abs_diff(g, numeric_gradient(host_f, xh)) < 1e-6);
    // The value itself, through value_and_grad.
    auto const [value, g2] = tessera::value_and_grad(f)(x);
    CHECK(std::abs(double(tessera::to_host(value)()) - host_f(xh)) < 1e-12);
    CHECK(max_abs_diff(tessera::to_host(g2), g) == 0.0);
  }

  SECTION("h = tanh(x) * 0.5 read by a product and by an element-wise expression") {
    auto f = [&](auto const& v, auto const& w_) {
      auto const h = tessera::tanh(v) * 0.5;
      auto const out = tessera::matmul(h, w_);
      return tessera::mean(out * out) + tessera::sum(h * tessera::exp(h));
    };
    auto const [gx, gw] = tessera::grad<0, 1>(f)(x, w);
    auto const host_f = [&](xt::xtensor<double, 2> const& v, xt::xtensor<double, 2> const& w_) {
      xt::xtensor<double, 2> const h = xt::tanh(v) * 0.5;
      xt::xtensor<double, 2> out = xt::zeros<double>({M, N});
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j)
          for (std::size_t k = 0; k < K; ++k) out(i, j) += h(i, k) * w_(k, j);
      return double(xt::mean(out * out)()) + double(xt::sum(h * xt::exp(h))());
    };
    auto const fx = [&](xt::xtensor<double, 2> const& v) { return host_f(v, wh); };
    auto const fw = [&](xt::xtensor<double, 2> const& w_) { return host_f(xh, w_); };
    CHECK(max_abs_diff(tessera::to_host(gx), numeric_gradient(fx, xh)) < 1e-6);
    CHECK(max_abs_diff(tessera::to_host(gw), numeric_gradient(fw, wh)) < 1e-6);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(gx)>, std::remove_cvref_t<decltype(x)>>);
  }

  SECTION("a fused value returned by vjp, and passed to the cotangent") {
    auto f = [](auto const& v) { return tessera::sin(v) * v + 1.0; };
    auto [y, vjp_fn] = tessera::vjp(f, x);
    xt::xtensor<double, 2> const yh = xt::sin(xh) * xh + 1.0;
    CHECK(max_abs_diff(tessera::to_host(y), yh) < 1e-15);
    auto const ct = tessera::device_put(values<2>({M, K}, 0.7), xs);
    auto const [gx] = vjp_fn(ct);
    xt::xtensor<double, 2> const expect = tessera::to_host(ct) * (xt::cos(xh) * xh + xt::sin(xh));
    CHECK(max_abs_diff(tessera::to_host(gx), expect) < 1e-14);
  }
}

TEST_CASE("values in a pass's prelude: a replicated value computed on a device whose block of the pass is empty",
          "[grad]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"X">({4});
  // 3 rows on 4 devices: the last device holds no row of x, but all of v = tanh(w).
  auto const xh = values<2>({3, 4}, 0.3);
  auto const wh = values<1>({4}, 0.8);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto f = [&](auto const& w_) {
    auto const v = tessera::tanh(w_);
    auto const u = x * v;
    return tessera::sum(u * u);
  };
  auto const [value, g] = tessera::value_and_grad(f)(w);
  auto const host_f = [&](xt::xtensor<double, 1> const& w_) {
    xt::xtensor<double, 2> const u = xh * xt::tanh(w_);
    return double(xt::sum(u * u)());
  };
  CHECK(std::abs(double(tessera::to_host(value)()) - host_f(wh)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host_f, wh)) < 1e-6);
}
