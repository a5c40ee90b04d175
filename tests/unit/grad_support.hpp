#pragma once
// Helpers of the gradient tests (grad_test, grad_shard_map_test, tree_hana_test): deterministic
// inputs, central finite differences in double (the independent reference), and the largest
// difference between two tensors.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

namespace tessera_test {

/// Deterministic values in [-0.9, 0.9] that are not symmetric (so max/min have no ties unless asked).
template <std::size_t N>
xt::xtensor<double, N> values(std::array<std::size_t, N> const& shape, double seed) {
  xt::xtensor<double, N> x(shape);
  std::size_t i = 0;
  for (auto& v : x) {
    v = std::sin(seed + 1.7 * static_cast<double>(i) + 0.3 * static_cast<double>(i * i % 7)) * 0.9;
    ++i;
  }
  return x;
}

/// Central finite differences of scalar f at x (a host tensor), step h.
template <class F, class X>
X numeric_gradient(F const& f, X x, double h = 1e-6) {
  X g = xt::zeros_like(x);
  for (std::size_t i = 0; i < x.size(); ++i) {
    double const keep = x.flat(i);
    x.flat(i) = keep + h;
    double const up = f(x);
    x.flat(i) = keep - h;
    double const down = f(x);
    x.flat(i) = keep;
    g.flat(i) = (up - down) / (2 * h);
  }
  return g;
}

/// max |a - b| over the elements in row-major order (same element count required).
template <class A, class B>
double max_abs_diff(A const& a, B const& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ia, ++ib) m = std::max(m, std::abs(double(*ia) - double(*ib)));
  return m;
}

}  // namespace tessera_test
