#pragma once
// Copying a rectangular region between two row-major buffers: the one loop
// behind device_put, to_host and resharding by copy.

#include <array>
#include <cstddef>
#include <cstring>

#include "tessera/array/shape.hpp"
#include "tessera/core/slice.hpp"

namespace tessera::detail {

/// Intersection of two blocks in global coordinates; empty when any extent is 0.
template <std::size_t N>
bool intersect(std::array<slice, N> const& a, std::array<slice, N> const& b, std::array<slice, N>& out) {
  for (std::size_t i = 0; i < N; ++i) {
    std::size_t const lo = a[i].start > b[i].start ? a[i].start : b[i].start;
    std::size_t const hi = a[i].stop < b[i].stop ? a[i].stop : b[i].stop;
    if (lo >= hi) return false;
    out[i] = {lo, hi};
  }
  return true;
}

/// Copies `region` (global coordinates) from a buffer holding block `src_block`
/// into a buffer holding block `dst_block`. Trailing dimensions that are whole in
/// both buffers merge into one memcpy run.
template <class T, std::size_t N>
void copy_region(T const* src, std::array<slice, N> const& src_block, T* dst, std::array<slice, N> const& dst_block,
                 std::array<slice, N> const& region) {
  if constexpr (N == 0) {
    *dst = *src;
  } else {
    std::size_t run = 1;  // elements per contiguous run
    std::size_t k = N;    // dimensions [k, N) form the run
    while (k > 0) {
      std::size_t const e = region[k - 1].size();
      run *= e;
      --k;
      if (e != src_block[k].size() || e != dst_block[k].size()) break;
    }
    // Row-major strides of both buffers.
    std::array<std::size_t, N> ss{}, ds{};
    std::size_t s = 1, d = 1;
    for (std::size_t i = N; i-- > 0;) {
      ss[i] = s;
      ds[i] = d;
      s *= src_block[i].size();
      d *= dst_block[i].size();
    }
    std::size_t src_off = 0, dst_off = 0;
    for (std::size_t i = 0; i < N; ++i) {
      src_off += (region[i].start - src_block[i].start) * ss[i];
      dst_off += (region[i].start - dst_block[i].start) * ds[i];
    }
    // Odometer over dimensions [0, k).
    std::array<std::size_t, N> idx{};
    for (;;) {
      std::memcpy(static_cast<void*>(dst + dst_off), static_cast<void const*>(src + src_off), run * sizeof(T));
      std::size_t i = k;
      for (;;) {
        if (i == 0) return;
        --i;
        ++idx[i];
        src_off += ss[i];
        dst_off += ds[i];
        if (idx[i] < region[i].size()) break;
        src_off -= idx[i] * ss[i];
        dst_off -= idx[i] * ds[i];
        idx[i] = 0;
      }
    }
  }
}

/// The whole-array block of a shape (how host buffers are described).
template <std::size_t N>
std::array<slice, N> full_block(shape_t<N> const& shape) {
  std::array<slice, N> b{};
  for (std::size_t i = 0; i < N; ++i) b[i] = {0, shape[i]};
  return b;
}

template <std::size_t N>
shape_t<N> block_shape(std::array<slice, N> const& b) {
  shape_t<N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = b[i].size();
  return s;
}

}  // namespace tessera::detail
