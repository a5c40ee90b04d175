#pragma once
// The numbers behind tessera's special functions (expr/special_functions.hpp) and jax.random's
// truncated_normal: lax.erf and lax.tanh in float32 as XLA's CPU backend emits them (the rational
// interpolants of Eigen, xla/service/llvm_ir/math_ops.cc EmitErfF32 and EmitFastTanh), on numbers
// and on xsimd batches. Only <cmath> and the xsimd shim: random/erf_inv.hpp includes it too.
//
// Each polynomial step is one fused multiply-add, as XLA emits llvm.fma (erf) or as LLVM contracts
// a multiply and an add (tanh) on machines with FMA. The batch forms are used only where xsimd's
// fma is the hardware's (FMA3, AVX-512, NEON64); elsewhere it would round twice, so the scalar
// forms run and every element is the same either way.

#include <cmath>
#include <type_traits>

#include "tessera/runtime/simd.hpp"

namespace tessera::detail::special {

/// Whether xsimd's fma on float batches is one rounding (the scalar std::fma's result).
inline constexpr bool batch_fma =
#if XSIMD_WITH_FMA3_SSE || XSIMD_WITH_FMA3_AVX || XSIMD_WITH_FMA3_AVX2 || XSIMD_WITH_AVX512F || XSIMD_WITH_NEON64
    true;
#else
    false;
#endif

template <class X>
inline constexpr bool is_number = std::is_arithmetic_v<X>;

/// The element type of a number (itself) or of an xsimd batch.
template <class X>
struct scalar_of {
  using type = X;
};
template <class T, class A>
struct scalar_of<xsimd::batch<T, A>> {
  using type = T;
};
template <class X>
using scalar_t = typename scalar_of<X>::type;

template <class X, class V>
X fma(X a, X b, X c) {
  if constexpr (is_number<X>) return std::fma(a, b, c);
  else return xsimd::fma(a, b, c);
}
template <class X>
X fabs(X a) {
  if constexpr (is_number<X>) return std::fabs(a);
  else return xsimd::abs(a);
}
template <class X, class M>
X select(M const& m, X const& a, X const& b) {
  if constexpr (is_number<X>) return m ? a : b;
  else return xsimd::select(m, a, b);
}

/// lax.erf in float32 (EmitErfF32): x P(x^2) / Q(x^2), and +-1 from |x| >= 3.8325069 (where the
/// quotient reaches 1 - ulp/2); NaN stays NaN.
template <class X>
X erf_f32(X x) {
  using V = float;
  X const x2 = x * x;
  X p = special::fma<X, V>(x2, X(V(0.00022905065861350646f)), X(V(0.0034082910107109506f)));
  p = special::fma<X, V>(x2, p, X(V(0.050955695062380861f)));
  p = special::fma<X, V>(x2, p, X(V(0.18520832239976145f)));
  p = special::fma<X, V>(x2, p, X(V(1.128379143519084f)));
  p = x * p;
  X q = special::fma<X, V>(x2, X(V(-1.1791602954361697e-7f)), X(V(0.000023547966471313185f)));
  q = special::fma<X, V>(x2, q, X(V(0.0010179625278914885f)));
  q = special::fma<X, V>(x2, q, X(V(0.014070470171167667f)));
  q = special::fma<X, V>(x2, q, X(V(0.11098505178285362f)));
  q = special::fma<X, V>(x2, q, X(V(0.49746925110067538f)));
  q = special::fma<X, V>(x2, q, X(V(1.0f)));
  X const one = select(x < X(V(0)), X(V(-1)), X(V(1)));
  return select(X(V(3.832506856900711f)) <= fabs(x), one, p / q);
}

/// lax.tanh in float32 (EmitFastTanh with FMA): x P(x^2) / Q(x^2) on x clamped to +-7.9988117,
/// x itself where |x| < 0.0004, and +-1 from |x| >= 20 (XLA's elemental emitter); NaN stays NaN.
template <class X>
X tanh_f32(X x) {
  using V = float;
  X const c = select(x < X(V(-7.99881172180175781f)), X(V(-7.99881172180175781f)),
                     select(x > X(V(7.99881172180175781f)), X(V(7.99881172180175781f)), x));
  X const x2 = c * c;
  X p = special::fma<X, V>(x2, X(V(-2.76076847742355e-16f)), X(V(2.00018790482477e-13f)));
  p = special::fma<X, V>(x2, p, X(V(-8.60467152213735e-11f)));
  p = special::fma<X, V>(x2, p, X(V(5.12229709037114e-08f)));
  p = special::fma<X, V>(x2, p, X(V(1.48572235717979e-05f)));
  p = special::fma<X, V>(x2, p, X(V(6.37261928875436e-04f)));
  p = special::fma<X, V>(x2, p, X(V(4.89352455891786e-03f)));
  p = c * p;
  X q = special::fma<X, V>(x2, X(V(1.19825839466702e-06f)), X(V(1.18534705686654e-04f)));
  q = special::fma<X, V>(x2, q, X(V(2.26843463243900e-03f)));
  q = special::fma<X, V>(x2, q, X(V(4.89352518554385e-03f)));
  X const ax = fabs(x);
  X const one = select(x < X(V(0)), X(V(-1)), X(V(1)));
  return select(ax >= X(V(20)), one, select(ax < X(V(0.0004f)), x, p / q));
}

/// lax.tanh in float64 (EmitFastTanhF64 with FMA): x P(x^2) / Q(x^2), degrees 19 and 18, on x
/// clamped to +-17.661019162460008, and +-1 from |x| >= 20 (XLA's elemental emitter); NaN stays NaN.
inline double tanh_f64(double x) {
  constexpr double num[10] = {2.6158007860482230e-23, 7.6534862268749319e-19, 3.1309488231386680e-15,
                              4.2303918148209176e-12, 2.4618379131293676e-09, 6.8644367682497074e-07,
                              9.3839087674268880e-05, 5.9809711724441161e-03, 1.5184719640284322e-01,
                              1.0};
  constexpr double den[10] = {6.463747022670968018e-21, 5.782506856739003571e-17, 1.293019623712687916e-13,
                              1.123643448069621992e-10, 4.492975677839633985e-08, 8.785185266237658698e-06,
                              8.295161192716231542e-04, 3.437448108450402717e-02, 4.851805297361760360e-01,
                              1.0};
  constexpr double clamp = 17.6610191624600077;
  double const c = x < -clamp ? -clamp : (x > clamp ? clamp : x);
  double const x2 = c * c;
  double p = num[0], q = den[0];
  for (int i = 1; i < 10; ++i) {
    p = std::fma(x2, p, num[i]);
    q = std::fma(x2, q, den[i]);
  }
  return std::fabs(x) >= 20.0 ? (x < 0 ? -1.0 : 1.0) : (c * p) / q;
}

/// lax.erf as JAX computes it on CPU: XLA's interpolant in float32, the C library's otherwise.
template <class F>
F erf(F x) {
  if constexpr (std::is_same_v<F, float>) return erf_f32(x);
  else return std::erf(x);
}
/// lax.tanh as JAX computes it on CPU: XLA's interpolants in float32 and float64.
template <class F>
F tanh(F x) {
  if constexpr (std::is_same_v<F, float>) return tanh_f32(x);
  else if constexpr (std::is_same_v<F, double>) return tanh_f64(x);
  else return std::tanh(x);
}

// The derivatives (numbers only), for grad's rules on tracers and on a shard_map body's local
// tracers: JAX's jvp rules (erf, logaddexp) or the derivative of jax.nn's formula (gelu, silu).

/// d/dx erf(x) = 2/sqrt(pi) exp(-x^2) (lax's erf jvp).
template <class F>
F erf_derivative(F x) {
  return static_cast<F>(1.12837916709551257390) * std::exp(-(x * x));
}
/// d/dx gelu(x), tanh form: 0.5 (1 + t) + x 0.5 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2).
template <class F>
F gelu_tanh_derivative(F x) {
  F const k = static_cast<F>(0.79788456080286535588);
  F const a = static_cast<F>(0.044715);
  F const t = tanh(k * (x + a * ((x * x) * x)));
  return F(0.5) * (F(1) + t) + x * (F(0.5) * (F(1) - t * t)) * k * (F(1) + F(3) * a * (x * x));
}
/// d/dx gelu(x), erf form: 0.5 erfc(-x / sqrt(2)) + x exp(-x^2 / 2) / sqrt(2 pi).
template <class F>
F gelu_erf_derivative(F x) {
  return F(0.5) * std::erfc(-x * static_cast<F>(0.70710678118654752440)) +
         x * std::exp(F(-0.5) * (x * x)) * static_cast<F>(0.39894228040143267794);
}
/// sigmoid(x) = 1 / (1 + exp(-x)).
template <class F>
F sigmoid(F x) {
  return F(1) / (F(1) + std::exp(-x));
}
/// d/dx silu(x) = s (1 + x (1 - s)), s = sigmoid(x).
template <class F>
F silu_derivative(F x) {
  F const s = sigmoid(x);
  return s * (F(1) + x * (F(1) - s));
}

}  // namespace tessera::detail::special
