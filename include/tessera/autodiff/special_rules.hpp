#pragma once
// grad's rules for the special functions of expr/special_functions.hpp: erf, erfc, gelu (both
// forms), silu/swish and softplus on tracers. The forward value is the same node on the primal;
// the backward step is one element-wise node g * f'(x) (fused, laid out like the operand, no
// communication), f' being JAX's jvp rule (erf, erfc, softplus's logaddexp) or the derivative of
// jax.nn's formula (gelu, silu), which jax.grad differentiates step by step; in float32 gelu's, silu's
// and softplus's follow JAX's steps and are its bits (tests/jax/special_functions_golden_test.cpp).

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "tessera/autodiff/rules.hpp"
#include "tessera/expr/special_functions.hpp"
#include "tessera/expr/special_math.hpp"

namespace tessera::op {

#define TESSERA_SPECIAL_DERIVATIVE(NAME, JAX, DERIVATIVE)                     \
  /** g * f'(x) for JAX (a cotangent times the derivative at the primal) */  \
  struct NAME {                                                              \
    template <class T> static constexpr bool simd = false;                   \
    template <class X> static X apply(X g, X x) {                            \
      namespace sp = tessera::detail::special;                               \
      return g * (DERIVATIVE);                                               \
    }                                                                        \
  };
#define TESSERA_ERF_DERIVATIVE(NAME, JAX, SIGN)                                                   \
  /** g * f'(x) for JAX, in its order: (+-2/sqrt(pi) g) exp(-x^2) */                               \
  struct NAME {                                                                                   \
    template <class T> static constexpr bool simd = false;                                        \
    template <class X> static X apply(X g, X x) {                                                 \
      return (static_cast<X>(SIGN 1.12837916709551257390) * g) * tessera::detail::special::exp_neg_sq(x); \
    }                                                                                             \
  };
TESSERA_ERF_DERIVATIVE(erf_cotangent, lax.erf, +)
TESSERA_ERF_DERIVATIVE(erfc_cotangent, lax.erfc, -)
#undef TESSERA_ERF_DERIVATIVE
/** g * gelu'(x) for jax.nn.gelu (approximate=True), on xsimd batches where they give the same bits */
struct gelu_tanh_cotangent {
  template <class T> static constexpr bool simd = detail::exact_batch<T>;
  template <class X> static X apply(X g, X x) { return g * tessera::detail::special::gelu_tanh_derivative(x); }
};
TESSERA_SPECIAL_DERIVATIVE(gelu_erf_cotangent, jax.nn.gelu(approximate=False), sp::gelu_erf_derivative(x))
TESSERA_SPECIAL_DERIVATIVE(silu_cotangent, jax.nn.silu, sp::silu_derivative(x))
#undef TESSERA_SPECIAL_DERIVATIVE

/// g * f'(x) for jax.nn.softplus: logaddexp's jvp, exp(x - softplus(x)) with +inf read as 0 on
/// both sides (float32: XLA's exp, JAX's bits); mathematically sigmoid(x).
struct softplus_cotangent {
  template <class T> static constexpr bool simd = false;
  template <class X> static X apply(X g, X x) {
    auto const finite = [](X v) { return v == std::numeric_limits<X>::infinity() ? X(0) : v; };
    X const d = finite(x) - finite(softplus::apply(x));
    if constexpr (std::is_same_v<X, float>) return g * tessera::detail::special::exp_f32(d);
    else return g * std::exp(d);
  }
};

}  // namespace tessera::op

namespace tessera {

namespace detail::ad {
/// The tracer of y = f(x) whose cotangent rule is Cotangent (g, x -> g f'(x)).
template <class Cotangent, class X, class Forward>
auto special_unary(X const& x, Forward forward) {
  return record(tape_of(x), forward(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] {
      using T = typename std::remove_cvref_t<decltype(g)>::value_type;
      return make_elementwise<Cotangent, T, T>(store(g), store(primal_of(x)));
    });
  });
}
}  // namespace detail::ad

/// jax.lax.erf of a tracer: g 2/sqrt(pi) exp(-x^2).
template <traced_value X>
auto erf(X const& x) {
  return detail::ad::special_unary<op::erf_cotangent>(x, [](auto const& p) { return tessera::erf(p); });
}
/// jax.lax.erfc of a tracer: -g 2/sqrt(pi) exp(-x^2).
template <traced_value X>
auto erfc(X const& x) {
  return detail::ad::special_unary<op::erfc_cotangent>(x, [](auto const& p) { return tessera::erfc(p); });
}
/// jax.nn.gelu of a tracer (gelu<false>: approximate=False).
template <bool Approximate = true, traced_value X>
auto gelu(X const& x) {
  if constexpr (Approximate)
    return detail::ad::special_unary<op::gelu_tanh_cotangent>(x, [](auto const& p) { return tessera::gelu<true>(p); });
  else
    return detail::ad::special_unary<op::gelu_erf_cotangent>(x, [](auto const& p) { return tessera::gelu<false>(p); });
}
/// jax.nn.silu of a tracer: g s (1 + x (1 - s)), s = sigmoid(x).
template <traced_value X>
auto silu(X const& x) {
  return detail::ad::special_unary<op::silu_cotangent>(x, [](auto const& p) { return tessera::silu(p); });
}
/// jax.nn.swish of a tracer: silu.
template <traced_value X>
auto swish(X const& x) {
  return silu(x);
}
/// jax.nn.softplus of a tracer: g sigmoid(x).
template <traced_value X>
auto softplus(X const& x) {
  return detail::ad::special_unary<op::softplus_cotangent>(x, [](auto const& p) { return tessera::softplus(p); });
}

}  // namespace tessera
