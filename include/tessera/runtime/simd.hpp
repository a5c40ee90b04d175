#pragma once
// The element-wise loops of the reductions (out[i] = out[i] op src[i]), vectorised
// with xsimd: the one header of tessera's runtime that includes it. Compilers
// vectorise these loops at -O3 but not at -O2 (GCC's cheap cost model refuses the
// alias check), and a scalar loop reads about a third of what one core's memory
// bandwidth allows. Only the part of xsimd's API that is the same in 8.x and 13.x
// is used: batch<T>, load_unaligned, store_unaligned, comparisons and select.
// Element by element the result is the scalar expression's, bit for bit. Integers wrap
// around (runtime/wrapping.hpp): the xsimd overloads of wrapping_add and friends are here.

#include <cstddef>
#include <type_traits>

#if defined(__has_include)
#if !__has_include(<xsimd/xsimd.hpp>)
#error "tessera: needs xsimd 8 to 14: <xsimd/xsimd.hpp> was not found (Debian: libxsimd-dev; or add xsimd's include directory)"
#endif
#endif
#include <xsimd/xsimd.hpp>
#if XSIMD_VERSION_MAJOR < 8
#error "tessera: needs xsimd 8 to 14: an older xsimd was found first on the include path"
#endif

#include "tessera/runtime/wrapping.hpp"

namespace tessera::detail {

/// a + b on xsimd batches: integer lanes wrap (every architecture adds them with a wrapping instruction).
template <class T, class A>
xsimd::batch<T, A> wrapping_add(xsimd::batch<T, A> const& a, xsimd::batch<T, A> const& b) {
  return a + b;
}

/// a - b on xsimd batches: integer lanes wrap.
template <class T, class A>
xsimd::batch<T, A> wrapping_sub(xsimd::batch<T, A> const& a, xsimd::batch<T, A> const& b) {
  return a - b;
}

/// -a on xsimd batches: integer lanes wrap (xsimd computes 0 - a).
template <class T, class A>
xsimd::batch<T, A> wrapping_neg(xsimd::batch<T, A> const& a) {
  return -a;
}

/// a * b on xsimd batches. Signed lanes are multiplied as their unsigned twins: where the
/// architecture has no integer multiply of that width (64 bits before AVX-512, 32 bits before
/// SSE4.1), xsimd multiplies lane by lane in T, and signed overflow there is undefined. The
/// lanes travel through memory: xsimd's bitwise_cast is spelled differently in 8.x and 13.x,
/// and the compiler turns the store and the loads back into register moves.
template <class T, class A>
xsimd::batch<T, A> wrapping_mul(xsimd::batch<T, A> const& a, xsimd::batch<T, A> const& b) {
  if constexpr (wrapping_integer<T> && std::is_signed_v<T>) {
    using U = std::make_unsigned_t<T>;
    using UB = xsimd::batch<U, A>;
    constexpr std::size_t n = xsimd::batch<T, A>::size;
    U x[n], y[n];
    // A signed and an unsigned integer of one size may alias each other.
    a.store_unaligned(reinterpret_cast<T*>(x));
    b.store_unaligned(reinterpret_cast<T*>(y));
    (UB::load_unaligned(x) * UB::load_unaligned(y)).store_unaligned(x);
    return xsimd::batch<T, A>::load_unaligned(reinterpret_cast<T const*>(x));
  } else {
    return a * b;
  }
}

}  // namespace tessera::detail

namespace tessera::detail::simd {

/// Whether the reductions of T run on xsimd batches (float, double and the 32- and 64-bit
/// integers, which every xsimd architecture registers); others stay scalar.
template <class T>
inline constexpr bool vectorised =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int> ||
    std::is_same_v<T, unsigned> || std::is_same_v<T, long> || std::is_same_v<T, unsigned long> ||
    std::is_same_v<T, long long> || std::is_same_v<T, unsigned long long>;

/// out[i] = f(a[i], b[i]) for i < n (out may be a: combine in place); `f` takes and returns
/// either scalars or batches.
template <class T, class F>
void combine_into(T* out, T const* a, T const* b, std::size_t n, F f) {
  std::size_t i = 0;
  if constexpr (vectorised<T>) {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    for (; i + width <= n; i += width) f(batch::load_unaligned(a + i), batch::load_unaligned(b + i)).store_unaligned(out + i);
  }
  for (; i < n; ++i) out[i] = f(a[i], b[i]);
}

/// out[i] = a[i] + b[i] (integers wrap around, as psum's do in JAX).
template <class T>
void add_into(T* out, T const* a, T const* b, std::size_t n) {
  combine_into(out, a, b, n, [](auto x, auto y) { return detail::wrapping_add(x, y); });
}

/// out[i] = a[i] * b[i] (integers wrap around).
template <class T>
void mul_into(T* out, T const* a, T const* b, std::size_t n) {
  combine_into(out, a, b, n, [](auto x, auto y) { return detail::wrapping_mul(x, y); });
}

/// out[i] = max(a[i], b[i]); a NaN on either side gives NaN, as XLA's max does.
template <class T>
void max_into(T* out, T const* a, T const* b, std::size_t n) {
  combine_into(out, a, b, n, [](auto x, auto y) {
    if constexpr (std::is_arithmetic_v<decltype(x)>) return (y > x || y != y) ? y : x;
    else return xsimd::select((y > x) | xsimd::isnan(y), y, x);
  });
}

/// out[i] = min(a[i], b[i]); a NaN on either side gives NaN.
template <class T>
void min_into(T* out, T const* a, T const* b, std::size_t n) {
  combine_into(out, a, b, n, [](auto x, auto y) {
    if constexpr (std::is_arithmetic_v<decltype(x)>) return (y < x || y != y) ? y : x;
    else return xsimd::select((y < x) | xsimd::isnan(y), y, x);
  });
}

}  // namespace tessera::detail::simd
