#pragma once
// The shape operations on a device's blocks inside shard_map (jnp.reshape, swapaxes, moveaxis,
// broadcast_to on the per-device values of a shard_map'd body): the same names as the global
// view, computing on the block alone, as JAX's do inside shard_map. Each result owns its values
// and keeps the operand's vma. autodiff/local_shape_ops.hpp gives them on local tracers.

#include <array>
#include <cstddef>
#include <utility>

#include "tessera/expr/shape_ops.hpp"
#include "tessera/parallel/block_functions.hpp"
#include "tessera/parallel/block_math.hpp"

namespace tessera {
namespace detail {

/// v with its dimensions permuted: result dimension i is v's dimension perm[i].
template <class T, std::size_t N>
local_value<T, N> permuted(local_value<T, N> const& v, std::array<std::size_t, N> const& perm) {
  shape_t<N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = v.shape[perm[i]];
  auto out = make_value<T>(s);
  std::array<std::size_t, N> in_strides{};
  std::size_t stride = 1;
  for (std::size_t d = N; d-- > 0;) {
    in_strides[d] = stride;
    stride *= v.shape[d];
  }
  std::array<std::array<std::size_t, N>, 1> st{};
  for (std::size_t i = 0; i < N; ++i) st[0][i] = in_strides[perm[i]];
  for_each_offset(s, st, [&](std::size_t i, auto const& off) { out.v[i] = v.v[off[0]]; });
  return out;
}

/// v broadcast to shape s (NumPy's rule; the sizes were checked by the caller).
template <class T, std::size_t N, std::size_t M>
local_value<T, M> broadcast_value(local_value<T, N> const& v, shape_t<M> const& s) {
  auto out = make_value<T>(s);
  std::array<std::array<std::size_t, M>, 1> st{broadcast_strides<M>(v.shape)};
  for_each_offset(s, st, [&](std::size_t i, auto const& off) { out.v[i] = v.v[off[0]]; });
  return out;
}

/// Throws unless shape `from` broadcasts to `to` (names both, as numpy does).
template <std::size_t N, std::size_t M>
void check_broadcast(shape_t<N> const& from, shape_t<M> const& to) {
  for (std::size_t i = 0; i < N; ++i)
    if (from[i] != to[M - N + i] && from[i] != 1)
      throw std::invalid_argument("tessera::broadcast_to: cannot broadcast an array of shape " + shape_string(from) +
                                  " to shape " + shape_string(to));
}

/// The permutation swapaxes<A1, A2> applies to rank N.
template <std::size_t N>
constexpr std::array<std::size_t, N> swap_perm(std::size_t a, std::size_t b) {
  std::array<std::size_t, N> p{};
  for (std::size_t i = 0; i < N; ++i) p[i] = i == a ? b : i == b ? a : i;
  return p;
}

template <std::size_t M, std::size_t N>
shape_t<M> to_shape(shape_t<N> const& s) {
  if constexpr (M == N) return s;
  else return shape_t<M>{};
}
}  // namespace detail

/// jnp.reshape(blk, shape) in a shard_map body (one size may be -1).
template <class X, std::integral I, std::size_t M>
  requires(detail::is_plain_block<X>())
auto reshape(X const& x, I const (&shape)[M]) {
  auto v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  auto const s = detail::resolve_shape(detail::shape_argument(shape), v.shape);
  return detail::plain_result<detail::plain_vma<X>>(detail::local_value<T, M>{std::move(v.v), s});
}

/// jnp.swapaxes(blk, A1, A2) in a shard_map body.
template <int A1, int A2, class X>
  requires(detail::is_plain_block<X>())
auto swapaxes(X const& x) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<A1, A2, N,
                                                              detail::axis_in_range(A1, N) && detail::axis_in_range(A2, N)>::value);
  constexpr auto perm = detail::swap_perm<N>(detail::normalize_axis(A1, N), detail::normalize_axis(A2, N));
  return detail::plain_result<detail::plain_vma<X>>(detail::permuted(detail::values_of(x), perm));
}

/// jnp.moveaxis(blk, From, To) in a shard_map body.
template <int From, int To, class X>
  requires(detail::is_plain_block<X>())
auto moveaxis(X const& x) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<From, To, N,
                                                              detail::axis_in_range(From, N) && detail::axis_in_range(To, N)>::value);
  constexpr auto perm = detail::moveaxis_perm<N>(detail::normalize_axis(From, N), detail::normalize_axis(To, N));
  return detail::plain_result<detail::plain_vma<X>>(detail::permuted(detail::values_of(x), perm));
}

/// jnp.broadcast_to(blk, shape) in a shard_map body.
template <class X, std::integral I, std::size_t M>
  requires(detail::is_plain_block<X>())
auto broadcast_to(X const& x, I const (&shape)[M]) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(diagnostic::broadcast_to_a_lower_rank<N, M, (N <= M)>::value);
  shape_t<M> s{};
  for (std::size_t i = 0; i < M; ++i) s[i] = static_cast<std::size_t>(shape[i]);
  auto const v = detail::values_of(x);
  detail::check_broadcast(v.shape, s);
  return detail::plain_result<detail::plain_vma<X>>(detail::broadcast_value(v, s));
}

}  // namespace tessera
