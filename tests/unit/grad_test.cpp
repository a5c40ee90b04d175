// tessera::grad, value_and_grad, vjp and stop_gradient (jax.grad and friends) on sharded arrays.
// Every rule is checked against central finite differences in double, computed on the host with
// plain xtensor from the same function; gradients keep their primals' types; the collectives a
// gradient runs are counted.

#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "tessera/tessera.hpp"

#include "grad_support.hpp"

namespace {

using tessera::none;
using tessera::P;

using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

}  // namespace

TEST_CASE("grad of the seed's logistic regression loss: types kept, values against finite differences, one all-reduce each",
          "[grad]") {
  tessera::runtime rt{8};
  std::size_t const devices = GENERATE(1, 2, 4, 8);
  std::size_t const B = 4 * devices + 3 * (devices > 1 ? 0 : 1);
  std::size_t const D = 5;
  auto const mesh = tessera::make_mesh<"X">({static_cast<int>(devices)});
  auto const xs = tessera::named_sharding(mesh, P<"X", none>{});
  auto const xh = values<2>({B, D}, 0.1);
  xt::xtensor<double, 2> yh = xt::zeros<double>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) yh(i, 0) = (i % 3 == 0) ? 1.0 : 0.0;
  auto const wh = values<2>({D, 1}, 2.0);
  auto const bh = values<1>({1}, 3.0);
  auto const x = tessera::device_put(xh, xs);
  auto const y = tessera::device_put(yh, xs);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto const b = tessera::device_put(bh, tessera::named_sharding(mesh, P<>{}));

  auto loss = [&](auto const& w_, auto const& b_) {
    auto const p = tessera::sigmoid(tessera::matmul(x, w_) + b_);
    return tessera::mean((p - y) * (p - y));
  };
  auto host_loss = [&](xt::xtensor<double, 2> const& wv, xt::xtensor<double, 1> const& bv) {
    double s = 0;
    for (std::size_t i = 0; i < B; ++i) {
      double z = bv(0);
      for (std::size_t k = 0; k < D; ++k) z += xh(i, k) * wv(k, 0);
      double const p = 1 / (1 + std::exp(-z));
      s += (p - yh(i, 0)) * (p - yh(i, 0));
    }
    return s / static_cast<double>(B);
  };

  // The hand-written gradients of examples/training.cpp, for the collectives they run.
  std::size_t hand_collectives = 0;
  {
    tessera::collective_counter hand;
    auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
    auto const g = (2.0 / static_cast<double>(B)) * (p - y) * p * (1.0 - p);
    auto const hw = tessera::eval(tessera::matmul(tessera::transpose(x), g));
    auto const hb = tessera::eval(tessera::sum<0>(g));
    hand_collectives = hand.count();
    CHECK(hand.count("all-reduce") == (devices > 1 ? 2u : hand_collectives));
  }

  // explain(): the plan of the gradient before it runs, the hand-written step's collectives.
  auto const plan = tessera::explain(tessera::grad<0, 1>(loss), w, b);
  CHECK(plan.count() == hand_collectives);
  CHECK(plan.count("all-reduce") == hand_collectives);
  CHECK(plan.result == "(float64[5,1], float64[1])");

  tessera::collective_counter counter;
  auto const [gw, gb] = tessera::grad<0, 1>(loss)(w, b);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gw)>, std::remove_cvref_t<decltype(w)>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gb)>, std::remove_cvref_t<decltype(b)>>);
  // One all-reduce per gradient, as the hand-written step runs (none for the unused loss value).
  CHECK(counter.count() == hand_collectives);
  CHECK(counter.count("all-reduce") == hand_collectives);

  auto const ngw = numeric_gradient([&](xt::xtensor<double, 2> const& v) { return host_loss(v, bh); }, wh);
  auto const ngb = numeric_gradient([&](xt::xtensor<double, 1> const& v) { return host_loss(wh, v); }, bh);
  CHECK(max_abs_diff(tessera::to_host(gw), ngw) < 1e-7);
  CHECK(max_abs_diff(tessera::to_host(gb), ngb) < 1e-7);

  auto const [l, g2] = tessera::value_and_grad<0, 1>(loss)(w, b);
  CHECK(std::abs(tessera::to_host(l)() - host_loss(wh, bh)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(std::get<0>(g2)), ngw) < 1e-7);
}

