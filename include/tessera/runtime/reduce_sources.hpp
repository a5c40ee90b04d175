#pragma once
// k buffers combined element by element into one, each read once and the result written once
// (the kernel of a sum of partial results in shared memory). Combining them pairwise, as
// reduce_inputs does, reads and writes the destination k-1 times; here an element's value
// stays in a register while the k sources stream past. The order is the same, source 0 first:
// dst[i] = ((src0[i] op src1[i]) op src2[i]) ... , so the bits are reduce_inputs' (and the
// runtime all-reduce's), float included.

#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/simd.hpp"
#include "tessera/runtime/wrapping.hpp"

namespace tessera::detail {

/// Sources folded per pass over the destination: k + 1 streams up to this, which the hardware
/// prefetchers follow; past it the destination is re-read from L1 (see reduce_sources_with).
inline constexpr std::size_t reduce_sources_group = 8;

/// out[i] = f(...f(f(first[i], srcs[0][i]), srcs[1][i])..., srcs[m-1][i]) for i < n (out may be first).
template <class T, class F>
void fold_sources(T* out, T const* first, T const* const* srcs, std::size_t m, std::size_t n, F const& f) {
  std::size_t i = 0;
  if constexpr (simd::vectorised<T>) {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    for (; i + width <= n; i += width) {
      batch acc = batch::load_unaligned(first + i);
      for (std::size_t j = 0; j < m; ++j) acc = f(acc, batch::load_unaligned(srcs[j] + i));
      acc.store_unaligned(out + i);
    }
  }
  for (; i < n; ++i) {
    T acc = first[i];
    for (std::size_t j = 0; j < m; ++j) acc = f(acc, srcs[j][i]);
    out[i] = acc;
  }
}

/// dst[0, n) = src[0][offset + i] f src[1][offset + i] f ... in source order (k >= 1).
template <class T, class F>
void reduce_sources_with(T* dst, T const* const* src, std::size_t k, std::size_t offset, std::size_t n, F const& f) {
  constexpr std::size_t group = reduce_sources_group;
  // With more sources than one pass takes, the destination is folded into again: in tiles small
  // enough to stay in L1 between the passes.
  constexpr std::size_t tile = std::max<std::size_t>(1, std::size_t{16384} / sizeof(T));
  std::size_t const step = k <= group ? n : tile;
  T const* at[group];
  for (std::size_t a = 0; a < n; a += step) {
    std::size_t const len = std::min(step, n - a);
    for (std::size_t j0 = 0; j0 < k; j0 += group) {
      // The first pass starts from source 0, the others from what the passes before left in dst.
      std::size_t const jb = j0 == 0 ? 1 : j0, j1 = std::min(k, j0 + group);
      for (std::size_t j = jb; j < j1; ++j) at[j - jb] = src[j] + offset + a;
      fold_sources(dst + a, j0 == 0 ? src[0] + offset + a : dst + a, at, j1 - jb, len, f);
    }
  }
}

/// dst[0, n) = the k sources at [offset, offset + n) combined by `op` in source order: the bits
/// of reduce_inputs (and of the runtime's all-reduce), each source read once, dst written once.
template <class T>
void reduce_sources(reduce_op op, T* dst, T const* const* src, std::size_t k, std::size_t offset, std::size_t n) {
  if (k == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, bool>) {
    if (op == reduce_op::min || op == reduce_op::prod)
      reduce_sources_with(dst, src, k, offset, n, [](bool x, bool y) { return x && y; });
    else
      reduce_sources_with(dst, src, k, offset, n, [](bool x, bool y) { return x || y; });
  } else if (op == reduce_op::sum) {
    // The operations of simd::add_into and friends, so that each element is what they give.
    reduce_sources_with(dst, src, k, offset, n, [](auto x, auto y) { return detail::wrapping_add(x, y); });
  } else if (op == reduce_op::prod) {
    reduce_sources_with(dst, src, k, offset, n, [](auto x, auto y) { return detail::wrapping_mul(x, y); });
  } else if (op == reduce_op::max) {
    reduce_sources_with(dst, src, k, offset, n, [](auto x, auto y) {
      if constexpr (std::is_arithmetic_v<decltype(x)>) return (y > x || y != y) ? y : x;
      else return xsimd::select((y > x) | xsimd::isnan(y), y, x);
    });
  } else {
    reduce_sources_with(dst, src, k, offset, n, [](auto x, auto y) {
      if constexpr (std::is_arithmetic_v<decltype(x)>) return (y < x || y != y) ? y : x;
      else return xsimd::select((y < x) | xsimd::isnan(y), y, x);
    });
  }
}

}  // namespace tessera::detail
