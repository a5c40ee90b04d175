#pragma once
// What jax.random makes of the cipher's two words for one element: bits, uniform, normal,
// truncated_normal, bernoulli and randint, step by step as jax/_src/random/core.py does them,
// in the sample's own precision, so that the values are JAX's bit for bit.

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tessera/random/erf_inv.hpp"
#include "tessera/random/threefry.hpp"
#include "tessera/runtime/simd.hpp"

namespace tessera::random::detail {

/// The floating types jax.random samples here: float32, and float64 (JAX with x64).
template <class F>
concept sample_float = std::same_as<F, float> || std::same_as<F, double>;

/// The unsigned types of jax.random.bits: uint8 to uint64.
template <class U>
concept sample_bits = std::same_as<U, std::uint8_t> || std::same_as<U, std::uint16_t> ||
                      std::same_as<U, std::uint32_t> || std::same_as<U, std::uint64_t>;

/// The integer types of jax.random.randint: 8 to 64 bits, signed or not.
template <class I>
concept sample_int = std::integral<I> && !std::same_as<I, bool> && !std::same_as<I, char> &&
                     (sizeof(I) == 1 || sizeof(I) == 2 || sizeof(I) == 4 || sizeof(I) == 8);

/// _random_bits of width 8 * sizeof(U): 64 bits join the words, narrower ones XOR them.
template <class U>
constexpr U bits_from(word_pair p) {
  if constexpr (sizeof(U) == 8) return (static_cast<std::uint64_t>(p.w0) << 32) | p.w1;
  else return static_cast<U>(p.w0 ^ p.w1);
}

/// The unsigned integer as wide as F.
template <class F>
using uint_of = std::conditional_t<sizeof(F) == 8, std::uint64_t, std::uint32_t>;

/// _uniform before scaling: the random bits as the mantissa of a number in [1, 2), minus 1.
template <sample_float F>
F unit_from(word_pair p) {
  using U = uint_of<F>;
  constexpr int nbits = 8 * sizeof(F);
  constexpr int nmant = std::numeric_limits<F>::digits - 1;
  U const b = (bits_from<U>(p) >> (nbits - nmant)) | std::bit_cast<U>(F(1));
  return std::bit_cast<F>(b) - F(1);
}

/// The elements a kernel's fill() is handed at most at once (block_fill.hpp's chunk).
inline constexpr std::size_t fill_chunk = 256;

/// Whether float32 kernels run on xsimd batches: where xsimd's fma is the hardware's, so that a
/// lane rounds as std::fma does (special_math.hpp).
inline constexpr bool batch_float_kernels = tessera::detail::special::batch_fma;

/// The float32 numbers in [1, 2) whose mantissas are the high 23 bits of w0 ^ w1, for a run of up
/// to fill_chunk words (a loop over plain integers, which compilers vectorise).
inline void unit_plus_one_run(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, float* out) {
  alignas(64) std::uint32_t b[fill_chunk];
  for (std::size_t e = 0; e < m; ++e) b[e] = ((w0[e] ^ w1[e]) >> 9) | 0x3f800000u;
  std::memcpy(out, b, m * sizeof(float));
}

/// _uniform: max(minval, floats * (maxval - minval) + minval), the multiply-add fused as XLA
/// fuses it on every x86-64 and ARM machine with FMA (and std::fma where there is none).
template <sample_float F>
struct uniform_kernel {
  F minval, maxval;
  F operator()(std::array<word_pair, 1> const& p) const {
    F const r = std::fma(unit_from<F>(p[0]), maxval - minval, minval);
    return r > minval ? r : minval;
  }
  /// The same from a number in [1, 2) (unit_plus_one_run's), on a number or a batch.
  template <class X>
  X from_unit_plus_one(X one_to_two) const {
    X const r = tessera::detail::special::fma<X, F>(one_to_two - X(F(1)), X(maxval - minval), X(minval));
    return tessera::detail::special::select(r > X(minval), r, X(minval));
  }
  /// A run of uniforms at once: out[e] = (*this)({w0[e], w1[e]}).
  void fill(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, F* out) const {
    if constexpr (std::is_same_v<F, float> && batch_float_kernels) {
      using B = xsimd::batch<float>;
      alignas(64) float us[fill_chunk];
      unit_plus_one_run(w0, w1, m, us);
      std::size_t e = 0;
      for (; e + B::size <= m; e += B::size) from_unit_plus_one(B::load_aligned(us + e)).store_unaligned(out + e);
      for (; e < m; ++e) out[e] = from_unit_plus_one(us[e]);
    } else {
      for (std::size_t e = 0; e < m; ++e) out[e] = (*this)(std::array{word_pair{w0[e], w1[e]}});
    }
  }
};

/// pre * erf_inv(uniform(lo, hi)), clipped to [low, high] when `clip`, times post: normal
/// (pre = sqrt(2)), truncated_normal (clip), and the scaled forms jax.nn.initializers makes of
/// them. Multiplying by post = 1 changes no bit. fill() makes a whole run from the cipher's words:
/// the uniforms first, then erf_inv on xsimd batches where that is bit for bit the number's
/// (float32 with hardware fma), so the block is JAX's either way.
template <sample_float F>
struct erf_inv_kernel {
  uniform_kernel<F> u;
  F pre = static_cast<F>(1.4142135623730951);
  bool clip = false;
  F low = F(0), high = F(0);
  F post = F(1);