namespace {

/// Host reference of loss(x) = sum(f(x) * c) for an element-wise f.
template <class H>
double host_weighted(xt::xtensor<double, 2> const& x, xt::xtensor<double, 2> const& c, H const& h) {
  double s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) s += h(x.flat(i)) * c.flat(i);
  return s;
}

/// grad of sum(f(x) * c) against finite differences, x and c laid out by Spec on `mesh`.
template <class Spec, class Mesh, class F, class H>
void check_unary(Mesh const& mesh, std::array<std::size_t, 2> shape, F const& f, H const& h, double shift = 0,
                 double tol = 1e-6) {
  auto const s = tessera::named_sharding(mesh, Spec{});
  xt::xtensor<double, 2> xh = values<2>(shape, 0.4) + shift;
  auto const ch = values<2>(shape, 1.3);
  auto const x = tessera::device_put(xh, s);
  auto const c = tessera::device_put(ch, s);
  auto const g = tessera::grad([&](auto const& v) { return tessera::sum(f(v) * c); })(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(x)>>);
  auto const n = numeric_gradient([&](xt::xtensor<double, 2> const& v) { return host_weighted(v, ch, h); }, xh);
  CHECK(max_abs_diff(tessera::to_host(g), n) < tol);
}

double sigmoid_host(double v) { return 1 / (1 + std::exp(-v)); }

}  // namespace

TEST_CASE("grad of every element-wise function against finite differences, on 1-D and 2-D meshes, uneven shapes",
          "[grad]") {
  tessera::runtime rt{8};
  auto const m8 = tessera::make_mesh<"X">({8});
  auto const m24 = tessera::make_mesh<"X", "Y">({2, 4});
  auto run = [&](auto const& mesh, auto spec, std::array<std::size_t, 2> shape) {
    using S = decltype(spec);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::sin(v); }, [](double v) { return std::sin(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::cos(v); }, [](double v) { return std::cos(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::tan(v); }, [](double v) { return std::tan(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::exp(v); }, [](double v) { return std::exp(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::log(v); }, [](double v) { return std::log(v); }, 2.0);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::log1p(v); }, [](double v) { return std::log1p(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::sqrt(v); }, [](double v) { return std::sqrt(v); }, 2.0);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::rsqrt(v); },
                   [](double v) { return 1 / std::sqrt(v); }, 2.0);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::tanh(v); }, [](double v) { return std::tanh(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::sigmoid(v); }, sigmoid_host);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::abs(v); }, [](double v) { return std::abs(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::relu(v); },
                   [](double v) { return v > 0 ? v : 0.0; });
    check_unary<S>(mesh, shape, [](auto const& v) { return -v; }, [](double v) { return -v; });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::pow(v, 3.0); },
                   [](double v) { return v * v * v; });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::pow(2.0, v); },
                   [](double v) { return std::pow(2.0, v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return 1.5 / (v * v + 1.0) - 2.0 * v; },
                   [](double v) { return 1.5 / (v * v + 1) - 2 * v; });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::clip(v, -0.3, 0.4); },
                   [](double v) { return std::min(std::max(v, -0.3), 0.4); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::where(v > 0.1, v * v, tessera::sin(v)); },
                   [](double v) { return v > 0.1 ? v * v : std::sin(v); });
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::astype<double>(tessera::astype<float>(v) * 2.0f); },
                   [](double v) { return 2 * v; }, 0, 1e-5);
    check_unary<S>(mesh, shape, [](auto const& v) { return tessera::reshard(v, P<>{}) * v; },
                   [](double v) { return v * v; });
    check_unary<S>(mesh, shape, [](auto const& v) { return v * tessera::stop_gradient(v); },
                   [](double v) { return v * v; }, 0, 1e9);  // value only: checked below
  };
  run(m8, P<"X", none>{}, {10, 3});
  run(m8, P<none, "X">{}, {3, 11});
  run(m24, P<"X", "Y">{}, {5, 7});
  run(m24, P<"Y", "X">{}, {4, 8});
  run(tessera::make_mesh<"X">({1}), P<"X">{}, {2, 3});
}

TEST_CASE("stop_gradient: the value goes through, the derivative does not", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const s = tessera::named_sharding(mesh, P<"X">{});
  auto const xh = values<1>({8}, 0.2);
  auto const x = tessera::device_put(xh, s);
  auto const g = tessera::grad([](auto const& v) { return tessera::sum(v * tessera::stop_gradient(v)); })(x);
  CHECK(max_abs_diff(tessera::to_host(g), xh) < 1e-15);  // d/dv (v * c) = c = v
}

