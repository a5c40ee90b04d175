// grad, value_and_grad and vjp through shard_map (autodiff/shard_map_grad.hpp): gradients of
// data-parallel and FSDP losses against central finite differences of the same loss written
// with plain xtensor on the host, the dot-product (adjoint) test of every collective's
// transpose (<ct, C(x)> == <C^T(ct), x> with C^T from vjp), the collectives a gradient runs,
// and the errors.

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

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

template <class A, class B>
double inner(A const& a, B const& b) {
  REQUIRE(a.size() == b.size());
  double s = 0;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) s += double(*ia) * double(*ib);
  return s;
}

/// The element-wise test body on the host, block by block (blocks of 2 rows), with plain xtensor.
double elementwise_host(xt::xtensor<double, 2> const& v, bool with_sigmoid) {
  double total = 0;
  for (std::size_t blk = 0; blk < 2; ++blk) {
    xt::xtensor<double, 2> vb = xt::view(v, xt::range(2 * blk, 2 * blk + 2), xt::all());
    xt::xtensor<double, 2> a = xt::exp(vb) / (1.0 + xt::log(vb)) - xt::sqrt(vb) * xt::cos(vb);
    xt::xtensor<double, 2> b = xt::maximum(xt::sin(vb) - 0.5, 0.0) + xt::abs(vb - 1.0) - xt::tanh(vb);
    xt::xtensor<double, 2> c = xt::zeros<double>({3, 3});
    for (std::size_t i = 0; i < 3; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        for (std::size_t k = 0; k < 2; ++k) c(i, j) += a(k, i) * b(k, j);
    xt::xtensor<double, 1> d = xt::sum(a * b, {0}) + xt::mean(c, {1}) * 2.0 - 1.0;
    total += xt::sum(d * d)() + xt::sum(c)();
    if (with_sigmoid) total += xt::sum(1.0 / (1.0 + xt::exp(-vb)))();
  }
  return total;
}

/// The data-parallel loss on the host: mean((sigmoid(x w + b) - y)^2) over every element.
double host_loss(xt::xtensor<double, 2> const& x, xt::xtensor<double, 2> const& y, xt::xtensor<double, 2> const& w,
                 xt::xtensor<double, 1> const& b) {
  double s = 0;
  for (std::size_t i = 0; i < x.shape()[0]; ++i)
    for (std::size_t j = 0; j < w.shape()[1]; ++j) {
      double z = b(j);
      for (std::size_t k = 0; k < w.shape()[0]; ++k) z += x(i, k) * w(k, j);
      double const d = 1.0 / (1.0 + std::exp(-z)) - y(i, j);
      s += d * d;
    }
  return s / static_cast<double>(x.shape()[0] * w.shape()[1]);
}

}  // namespace

