#pragma once
// lax.erf_inv and lax.erf as XLA computes them on CPU (jax_accurate_erf_inv off, JAX's default),
// the pieces of normal() and truncated_normal(). erf_inv: M. Giles' polynomials, "Approximating
// the erfinv function" (GPU Computing Gems, 2011), 9 coefficients in float32 and 23/19/17 in
// float64 (xla/hlo/builder/lib/math.cc, ErfInv32 and ErfInv64), each Horner step one fused
// multiply-add as LLVM emits it on machines with FMA.
//
// Inside float32 erf_inv is log1p, and inside log1p XLA's CPU log: not the C library's but the
// Cephes polynomial XLA emits itself (xla/service/cpu polynomial approximations, Eigen's plog),
// reproduced here operation by operation from the machine code XLA emits for jnp.log (which
// multiplies and adds LLVM fuses into one rounding is part of the result). With it float32
// normal and truncated_normal are JAX's bit for bit. The float32 functions take a number or an
// xsimd batch of floats (one template, so a batch lane and the number agree bit for bit); the
// batch form runs where xsimd's fma is the hardware's (special::batch_fma), and
// erf_inv_f32_block applies it to a whole array. float64 log1p is the same rational, with the C
// library's log outside it (XLA calls it for float64).

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tessera/expr/special_math.hpp"
#include "tessera/expr/xla_log.hpp"

namespace tessera::random::detail {

namespace sp = tessera::detail::special;

// XLA's log and log1p live with the other special functions (expr/xla_log.hpp); named here as
// erf_inv and the random generators have called them.
using sp::f32_and;
using sp::f32_bits;
using sp::f32_exponent_plus_one;
using sp::f32_or;
using sp::xla_log1p;
using sp::xla_log1p_f32;
using sp::xla_log_f32;

/// lax.erf as XLA's CPU backend computes it (expr/special_math.hpp: its float32 interpolant, JAX's
/// bits; the C library's erf in float64).
template <class F>
F xla_erf(F x) {
  return tessera::detail::special::erf(x);
}

/// erf_inv(x) in float32, XLA's ErfInv32, on a number or a batch.
template <class X>
X erf_inv_f32(X x) {
  using V = float;
  constexpr std::array<float, 9> small = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                          -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                          -0.00417768164f,  0.246640727f,    1.50140941f};
  constexpr std::array<float, 9> large = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                          -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                          0.00943887047f,   1.00167406f,     2.83297682f};
  X w = -xla_log1p_f32(-x * x);
  auto const lt = w < X(V(5));
  if constexpr (sp::is_number<X>) {
    w = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  } else {
    w = xsimd::select(lt, w - X(V(2.5f)), xsimd::sqrt(w) - X(V(3.0f)));
  }
  X p = sp::select(lt, X(small[0]), X(large[0]));
  for (std::size_t i = 1; i < 9; ++i) p = sp::fma<X, V>(p, w, sp::select(lt, X(small[i]), X(large[i])));
  return sp::select(sp::fabs(x) == X(V(1)), x * X(std::numeric_limits<float>::infinity()), p * x);
}

/// erf_inv(x) in float32, XLA's ErfInv32.
inline float erf_inv(float x) { return erf_inv_f32(x); }

/// erf_inv(x) in float64, XLA's ErfInv64.
inline double erf_inv(double x) {
  constexpr std::array<double, 23> w_lt_6_25 = {
      -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
      1.115787767802518096e-17,   -1.333171662854620906e-16, 2.0972767875968561637e-17,
      6.6376381343583238325e-15,  -4.0545662729752068639e-14, -8.1519341976054721522e-14,
      2.6335093153082322977e-12,  -1.2975133253453532498e-11, -5.4154120542946279317e-11,
      1.051212273321532285e-09,   -4.1126339803469836976e-09, -2.9070369957882005086e-08,
      4.2347877827932403518e-07,  -1.3654692000834678645e-06, -1.3882523362786468719e-05,
      0.0001867342080340571352,   -0.00074070253416626697512, -0.0060336708714301490533,
      0.24015818242558961693,     1.6536545626831027356};
  constexpr std::array<double, 19> w_lt_16 = {
      2.2137376921775787049e-09,  9.0756561938885390979e-08, -2.7517406297064545428e-07,
      1.8239629214389227755e-08,  1.5027403968909827627e-06, -4.013867526981545969e-06,
      2.9234449089955446044e-06,  1.2475304481671778723e-05, -4.7318229009055733981e-05,
      6.8284851459573175448e-05,  2.4031110387097893999e-05, -0.0003550375203628474796,
      0.00095328937973738049703,  -0.0016882755560235047313, 0.0024914420961078508066,
      -0.0037512085075692412107,  0.005370914553590063617,   1.0052589676941592334,
      3.0838856104922207635};
  constexpr std::array<double, 17> w_ge_16 = {
      -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
      -3.7894654401267369937e-09, 7.6157012080783393804e-09,  -1.4960026627149240478e-08,
      2.9147953450901080826e-08,  -6.7711997758452339498e-08, 2.2900482228026654717e-07,
      -9.9298272942317002539e-07, 4.5260625972231537039e-06,  -1.9681778105531670567e-05,
      7.5995277030017761139e-05,  -0.00021503011930044477347, -0.00013871931833623122026,
      1.0103004648645343977,      4.8499064014085844221};
  double w = -xla_log1p(-x * x);
  double p;
  if (w < 6.25) {
    w -= 3.125;
    p = w_lt_6_25[0];
    for (std::size_t i = 1; i < w_lt_6_25.size(); ++i) p = std::fma(p, w, w_lt_6_25[i]);
  } else if (w < 16.0) {
    w = std::sqrt(w) - 3.25;
    p = w_lt_16[0];
    for (std::size_t i = 1; i < w_lt_16.size(); ++i) p = std::fma(p, w, w_lt_16[i]);
  } else {
    w = std::sqrt(w) - 5.0;
    p = w_ge_16[0];
    for (std::size_t i = 1; i < w_ge_16.size(); ++i) p = std::fma(p, w, w_ge_16[i]);
  }
  return std::fabs(x) == 1.0 ? x * std::numeric_limits<double>::infinity() : p * x;
}

}  // namespace tessera::random::detail