TEST_CASE("maximum and minimum share the cotangent at ties, as JAX does", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  auto const s = tessera::named_sharding(mesh, P<"X">{});
  xt::xtensor<double, 1> ah = {1.0, 2.0, 3.0, 4.0};
  xt::xtensor<double, 1> bh = {1.0, 5.0, 3.0, 0.0};
  auto const a = tessera::device_put(ah, s);
  auto const b = tessera::device_put(bh, s);
  auto const [ga, gb] = tessera::grad<0, 1>([](auto const& u, auto const& v) { return tessera::sum(tessera::maximum(u, v)); })(a, b);
  xt::xtensor<double, 1> const want_a = {0.5, 0.0, 0.5, 1.0};
  xt::xtensor<double, 1> const want_b = {0.5, 1.0, 0.5, 0.0};
  CHECK(max_abs_diff(tessera::to_host(ga), want_a) == 0);
  CHECK(max_abs_diff(tessera::to_host(gb), want_b) == 0);
  auto const [ha, hb] = tessera::grad<0, 1>([](auto const& u, auto const& v) { return tessera::sum(tessera::minimum(u, v)); })(a, b);
  CHECK(max_abs_diff(tessera::to_host(ha), want_b) == 0);
  CHECK(max_abs_diff(tessera::to_host(hb), want_a) == 0);
}

TEST_CASE("binary operations with NumPy broadcasting: cotangents summed over the broadcast dimensions", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 2});
  auto const sa = tessera::named_sharding(mesh, P<"X", "Y">{});
  auto const ah = values<2>({6, 5}, 0.3);
  auto const a = tessera::device_put(ah, sa);
  auto check = [&](auto const& b, auto const& bh, auto const& f, auto const& h) {
    auto const [ga, gb] = tessera::grad<0, 1>([&](auto const& u, auto const& v) { return tessera::sum(f(u, v)); })(a, b);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gb)>, std::remove_cvref_t<decltype(b)>>);
    using BH = std::remove_cvref_t<decltype(bh)>;
    auto host = [&](xt::xtensor<double, 2> const& u, BH const& v) {
      xt::xtensor<double, 2> const vb = xt::broadcast(v, {6, 5});
      double s = 0;
      for (std::size_t i = 0; i < u.size(); ++i) s += h(u.flat(i), vb.flat(i));
      return s;
    };
    auto const na = numeric_gradient([&](xt::xtensor<double, 2> const& u) { return host(u, bh); }, ah);
    auto const nb = numeric_gradient([&](BH const& v) { return host(ah, v); }, BH(bh));
    CHECK(max_abs_diff(tessera::to_host(ga), na) < 1e-6);
    CHECK(max_abs_diff(tessera::to_host(gb), nb) < 1e-6);
  };
  auto all_ops = [&](auto const& b, auto const& bh) {
    check(b, bh, [](auto const& u, auto const& v) { return u + v; }, [](double u, double v) { return u + v; });
    check(b, bh, [](auto const& u, auto const& v) { return u - v; }, [](double u, double v) { return u - v; });
    check(b, bh, [](auto const& u, auto const& v) { return u * v; }, [](double u, double v) { return u * v; });
    check(b, bh, [](auto const& u, auto const& v) { return u / (v + 2.0); }, [](double u, double v) { return u / (v + 2); });
    check(b, bh, [](auto const& u, auto const& v) { return tessera::maximum(u, v); },
          [](double u, double v) { return std::max(u, v); });
    check(b, bh, [](auto const& u, auto const& v) { return tessera::minimum(u, v); },
          [](double u, double v) { return std::min(u, v); });
    check(b, bh, [](auto const& u, auto const& v) { return tessera::pow(u + 2.0, v); },
          [](double u, double v) { return std::pow(u + 2, v); });
  };
  auto const b_row = values<1>({5}, 0.7);  // [5]: a leading dimension added
  all_ops(tessera::device_put(b_row, tessera::named_sharding(mesh, P<"Y">{})), b_row);
  xt::xtensor<double, 2> const b_1n = values<2>({1, 5}, 0.8);  // [1, 5]: dimension 0 grows
  all_ops(tessera::device_put(b_1n, tessera::named_sharding(mesh, P<none, "Y">{})), b_1n);
  xt::xtensor<double, 2> const b_m1 = values<2>({6, 1}, 0.9);  // [6, 1]: dimension 1 grows
  all_ops(tessera::device_put(b_m1, tessera::named_sharding(mesh, P<"X", none>{})), b_m1);
  xt::xtensor<double, 2> const b_11 = values<2>({1, 1}, 1.1);  // [1, 1]: both grow
  all_ops(tessera::device_put(b_11, tessera::named_sharding(mesh, P<>{})), b_11);
}