TEST_CASE("grad through shard_map: a data-parallel loss with pmean, replicated parameters all-reduced once") {
  tessera::runtime rt{8};
  auto const xh = values<2>({8, 3}, 0.1);
  xt::xtensor<double, 2> const yh = values<2>({8, 2}, 0.7) * 0.5 + 0.5;
  auto const wh = values<2>({3, 2}, 1.3);
  auto const bh = values<1>({2}, 2.9);
  auto const ngw = numeric_gradient([&](xt::xtensor<double, 2> const& v) { return host_loss(xh, yh, v, bh); }, wh);
  auto const ngb = numeric_gradient([&](xt::xtensor<double, 1> const& v) { return host_loss(xh, yh, wh, v); }, bh);
  auto const body = [](auto const& w, auto const& b, auto const& x, auto const& y) {
    auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
    return tessera::pmean<"X">(tessera::mean(d * d));
  };

  SECTION("1-D mesh of 4") {
    auto const mesh = tessera::make_mesh<"X">({4});
    auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
    auto const b = tessera::device_put(bh, tessera::named_sharding(mesh, P<>{}));
    auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
    auto const y = tessera::device_put(yh, tessera::named_sharding(mesh, P<"X">{}));
    auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<>{}, P<>{}, P<"X">{}, P<"X">{}),
                                       tessera::out_specs(P<>{}));
    auto const loss = [&](auto const& wv, auto const& bv) { return sm(wv, bv, x, y); };
    tessera::collective_counter counter;
    auto const [gw, gb] = tessera::grad<0, 1>(loss)(w, b);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gw)>, std::remove_cvref_t<decltype(w)>>);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gb)>, std::remove_cvref_t<decltype(b)>>);
    // The forward pmean, then one all-reduce per replicated parameter (pvary's transpose).
    CHECK(counter.count() == 3);
    CHECK(counter.count("all-reduce") == 3);
    CHECK(max_abs_diff(tessera::to_host(gw), ngw) < 1e-7);
    CHECK(max_abs_diff(tessera::to_host(gb), ngb) < 1e-7);

    auto const [l, g2] = tessera::value_and_grad<0, 1>(loss)(w, b);
    CHECK(std::abs(tessera::to_host(l)() - host_loss(xh, yh, wh, bh)) < 1e-12);
    CHECK(max_abs_diff(tessera::to_host(std::get<0>(g2)), ngw) < 1e-7);
  }

  SECTION("2-D mesh, the batch over one axis and the other axis unused") {
    auto const mesh = tessera::make_mesh<"X", "Y">({2, 2});
    auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
    auto const b = tessera::device_put(bh, tessera::named_sharding(mesh, P<>{}));
    auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
    auto const y = tessera::device_put(yh, tessera::named_sharding(mesh, P<"X">{}));
    auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<>{}, P<>{}, P<"X">{}, P<"X">{}),
                                       tessera::out_specs(P<>{}));
    auto const g = tessera::grad<0, 1>([&](auto const& wv, auto const& bv) { return sm(wv, bv, x, y); })(w, b);
    CHECK(max_abs_diff(tessera::to_host(std::get<0>(g)), ngw) < 1e-7);
    CHECK(max_abs_diff(tessera::to_host(std::get<1>(g)), ngb) < 1e-7);
  }

  SECTION("2-D mesh, the batch over both axes") {
    auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
    using batch = P<tessera::axes<"X", "Y">>;
    auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
    auto const b = tessera::device_put(bh, tessera::named_sharding(mesh, P<>{}));
    auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, batch{}));
    auto const y = tessera::device_put(yh, tessera::named_sharding(mesh, batch{}));
    auto const body2 = [](auto const& wv, auto const& bv, auto const& xv, auto const& yv) {
      auto const d = tessera::sigmoid(tessera::matmul(xv, wv) + bv) - yv;
      return tessera::pmean<"X", "Y">(tessera::mean(d * d));
    };
    auto const sm = tessera::shard_map(body2, mesh, tessera::in_specs(P<>{}, P<>{}, batch{}, batch{}),
                                       tessera::out_specs(P<>{}));
    tessera::collective_counter counter;
    auto const g = tessera::grad<0, 1>([&](auto const& wv, auto const& bv) { return sm(wv, bv, x, y); })(w, b);
    CHECK(counter.count("all-reduce") == 3);
    CHECK(max_abs_diff(tessera::to_host(std::get<0>(g)), ngw) < 1e-7);
    CHECK(max_abs_diff(tessera::to_host(std::get<1>(g)), ngb) < 1e-7);
  }
}

TEST_CASE("grad through shard_map: a loss that psums without pmean counts every device's copy") {
  // psum of an invariant value is k times it (JAX's pvary then psum); its gradient is k too.
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const wh = values<1>({3}, 0.4);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto const sm = tessera::shard_map([](auto const& v) { return tessera::psum<"X">(tessera::sum(v * v)); }, mesh,
                                     tessera::in_specs(P<>{}), tessera::out_specs(P<>{}));
  auto const g = tessera::grad([&](auto const& v) { return sm(v); })(w);
  CHECK(max_abs_diff(tessera::to_host(g), 8.0 * wh) < 1e-12);
}

TEST_CASE("grad through shard_map: FSDP parameters all-gathered in the body get reduce-scattered gradients") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  auto const xh = values<2>({6, 4}, 0.3);
  auto const wh = values<2>({4, 3}, 1.1);
  auto const host = [&](xt::xtensor<double, 2> const& w) {
    double s = 0;
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        double z = 0;
        for (std::size_t k = 0; k < 4; ++k) z += xh(i, k) * w(k, j);
        s += std::tanh(z) * std::tanh(z);
      }
    return s / 18.0;
  };
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"X">{}));
  auto const sm = tessera::shard_map(
      [](auto const& wv, auto const& xv) {
        auto const full = tessera::all_gather<"X">(wv, 0, tessera::tiled);
        auto const z = tessera::tanh(tessera::matmul(xv, full));
        return tessera::pmean<"X">(tessera::mean(z * z));
      },
      mesh, tessera::in_specs(P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}));
  auto const g = tessera::grad([&](auto const& v) { return sm(v, x); })(w);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(w)>>);
  CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, wh)) < 1e-7);
}

