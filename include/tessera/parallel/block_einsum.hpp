#pragma once
// jnp.einsum on a device's blocks inside shard_map: `tessera::einsum<"bqhd,bkhd->bhqk">(q, k)` on
// the per-device values, a plain local computation (no collective: the body sums partial
// results itself with psum, as in JAX). The subscripts are parsed and checked at compile time
// as the global einsum's are (expr/einsum.hpp), with the same errors. The result owns its
// values and varies where its operands vary.

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "tessera/expr/einsum.hpp"
#include "tessera/expr/promote.hpp"
#include "tessera/parallel/block_functions.hpp"

namespace tessera {

namespace detail {

/// Row-major strides of a local value, by index.
template <std::size_t N>
std::array<std::size_t, 128> einsum_label_strides(einsum_term const& t, shape_t<N> const& shape) {
  std::array<std::size_t, 128> s{};
  std::size_t st = 1;
  for (std::size_t i = N; i-- > 0;) {
    s[static_cast<unsigned char>(t.labels[i])] = st;
    st *= shape[i];
  }
  return s;
}

/// einsum of two local values of element type T (the one-operand form passes the number 1
/// with no indices as b): every index not in the output is summed, in one packed product.
template <einsum_labels L, class T, std::size_t RA, std::size_t RB>
local_value<T, L.out.rank> einsum_values(local_value<T, RA> const& a, local_value<T, RB> const& b) {
  auto const size = einsum_sizes<RA, RB>(L, a.shape, b.shape);
  constexpr std::size_t R = L.out.rank;
  shape_t<R> shape{};
  for (std::size_t d = 0; d < R; ++d) shape[d] = size[static_cast<unsigned char>(L.out.labels[d])];
  auto y = make_value<T>(shape);
  einsum_local<T>(L, size, a.data(), einsum_label_strides(L.a, a.shape), b.data(), einsum_label_strides(L.b, b.shape),
                  y.data(), einsum_label_strides(L.out, shape));
  return y;
}

template <class T, class X>
local_value<T, static_rank_v<X>> einsum_block_values(X const& x) {
  auto v = values_of(x);
  local_value<T, static_rank_v<X>> out{std::vector<T>(v.v.begin(), v.v.end()), v.shape};
  return out;
}

}  // namespace detail

/// jnp.einsum(subscripts, x) of a device's block in a shard_map body: the indices left out of
/// the output summed locally, the rest transposed.
template <einsum_subscripts S, plain_block X>
auto einsum(X const& x) {
  using T = std::remove_cv_t<typename std::remove_cvref_t<X>::value_type>;
  constexpr std::size_t N = static_rank_v<X>;
  if constexpr (!detail::einsum_ok<S, 1, N, 0>()) {
    detail::einsum_diagnose<S, 1, N, 0>();
    return detail::plain_result<detail::plain_vma<X>>(detail::make_value<T>(shape_t<0>{}));
  } else {
    constexpr detail::einsum_labels L = detail::parse_einsum(S.view());
    detail::local_value<T, 0> const one{std::vector<T>(1, T(1)), {}};
    return detail::plain_result<detail::plain_vma<X>>(
        detail::einsum_values<L>(detail::einsum_block_values<T>(x), one));
  }
}

/// jnp.einsum(subscripts, a, b) of a device's blocks in a shard_map body (element types
/// promoted as jnp.einsum promotes them): a local product; where the contracted dimension is
/// split over devices, psum the result.
template <einsum_subscripts S, plain_block A, plain_block B>
auto einsum(A const& a, B const& b) {
  using TA = std::remove_cv_t<typename std::remove_cvref_t<A>::value_type>;
  using TB = std::remove_cv_t<typename std::remove_cvref_t<B>::value_type>;
  using T = detail::promote_t<TA, TB>;
  constexpr std::size_t NA = static_rank_v<A>, NB = static_rank_v<B>;
  if constexpr (!detail::einsum_ok<S, 2, NA, NB>()) {
    detail::einsum_diagnose<S, 2, NA, NB>();
    return detail::plain_result<detail::plain_vma2<A, B>>(detail::make_value<T>(shape_t<0>{}));
  } else {
    constexpr detail::einsum_labels L = detail::parse_einsum(S.view());
    return detail::plain_result<detail::plain_vma2<A, B>>(
        detail::einsum_values<L>(detail::einsum_block_values<T>(a), detail::einsum_block_values<T>(b)));
  }
}

}  // namespace tessera