TEST_CASE("reductions: sum, mean, max, min and prod over every axis set, sharded reduced dimensions", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const s = tessera::named_sharding(mesh, P<"X", "Y">{});
  xt::xtensor<double, 2> xh = values<2>({6, 5}, 0.5);
  xh(1, 2) = 0.0;  // prod: one zero in a row and a column
  xh(4, 0) = 0.0;
  xh(4, 3) = 0.0;  // and two zeros in row 4
  auto const x = tessera::device_put(xh, s);
  auto const ch = values<2>({6, 5}, 2.5);
  auto const c0 = tessera::device_put(xt::xtensor<double, 1>(xt::view(ch, 0)), tessera::named_sharding(mesh, P<"Y">{}));
  auto const c1 = tessera::device_put(xt::xtensor<double, 1>(xt::view(ch, xt::all(), 0)),
                                      tessera::named_sharding(mesh, P<"X">{}));
  auto check = [&](auto const& f, auto const& h) {
    auto const g = tessera::grad([&](auto const& v) { return f(v); })(x);
    auto const n = numeric_gradient(h, xh);
    CHECK(max_abs_diff(tessera::to_host(g), n) < 1e-6);
  };
  // Host reductions over rows (axis 0, weights c0 per column) and columns (axis 1, weights c1 per row).
  auto over0 = [&](auto const& op, double init) {
    return [&, op, init](xt::xtensor<double, 2> const& v) {
      double s2 = 0;
      for (std::size_t j = 0; j < 5; ++j) {
        double r = init;
        for (std::size_t i = 0; i < 6; ++i) r = op(r, v(i, j));
        s2 += r * ch(0, j);
      }
      return s2;
    };
  };
  auto over1 = [&](auto const& op, double init) {
    return [&, op, init](xt::xtensor<double, 2> const& v) {
      double s2 = 0;
      for (std::size_t i = 0; i < 6; ++i) {
        double r = init;
        for (std::size_t j = 0; j < 5; ++j) r = op(r, v(i, j));
        s2 += r * ch(i, 0);
      }
      return s2;
    };
  };
  auto plus = [](double a, double b) { return a + b; };
  auto times = [](double a, double b) { return a * b; };
  auto larger = [](double a, double b) { return std::max(a, b); };
  auto smaller = [](double a, double b) { return std::min(a, b); };
  auto all_of = [&](auto const& op, double init) {
    return [&, op, init](xt::xtensor<double, 2> const& v) {
      double r = init;
      for (double e : v) r = op(r, e);
      return r;
    };
  };
  check([&](auto const& v) { return tessera::sum(tessera::sum<0>(v) * c0); }, over0(plus, 0.0));
  check([&](auto const& v) { return tessera::sum(tessera::sum<1>(v) * c1); }, over1(plus, 0.0));
  check([&](auto const& v) { return tessera::sum(v); }, all_of(plus, 0.0));
  check([&](auto const& v) { return tessera::mean(v); }, [&](xt::xtensor<double, 2> const& v) { return all_of(plus, 0.0)(v) / 30; });
  check([&](auto const& v) { return tessera::sum(tessera::mean<1>(v) * c1); },
        [&](xt::xtensor<double, 2> const& v) { return over1(plus, 0.0)(v) / 5; });
  check([&](auto const& v) { return tessera::sum(tessera::max<0>(v) * c0); }, over0(larger, -1e300));
  check([&](auto const& v) { return tessera::sum(tessera::min<1>(v) * c1); }, over1(smaller, 1e300));
  check([&](auto const& v) { return tessera::max(v); }, all_of(larger, -1e300));
  check([&](auto const& v) { return tessera::sum(tessera::prod<0>(v) * c0); }, over0(times, 1.0));
  check([&](auto const& v) { return tessera::sum(tessera::prod<1>(v) * c1); }, over1(times, 1.0));
  check([&](auto const& v) { return tessera::sum(tessera::sum<0, 1>(v * v)); },
        [](xt::xtensor<double, 2> const& v) { return double(xt::sum(v * v)()); });

  // Ties of a max share the cotangent equally (JAX's _reduce_chooser_jvp_rule).
  xt::xtensor<double, 1> th = {1.0, 3.0, 3.0, 2.0};
  auto const t = tessera::device_put(th, tessera::named_sharding(mesh, P<"Y">{}));
  auto const gt = tessera::grad([](auto const& v) { return tessera::max(v); })(t);
  xt::xtensor<double, 1> const want = {0.0, 0.5, 0.5, 0.0};
  CHECK(max_abs_diff(tessera::to_host(gt), want) == 0);
}

