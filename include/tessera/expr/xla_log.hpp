#pragma once
// log and log1p as XLA's CPU backend computes them: float32 log is not the C library's but the
// Cephes polynomial XLA emits itself (xla/service/cpu polynomial approximations, Eigen's plog),
// reproduced here operation by operation from the machine code XLA emits for jnp.log (which
// multiplies and adds LLVM fuses into one rounding is part of the result); log1p is XLA's
// expansion around it. jax.nn.softplus (expr/special_functions.hpp) and erf_inv
// (random/erf_inv.hpp) call them, so both give JAX's float32 bits. The float32 functions take a
// number or an xsimd batch of floats (one template, so a batch lane and the number agree bit for
// bit). float64 log1p is the same rational, with the C library's log outside it (XLA calls it
// for float64).

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tessera/expr/special_math.hpp"

namespace tessera::detail::special {

/// A float of the given bits, as a number or a batch.
template <class X>
X f32_bits(std::uint32_t b) {
  return X(std::bit_cast<float>(b));
}

/// Bitwise and / or of two floats' bits.
template <class X>
X f32_and(X a, X b) {
  if constexpr (special::is_number<X>) return std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) & std::bit_cast<std::uint32_t>(b));
  else return a & b;
}
template <class X>
X f32_or(X a, X b) {
  if constexpr (special::is_number<X>) return std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) | std::bit_cast<std::uint32_t>(b));
  else return a | b;
}

/// (bits(t) >> 23) - 126 as a float: the exponent XLA's log starts from (emm0 - 127, converted,
/// plus 1; every step exact). t is positive here. xsimd spells a batch's bit cast differently in
/// 8.x and 13.x, so the lanes go through memory (the compiler makes that a register move).
template <class X>
X f32_exponent_plus_one(X t) {
  if constexpr (special::is_number<X>) {
    return static_cast<float>(static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) >> 23) - 127) + 1.0f;
  } else {
    using A = typename X::arch_type;
    constexpr std::size_t n = X::size;
    alignas(64) float f[n];
    alignas(64) std::int32_t i[n];
    t.store_aligned(f);
    std::memcpy(i, f, sizeof f);
    auto const b = (xsimd::batch<std::int32_t, A>::load_aligned(i) >> 23) - xsimd::batch<std::int32_t, A>(127);
    return xsimd::to_float(b) + X(1.0f);
  }
}

/// log(x) in float32 as XLA's CPU backend computes it: Cephes' polynomial on the mantissa in
/// [sqrt(1/2), sqrt(2)), with LLVM's fusions (x - x^2/2 as one fma, y x^3 + e q1 and
/// q2 e + r as fmas); log(0) = -inf, log(inf) = inf, NaN for x < 0 or NaN (all bits set, as XLA).
template <class X>
X xla_log_f32(X x) {
  using V = float;
  X const zero(V(0)), one(V(1)), half(V(0.5f));
  X const t = special::select(x > f32_bits<X>(0x00800000u), x, f32_bits<X>(0x00800000u));  // vmaxps(x, min_normal)
  X e = f32_exponent_plus_one(t);
  X const m = f32_or(f32_and(t, f32_bits<X>(0x807fffffu)), half);
  auto const below = m < f32_bits<X>(0x3f3504f3u);  // sqrt(1/2)
  X const xm = (m - one) + special::select(below, m, zero);
  e = e - special::select(below, one, zero);
  X const x2 = xm * xm;
  X const x3 = x2 * xm;
  X y = special::fma<X, V>(xm, X(V(7.0376836292E-2f)), X(V(-1.1514610310E-1f)));
  X y1 = special::fma<X, V>(xm, X(V(-1.2420140846E-1f)), X(V(1.4249322787E-1f)));
  X y2 = special::fma<X, V>(xm, X(V(2.0000714765E-1f)), X(V(-2.4999993993E-1f)));
  y = special::fma<X, V>(y, xm, X(V(1.1676998740E-1f)));
  y1 = special::fma<X, V>(y1, xm, X(V(-1.6668057665E-1f)));
  y2 = special::fma<X, V>(y2, xm, X(V(3.3333331174E-1f)));
  y = special::fma<X, V>(y, x3, y1);
  y = special::fma<X, V>(y, x3, y2);
  y = special::fma<X, V>(y, x3, e * X(V(-2.12194440e-4f)));
  X r = special::fma<X, V>(X(V(-0.5f)), x2, xm) + y;
  r = special::fma<X, V>(X(V(0.693359375f)), e, r);
  X const inf = f32_bits<X>(0x7f800000u);
  r = special::select(x > zero, r, f32_bits<X>(0xffffffffu));  // negative or NaN
  r = special::select(x == inf, inf, r);
  return special::select(x == zero, -inf, r);
}

/// log1p(y) in float32 as XLA's CPU emitter expands it: for |y| < sqrt(2) - 1 a rational
/// approximation from the Cephes library, y - y^2/2 + y^3 P(y)/Q(y), otherwise log(1 + y)
/// with XLA's log; polynomial steps fused as LLVM fuses them.
template <class X>
X xla_log1p_f32(X y) {
  using V = float;
  constexpr float den[7] = {1.f,
                            1.5062909083469192043167E1f,
                            8.3047565967967209469434E1f,
                            2.2176239823732856465394E2f,
                            3.0909872225312059774938E2f,
                            2.1642788614495947685003E2f,
                            6.0118660497603843919306E1f};
  constexpr float num[7] = {4.5270000862445199635215E-5f, 4.9854102823193375972212E-1f,
                            6.5787325942061044846969E0f,  2.9911919328553073277375E1f,
                            6.0949667980987787057556E1f,  5.7112963590585538103336E1f,
                            2.0039553499201281259648E1f};
  X const large = xla_log_f32(y + X(V(1)));
  X const y2 = y * y;
  X q(den[0]), p(num[0]);
  for (int i = 1; i < 7; ++i) {
    q = special::fma<X, V>(q, y, X(den[i]));
    p = special::fma<X, V>(p, y, X(num[i]));
  }
  X small = (y * y2) * (p / q);
  small = special::fma<X, V>(X(V(-0.5f)), y2, small);
  return special::select(special::fabs(y) < X(V(0.41421356237309504880f)), y + small, large);
}

/// log1p(y) in float64 as XLA's CPU emitter expands it: the same Cephes rational on
/// [sqrt(1/2) - 1, sqrt(2) - 1] (both ends in), otherwise the C library's log(1 + y), which XLA
/// calls for float64.
inline double xla_log1p(double y) {
  constexpr double den[7] = {1.,
                             1.5062909083469192043167E1,
                             8.3047565967967209469434E1,
                             2.2176239823732856465394E2,
                             3.0909872225312059774938E2,
                             2.1642788614495947685003E2,
                             6.0118660497603843919306E1};
  constexpr double num[7] = {4.5270000862445199635215E-5, 4.9854102823193375972212E-1,
                             6.5787325942061044846969E0,  2.9911919328553073277375E1,
                             6.0949667980987787057556E1,  5.7112963590585538103336E1,
                             2.0039553499201281259648E1};
  if (!(y >= -0.29289321881345247560 && y <= 0.41421356237309504880)) return std::log(y + 1.0);
  double const y2 = y * y;
  double q = den[0], p = num[0];
  for (int i = 1; i < 7; ++i) {
    q = std::fma(q, y, den[i]);
    p = std::fma(p, y, num[i]);
  }
  return y + std::fma(-0.5, y2, (y * y2) * (p / q));
}
/// log1p(y) in float32, XLA's.
inline float xla_log1p(float y) { return xla_log1p_f32(y); }

}  // namespace tessera::detail::special
