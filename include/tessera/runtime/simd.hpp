#pragma once
// The element-wise loops of the reductions (out[i] = out[i] op src[i]), vectorised
// with xsimd: the one header of tessera's runtime that includes it. Compilers
// vectorise these loops at -O3 but not at -O2 (GCC's cheap cost model refuses the
// alias check), and a scalar loop reads about a third of what one core's memory
// bandwidth allows. Only the part of xsimd's API that is the same in 8.x and 13.x
// is used: batch<T>, load_unaligned, store_unaligned, comparisons and select.
// Element by element the result is the scalar expression's, bit for bit.

#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace tessera::detail::simd {

/// Whether the reductions of T run on xsimd batches (float, double and the 32- and 64-bit
/// integers, which every xsimd architecture registers); others stay scalar.
template <class T>
inline constexpr bool vectorised =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int> ||
    std::is_same_v<T, unsigned> || std::is_same_v<T, long> || std::is_same_v<T, unsigned long> ||
    std::is_same_v<T, long long> || std::is_same_v<T, unsigned long long>;

/// out[i] = f(out[i], src[i]) for i < n; `f` takes and returns either scalars or batches.
template <class T, class F>
void combine_into(T* out, T const* src, std::size_t n, F f) {
  std::size_t i = 0;
  if constexpr (vectorised<T>) {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    for (; i + width <= n; i += width) {
      batch const a = batch::load_unaligned(out + i);
      batch const b = batch::load_unaligned(src + i);
      f(a, b).store_unaligned(out + i);
    }
  }
  for (; i < n; ++i) out[i] = f(out[i], src[i]);
}

/// out[i] += src[i] (wrapping as the scalar cast does for integers).
template <class T>
void add_into(T* out, T const* src, std::size_t n) {
  combine_into(out, src, n, [](auto a, auto b) {
    if constexpr (std::is_arithmetic_v<decltype(a)>) return static_cast<T>(a + b);
    else return a + b;
  });
}

/// out[i] *= src[i].
template <class T>
void mul_into(T* out, T const* src, std::size_t n) {
  combine_into(out, src, n, [](auto a, auto b) {
    if constexpr (std::is_arithmetic_v<decltype(a)>) return static_cast<T>(a * b);
    else return a * b;
  });
}

/// out[i] = max(out[i], src[i]); a NaN on either side gives NaN, as XLA's max does.
template <class T>
void max_into(T* out, T const* src, std::size_t n) {
  combine_into(out, src, n, [](auto a, auto b) {
    if constexpr (std::is_arithmetic_v<decltype(a)>) return (b > a || b != b) ? b : a;
    else return xsimd::select((b > a) | (b != b), b, a);
  });
}

/// out[i] = min(out[i], src[i]); a NaN on either side gives NaN.
template <class T>
void min_into(T* out, T const* src, std::size_t n) {
  combine_into(out, src, n, [](auto a, auto b) {
    if constexpr (std::is_arithmetic_v<decltype(a)>) return (b < a || b != b) ? b : a;
    else return xsimd::select((b < a) | (b != b), b, a);
  });
}

}  // namespace tessera::detail::simd