TEST_CASE("transpose and every matmul form against finite differences", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 2});
  auto put = [&](auto const& h, auto spec) { return tessera::device_put(h, tessera::named_sharding(mesh, spec)); };
  // Host products written out (xtensor-blas is not a dependency).
  auto mm = [](xt::xtensor<double, 2> const& a, xt::xtensor<double, 2> const& b) {
    xt::xtensor<double, 2> c = xt::zeros<double>({a.shape()[0], b.shape()[1]});
    for (std::size_t i = 0; i < a.shape()[0]; ++i)
      for (std::size_t k = 0; k < a.shape()[1]; ++k)
        for (std::size_t j = 0; j < b.shape()[1]; ++j) c(i, j) += a(i, k) * b(k, j);
    return c;
  };
  auto const ah = values<2>({6, 4}, 0.2);
  auto const bh = values<2>({4, 5}, 0.6);
  auto const wh = values<2>({6, 5}, 1.6);  // weights of the output
  auto const w = put(wh, P<"X", "Y">{});
  auto weighted = [&](xt::xtensor<double, 2> const& c) { return double(xt::sum(c * wh)()); };
  auto check2 = [&](auto sa, auto sb) {
    auto const a = put(ah, sa);
    auto const b = put(bh, sb);
    auto const [ga, gb] = tessera::grad<0, 1>([&](auto const& u, auto const& v) {
      return tessera::sum(tessera::matmul(u, v) * w);
    })(a, b);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(ga)>, std::remove_cvref_t<decltype(a)>>);
    auto const na = numeric_gradient([&](xt::xtensor<double, 2> const& u) { return weighted(mm(u, bh)); }, ah);
    auto const nb = numeric_gradient([&](xt::xtensor<double, 2> const& v) { return weighted(mm(ah, v)); }, bh);
    CHECK(max_abs_diff(tessera::to_host(ga), na) < 1e-6);
    CHECK(max_abs_diff(tessera::to_host(gb), nb) < 1e-6);
  };
  check2(P<"X", none>{}, P<>{});          // data parallel: b's gradient is a partial sum over X
  check2(P<none, "X">{}, P<"X", none>{});  // contracting dimension sharded alike
  check2(P<"X", "Y">{}, P<"Y", none>{});
  check2(P<>{}, P<none, "Y">{});           // model parallel
  check2(P<"Y", none>{}, P<"X", "Y">{});   // Auto conflicts resolved by the forward rule

  // Vector forms: [K] @ [K, N], [M, K] @ [K], [K] @ [K], and dot.
  auto const vh = values<1>({4}, 0.9);
  auto const v = put(vh, P<"X">{});
  auto const a = put(ah, P<"X", none>{});
  auto const b = put(bh, P<none, "Y">{});
  auto const uh = values<1>({6}, 1.9);
  auto const u = put(uh, P<"Y">{});
  {
    auto const [gv, gb] = tessera::grad<0, 1>([&](auto const& x, auto const& y) {
      return tessera::sum(tessera::matmul(x, y) * tessera::sin(tessera::sum<0>(w)));
    })(v, b);
    auto const sw = xt::eval(xt::sin(xt::sum(wh, {0})));
    auto host = [&](xt::xtensor<double, 1> const& x, xt::xtensor<double, 2> const& y) {
      double s = 0;
      for (std::size_t j = 0; j < 5; ++j)
        for (std::size_t k = 0; k < 4; ++k) s += x(k) * y(k, j) * sw(j);
      return s;
    };
    CHECK(max_abs_diff(tessera::to_host(gv), numeric_gradient([&](xt::xtensor<double, 1> const& x) { return host(x, bh); }, vh)) < 1e-6);
    CHECK(max_abs_diff(tessera::to_host(gb), numeric_gradient([&](xt::xtensor<double, 2> const& y) { return host(vh, y); }, bh)) < 1e-6);
  }
  {
    auto const [ga, gv] = tessera::grad<0, 1>([&](auto const& x, auto const& y) {
      return tessera::sum(tessera::matmul(x, y) * u);
    })(a, v);
    auto host = [&](xt::xtensor<double, 2> const& x, xt::xtensor<double, 1> const& y) {
      double s = 0;
      for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t k = 0; k < 4; ++k) s += x(i, k) * y(k) * uh(i);
      return s;
    };
    CHECK(max_abs_diff(tessera::to_host(ga), numeric_gradient([&](xt::xtensor<double, 2> const& x) { return host(x, vh); }, ah)) < 1e-6);
    CHECK(max_abs_diff(tessera::to_host(gv), numeric_gradient([&](xt::xtensor<double, 1> const& y) { return host(ah, y); }, vh)) < 1e-6);
  }
  {
    auto const v2h = values<1>({4}, 2.9);
    auto const v2 = put(v2h, P<>{});
    auto const [g1, g2] = tessera::grad<0, 1>([&](auto const& x, auto const& y) { return tessera::dot(x, y); })(v, v2);
    CHECK(max_abs_diff(tessera::to_host(g1), v2h) < 1e-12);
    CHECK(max_abs_diff(tessera::to_host(g2), vh) < 1e-12);
  }
  {  // dot with an out_sharding
    auto const a2 = put(ah, P<"X", "Y">{});
    auto const g = tessera::grad([&](auto const& x) {
      return tessera::sum(tessera::sin(tessera::dot(x, b, P<none, "Y">{})));
    })(a2);
    auto host = [&](xt::xtensor<double, 2> const& x) { return double(xt::sum(xt::sin(mm(x, bh)))()); };
    CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, ah)) < 1e-6);
  }
  {  // transpose, and matmul with an out_sharding
    auto const a2 = put(ah, P<"X", "Y">{});
    auto const g = tessera::grad([&](auto const& x) {
      return tessera::sum(tessera::matmul(tessera::transpose(x), tessera::matmul(x, b, P<"X", none>{})));
    })(a2);
    auto host = [&](xt::xtensor<double, 2> const& x) {
      xt::xtensor<double, 2> const xt_ = xt::transpose(x);
      return double(xt::sum(mm(xt_, mm(x, bh)))());
    };
    CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, ah)) < 1e-6);
  }
}

