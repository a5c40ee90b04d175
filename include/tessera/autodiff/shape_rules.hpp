#pragma once
// The shape operations on tracers (expr/shape_ops.hpp), with their transposes: a reshape's
// cotangent is reshaped back into the operand's shape and layout, swapaxes and moveaxis are
// transposes (whose rule is in rules.hpp), and broadcast_to's cotangent is summed over the
// broadcast dimensions (what contribute does for any broadcast result).

#include <array>
#include <cstddef>
#include <utility>

#include "tessera/autodiff/rules.hpp"
#include "tessera/expr/shape_ops.hpp"

namespace tessera {

namespace detail::ad {
/// g reshaped back into x's shape, laid out as x is.
template <class X, class G>
auto reshape_back(X const& x, G const& g) {
  using A = typename X::array_type;
  if constexpr (all_none(operand_traits<A>::spec)) return tessera::reshape(g, x.shape());
  else return tessera::reshape(g, x.shape(), spec_of<A>{});
}
}  // namespace detail::ad

/// jnp.reshape of a replicated tracer: g reshaped back.
template <traced_value X, std::integral I, std::size_t M>
auto reshape(X const& x, I const (&shape)[M]) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::reshape(primal_of(x), shape), [x](auto const& g, auto const&) {
    contribute(x, [&] { return reshape_back(x, g); });
  });
}
/// jnp.reshape of a replicated tracer.
template <traced_value X, std::size_t M>
auto reshape(X const& x, shape_t<M> const& shape) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::reshape(primal_of(x), shape), [x](auto const& g, auto const&) {
    contribute(x, [&] { return reshape_back(x, g); });
  });
}
/// jax.lax.reshape(x, shape, out_sharding=P(...)) of a tracer: g reshaped back into x's layout.
template <traced_value X, std::integral I, std::size_t M, dim_spec... D>
auto reshape(X const& x, I const (&shape)[M], P<D...> p) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::reshape(primal_of(x), shape, p), [x](auto const& g, auto const&) {
    contribute(x, [&] { return reshape_back(x, g); });
  });
}
/// jax.lax.reshape(x, shape, out_sharding=P(...)) of a tracer.
template <traced_value X, std::size_t M, dim_spec... D>
auto reshape(X const& x, shape_t<M> const& shape, P<D...> p) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::reshape(primal_of(x), shape, p), [x](auto const& g, auto const&) {
    contribute(x, [&] { return reshape_back(x, g); });
  });
}

/// jnp.swapaxes of a tracer: a transpose, whose rule transposes g back.
template <int A1, int A2, traced_value X>
auto swapaxes(X const& x) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<A1, A2, N,
                                                              detail::axis_in_range(A1, N) && detail::axis_in_range(A2, N)>::value);
  constexpr std::size_t a = detail::normalize_axis(A1, N), b = detail::normalize_axis(A2, N);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return transpose<(I == a ? b : I == b ? a : I)...>(x);
  }(std::make_index_sequence<N>{});
}
/// jnp.moveaxis of a tracer: a transpose.
template <int From, int To, traced_value X>
auto moveaxis(X const& x) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<From, To, N,
                                                              detail::axis_in_range(From, N) && detail::axis_in_range(To, N)>::value);
  constexpr auto perm = detail::moveaxis_perm<N>(detail::normalize_axis(From, N), detail::normalize_axis(To, N));
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return transpose<perm[I]...>(x);
  }(std::make_index_sequence<N>{});
}

/// jnp.broadcast_to of a tracer: g summed over the broadcast dimensions.
template <traced_value X, std::size_t M>
auto broadcast_to(X const& x, shape_t<M> const& shape) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::broadcast_to(primal_of(x), shape), [x](auto const& g, auto const&) {
    contribute(x, [&] { return g; });
  });
}
/// jnp.broadcast_to of a tracer.
template <traced_value X, std::integral I, std::size_t M>
auto broadcast_to(X const& x, I const (&shape)[M]) {
  shape_t<M> s{};
  for (std::size_t i = 0; i < M; ++i) s[i] = static_cast<std::size_t>(shape[i]);
  return tessera::broadcast_to(x, s);
}

}  // namespace tessera
