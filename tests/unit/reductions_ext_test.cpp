// expand_dims and squeeze (views), negative axes and keepdims on the reductions, and the
// reductions written over them (var, std, logsumexp, argmax, argmin, softmax, log_softmax),
// against plain xtensor computations in double and, for gradients, central finite differences.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "grad_support.hpp"

using Catch::Matchers::Contains;
using tessera::none;
using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

namespace {

/// The host copy of an array or an expression.
template <class E>
auto host(E const& e) {
  return tessera::to_host(tessera::eval(e));
}

/// Row-wise (axis 1) or column-wise (axis 0) reductions of a host matrix, in double.
template <class F>
xt::xtensor<double, 1> along(xt::xtensor<double, 2> const& x, std::size_t axis, F f) {
  std::size_t const n = x.shape()[1 - axis], m = x.shape()[axis];
  xt::xtensor<double, 1> out = xt::zeros<double>({n});
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> v(m);
    for (std::size_t k = 0; k < m; ++k) v[k] = axis == 1 ? x(i, k) : x(k, i);
    out(i) = f(v);
  }
  return out;
}

double host_mean(std::vector<double> const& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}
double host_var(std::vector<double> const& v, double ddof) {
  double const m = host_mean(v);
  double s = 0;
  for (double e : v) s += (e - m) * (e - m);
  return s / (static_cast<double>(v.size()) - ddof);
}
double host_lse(std::vector<double> const& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double e : v) m = std::max(m, e);
  double s = 0;
  for (double e : v) s += std::exp(e - m);
  return std::log(s) + m;
}

}  // namespace

TEST_CASE("expand_dims and squeeze are views that keep the other dimensions' specs", "[reductions]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));

  tessera::array const last = tessera::expand_dims<-1>(x);
  CHECK(tessera::type_of(last) == "float32[8@X,4@Y,1]");
  tessera::array const mid = tessera::expand_dims<1>(x * 2.0f);
  CHECK(tessera::type_of(mid) == "float32[8@X,1,4@Y]");
  tessera::array const two = tessera::expand_dims<0, -1>(x);
  CHECK(tessera::type_of(two) == "float32[1,8@X,4@Y,1]");
  auto const lh = host(last);
  auto const mh = host(mid);
  auto const th = host(two);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      CHECK(lh(i, j, 0) == h(i, j));
      CHECK(mh(i, 0, j) == 2 * h(i, j));
      CHECK(th(0, i, j, 0) == h(i, j));
    }
  // Fused: squeeze of an element-wise expression of a view, and a view that broadcasts.
  tessera::array const back = tessera::squeeze<-1>(tessera::expand_dims<-1>(x) + 1.0f);
  CHECK(tessera::type_of(back) == "float32[8@X,4@Y]");
  CHECK(max_abs_diff(host(back), h + 1.0f) == 0);
  tessera::array const sq0 = tessera::squeeze<0, 3>(two) - x;
  CHECK(max_abs_diff(host(sq0), xt::zeros<float>({8, 4})) == 0);
  tessera::array const bc = tessera::expand_dims<-1>(x) * tessera::expand_dims<1>(x);  // [8,4,1] * [8,1,4]
  CHECK(tessera::type_of(bc) == "float32[8@X,4@Y,4]");
  auto const bh = host(bc);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j)
      for (std::size_t k = 0; k < 4; ++k) CHECK(bh(i, j, k) == h(i, j) * h(i, k));

  // A squeezed dimension must have size 1; a sharded size-1 dimension is made whole first.
  CHECK_THROWS_WITH(tessera::squeeze<0>(x), Contains("dimension 0 of the operand of shape (8, 4) has size 8"));
  xt::xtensor<float, 2> const row = {{1.f, 2.f, 3.f, 4.f}};
  auto const r = tessera::device_put(row, tessera::named_sharding(mesh, P<"X", "Y">{}));
  tessera::array const rs = tessera::squeeze<0>(r);
  CHECK(tessera::type_of(rs) == "float32[4@Y]");
  CHECK(max_abs_diff(host(rs), xt::xtensor<float, 1>{1.f, 2.f, 3.f, 4.f}) == 0);
}