TEST_CASE("gradient collectives: partial contributions are summed once; a sharded parameter's is reduce-scattered",
          "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const xh = values<2>({8, 6}, 0.1);
  auto const x2h = values<2>({8, 6}, 0.7);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const x2 = tessera::device_put(x2h, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const wh = values<2>({6, 3}, 1.2);
  // w used by two products, each contracting the sharded batch: two partial sums, one all-reduce.
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto loss = [&](auto const& v) {
    return tessera::sum(tessera::matmul(x, v)) + tessera::sum(tessera::sin(tessera::matmul(x2, v)));
  };
  auto const plan = tessera::explain(tessera::grad(loss), w);
  CHECK(plan.count() == 1);
  CHECK(plan.count("all-reduce") == 1);
  tessera::collective_counter counter;
  auto const g = tessera::grad(loss)(w);
  auto const host = [&](xt::xtensor<double, 2> const& v) {
    double s = 0;
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        double p = 0, q = 0;
        for (std::size_t k = 0; k < 6; ++k) {
          p += xh(i, k) * v(k, j);
          q += x2h(i, k) * v(k, j);
        }
        s += p + std::sin(q);
      }
    return s;
  };
  CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, wh)) < 1e-6);
  // The forward sums of the two products are never needed; the gradient of w is one all-reduce.
  CHECK(counter.count("all-reduce") == 1);

  // FSDP: the parameter sharded over X; its gradient arrives reduce-scattered, in its layout.
  auto const ws = tessera::device_put(wh, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const fsdp_grad = tessera::grad([&](auto const& v) { return tessera::sum(tessera::sin(tessera::matmul(x, v))); });
  auto const fsdp_plan = tessera::explain(fsdp_grad, ws);
  CHECK(fsdp_plan.count("reduce-scatter") == 1);
  CHECK(fsdp_plan.count("all-reduce") == 0);
  tessera::collective_counter fsdp;
  auto const gs = fsdp_grad(ws);
  CHECK(fsdp.count() == fsdp_plan.count());
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gs)>, std::remove_cvref_t<decltype(ws)>>);
  CHECK(fsdp.count("reduce-scatter") == 1);
  CHECK(fsdp.count("all-reduce") == 0);
  auto const host1 = [&](xt::xtensor<double, 2> const& v) {
    double s = 0;
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        double p = 0;
        for (std::size_t k = 0; k < 6; ++k) p += xh(i, k) * v(k, j);
        s += std::sin(p);
      }
    return s;
  };
  CHECK(max_abs_diff(tessera::to_host(gs), numeric_gradient(host1, wh)) < 1e-6);
}