namespace {
/// <ct, f(x)> against <vjp(ct), x> for a shard_map f of one argument: the adjoint test of f's
/// transpose. f is linear, or homogeneous of `degree` (Euler: <J(x)^T ct, x> = degree <ct, f(x)>).
template <class SM, class X, std::size_t R>
void adjoint_test(SM const& sm, X const& x, std::array<std::size_t, R> const& out_shape, double degree = 1) {
  auto [y, fn] = tessera::vjp([&](auto const& v) { return sm(v); }, x);
  REQUIRE(y.shape() == out_shape);
  auto const cth = values<R>(out_shape, 5.3);
  auto const ct = tessera::device_put(cth, y.sharding());
  auto const gx = std::get<0>(fn(ct));
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gx)>, std::remove_cvref_t<X>>);
  double const lhs = degree * inner(cth, tessera::to_host(y));
  double const rhs = inner(tessera::to_host(gx), tessera::to_host(x));
  CHECK(std::abs(lhs - rhs) < 1e-10 * (1 + std::abs(lhs)));
  CHECK(std::abs(rhs) > 1e-3);  // not trivially zero
  // A vjp function can be called again, and gives the same.
  CHECK(max_abs_diff(tessera::to_host(std::get<0>(fn(ct))), tessera::to_host(gx)) == 0);
}
}  // namespace

TEST_CASE("grad through shard_map: the dot-product test of every collective's transpose") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const sharded = tessera::named_sharding(mesh, P<"X">{});
  auto const replicated = tessera::named_sharding(mesh, P<>{});
  auto const x83 = tessera::device_put(values<2>({8, 3}, 0.2), sharded);

  SECTION("psum and pmean of varying values") {
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::psum<"X">(v); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{})),
                 x83, std::array<std::size_t, 2>{2, 3});
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::pmean<"X">(v * 3.0); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{})),
                 x83, std::array<std::size_t, 2>{2, 3});
  }
  SECTION("psum of an invariant value") {
    auto const r = tessera::device_put(values<2>({2, 3}, 0.9), replicated);
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::psum<"X">(v); }, mesh,
                                    tessera::in_specs(P<>{}), tessera::out_specs(P<>{})),
                 r, std::array<std::size_t, 2>{2, 3});
  }
  SECTION("all_gather, tiled and stacked, and its result used with varying values") {
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::all_gather<"X">(v, 0, tessera::tiled); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{})),
                 x83, std::array<std::size_t, 2>{8, 3});
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::all_gather<"X">(v, 1); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{})),
                 x83, std::array<std::size_t, 3>{2, 4, 3});
    // The gathered value times the device's own block: varies again, and out_spec P("X") stacks the blocks.
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::all_gather<"X">(v, 0, tessera::tiled) * tessera::sum(v); },
                                    mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x83, std::array<std::size_t, 2>{32, 3}, 2.0);
  }
  SECTION("an invariant result under an out_spec that names the axis") {
    auto const r = tessera::device_put(values<2>({2, 3}, 0.9), replicated);
    adjoint_test(tessera::shard_map([](auto const& v) { return v * 2.0; }, mesh, tessera::in_specs(P<>{}),
                                    tessera::out_specs(P<"X">{})),
                 r, std::array<std::size_t, 2>{8, 3});
  }
  SECTION("psum_scatter, tiled and not") {
    auto const x = tessera::device_put(values<2>({32, 3}, 0.4), sharded);
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::psum_scatter<"X">(v, 0, tessera::tiled); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x, std::array<std::size_t, 2>{8, 3});
    auto const x16 = tessera::device_put(values<2>({16, 3}, 0.6), sharded);
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::psum_scatter<"X">(v, 0); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x16, std::array<std::size_t, 1>{12});
  }
  SECTION("all_to_all, tiled and not") {
    auto const x = tessera::device_put(values<2>({8, 4}, 0.8), sharded);
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::all_to_all<"X">(v, 1, 0, tessera::tiled); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x, std::array<std::size_t, 2>{32, 1});
    auto const x16 = tessera::device_put(values<2>({16, 4}, 0.5), sharded);
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::all_to_all<"X">(v, 1, 0); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x16, std::array<std::size_t, 2>{16, 4});
  }
  SECTION("ppermute, a cycle and a partial permutation") {
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::ppermute<"X">(v, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}); },
                                    mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x83, std::array<std::size_t, 2>{8, 3});
    adjoint_test(tessera::shard_map([](auto const& v) { return tessera::ppermute<"X">(v * v, {{0, 2}, {3, 1}}); }, mesh,
                                    tessera::in_specs(P<"X">{}), tessera::out_specs(P<"X">{})),
                 x83, std::array<std::size_t, 2>{8, 3}, 2.0);
  }
}

