#pragma once
// The index of a block: one half-open range per dimension, as JAX's tuple of slices.

#include <cstddef>
#include <ostream>

namespace tessera {

/// Python's `slice(start, stop, None)` over one dimension; blocks are contiguous ranges.
struct slice {
  std::size_t start = 0;
  std::size_t stop = 0;
  /// Number of elements in the range.
  constexpr std::size_t size() const { return stop - start; }
  friend constexpr bool operator==(slice const&, slice const&) = default;
  friend std::ostream& operator<<(std::ostream& os, slice const& s) {
    return os << "slice(" << s.start << ", " << s.stop << ", None)";
  }
};

/// Block arithmetic shared by every sharding: `n` elements in `k` blocks of ceil(n/k),
/// the last ones smaller or empty (DTensor's rule; JAX refuses uneven shapes).
constexpr slice block_range(std::size_t n, std::size_t k, std::size_t index) {
  std::size_t const bs = k == 0 ? n : (n + k - 1) / k;
  std::size_t const start = index * bs < n ? index * bs : n;
  std::size_t const stop = start + bs < n ? start + bs : n;
  return {start, stop};
}

}  // namespace tessera