  /// The steps after erf_inv, on a number or a batch.
  template <class X>
  X finish(X e) const {
    X x = X(pre) * e;
    if (clip) {
      x = tessera::detail::special::select(x > X(low), x, X(low));  // jnp.clip: minimum(maximum(x, low), high)
      x = tessera::detail::special::select(x < X(high), x, X(high));
    }
    return x * X(post);
  }
  F operator()(std::array<word_pair, 1> const& p) const { return finish(erf_inv(u(p))); }

  void fill(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, F* out) const {
    if constexpr (std::is_same_v<F, float> && batch_float_kernels) {
      using B = xsimd::batch<float>;
      alignas(64) float us[fill_chunk];
      unit_plus_one_run(w0, w1, m, us);
      std::size_t e = 0;
      for (; e + B::size <= m; e += B::size)
        finish(erf_inv_f32(u.from_unit_plus_one(B::load_aligned(us + e)))).store_unaligned(out + e);
      for (; e < m; ++e) out[e] = finish(erf_inv_f32(u.from_unit_plus_one(us[e])));
    } else {
      for (std::size_t e = 0; e < m; ++e) out[e] = (*this)(std::array{word_pair{w0[e], w1[e]}});
    }
  }
};

/// _normal_real: sqrt(2) * erf_inv(uniform(nextafter(-1, 0), 1)).
template <sample_float F>
struct normal_kernel : erf_inv_kernel<F> {
  normal_kernel() : erf_inv_kernel<F>{{std::nextafter(F(-1), F(0)), F(1)}} {}
  /// (sqrt(2) * scale) * erf_inv(u): JAX's _scaled_normal (jax.nn.initializers.normal), the
  /// constant product rounded first as JAX's eager jnp.array(np.sqrt(2), dtype) * scale rounds it.
  static normal_kernel scaled(F scale) {
    normal_kernel k;
    k.pre = static_cast<F>(1.4142135623730951) * scale;
    return k;
  }
};

/// _truncated_normal: sqrt(2) * erf_inv(uniform(erf(lower / sqrt(2)), erf(upper / sqrt(2)))),
/// clipped to the open interval (lower, upper). XLA's algebraic simplifier turns the division by
/// the constant sqrt(2) into a product with its reciprocal (rounded in F), so the bounds are
/// erf(lower * (1 / sqrt(2))): for lower = -1.5 the quotient is one ulp away, erf two, and a
/// sample near 0 (where u cancels) thousands of ulps (issue 31). `post` multiplies the clipped
/// sample (jax.nn.initializers' stddev).
template <sample_float F>
struct truncated_normal_kernel : erf_inv_kernel<F> {
  static constexpr F inv_sqrt2 = F(1) / static_cast<F>(1.4142135623730951);
  truncated_normal_kernel(F lower, F upper, F post = F(1))
      : erf_inv_kernel<F>{{xla_erf(lower * inv_sqrt2), xla_erf(upper * inv_sqrt2)},
                          static_cast<F>(1.4142135623730951),
                          true,
                          std::nextafter(lower, std::numeric_limits<F>::infinity()),  // nextafter(lower, +inf)
                          std::nextafter(upper, -std::numeric_limits<F>::infinity()),
                          post} {}
};

/// _bernoulli (mode "low"): uniform(key, shape, dtype(p)) < p.
template <sample_float F>
struct bernoulli_kernel {
  F p;
  bool operator()(std::array<word_pair, 1> const& w) const { return unit_from<F>(w[0]) < p; }
};

/// _randint in the sampling type S (int32 for types narrower than 32 bits, as JAX): two bit
/// streams from split(key), reduced modulo the span with JAX's 2 * nbits trick, added to minval.
template <sample_int S>
struct randint_kernel {
  using U = std::make_unsigned_t<S>;
  S minval;
  U span, multiplier;

