#pragma once
// JAX's element-wise special functions on sharded arrays: lax.erf, lax.erfc and the activations
// jax.nn.gelu, silu (swish) and softplus. Each is one element-wise node (it fuses with its
// neighbours, keeps its operand's sharding and moves no data), computed as XLA computes it on
// CPU where that is cheap to follow: in float32 erf, tanh, exp and log1p are XLA's own
// (expr/special_math.hpp, expr/xla_log.hpp), so erf, gelu, silu and softplus give JAX's float32
// bits; erfc, gelu<false> and the float64 forms go through the C library's erf, erfc, exp and
// log1p and land within a few ulps (tests/jax/special_functions_golden_test.cpp measures them). Their gradients are in autodiff/special_rules.hpp, the same names on a device's
// block in parallel/block_special.hpp and on a shard_map body's local tracers in
// autodiff/local_special.hpp.
//
// gelu's approximate=False is a template argument, gelu<false>(x), because the two forms are
// different nodes (a run-time bool would have to evaluate both).

#include <cmath>
#include <type_traits>
#include <utility>

#include "tessera/expr/functions.hpp"
#include "tessera/expr/special_math.hpp"
#include "tessera/expr/xla_log.hpp"

namespace tessera::op {

namespace detail {
/// Whether an op built from +, *, fma and select runs on batches of T with the scalar's bits.
template <class T>
inline constexpr bool exact_batch = std::is_same_v<T, float> && tessera::detail::special::batch_fma;
}  // namespace detail

/// lax.erf (float32: XLA's interpolant, JAX's bits; float64: the C library's erf)
struct erf {
  template <class T> static constexpr bool simd = detail::exact_batch<T>;
  template <class X> static X apply(X a) {
    if constexpr (!detail::is_number<X> || std::is_same_v<X, float>) return tessera::detail::special::erf_f32(a);
    else return std::erf(a);
  }
};

/// lax.erfc (the C library's erfc)
struct erfc {
  template <class T> static constexpr bool simd = false;
  template <class X> static X apply(X a) { return std::erfc(a); }
};

/// jax.nn.gelu(x, approximate=True): x * (0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))), in
/// jax.nn's order of operations with XLA's tanh; XLA's fusion rounds every other step on its own
/// (no fused multiply-add), so 0.044715 x^3 is kept out of the add (special::unfused): fused, it
/// moved results by up to millions of ulps where 1 + tanh cancels (x < -4).
struct gelu_tanh {
  template <class T> static constexpr bool simd = detail::exact_batch<T>;
  template <class X> static X apply(X x) {
    namespace sp = tessera::detail::special;
    using V = tessera::detail::special::scalar_t<X>;
    V const k = static_cast<V>(0.79788456080286535588);  // np.sqrt(2 / np.pi).astype(dtype)
    X const inner = X(k) * (x + sp::unfused(X(static_cast<V>(0.044715)) * ((x * x) * x)));
    X const t = sp::tanh(inner);
    return x * (X(V(0.5)) * (X(V(1)) + t));
  }
};

/// jax.nn.gelu(x, approximate=False): 0.5 x erfc(-x sqrt(1/2)).
struct gelu_erf {
  template <class T> static constexpr bool simd = false;
  template <class X> static X apply(X x) {
    X const sqrt_half = static_cast<X>(0.70710678118654752440);
    return X(0.5) * x * std::erfc(-x * sqrt_half);
  }
};

/// An argument past which exp is inf (and -it, 0): xsimd's exp converts x / log(2) to an integer,
/// undefined behaviour for |x| near 1e30, so its batches get no larger arguments.
template <class V>
inline constexpr V exp_overflows = sizeof(V) == 4 ? V(104) : V(746);

/// jax.nn.silu: x * sigmoid(x), sigmoid as 1 / (1 + exp(-x)) (XLA's expansion of lax.logistic);
/// float32 with XLA's exp (JAX's bits), float64 with the C library's and xsimd's.
struct silu {
  template <class T> static constexpr bool simd = detail::exact_batch<T> || std::is_same_v<T, double>;
  template <class X> static X apply(X x) {
    using V = tessera::detail::special::scalar_t<X>;
    if constexpr (std::is_same_v<V, float>) return x * tessera::detail::special::logistic_f32(x);
    else if constexpr (detail::is_number<X>) return x * (V(1) / (V(1) + std::exp(-x)));
    else return x * (X(V(1)) / (X(V(1)) + xsimd::exp(xsimd::max(xsimd::min(-x, X(exp_overflows<V>)), X(-exp_overflows<V>)))));
  }
};

/// jax.nn.softplus: logaddexp(x, 0) = max(x, 0) + log1p(exp(-|x|)), x itself for NaN; float32 with
/// XLA's exp and log1p (JAX's bits), float64 with the C library's and xsimd's.
struct softplus {
  template <class T> static constexpr bool simd =
      detail::exact_batch<T> || (std::is_same_v<T, double> && detail::batch_log_compiles);
  template <class X> static X apply(X x) {
    namespace sp = tessera::detail::special;
    using V = sp::scalar_t<X>;
    if constexpr (std::is_same_v<V, float>) {
      X const r = sp::select(x > X(V(0)), x, X(V(0))) + sp::xla_log1p_f32(sp::exp_f32(-sp::fabs(x)));
      return sp::select(sp::is_nan(x), x, r);
    } else if constexpr (detail::is_number<X>) {
      if (x != x) return x;
      return (x > V(0) ? x : V(0)) + std::log1p(std::exp(-std::fabs(x)));
    } else {
      X const r = xsimd::select(x > X(V(0)), x, X(V(0))) +
                  xsimd::log1p(xsimd::exp(xsimd::max(-xsimd::abs(x), X(-exp_overflows<V>))));
      return xsimd::select(xsimd::isnan(x), x, r);
    }
  }
};

}  // namespace tessera::op

namespace tessera {

/// jax.lax.erf (jax.scipy.special.erf); integers compute in floating point, as in JAX.
template <sharded_expression X>
auto erf(X&& x) {
  return detail::floating_function<op::erf>(std::forward<X>(x));
}
/// jax.lax.erfc (jax.scipy.special.erfc)
template <sharded_expression X>
auto erfc(X&& x) {
  return detail::floating_function<op::erfc>(std::forward<X>(x));
}
/// jax.nn.gelu(x): the tanh approximation; gelu<false>(x) is jax.nn.gelu(x, approximate=False).
template <bool Approximate = true, sharded_expression X>
auto gelu(X&& x) {
  if constexpr (Approximate) return detail::floating_function<op::gelu_tanh>(std::forward<X>(x));
  else return detail::floating_function<op::gelu_erf>(std::forward<X>(x));
}
/// jax.nn.silu: x * sigmoid(x).
template <sharded_expression X>
auto silu(X&& x) {
  return detail::floating_function<op::silu>(std::forward<X>(x));
}
/// jax.nn.swish: silu.
template <sharded_expression X>
auto swish(X&& x) {
  return detail::floating_function<op::silu>(std::forward<X>(x));
}
/// jax.nn.softplus: log(1 + exp(x)), computed as jnp.logaddexp(x, 0) (no overflow).
template <sharded_expression X>
auto softplus(X&& x) {
  return detail::floating_function<op::softplus>(std::forward<X>(x));
}

}  // namespace tessera
