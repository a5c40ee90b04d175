#pragma once
// lax.erf_inv and lax.erf as XLA computes them on CPU (jax_accurate_erf_inv off, JAX's default),
// the pieces of normal() and truncated_normal(). erf_inv: M. Giles' polynomials, "Approximating
// the erfinv function" (GPU Computing Gems, 2011), 9 coefficients in float32 and 23/19/17 in
// float64 (xla/hlo/builder/lib/math.cc, ErfInv32 and ErfInv64), each Horner step one fused
// multiply-add as LLVM emits it on machines with FMA. XLA's log (inside log1p) is LLVM's own;
// the C library's stands in for it and may round the other way, so a sample can be 2 (float32)
// or 3 (float64) ulps from JAX's; random_test.cpp measures how many are exact.

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "tessera/expr/special_math.hpp"

namespace tessera::random::detail {

/// log1p(y) as XLA's CPU emitter expands it: for |y| < sqrt(2) - 1 a rational approximation
/// from the Cephes library, y - y^2/2 + y^3 P(y)/Q(y), otherwise log(1 + y); polynomial steps
/// fused as LLVM fuses them on a machine with FMA.
template <class F>
F xla_log1p(F y) {
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
  if (!(std::fabs(y) < F(0.41421356237309504880))) return std::log(y + F(1));
  F const y2 = y * y;
  F q = F(den[0]), p = F(num[0]);
  for (int i = 1; i < 7; ++i) {
    q = std::fma(q, y, F(den[i]));
    p = std::fma(p, y, F(num[i]));
  }
  F small = (y * y2) * (p / q);
  small = std::fma(F(-0.5), y2, small);
  return y + small;
}

/// lax.erf as XLA's CPU backend computes it (expr/special_math.hpp: its float32 interpolant, JAX's
/// bits; the C library's erf in float64).
template <class F>
F xla_erf(F x) {
  return tessera::detail::special::erf(x);
}

/// erf_inv(x) in float32, XLA's ErfInv32.
inline float erf_inv(float x) {
  constexpr std::array<float, 9> small = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f,
                                          -4.39150654e-06f, 0.00021858087f,  -0.00125372503f,
                                          -0.00417768164f,  0.246640727f,    1.50140941f};
  constexpr std::array<float, 9> large = {-0.000200214257f, 0.000100950558f, 0.00134934322f,
                                          -0.00367342844f,  0.00573950773f,  -0.0076224613f,
                                          0.00943887047f,   1.00167406f,     2.83297682f};
  float w = -xla_log1p(-x * x);
  bool const lt = w < 5.0f;
  w = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = lt ? small[0] : large[0];
  for (std::size_t i = 1; i < 9; ++i) p = std::fma(p, w, lt ? small[i] : large[i]);
  return std::fabs(x) == 1.0f ? x * std::numeric_limits<float>::infinity() : p * x;
}

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
  double w = -std::log1p(-x * x);
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
