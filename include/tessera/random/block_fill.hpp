#pragma once
// How a block of random numbers is made: element i of a global shape (row-major) takes the
// cipher of the 64-bit counter i under each key, whichever device holds it. That is JAX's
// partitionable threefry (jax_threefry_partitionable, the default since JAX 0.5): the numbers
// depend only on the key and the global index, never on the sharding, and no device talks to
// another. Runs of consecutive counters go through the vectorised cipher in chunks.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "tessera/array/shape.hpp"
#include "tessera/core/slice.hpp"
#include "tessera/random/key.hpp"
#include "tessera/random/distributions.hpp"
#include "tessera/random/threefry.hpp"

namespace tessera::random::detail {

/// Calls run(first_index, count, offset_in_block) for each row of `block` (the last dimension's
/// range), in row-major order; a rank-0 array is the one element at index 0.
template <std::size_t N, class Run>
void for_each_row(shape_t<N> const& global, std::array<slice, N> const& block, Run&& run) {
  if constexpr (N == 0) {
    run(std::uint64_t{0}, std::size_t{1}, std::size_t{0});
  } else {
    for (auto const& r : block)
      if (r.size() == 0) return;
    std::array<std::uint64_t, N> stride{};
    stride[N - 1] = 1;
    for (std::size_t d = N - 1; d > 0; --d) stride[d - 1] = stride[d] * global[d];
    std::array<std::size_t, N> at{};  // position inside the block, the last dimension left at 0
    std::size_t const row = block[N - 1].size();
    for (std::size_t offset = 0;; offset += row) {
      std::uint64_t first = block[N - 1].start;
      for (std::size_t d = 0; d + 1 < N; ++d) first += (block[d].start + at[d]) * stride[d];
      run(first, row, offset);
      std::size_t d = N - 1;
      for (; d > 0; --d) {
        if (++at[d - 1] < block[d - 1].size()) break;
        at[d - 1] = 0;
      }
      if (d == 0) return;
    }
  }
}

/// Fills `out`, the block `block` of an array of shape `global`, with kernel(pairs) where
/// pairs[j] is the cipher of the element's counter under keys[j]; a one-key kernel with a
/// fill(w0, w1, m, out) makes each run of up to fill_chunk elements at once.
template <class T, std::size_t N, std::size_t K, class Kernel>
void fill_block(std::array<prng_key, K> const& keys, shape_t<N> const& global, std::array<slice, N> const& block,
                T* out, Kernel const& kernel) {
  constexpr std::size_t chunk = fill_chunk;
  alignas(64) std::uint32_t w0[K][chunk];
  alignas(64) std::uint32_t w1[K][chunk];
  for_each_row(global, block, [&](std::uint64_t first, std::size_t n, std::size_t offset) {
    for (std::size_t i = 0; i < n; i += chunk) {
      std::size_t const m = std::min(chunk, n - i);
      for (std::size_t j = 0; j < K; ++j) threefry_run(keys[j].words(), first + i, m, w0[j], w1[j]);
      T* o = out + offset + i;
      if constexpr (K == 1 && requires { kernel.fill(w0[0], w1[0], m, o); }) {
        kernel.fill(w0[0], w1[0], m, o);  // a whole run at once (erf_inv on SIMD batches)
        continue;
      }
      for (std::size_t e = 0; e < m; ++e) {
        std::array<word_pair, K> pairs;
        for (std::size_t j = 0; j < K; ++j) pairs[j] = {w0[j][e], w1[j][e]};
        o[e] = kernel(pairs);
      }
    }
  });
}

}  // namespace tessera::random::detail