TEST_CASE("grad through shard_map: element-wise rules, reductions and transpose against finite differences") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  xt::xtensor<double, 2> const xh = values<2>({4, 3}, 0.25) * 0.5 + 1.0;  // positive, for log and sqrt
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  auto const sm = tessera::shard_map(
      [](auto const& v) {
        auto const a = tessera::exp(v) / (1.0 + tessera::log(v)) - tessera::sqrt(v) * tessera::cos(v);
        auto const b = tessera::relu(tessera::sin(v) - 0.5) + tessera::abs(v - 1.0) + -tessera::tanh(v);
        auto const c = tessera::matmul(tessera::transpose(a), b);                 // 3x3
        auto const d = tessera::sum<0>(a * b) + tessera::mean<1>(c) * 2.0 - 1.0;  // broadcast of rank 1
        return tessera::psum<"X">(tessera::sum(d * d) + tessera::sum(c));
      },
      mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  auto const host = [](xt::xtensor<double, 2> const& v) { return elementwise_host(v, false); };
  auto const g = tessera::grad([&](auto const& v) { return sm(v); })(x);
  CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, xh)) < 1e-6);
}

TEST_CASE("grad through shard_map: maximum, minimum, max and min against finite differences, ties as JAX shares them") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  auto const body = [](auto const& v) {
    auto const m = tessera::maximum(v, 0.25) * tessera::minimum(0.5, v);          // with numbers
    auto const r = tessera::max<1>(m) + tessera::min<0>(tessera::maximum(v, m)); // [rows] + [cols]: rows == cols
    return tessera::psum<"X">(tessera::sum(r * r) + tessera::max(tessera::abs(v)));
  };
  auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  auto const host = [](xt::xtensor<double, 2> const& v) {
    double total = 0;
    for (std::size_t blk = 0; blk < 2; ++blk) {
      xt::xtensor<double, 2> const vb = xt::view(v, xt::range(3 * blk, 3 * blk + 3), xt::all());
      xt::xtensor<double, 2> const m = xt::maximum(vb, 0.25) * xt::minimum(0.5, vb);
      xt::xtensor<double, 1> const r = xt::amax(m, {1}) + xt::amin(xt::maximum(vb, m), {0});
      total += double(xt::sum(r * r)()) + double(xt::amax(xt::abs(vb))());
    }
    return total;
  };
  SECTION("no ties: finite differences") {
    xt::xtensor<double, 2> const xh = values<2>({6, 3}, 0.6);
    auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
    auto const g = tessera::grad([&](auto const& v) { return sm(v); })(x);
    CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(host, xh)) < 1e-6);
    // The body also runs on plain blocks, with the same value.
    CHECK(std::abs(double(tessera::to_host(sm(x))()) - host(xh)) < 1e-12);
  }
  SECTION("ties: JAX's values (jax.grad of jnp.abs at 0 is 1, of jnp.maximum(x, c) at x == c is 1/2, of jnp.max "
          "over k equal elements 1/k each)") {
    auto const ties = tessera::shard_map(
        [](auto const& v) {
          return tessera::psum<"X">(tessera::sum(tessera::maximum(v, 1.0)) + tessera::sum(tessera::max<1>(v)) +
                                    tessera::sum(tessera::abs(v)));
        },
        mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
    xt::xtensor<double, 2> const xh = {{1.0, 1.0, 0.0}, {0.0, 2.0, -1.0}};
    auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
    auto const g = tessera::to_host(tessera::grad([&](auto const& v) { return ties(v); })(x));
    // maximum(v, 1): 1/2 at v == 1, 1 above, 0 below; max over a row: 1/k to its k maxima; abs: sign, 1 at 0.
    xt::xtensor<double, 2> const expect = {{0.5 + 0.5 + 1.0, 0.5 + 0.5 + 1.0, 0.0 + 0.0 + 1.0},
                                           {0.0 + 0.0 + 1.0, 1.0 + 1.0 + 1.0, 0.0 + 0.0 - 1.0}};
    CHECK(max_abs_diff(g, expect) == 0.0);
  }
}

