#pragma once
// One device's values as plain row-major memory, and the loops over them that a shard_map body's
// tessera functions need (parallel/block_functions.hpp) and grad's local tracers record
// (autodiff/local_tracer.hpp): NumPy broadcasting by strides, reductions, products. Loops of
// their own, so that bodies do not pull in xtensor's math headers (every program would parse them).

#include <algorithm>
#include <array>
#include <limits>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/array/shape.hpp"
#include "tessera/runtime/gemm.hpp"

namespace tessera::detail {

/// One device's value: row-major elements and a shape.
template <class T, std::size_t N>
struct local_value {
  using value_type = T;
  std::vector<T> v;
  shape_t<N> shape{};
  T const* data() const { return v.data(); }
  T* data() { return v.data(); }
  std::size_t count() const { return v.size(); }
};

template <class T, std::size_t N>
local_value<T, N> make_value(shape_t<N> const& s) {
  return local_value<T, N>{std::vector<T>(element_count(s)), s};
}

/// Row-major strides of shape s read as rank R (right-aligned, NumPy's rule): 0 along the
/// dimensions s broadcasts over (missing, or of size 1).
template <std::size_t R, std::size_t M>
std::array<std::size_t, R> broadcast_strides(shape_t<M> const& s) {
  static_assert(M <= R);
  std::array<std::size_t, R> st{};
  std::size_t stride = 1;
  for (std::size_t i = M; i-- > 0;) {
    st[R - M + i] = s[i] == 1 ? 0 : stride;
    stride *= s[i];
  }
  return st;
}

/// Calls f(i, offsets...) for every row-major index i of shape S, with each operand's offset
/// from its strides.
template <std::size_t R, std::size_t K, class F>
void for_each_offset(shape_t<R> const& S, std::array<std::array<std::size_t, R>, K> const& strides, F&& f) {
  std::size_t const total = element_count(S);
  if (total == 0) return;
  std::array<std::size_t, R> idx{};
  std::array<std::size_t, K> off{};
  for (std::size_t i = 0; i < total; ++i) {
    f(i, off);
    for (std::size_t d = R; d-- > 0;) {
      if (++idx[d] < S[d]) {
        for (std::size_t k = 0; k < K; ++k) off[k] += strides[k][d];
        break;
      }
      for (std::size_t k = 0; k < K; ++k) off[k] -= strides[k][d] * (S[d] - 1);
      idx[d] = 0;
    }
  }
}

/// The broadcast shape of a and b (NumPy's rule), or an exception naming both.
template <std::size_t R, std::size_t A, std::size_t B>
shape_t<R> broadcast_shape(shape_t<A> const& a, shape_t<B> const& b, char const* what) {
  shape_t<R> s{};
  for (std::size_t i = 0; i < R; ++i) {
    std::size_t const x = i + A >= R ? a[i + A - R] : 1;
    std::size_t const y = i + B >= R ? b[i + B - R] : 1;
    if (x != y && x != 1 && y != 1)
      throw std::invalid_argument(std::string("tessera::") + what + " in a shard_map body: shapes " + shape_string(a) +
                                  " and " + shape_string(b) + " do not broadcast");
    s[i] = x == 1 ? y : x;
  }
  return s;
}

/// f over the elements of a and b broadcast together.
template <class T, std::size_t A, std::size_t B, class F>
auto zip(local_value<T, A> const& a, local_value<T, B> const& b, F f, char const* what) {
  constexpr std::size_t R = A > B ? A : B;
  auto out = make_value<T>(broadcast_shape<R>(a.shape, b.shape, what));
  std::array<std::array<std::size_t, R>, 2> st{broadcast_strides<R>(a.shape), broadcast_strides<R>(b.shape)};
  for_each_offset(out.shape, st, [&](std::size_t i, auto const& off) { out.v[i] = f(a.v[off[0]], b.v[off[1]]); });
  return out;
}

/// A reduction over Axes... of a rank-N value (every axis when none): the result's shape, the
/// result's strides seen from the operand's dimensions (0 along reduced ones), and the count
/// each result element reduces.
template <std::size_t N, std::size_t... Axes>
struct reduction_layout {
  static constexpr bool all = sizeof...(Axes) == 0;
  static constexpr std::size_t M = all ? 0 : N - sizeof...(Axes);
  shape_t<M> shape{};
  std::array<std::array<std::size_t, N>, 1> strides{};
  std::size_t count = 1;

  explicit reduction_layout(shape_t<N> const& x) {
    std::array<bool, N> reduced{};
    for (std::size_t i = 0; i < N; ++i) reduced[i] = all;
    ((reduced[Axes] = true), ...);
    for (std::size_t i = 0, j = 0; i < N; ++i)
      if (!reduced[i]) shape[j++] = x[i];
      else count *= x[i];
    for (std::size_t i = N, stride = 1; i-- > 0;)
      if (!reduced[i]) {
        strides[0][i] = stride;
        stride *= x[i];
      }
  }
};

/// The largest (Max) or smallest element over Axes...; an empty reduction has no identity, as
/// jnp.max says.
template <bool Max, std::size_t... Axes, class T, std::size_t N>
auto choose(local_value<T, N> const& x, char const* what) {
  static_assert(((Axes < N) && ...), "tessera::max/min in a shard_map body: an axis is out of range for the block's rank");
  reduction_layout<N, Axes...> const r(x.shape);
  auto y = make_value<T>(r.shape);
  if (r.count == 0 && !y.v.empty())
    throw std::invalid_argument(std::string("tessera::") + what + " in a shard_map body: zero-size reduction of shape " +
                                shape_string(x.shape) + ", which has no identity");
  std::fill(y.v.begin(), y.v.end(), Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max());
  for_each_offset(x.shape, r.strides, [&](std::size_t i, auto const& off) {
    T& m = y.v[off[0]];
    if (Max ? x.v[i] > m : x.v[i] < m) m = x.v[i];
  });
  return y;
}

/// C[M,N] = A[M,K] B[K,N], row-major, with tessera's kernel.
template <class T>
void product(std::size_t m, std::size_t n, std::size_t k, T const* a, T const* b, T* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill_n(c, m * n, T(0));
    return;
  }
  gemm_kernel(m, n, k, a, k, b, n, c, n, false);
}
template <class T>
local_value<T, 2> transposed_matrix(local_value<T, 2> const& x) {
  auto out = make_value<T>(shape_t<2>{x.shape[1], x.shape[0]});
  for (std::size_t i = 0; i < x.shape[0]; ++i)
    for (std::size_t j = 0; j < x.shape[1]; ++j) out.v[j * x.shape[0] + i] = x.v[i * x.shape[1] + j];
  return out;
}
/// A rank-1 or rank-2 value as a matrix: a vector is a row (Left) or a column (right).
template <bool Left, class T, std::size_t N>
local_value<T, 2> as_matrix(local_value<T, N> const& x) {
  if constexpr (N == 2) return x;
  else if constexpr (Left) return local_value<T, 2>{x.v, {1, x.shape[0]}};
  else return local_value<T, 2>{x.v, {x.shape[0], 1}};
}
template <std::size_t N, class T>
local_value<T, N> from_matrix(local_value<T, 2>&& m, shape_t<N> const& s) {
  return local_value<T, N>{std::move(m.v), s};
}

}  // namespace tessera::detail
