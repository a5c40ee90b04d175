#pragma once
// Copying a rectangular region between two row-major buffers: the one loop
// behind device_put, to_host and resharding by copy.

#include <array>
#include <algorithm>
#include <cstddef>
#include <optional>

#include "tessera/array/shape.hpp"
#include "tessera/core/slice.hpp"
#include "tessera/runtime/copy_box.hpp"

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

/// Calls run(src_run, dst_run, length) over `region` (global coordinates) of a buffer holding
/// block `src_block` and one holding `dst_block`: copy_region with another operation.
template <class T, std::size_t N, class Run>
void visit_region(T const* src, std::array<slice, N> const& src_block, T* dst, std::array<slice, N> const& dst_block,
                  std::array<slice, N> const& region, Run&& run) {
  if constexpr (N == 0) {
    run(src, dst, 1);
  } else {
    std::array<std::size_t, N> src_shape{}, src_start{}, dst_shape{}, dst_start{}, extent{};
    std::array<std::size_t, 3 * N> scratch{};
    for (std::size_t i = 0; i < N; ++i) {
      src_shape[i] = src_block[i].size();
      dst_shape[i] = dst_block[i].size();
      src_start[i] = region[i].start - src_block[i].start;
      dst_start[i] = region[i].start - dst_block[i].start;
      extent[i] = region[i].size();
    }
    visit_box<T>(src, src_shape, src_start, dst, dst_shape, dst_start, extent, scratch, run);
  }
}

/// Copies `region` (global coordinates) from a buffer holding block `src_block`
/// into a buffer holding block `dst_block`.
template <class T, std::size_t N>
void copy_region(T const* src, std::array<slice, N> const& src_block, T* dst, std::array<slice, N> const& dst_block,
                 std::array<slice, N> const& region) {
  visit_region(src, src_block, dst, dst_block, region, [](T const* s, T* d, std::size_t n) { std::copy(s, s + n, d); });
}

/// Where `region` lies in the row-major buffer of `block` (both in global coordinates), when it
/// is one contiguous run there: its first element's offset; none otherwise.
template <std::size_t N>
std::optional<std::size_t> contiguous_offset(std::array<slice, N> const& region, std::array<slice, N> const& block) {
  // Row-major: every dimension after the last one the region does not span whole is spanned
  // whole, and every one before it has extent 1.
  std::size_t partial = 0;
  for (std::size_t i = 0; i < N; ++i)
    if (region[i] != block[i]) partial = i;
  for (std::size_t i = 0; i < partial; ++i)
    if (region[i].size() != 1) return std::nullopt;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < N; ++i) offset = offset * block[i].size() + (region[i].start - block[i].start);
  return offset;
}

/// The bytes to send for `region` of a buffer holding `block`: the buffer itself where the region
/// is contiguous there, else `pack` (room the caller made), into which it is copied first.
template <class T, std::size_t N>
std::byte* region_to_send(T const* src, std::array<slice, N> const& block, std::array<slice, N> const& region,
                          std::byte* pack) {
  if (auto at = contiguous_offset(region, block))
    // MPI reads, never writes, a send buffer; its C signature takes void const*.
    return reinterpret_cast<std::byte*>(const_cast<T*>(src + *at));
  copy_region(src, block, reinterpret_cast<T*>(pack), region, region);
  return pack;
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