TEST_CASE("device_put of a tracer: the cotangent goes back to the operand's devices and layout", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 2});
  auto const other = tessera::make_mesh<"X", "Y">({2, 2}, std::vector<int>{4, 5, 6, 7});  // the same axes, other devices
  auto const xh = values<2>({5, 6}, 0.4);
  auto const ch = values<2>({5, 6}, 1.9);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const c = tessera::device_put(ch, tessera::named_sharding(other, P<"Y", none>{}));
  auto f = [&](auto const& v) {
    auto const moved = tessera::device_put(tessera::sin(v), tessera::named_sharding(other, P<"Y", none>{}));
    return tessera::sum(moved * c);
  };
  auto const host = [&](xt::xtensor<double, 2> const& v) { return double(xt::sum(xt::sin(v) * ch)()); };
  auto const plan = tessera::explain(tessera::grad(f), x);
  tessera::collective_counter counter;
  auto const g = tessera::grad(f)(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(x)>>);
  CHECK(g.sharding().device_ids() == x.sharding().device_ids());
  CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, xh)) < 1e-6);
  // Forward and backward moves: the counter records what explain listed.
  CHECK(counter.count() == plan.count());
}

namespace {
/// A layer's parameters as a class template over its field types, so it holds tracers too.
template <class W, class B>
struct dense {
  W w;
  B b;
};
}  // namespace

TEST_CASE("parameter trees: tuples and class-template structs in, the same structure out; has_aux, vjp", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  auto const xh = values<2>({4, 3}, 0.3);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", none>{}));
  auto const wh = values<2>({3, 2}, 0.4);
  auto const bh = values<1>({2}, 0.5);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto const b = tessera::device_put(bh, tessera::named_sharding(mesh, P<>{}));
  auto host = [&](xt::xtensor<double, 2> const& wv, xt::xtensor<double, 1> const& bv) {
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        double z = bv(j);
        for (std::size_t k = 0; k < 3; ++k) z += xh(i, k) * wv(k, j);
        s += std::tanh(z);
      }
    return s;
  };
  auto const nw = numeric_gradient([&](xt::xtensor<double, 2> const& v) { return host(v, bh); }, wh);
  auto const nb = numeric_gradient([&](xt::xtensor<double, 1> const& v) { return host(wh, v); }, bh);

  using W = std::remove_cvref_t<decltype(w)>;
  using Bv = std::remove_cvref_t<decltype(b)>;
  dense<W, Bv> const params{w, b};
  auto const g = tessera::grad([&](auto const& p) { return tessera::sum(tessera::tanh(tessera::matmul(x, p.w) + p.b)); })(params);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, dense<W, Bv>>);
  CHECK(max_abs_diff(tessera::to_host(g.w), nw) < 1e-6);
  CHECK(max_abs_diff(tessera::to_host(g.b), nb) < 1e-6);
  // jax.tree.map(lambda a, g: a - lr * g, p, grad)
  auto const updated = tessera::tree_map([](auto const& a, auto const& d) { return a - 0.5 * d; }, params, g);
  CHECK(max_abs_diff(tessera::to_host(updated.w), xt::eval(wh - 0.5 * nw)) < 1e-6);

  auto const tg = tessera::grad([&](auto const& p) {
    return tessera::sum(tessera::tanh(tessera::matmul(x, std::get<0>(p)) + std::get<1>(p)));
  })(std::make_tuple(w, b));
  CHECK(max_abs_diff(tessera::to_host(std::get<1>(tg)), nb) < 1e-6);

  // has_aux: the aux value comes back evaluated, undifferentiated.
  auto const [grads, aux] = tessera::grad<0>(
      [&](auto const& wv) {
        auto const z = tessera::matmul(x, wv) + b;
        return std::make_pair(tessera::sum(tessera::tanh(z)), z);
      },
      tessera::has_aux)(w);
  CHECK(max_abs_diff(tessera::to_host(grads), nw) < 1e-6);
  CHECK(aux.shape() == tessera::shape_t<2>{4, 2});
  auto const [va, ga2] = tessera::value_and_grad<0>(
      [&](auto const& wv) {
        auto const z = tessera::matmul(x, wv) + b;
        return std::make_pair(tessera::sum(tessera::tanh(z)), tessera::sum(z));
      },
      tessera::has_aux)(w);
  CHECK(std::abs(tessera::to_host(va.first)() - host(wh, bh)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(ga2), nw) < 1e-6);

  // vjp of a non-scalar function, called twice with different cotangents.
  auto const [out, vjp_fn] = tessera::vjp([&](auto const& wv) { return tessera::tanh(tessera::matmul(x, wv)); }, w);
  CHECK(out.shape() == tessera::shape_t<2>{4, 2});
  for (double scale : {1.0, -2.0}) {
    xt::xtensor<double, 2> const cth = values<2>({4, 2}, 3.3) * scale;
    auto const ct = tessera::device_put(cth, tessera::named_sharding(mesh, P<"X", none>{}));
    auto const [gw] = vjp_fn(ct);
    auto hostv = [&](xt::xtensor<double, 2> const& v) {
      double s = 0;
      for (std::size_t i = 0; i < 4; ++i)
        for (std::size_t j = 0; j < 2; ++j) {
          double z = 0;
          for (std::size_t k = 0; k < 3; ++k) z += xh(i, k) * v(k, j);
          s += std::tanh(z) * cth(i, j);
        }
      return s;
    };
    CHECK(max_abs_diff(tessera::to_host(gw), numeric_gradient(hostv, wh)) < 1e-6);
  }
  auto const bad = tessera::device_put(xt::xtensor<double, 2>(xt::zeros<double>({2, 2})),
                                       tessera::named_sharding(mesh, P<"X", none>{}));
  CHECK_THROWS_WITH(vjp_fn(bad), Catch::Contains("the cotangent has shape (2, 2), the output (4, 2)"));
}