  /// XLA's remainder: x % 0 is x (a span of 2^nbits wraps to 0 and must not change anything).
  static constexpr U rem(U a, U b) { return b == 0 ? a : static_cast<U>(a % b); }

  /// From _randint's clipped bounds; `maxval_out_of_range` when the asked maxval exceeded S's range.
  constexpr randint_kernel(S lo, S hi, bool maxval_out_of_range) : minval(lo), span(0), multiplier(0) {
    span = static_cast<U>(static_cast<U>(hi) - static_cast<U>(lo));
    if (hi <= lo) span = 1;
    if (maxval_out_of_range && hi > lo) span = static_cast<U>(span + 1u);
    constexpr int nbits = 8 * sizeof(S);
    multiplier = rem(static_cast<U>(U(1) << (nbits / 2)), span);
    multiplier = rem(static_cast<U>(multiplier * multiplier), span);
  }

  S operator()(std::array<word_pair, 2> const& p) const {
    U const high = bits_from<U>(p[0]), low = bits_from<U>(p[1]);
    U const offset = rem(static_cast<U>(static_cast<U>(rem(high, span) * multiplier) + rem(low, span)), span);
    return static_cast<S>(static_cast<U>(static_cast<U>(minval) + offset));
  }
};

/// jax.random.randint's bounds for T: the sampling type, its clipped bounds, and whether maxval
/// was past T's range (so that randint(key, shape, 0, 256, uint8) reaches 255).
template <sample_int T>
struct randint_plan {
  using S = std::conditional_t<(sizeof(T) < 4), std::int32_t, T>;
  randint_kernel<S> kernel;

  static constexpr S clip(long long v, long double lo, long double hi) {
    long double const x = static_cast<long double>(v);
    return x < lo ? static_cast<S>(lo) : x > hi ? static_cast<S>(hi) : static_cast<S>(v);
  }

  static constexpr randint_kernel<S> make(long long minval, long long maxval) {
    if constexpr (sizeof(T) < 4) {
      // randint: jnp.asarray(v).astype('int32').clip(min(T), max(T)) (max(T) + 1 for maxval).
      auto const as32 = [](long long v) {
        return static_cast<long long>(static_cast<std::int32_t>(static_cast<std::uint32_t>(v)));
      };
      constexpr long long tmin = std::numeric_limits<T>::min(), tmax = std::numeric_limits<T>::max();
      long long const lo = std::clamp(as32(minval), tmin, tmax);
      long long const hi = std::clamp(as32(maxval), tmin, tmax + 1);
      return randint_kernel<S>(static_cast<S>(lo), static_cast<S>(hi), false);
    } else {
      constexpr long double smin = static_cast<long double>(std::numeric_limits<S>::min());
      constexpr long double smax = static_cast<long double>(std::numeric_limits<S>::max());
      bool const out_of_range = static_cast<long double>(maxval) > smax;
      return randint_kernel<S>(clip(minval, smin, smax), clip(maxval, smin, smax), out_of_range);
    }
  }

  constexpr randint_plan(long long minval, long long maxval) : kernel(make(minval, maxval)) {}
  T operator()(std::array<word_pair, 2> const& p) const { return static_cast<T>(kernel(p)); }
};

/// jax.random.bits of type U.
template <sample_bits U>
struct bits_kernel {
  U operator()(std::array<word_pair, 1> const& p) const { return bits_from<U>(p[0]); }
  /// A run at once (a loop over plain integers, which compilers vectorise).
  void fill(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, U* out) const {
    for (std::size_t e = 0; e < m; ++e) out[e] = bits_from<U>(word_pair{w0[e], w1[e]});
  }
};

}  // namespace tessera::random::detail