TEST_CASE("negative axes and keepdims on sum, mean, max, min and prod", "[reductions]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const xh = values<2>({8, 4}, 0.5);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  CHECK(max_abs_diff(host(tessera::sum<-1>(x)), host(tessera::sum<1>(x))) == 0);
  CHECK(max_abs_diff(host(tessera::max<-2>(x)), host(tessera::max<0>(x))) == 0);
  tessera::array const k = tessera::sum<-1>(x, tessera::keepdims);
  CHECK(tessera::type_of(k) == "float64[8@X,1]");
  tessera::array const k0 = tessera::mean<0>(x, tessera::keepdims);
  CHECK(tessera::type_of(k0) == "float64[1,4@Y]");
  tessera::array const kall = tessera::prod(x, tessera::keepdims);
  CHECK(tessera::type_of(kall) == "float64[1,1]");
  tessera::array const kmin = tessera::min<1, 0>(x, tessera::keepdims);
  CHECK(tessera::type_of(kmin) == "float64[1,1]");
  auto const kh = host(k);
  auto const want = along(xh, 1, [](auto const& v) { double s = 0; for (double e : v) s += e; return s; });
  for (std::size_t i = 0; i < 8; ++i) CHECK(std::abs(kh(i, 0) - want(i)) < 1e-12);
  // keepdims broadcasts against the operand: x - mean(x, keepdims) has zero row means.
  tessera::array const centred = x - tessera::mean<-1>(x, tessera::keepdims);
  CHECK(tessera::type_of(centred) == "float64[8@X,4@Y]");
  CHECK(max_abs_diff(host(tessera::sum<-1>(centred)), xt::zeros<double>({8})) < 1e-12);
}

TEST_CASE("var, std, logsumexp, softmax and log_softmax against plain references", "[reductions]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const xh = values<2>({8, 4}, 1.5) * 3.0;
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  for (double ddof : {0.0, 1.0}) {
    tessera::array const v1 = tessera::var<-1>(x, ddof);
    CHECK(tessera::type_of(v1) == "float64[8@X]");
    CHECK(max_abs_diff(host(v1), along(xh, 1, [&](auto const& v) { return host_var(v, ddof); })) < 1e-12);
    tessera::array const s0 = tessera::std<0>(x, ddof);
    CHECK(tessera::type_of(s0) == "float64[4@Y]");
    CHECK(max_abs_diff(host(s0), along(xh, 0, [&](auto const& v) { return std::sqrt(host_var(v, ddof)); })) <
          1e-12);
  }
  tessera::array const vk = tessera::var<0>(x, tessera::keepdims);
  CHECK(tessera::type_of(vk) == "float64[1,4@Y]");
  tessera::array const l = tessera::logsumexp<-1>(x);
  CHECK(tessera::type_of(l) == "float64[8@X]");
  CHECK(max_abs_diff(host(l), along(xh, 1, host_lse)) < 1e-12);
  tessera::array const lk = tessera::logsumexp<0>(x, tessera::keepdims);
  CHECK(tessera::type_of(lk) == "float64[1,4@Y]");
  tessera::array const lall = tessera::logsumexp(x);
  CHECK(tessera::type_of(lall) == "float64[]");
  // All -inf gives -inf, not NaN (the max's non-finite values are replaced by 0).
  xt::xtensor<float, 2> minf = xt::zeros<float>({2, 4});
  for (std::size_t j = 0; j < 4; ++j) minf(0, j) = -std::numeric_limits<float>::infinity();
  auto const mi = tessera::device_put(minf, tessera::named_sharding(mesh, P<none, "Y">{}));
  auto const lm = host(tessera::logsumexp<1>(mi));
  CHECK(lm(0) == -std::numeric_limits<float>::infinity());
  CHECK(std::abs(lm(1) - std::log(4.0f)) < 1e-6);

  tessera::array const sm = tessera::softmax(x);  // over the sharded last axis
  CHECK(tessera::type_of(sm) == "float64[8@X,4@Y]");
  tessera::array const lsm = tessera::log_softmax<0>(x);
  CHECK(tessera::type_of(lsm) == "float64[8@X,4@Y]");
  auto const smh = host(sm);
  auto const lsmh = host(lsm);
  auto const lse1 = along(xh, 1, host_lse);
  auto const lse0 = along(xh, 0, host_lse);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      CHECK(std::abs(smh(i, j) - std::exp(xh(i, j) - lse1(i))) < 1e-12);
      CHECK(std::abs(lsmh(i, j) - (xh(i, j) - lse0(j))) < 1e-12);
    }
}

TEST_CASE("argmax and argmin: int32, the first index on ties and of the first NaN, any sharding", "[reductions]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  float const nan = std::numeric_limits<float>::quiet_NaN();
  xt::xtensor<float, 2> h = {{1, 5, 5, 0, 5, -1, 2, 5},   // ties: first 5 at 1, first -1 at 5
                             {3, 3, 3, 3, 3, 3, 3, 3},    // all equal: 0
                             {0, 1, nan, 2, nan, 9, -9, 0},  // first NaN at 2
                             {7, 6, 5, 4, 3, 2, 1, 0}};
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));  // the reduced axis sharded
  tessera::array const am = tessera::argmax<-1>(x);
  CHECK(tessera::type_of(am) == "int32[4@X]");
  CHECK(max_abs_diff(host(am), xt::xtensor<int, 1>{1, 0, 2, 0}) == 0);
  tessera::array const an = tessera::argmin<1>(x);
  CHECK(max_abs_diff(host(an), xt::xtensor<int, 1>{5, 0, 2, 7}) == 0);
  tessera::array const ak = tessera::argmax<1>(x, tessera::keepdims);
  CHECK(tessera::type_of(ak) == "int32[4@X,1]");
  tessera::array const a0 = tessera::argmin<0>(x * 1.0f);
  CHECK(tessera::type_of(a0) == "int32[8@Y]");
  CHECK(max_abs_diff(host(a0), xt::xtensor<int, 1>{2, 2, 2, 0, 2, 0, 2, 2}) == 0);
}

