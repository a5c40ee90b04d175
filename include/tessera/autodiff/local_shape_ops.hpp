#pragma once
// The shape operations on local tracers (a shard_map body under grad), with their transposes:
// reshape's cotangent reshaped back, swapaxes' and moveaxis' permuted back, broadcast_to's
// summed over the broadcast dimensions. Nothing here communicates.

#include <array>
#include <cstddef>
#include <utility>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/parallel/block_shape_ops.hpp"

namespace tessera {

/// jnp.reshape of a local tracer: g reshaped back.
template <local_traced X, std::integral I, std::size_t M>
auto reshape(X const& x, I const (&shape)[M]) {
  using T = typename X::value_type;
  auto const& v = x.node()->value;
  auto const s = detail::resolve_shape(detail::shape_argument(shape), v.shape);
  return detail::ad::local_record(detail::local_value<T, M>{v.v, s}, x.node()->vma,
                                  [x](detail::local_value<T, M> g, detail::ad::axis_mask m) {
                                    x.node()->add(m, detail::local_value<T, X::rank>{std::move(g.v), x.shape()});
                                  },
                                  "reshape");
}

namespace detail::ad {
template <std::size_t N>
constexpr std::array<std::size_t, N> inverse_of(std::array<std::size_t, N> const& p) {
  std::array<std::size_t, N> inv{};
  for (std::size_t i = 0; i < N; ++i) inv[p[i]] = i;
  return inv;
}
template <std::size_t N, class X>
auto local_permute(X const& x, std::array<std::size_t, N> const& perm, char const* what) {
  using T = typename X::value_type;
  return local_record(permuted(x.node()->value, perm), x.node()->vma,
                      [x, perm](local_value<T, N> g, axis_mask m) { x.node()->add(m, permuted(g, inverse_of(perm))); },
                      what);
}
}  // namespace detail::ad

/// jnp.swapaxes of a local tracer.
template <int A1, int A2, local_traced X>
auto swapaxes(X const& x) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<A1, A2, N,
                                                              detail::axis_in_range(A1, N) && detail::axis_in_range(A2, N)>::value);
  return detail::ad::local_permute<N>(x, detail::swap_perm<N>(detail::normalize_axis(A1, N), detail::normalize_axis(A2, N)),
                                      "swapaxes");
}

/// jnp.moveaxis of a local tracer.
template <int From, int To, local_traced X>
auto moveaxis(X const& x) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<From, To, N,
                                                              detail::axis_in_range(From, N) && detail::axis_in_range(To, N)>::value);
  return detail::ad::local_permute<N>(
      x, detail::moveaxis_perm<N>(detail::normalize_axis(From, N), detail::normalize_axis(To, N)), "moveaxis");
}

/// jnp.broadcast_to of a local tracer: g summed over the broadcast dimensions.
template <local_traced X, std::integral I, std::size_t M>
auto broadcast_to(X const& x, I const (&shape)[M]) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::broadcast_to_a_lower_rank<N, M, (N <= M)>::value);
  shape_t<M> s{};
  for (std::size_t i = 0; i < M; ++i) s[i] = static_cast<std::size_t>(shape[i]);
  detail::check_broadcast(x.shape(), s);
  return detail::ad::local_record(detail::broadcast_value(x.node()->value, s), x.node()->vma,
                                  [x](detail::local_value<T, M> g, detail::ad::axis_mask m) {
                                    x.node()->add(m, detail::ad::unbroadcast(g, x.shape()));
                                  },
                                  "broadcast_to");
}

}  // namespace tessera
