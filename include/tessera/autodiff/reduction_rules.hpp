#pragma once
// Rules on tracers for expand_dims and squeeze (each the other's transpose), the keepdims
// reductions (the reduction, then expand_dims), var and std (composites of traced operations),
// logsumexp, softmax and log_softmax (one recorded step each, with JAX's derivatives), and
// argmax and argmin (integer results: not traced, as their cotangents are zero in JAX).

#include <cstddef>
#include <utility>

#include "tessera/autodiff/rules.hpp"
#include "tessera/autodiff/tracer.hpp"
#include "tessera/expr/expand_dims.hpp"
#include "tessera/expr/reduction_ops.hpp"

namespace tessera {

/// jnp.expand_dims of a tracer: the cotangent is squeezed back.
template <int... Axes, traced_value X>
auto expand_dims(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::expand_dims<Axes...>(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] { return tessera::squeeze<Axes...>(g); });
  });
}

/// jnp.squeeze of a tracer: the cotangent gets its size-1 dimensions back.
template <int... Axes, traced_value X>
auto squeeze(X const& x) {
  using namespace detail::ad;
  static constexpr auto at = detail::normalised_axes<Axes...>(X::rank);
  return record(tape_of(x), tessera::squeeze<Axes...>(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return tessera::expand_dims<static_cast<int>(at[I])...>(g);
      }(std::make_index_sequence<at.size()>{});
    });
  });
}

namespace detail::ad {
/// A traced reduction's result with size-1 dimensions put back where the rank-N operand was reduced.
template <std::size_t N, int... Axes, class R>
auto keep_reduced(R const& r) {
  constexpr auto at = kept_positions<N, Axes...>();
  if constexpr (at.size() == 0) return r;
  else return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return tessera::expand_dims<static_cast<int>(at[I])...>(r);
  }(std::make_index_sequence<at.size()>{});
}
}  // namespace detail::ad

#define TESSERA_AD_KEEPDIMS(NAME)                                                     \
  /** jnp.NAME(x, axis=(Axes...), keepdims=True) of a tracer */                      \
  template <int... Axes, traced_value X>                                              \
  auto NAME(X const& x, keepdims_t) {                                                 \
    return detail::ad::keep_reduced<X::rank, Axes...>(tessera::NAME<Axes...>(x));    \
  }
TESSERA_AD_KEEPDIMS(sum)
TESSERA_AD_KEEPDIMS(mean)
TESSERA_AD_KEEPDIMS(max)
TESSERA_AD_KEEPDIMS(min)
TESSERA_AD_KEEPDIMS(prod)
#undef TESSERA_AD_KEEPDIMS

/// jnp.var of a tracer: the same composite as on arrays, differentiated step by step.
template <int... Axes, traced_value X>
auto var(X const& x, double ddof = 0) {
  using T = typename X::value_type;
  auto const n = detail::reduced_size<Axes...>(x.shape());
  auto const c = x - tessera::mean<Axes...>(x, keepdims);
  return tessera::sum<Axes...>(c * c) / static_cast<T>(static_cast<double>(n) - ddof);
}
/// jnp.var(..., keepdims=True) of a tracer.
template <int... Axes, traced_value X>
auto var(X const& x, keepdims_t, double ddof = 0) {
  return detail::ad::keep_reduced<X::rank, Axes...>(tessera::var<Axes...>(x, ddof));
}
/// jnp.std of a tracer: sqrt of var.
template <int... Axes, traced_value X>
auto std(X const& x, double ddof = 0) {
  return tessera::sqrt(tessera::var<Axes...>(x, ddof));
}
/// jnp.std(..., keepdims=True) of a tracer.
template <int... Axes, traced_value X>
auto std(X const& x, keepdims_t, double ddof = 0) {
  return tessera::sqrt(tessera::var<Axes...>(x, keepdims, ddof));
}

/// jax.nn.logsumexp of a tracer: g spread back times exp(x - logsumexp(x)) (the max is a constant
/// to JAX's derivative, so this is all of it).
template <int... Axes, traced_value X>
auto logsumexp(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::logsumexp<Axes...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] {
      auto const& p = x.primal();
      return spread<Axes...>(g, p) * tessera::exp(p - spread<Axes...>(y(), p));
    });
  });
}
/// jax.nn.logsumexp(..., keepdims=True) of a tracer.
template <int... Axes, traced_value X>
auto logsumexp(X const& x, keepdims_t) {
  return detail::ad::keep_reduced<X::rank, Axes...>(tessera::logsumexp<Axes...>(x));
}

/// jax.nn.softmax of a tracer, with JAX's custom_jvp: the cotangent y * (g - sum(g * y)).
template <int Axis = -1, int... More, traced_value X>
auto softmax(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::softmax<Axis, More...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] {
      auto const& s = y();
      return s * (g - tessera::sum<Axis, More...>(g * s, keepdims));
    });
  });
}
/// jax.nn.log_softmax of a tracer (the max stopped, as in JAX): the cotangent g - exp(y) * sum(g).
template <int Axis = -1, int... More, traced_value X>
auto log_softmax(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::log_softmax<Axis, More...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] { return g - tessera::exp(y()) * tessera::sum<Axis, More...>(g, keepdims); });
  });
}

/// jnp.argmax of a tracer: the indices of its value (integers carry no cotangent).
template <int Axis, traced_value X>
auto argmax(X const& x) {
  return tessera::argmax<Axis>(x.primal());
}
/// jnp.argmin of a tracer.
template <int Axis, traced_value X>
auto argmin(X const& x) {
  return tessera::argmin<Axis>(x.primal());
}
/// jnp.argmax(..., keepdims=True) of a tracer.
template <int Axis, traced_value X>
auto argmax(X const& x, keepdims_t) {
  return tessera::argmax<Axis>(x.primal(), keepdims);
}
/// jnp.argmin(..., keepdims=True) of a tracer.
template <int Axis, traced_value X>
auto argmin(X const& x, keepdims_t) {
  return tessera::argmin<Axis>(x.primal(), keepdims);
}

}  // namespace tessera