TEST_CASE("grad through shard_map: errors") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  auto const w = tessera::device_put(values<1>({4}, 0.1), tessera::named_sharding(mesh, P<"X">{}));
  SECTION("a result that varies over an axis its out_spec does not name") {
    auto const sm = tessera::shard_map([](auto const& v) { return tessera::sum(v); }, mesh, tessera::in_specs(P<"X">{}),
                                       tessera::out_specs(P<>{}), tessera::no_check_vma);
    auto const bad = tessera::shard_map(
        [](auto const& v) { return tessera::sum(v); }, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
    CHECK_THROWS_WITH(tessera::grad([&](auto const& v) { return bad(v); })(w),
                      Catch::Contains("varies over mesh axes that out_specs[0] = P(None,)") ||
                          Catch::Contains("does not name"));
    (void)sm;
  }
}

TEST_CASE("grad inside a shard_map body: seed 004's distributed_training_step, local gradients then pmean") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const xh = values<2>({8, 3}, 0.1);
  auto const yh = values<2>({8, 2}, 0.7);
  auto const wh = values<2>({3, 2}, 1.3);
  auto const host = [&](xt::xtensor<double, 2> const& w) {
    double s = 0;
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 2; ++j) {
        double z = -yh(i, j);
        for (std::size_t k = 0; k < 3; ++k) z += xh(i, k) * w(k, j);
        s += z * z;
      }
    return s / 16.0;
  };
  auto const expected = numeric_gradient(host, wh);
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  auto const y = tessera::device_put(yh, tessera::named_sharding(mesh, P<"X">{}));
  auto const loss_fn = [](auto const& wv, auto const& xv, auto const& yv) {
    auto const d = tessera::matmul(xv, wv) - yv;
    return tessera::mean(d * d);
  };

  SECTION("jax.grad(loss_fn)(params, x, y), then pmean, with check_vma=False: the average of the devices' gradients") {
    auto const step = tessera::shard_map(
        [&](auto const& wv, auto const& xv, auto const& yv) {
          auto const g = tessera::grad(loss_fn)(wv, xv, yv);
          // The gradient has the parameter's type (static_assert: Catch's macros are not for device threads).
          static_assert(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(wv)>>);
          return tessera::pmean<"X">(g);
        },
        mesh, tessera::in_specs(P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}), tessera::no_check_vma);
    tessera::collective_counter counter;
    auto const g = step(w, x, y);
    CHECK(counter.count() == 1);  // the pmean alone
    CHECK(max_abs_diff(tessera::to_host(g), expected) < 1e-7);
  }
  SECTION("the same with check_vma: the invariant parameter's gradient is already summed over the devices") {
    // JAX 0.12 gives the same: grad psums an invariant argument's cotangent (pvary's transpose),
    // so pmean then changes nothing, and the result is 4 times the average.
    auto const step = tessera::shard_map(
        [&](auto const& wv, auto const& xv, auto const& yv) { return tessera::pmean<"X">(tessera::grad(loss_fn)(wv, xv, yv)); },
        mesh, tessera::in_specs(P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}));
    tessera::collective_counter counter;
    auto const g = step(w, x, y);
    CHECK(counter.count() == 2);  // grad's psum, then the pmean
    CHECK(max_abs_diff(tessera::to_host(g), 4.0 * expected) < 1e-7);
  }
  SECTION("value_and_grad, the loss averaged with pmean too") {
    auto const step = tessera::shard_map(
        [&](auto const& wv, auto const& xv, auto const& yv) {
          auto const [l, g] = tessera::value_and_grad(loss_fn)(wv, xv, yv);
          return std::make_tuple(tessera::pmean<"X">(l), tessera::pmean<"X">(g));
        },
        mesh, tessera::in_specs(P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}, P<>{}), tessera::no_check_vma);
    auto const [l, g] = step(w, x, y);
    CHECK(std::abs(tessera::to_host(l)() - host(wh)) < 1e-12);
    CHECK(max_abs_diff(tessera::to_host(g), expected) < 1e-7);
  }
  SECTION("a loss that averages over the devices itself: the invariant parameter's gradient is summed by grad") {
    auto const step = tessera::shard_map(
        [](auto const& wv, auto const& xv, auto const& yv) {
          return tessera::grad([](auto const& a, auto const& b, auto const& c) {
            auto const d = tessera::matmul(b, a) - c;
            return tessera::pmean<"X">(tessera::mean(d * d));
          })(wv, xv, yv);
        },
        mesh, tessera::in_specs(P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}));
    CHECK(max_abs_diff(tessera::to_host(step(w, x, y)), expected) < 1e-7);
  }
  SECTION("grad of plain xtensor values on the host") {
    xt::xtensor<double, 2> const xs = xh;
    xt::xtensor<double, 2> const ys = yh;
    auto const g = tessera::grad(loss_fn)(wh, xs, ys);
    CHECK(max_abs_diff(g, expected) < 1e-7);
  }
}