TEST_CASE("gradients of the new reductions and views against finite differences", "[reductions][grad]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const xh = values<2>({4, 8}, 0.25);
  auto const wh = values<2>({4, 8}, 2.0);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const w1 = tessera::device_put(xt::xtensor<double, 1>(xt::view(wh, 0, xt::range(0, 4))),
                                      tessera::named_sharding(mesh, P<"X">{}));
  auto check = [&](auto f, auto host_f) {
    auto const g = tessera::grad([&](auto const& v) { return f(v); })(x);
    auto const n = numeric_gradient(host_f, xh);
    CHECK(max_abs_diff(host(g), n) < 1e-6);
  };
  auto rows = [&](xt::xtensor<double, 2> const& v, auto op) {  // sum_i w1[i] * op(row i)
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      std::vector<double> r(8);
      for (std::size_t k = 0; k < 8; ++k) r[k] = v(i, k);
      s += wh(0, i) * op(r);
    }
    return s;
  };
  check([&](auto const& v) { return tessera::sum(tessera::var<-1>(v, 1.0) * w1); },
        [&](auto const& v) { return rows(v, [](auto const& r) { return host_var(r, 1.0); }); });
  check([&](auto const& v) { return tessera::sum(tessera::std<1>(v) * w1); },
        [&](auto const& v) { return rows(v, [](auto const& r) { return std::sqrt(host_var(r, 0.0)); }); });
  check([&](auto const& v) { return tessera::sum(tessera::logsumexp<-1>(v) * w1); },
        [&](auto const& v) { return rows(v, host_lse); });
  check([&](auto const& v) { return tessera::sum(tessera::squeeze<-1>(tessera::logsumexp<-1>(v, tessera::keepdims)) * w1); },
        [&](auto const& v) { return rows(v, host_lse); });
  auto host_soft = [&](xt::xtensor<double, 2> const& v, bool log) {
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      std::vector<double> r(8);
      for (std::size_t k = 0; k < 8; ++k) r[k] = v(i, k);
      double const l = host_lse(r);
      for (std::size_t k = 0; k < 8; ++k) s += wh(i, k) * (log ? v(i, k) - l : std::exp(v(i, k) - l));
    }
    return s;
  };
  check([&](auto const& v) { return tessera::sum(tessera::softmax(v) * w); },
        [&](auto const& v) { return host_soft(v, false); });
  check([&](auto const& v) { return tessera::sum(tessera::log_softmax<-1>(v) * w); },
        [&](auto const& v) { return host_soft(v, true); });
  // keepdims and the views: sum(x * sum(x, keepdims) * w) and a squeeze of an expand_dims.
  check([&](auto const& v) { return tessera::sum(v * tessera::sum<-1>(v, tessera::keepdims) * w); },
        [&](xt::xtensor<double, 2> const& v) {
          double s = 0;
          for (std::size_t i = 0; i < 4; ++i) {
            double rs = 0;
            for (std::size_t k = 0; k < 8; ++k) rs += v(i, k);
            for (std::size_t k = 0; k < 8; ++k) s += v(i, k) * rs * wh(i, k);
          }
          return s;
        });
  check([&](auto const& v) { return tessera::sum(tessera::squeeze<0>(tessera::expand_dims<0>(v) * 3.0) * w); },
        [&](xt::xtensor<double, 2> const& v) { return 3.0 * xt::sum(v * wh)(); });
  // argmax of a tracer is a constant.
  auto const g = tessera::grad([&](auto const& v) {
    return tessera::sum(v * tessera::astype<double>(tessera::argmax<-1>(v, tessera::keepdims)));
  })(x);
  CHECK(tessera::type_of(g) == "float64[4@X,8@Y]");
}

TEST_CASE("negative axes in shard_map bodies", "[reductions][shard_map]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({8});
  auto const xh = values<2>({8, 4}, 0.75);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  auto const got = host(tessera::shard_map(
      [](auto const& b) { return tessera::sum<-1>(b) + tessera::max<-1>(b); }, mesh, tessera::in_specs(P<"X">{}),
      tessera::out_specs(P<"X">{}))(x));
  auto const want = along(xh, 1, [](auto const& v) {
    double s = 0, m = -1e300;
    for (double e : v) s += e, m = std::max(m, e);
    return s + m;
  });
  CHECK(max_abs_diff(got, want) < 1e-12);
}
