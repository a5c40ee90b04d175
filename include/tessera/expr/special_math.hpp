#pragma once
// The numbers behind tessera's special functions (expr/special_functions.hpp) and jax.random's
// truncated_normal: lax.erf and lax.tanh in float32 as XLA's CPU backend emits them (the rational
// interpolants of Eigen, xla/service/llvm_ir/math_ops.cc EmitErfF32 and EmitFastTanh), on numbers
// and on xsimd batches. Only <cmath> and the xsimd shim: expr/xla_log.hpp and random/erf_inv.hpp include it too.
//
// Each polynomial step is one fused multiply-add, as XLA emits llvm.fma (erf) or as LLVM contracts
// a multiply and an add (tanh) on machines with FMA. The batch forms are used only where the
// hardware has FMA (FMA3, AVX-512, NEON64); elsewhere xsimd's fma would round twice, so the scalar
// forms run and every element is the same either way.
//
// Everywhere else XLA rounds each multiply on its own (its IR carries no `contract` flag), but a
// C++ compiler may fuse a * b + c into one fma: GCC does so across statements in GNU mode
// (-ffp-contract=fast) once FMA is enabled (-march=native, -mfma), clang within an expression. Where
// 1 + tanh cancels in gelu that moved float32 results by millions of ulps, so each product that
// feeds an add goes through `unfused` (an empty asm statement the compiler cannot see through),
// and the bits are the same at -O0 to -O3, with or without -march=native, under GCC and clang.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tessera/runtime/simd.hpp"