TEST_CASE("a body written with tessera's functions also runs without grad, on plain blocks") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({2});
  xt::xtensor<double, 2> const xh = values<2>({4, 3}, 0.25) * 0.5 + 1.0;
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  auto const body = [](auto const& v) {
    auto const a = tessera::exp(v) / (1.0 + tessera::log(v)) - tessera::sqrt(v) * tessera::cos(v);
    auto const b = tessera::relu(tessera::sin(v) - 0.5) + tessera::abs(v - 1.0) + -tessera::tanh(v);
    auto const c = tessera::matmul(tessera::transpose(a), b);
    auto const d = tessera::sum<0>(a * b) + tessera::mean<1>(c) * 2.0 - 1.0;
    return tessera::psum<"X">(tessera::sum(d * d) + tessera::sum(c) + tessera::sum(tessera::sigmoid(v)));
  };
  auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  double const plain = tessera::to_host(sm(x))();
  auto const [value, g] = tessera::value_and_grad([&](auto const& v) { return sm(v); })(x);
  (void)g;
  CHECK(std::abs(plain - tessera::to_host(value)()) < 1e-12 * (1 + std::abs(plain)));
  // And against the host: the same formula with xtensor on each block.
  double const total = elementwise_host(xh, true);
  CHECK(std::abs(plain - total) < 1e-10 * (1 + std::abs(total)));

  // The data-parallel loss: one body for the value and for grad.
  auto const w = tessera::device_put(values<2>({3, 2}, 1.3), tessera::named_sharding(mesh, P<>{}));
  auto const y = tessera::device_put(values<2>({4, 2}, 0.7), tessera::named_sharding(mesh, P<"X">{}));
  auto const loss = tessera::shard_map(
      [](auto const& wv, auto const& xv, auto const& yv) {
        auto const dd = tessera::sigmoid(tessera::matmul(xv, wv)) - yv;
        return tessera::pmean<"X">(tessera::mean(dd * dd));
      },
      mesh, tessera::in_specs(P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}));
  auto const [lv, gw] = tessera::value_and_grad([&](auto const& v) { return loss(v, x, y); })(w);
  (void)gw;
  CHECK(std::abs(tessera::to_host(loss(w, x, y))() - tessera::to_host(lv)()) < 1e-14);
}

TEST_CASE("explain of a gradient through shard_map lists the collectives the gradient runs") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  auto const w = tessera::device_put(values<2>({3, 2}, 1.3), tessera::named_sharding(mesh, P<>{}));
  auto const b = tessera::device_put(values<1>({2}, 2.9), tessera::named_sharding(mesh, P<>{}));
  auto const x = tessera::device_put(values<2>({8, 3}, 0.1), tessera::named_sharding(mesh, P<"X">{}));
  auto const y = tessera::device_put(values<2>({8, 2}, 0.7), tessera::named_sharding(mesh, P<"X">{}));
  auto const sm = tessera::shard_map(
      [](auto const& wv, auto const& bv, auto const& xv, auto const& yv) {
        auto const d = tessera::sigmoid(tessera::matmul(xv, wv) + bv) - yv;
        return tessera::pmean<"X">(tessera::mean(d * d));
      },
      mesh, tessera::in_specs(P<>{}, P<>{}, P<"X">{}, P<"X">{}), tessera::out_specs(P<>{}));
  auto const g = tessera::grad<0, 1>([&](auto const& wv, auto const& bv) { return sm(wv, bv, x, y); });
  auto const plan = tessera::explain(g, w, b);
  tessera::collective_counter counter;
  auto const r = g(w, b);
  (void)r;
  auto const ran = counter.events();
  REQUIRE(plan.collectives.size() == ran.size());
  for (std::size_t i = 0; i < ran.size(); ++i) {
    CHECK(plan.collectives[i].kind == ran[i].kind);
    CHECK(plan.collectives[i].axes == ran[i].axes);
    CHECK(plan.collectives[i].bytes_per_device == ran[i].bytes_per_device);
  }
  CHECK(ran.size() == 3);  // the pmean, then the two parameters' all-reduces
}
