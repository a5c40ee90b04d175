#pragma once
// Copying a box between two row-major buffers of any rank: the one loop behind
// all_to_all (runtime/collectives.hpp) and device_put, to_host and resharding
// (array/block_copy.hpp). noexcept and allocation-free, so it can run inside a
// collective, between team::enter and team::leave.

#include <algorithm>
#include <cstddef>
#include <span>

namespace tessera::detail {

/// Calls run(src_run, dst_run, length) over a box of `extent` elements between two row-major
/// buffers of any rank, given their shapes and the box's start in each. Trailing dimensions
/// whole in both merge into one run. `scratch` holds 3 * rank numbers: allocated by the
/// caller, since this runs inside a collective.
template <class T, class Run>
void visit_box(T const* src, std::span<std::size_t const> src_shape, std::span<std::size_t const> src_start, T* dst,
               std::span<std::size_t const> dst_shape, std::span<std::size_t const> dst_start,
               std::span<std::size_t const> extent, std::span<std::size_t> scratch, Run&& run_op) noexcept {
  std::size_t const n = extent.size();
  for (std::size_t i = 0; i < n; ++i)
    if (extent[i] == 0) return;
  std::span<std::size_t> const ss = scratch.subspan(0, n), ds = scratch.subspan(n, n), idx = scratch.subspan(2 * n, n);
  std::fill(idx.begin(), idx.end(), std::size_t{0});
  std::size_t s = 1, d = 1;
  for (std::size_t i = n; i-- > 0;) {
    ss[i] = s;
    ds[i] = d;
    s *= src_shape[i];
    d *= dst_shape[i];
  }
  std::size_t run = 1, k = n;
  while (k > 0) {
    run *= extent[k - 1];
    --k;
    if (extent[k] != src_shape[k] || extent[k] != dst_shape[k]) break;
  }
  std::size_t so = 0, dof = 0;
  for (std::size_t i = 0; i < n; ++i) {
    so += src_start[i] * ss[i];
    dof += dst_start[i] * ds[i];
  }
  for (;;) {
    run_op(src + so, dst + dof, run);
    std::size_t i = k;
    for (;;) {
      if (i == 0) return;
      --i;
      ++idx[i];
      so += ss[i];
      dof += ds[i];
      if (idx[i] < extent[i]) break;
      so -= idx[i] * ss[i];
      dof -= idx[i] * ds[i];
      idx[i] = 0;
    }
  }
}

/// Copies a box between two row-major buffers of any rank (see visit_box).
template <class T>
void copy_box(T const* src, std::span<std::size_t const> src_shape, std::span<std::size_t const> src_start, T* dst,
              std::span<std::size_t const> dst_shape, std::span<std::size_t const> dst_start,
              std::span<std::size_t const> extent, std::span<std::size_t> scratch) noexcept {
  visit_box(src, src_shape, src_start, dst, dst_shape, dst_start, extent, scratch,
            [](T const* s, T* d, std::size_t n) { std::copy(s, s + n, d); });
}

}  // namespace tessera::detail