namespace tessera::detail::special {

/// Whether special::fma on float batches is one rounding (the scalar std::fma's result).
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

/// a * b + c rounded once. xsimd 8 has no fma of its own for AVX-512 (its generic one is a multiply
/// and an add, fused or not as the compiler pleases), so the intrinsics are called there.
template <class X, class V>
X fma(X a, X b, X c) {
  if constexpr (is_number<X>) {
    return std::fma(a, b, c);
  } else {
#if defined(__AVX512F__)
    using R = typename X::register_type;
    // Told apart by size and element type: naming the vector types in a template argument drops
    // their attributes (GCC's -Wignored-attributes).
    if constexpr (sizeof(R) == 64) {
      R const ra = a, rb = b, rc = c;
      if constexpr (std::is_same_v<V, float>) return X(_mm512_fmadd_ps(ra, rb, rc));
      else return X(_mm512_fmadd_pd(ra, rb, rc));
    } else {
      return xsimd::fma(a, b, c);
    }
#else
    return xsimd::fma(a, b, c);
#endif
  }
}

/// x, rounded on its own: a product passed through here is not fused into the add that follows
/// (the asm statement is empty; the compiler only has to keep the value in a vector register, or in
/// memory where none is named here). MSVC does not contract without /fp:contract.
template <class X>
X unfused(X x) {
#if defined(__GNUC__) || defined(__clang__)
#if defined(__x86_64__) && defined(__AVX512F__)
#define TESSERA_VECTOR_REGISTER "+v"
#elif defined(__x86_64__)
#define TESSERA_VECTOR_REGISTER "+x"
#elif defined(__aarch64__)
#define TESSERA_VECTOR_REGISTER "+w"
#else
#define TESSERA_VECTOR_REGISTER "+m"
#endif
  if constexpr (std::is_same_v<X, float> || std::is_same_v<X, double>) {
    __asm__("" : TESSERA_VECTOR_REGISTER(x));
  } else if constexpr (is_number<X>) {
    __asm__("" : "+m"(x));  // long double: x87 registers on x86
  } else {
    typename X::register_type r = x;
    __asm__("" : TESSERA_VECTOR_REGISTER(r));
    x = X(r);
  }
#undef TESSERA_VECTOR_REGISTER
#endif
  return x;
}
template <class X>
X fabs(X a) {
  if constexpr (is_number<X>) return std::fabs(a);
  else return xsimd::abs(a);
}
/// Whether x is NaN, lane by lane on batches: xsimd 8's AVX-512 `!=` compares ordered
/// (_CMP_NEQ_OQ), so there `x != x` is false for a NaN; its isnan asks the unordered question.
template <class X>
auto is_nan(X const& x) {
  if constexpr (is_number<X>) return x != x;
  else return xsimd::isnan(x);
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

/// floor(x). On AVX-512 the masked intrinsic with every lane set: GCC 12's _mm512_roundscale_ps
/// (xsimd's floor) warns that its own undefined vector "is used uninitialized".
template <class X>
X floor(X x) {
  if constexpr (is_number<X>) {
    return std::floor(x);
  } else {
#if defined(__AVX512F__)
    using R = typename X::register_type;
    if constexpr (sizeof(R) == 64 && std::is_same_v<scalar_t<X>, float>) {
      R const r = x;
      return X(_mm512_mask_roundscale_ps(r, static_cast<__mmask16>(0xFFFF), r, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    }
#endif
    return xsimd::floor(x);
  }
}

/// 2^n for an integral float n in [-127, 127], 0 for -127: the float whose bits are (n + 127) << 23,
/// as XLA's exp builds it. xsimd spells a batch's bit cast differently in 8.x and 13.x, so the
/// lanes go through memory.
template <class X>
X exp2_integral(X n) {
  if constexpr (is_number<X>) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23);
  } else {
    constexpr std::size_t size = X::size;
    alignas(64) float f[size];
    alignas(64) std::uint32_t u[size];
    n.store_aligned(f);
    for (std::size_t i = 0; i < size; ++i) u[i] = static_cast<std::uint32_t>(static_cast<std::int32_t>(f[i]) + 127) << 23;
    std::memcpy(f, u, sizeof f);
    return X::load_aligned(f);
  }
}

/// exp in float32 as XLA's CPU backend computes it (read off the machine code it emits for
/// jnp.exp; Cephes' polynomial): x clamped to [-87.8, 88.8], n = floor(x log2(e) + 1/2) clamped
/// to [-127, 128], r = x - n ln(2) in two fmas (ln(2) split as 0.693145751953125 + 1.4286068e-6),
/// 1 + r + r^2 P(r), times 2^n (2^128 as 2 * 2^127; 2^-127 as 0). NaN stays NaN.
template <class X>
X exp_f32(X x) {
  using V = float;
  x = select(X(V(-87.8f)) > x, X(V(-87.8f)), x);  // vmaxps / vminps: NaN passes through
  x = select(X(V(88.8f)) < x, X(V(88.8f)), x);
  X n = special::fma<X, V>(x, X(V(1.44269502f)), X(V(0.5f)));
  n = special::floor(n);
  n = select(X(V(-127)) > n, X(V(-127)), n);
  n = select(X(V(128)) < n, X(V(128)), n);
  X r = special::fma<X, V>(-n, X(std::bit_cast<V>(0x3f317200u)), x);
  r = special::fma<X, V>(-n, X(std::bit_cast<V>(0x35bfbe8eu)), r);
  X const r2 = r * r;
  X z = special::fma<X, V>(r, X(std::bit_cast<V>(0x39506967u)), X(std::bit_cast<V>(0x3ab743ceu)));
  z = special::fma<X, V>(z, r, X(std::bit_cast<V>(0x3c088908u)));
  z = special::fma<X, V>(z, r, X(std::bit_cast<V>(0x3d2aa9c1u)));
  z = special::fma<X, V>(z, r, X(std::bit_cast<V>(0x3e2aaaaau)));
  z = special::fma<X, V>(z, r, X(V(0.5f)));
  X s = special::fma<X, V>(z, r2, r) + X(V(1));
  auto const top = n == X(V(128));  // XLA adds 2^128's excess to s's exponent
  s = select(top, s * X(V(2)), s);
  X const e = select(is_nan(n), X(V(0)), select(top, X(V(127)), n));
  return s * exp2_integral(e);
}

/// jax.nn.sigmoid in float32 as XLA expands lax.logistic: 1 / (1 + exp(-x)), XLA's exp.
template <class X>
X logistic_f32(X x) {
  using V = float;
  return X(V(1)) / (X(V(1)) + exp_f32(-x));
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
/// lax.tanh as JAX computes it on CPU: XLA's interpolants in float32 (also on xsimd batches of
/// floats) and float64.
template <class F>
F tanh(F x) {
  if constexpr (std::is_same_v<scalar_t<F>, float>) return tanh_f32(x);
  else if constexpr (std::is_same_v<F, double>) return tanh_f64(x);
  else return std::tanh(x);
}

// The derivatives (numbers only), for grad's rules on tracers and on a shard_map body's local
// tracers: JAX's jvp rules (erf, logaddexp) or the derivative of jax.nn's formula (gelu, silu).

/// exp(-x^2); in float32 as JAX 0.12 computes it (jax/_src/lax/erf.py, exp_neg_sq): |x| clamped to
/// 11, x^2 split as hi + lo with hi the square of x's top 12 significant bits (exact), then
/// exp(-hi) + exp(-hi) expm1(-lo), expm1 as lo's Taylor polynomial in Horner steps each rounded on
/// its own (lax.polynomial), exp XLA's.
template <class F>
F exp_neg_sq(F x) {
  if constexpr (std::is_same_v<F, float>) {
    float const a = !(std::fabs(x) >= 11.0f) ? std::fabs(x) : 11.0f;  // lax.min(|x|, 11): NaN stays NaN
    float const hi = std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) & 0xFFFFF000u);
    float const u = -unfused((a - hi) * (a + hi));
    float p = unfused(0.008333333767950535f * u) + 0.0416666679084301f;
    p = unfused(p * u) + 0.1666666716337204f;
    p = unfused(p * u) + 0.5f;
    p = unfused(p * u) + 1.0f;
    float const e = exp_f32(-(hi * hi));
    return e + unfused(e * (u * p));
  } else {
    return std::exp(-(x * x));
  }
}
/// d/dx erf(x) = 2/sqrt(pi) exp(-x^2) (lax's erf jvp).
template <class F>
F erf_derivative(F x) {
  return static_cast<F>(1.12837916709551257390) * exp_neg_sq(x);
}
/// d/dx gelu(x), tanh form, as jax.grad computes it from jax.nn.gelu's steps (its transposed jaxpr,
/// each step rounded on its own, tanh's derivative as (1 + t)(1 - t)):
/// 0.5 (1 + t) + k (0.5 x (1 + t)(1 - t)) + 0.044715 k (0.5 x (1 + t)(1 - t)) 3 x^2.
/// F is a float or double, or an xsimd batch of floats (the same steps, so the same bits).
template <class F>
F gelu_tanh_derivative(F x) {
  using V = scalar_t<F>;
  F const k = F(static_cast<V>(0.79788456080286535588));
  F const a = F(static_cast<V>(0.044715));
  F const x2 = x * x;
  F const t = special::tanh(k * (x + unfused(((x2 * x) * a))));  // qualified: ADL would find xsimd::tanh
  F const r = unfused(((F(V(0.5)) * x) * ((F(V(1)) + t) * (F(V(1)) - t))) * k);
  return (unfused(F(V(0.5)) * (F(V(1)) + t)) + r) + unfused((r * a) * (x2 * F(V(3))));
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
/// d/dx silu(x) as jax.grad computes it from jax.nn.silu's steps: s + x (s (1 - s)), s = sigmoid(x)
/// (float32: XLA's logistic).
template <class F>
F silu_derivative(F x) {
  F s;
  if constexpr (std::is_same_v<F, float>) s = logistic_f32(x);
  else s = sigmoid(x);
  return s + unfused(x * (s * (F(1) - s)));
}

}  // namespace tessera::detail::special