TEST_CASE("grad on Explicit axes, unused arguments and escaped tracers", "[grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 2}, tessera::explicit_axes);
  auto const xh = values<2>({4, 6}, 0.3);
  auto const wh = values<2>({6, 2}, 0.8);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"Y", none>{}));
  auto const [gx, gw] = tessera::grad<0, 1>([](auto const& a, auto const& v) {
    return tessera::sum(tessera::sigmoid(tessera::matmul(a, v, P<"X", none>{})));
  })(x, w);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gw)>, std::remove_cvref_t<decltype(w)>>);
  auto host = [&](xt::xtensor<double, 2> const& a, xt::xtensor<double, 2> const& v) {
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        double z = 0;
        for (std::size_t k = 0; k < 6; ++k) z += a(i, k) * v(k, j);
        s += sigmoid_host(z);
      }
    return s;
  };
  CHECK(max_abs_diff(tessera::to_host(gx), numeric_gradient([&](xt::xtensor<double, 2> const& a) { return host(a, wh); }, xh)) < 1e-6);
  CHECK(max_abs_diff(tessera::to_host(gw), numeric_gradient([&](xt::xtensor<double, 2> const& v) { return host(xh, v); }, wh)) < 1e-6);

  // An argument the result does not depend on gets zeros of its type.
  auto const gz = tessera::grad<1>([](auto const& a, auto const&) { return tessera::sum(a); })(x, w);
  CHECK(max_abs_diff(tessera::to_host(gz), xt::zeros<double>({6, 2})) == 0);

  // A tracer kept past its grad call cannot be computed with (JAX's UnexpectedTracerError).
  std::optional<tessera::tracer<std::remove_cvref_t<decltype(x)>>> kept;
  (void)tessera::grad([&](auto const& a) {
    kept.emplace(a);
    return tessera::sum(a);
  })(x);
  CHECK_THROWS_WITH(tessera::sin(*kept), Catch::Contains("a tracer was used after its grad"));

  // explain() only plans: a function that reads its traced values is told so.
  auto const reads = tessera::grad([](auto const& a) {
    auto const b = a * a;
    (void)tessera::to_host(b.primal());
    return tessera::sum(b);
  });
  CHECK_THROWS_WITH(tessera::explain(reads, x), Catch::Contains("only planned was read"));
  CHECK(tessera::explain(tessera::grad([](auto const& a) { return tessera::sum(a * a); }), x).count() == 0);
}
