#pragma once
// Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// 2011), the block cipher behind jax.random's default generator: one counter at a time
// (constexpr, for keys) and runs of consecutive 64-bit counters with xsimd (for samples).

#include <cstddef>
#include <cstdint>

#include "tessera/runtime/simd.hpp"  // xsimd, behind tessera's one header for it

namespace tessera::random::detail {

/// Two 32-bit words: a key, a counter or a cipher output (JAX's pair of uint32 arrays).
struct word_pair {
  std::uint32_t w0 = 0;
  std::uint32_t w1 = 0;
  friend constexpr bool operator==(word_pair const&, word_pair const&) = default;
};

inline constexpr int threefry_rotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
inline constexpr std::uint32_t threefry_parity = 0x1BD11BDAu;

/// The cipher over any type with wrapping +, ^, << and >> (std::uint32_t or an xsimd batch of it).
template <class W>
constexpr void threefry_rounds(std::uint32_t k0, std::uint32_t k1, W& x0, W& x1) {
  std::uint32_t const ks[3] = {k0, k1, k0 ^ k1 ^ threefry_parity};
  x0 += W(ks[0]);
  x1 += W(ks[1]);
  for (std::uint32_t i = 0; i < 5; ++i) {
    for (int r : threefry_rotations[i % 2]) {
      x0 += x1;
      x1 = ((x1 << r) | (x1 >> (32 - r))) ^ x0;
    }
    x0 += W(ks[(i + 1) % 3]);
    x1 += W(ks[(i + 2) % 3] + i + 1);
  }
}

/// threefry2x32(key, counter) on one counter: jax._src.random.threefry2x32's threefry_2x32.
constexpr word_pair threefry2x32(word_pair key, word_pair counter) {
  std::uint32_t x0 = counter.w0, x1 = counter.w1;
  threefry_rounds(key.w0, key.w1, x0, x1);
  return {x0, x1};
}

/// The cipher of the counters first, first + 1, ... first + n - 1, each split into its high and
/// low 32-bit words as JAX's iota_2x32_shape splits a row-major index: out0[i], out1[i].
inline void threefry_run(word_pair key, std::uint64_t first, std::size_t n, std::uint32_t* out0,
                         std::uint32_t* out1) {
  using batch = xsimd::batch<std::uint32_t>;
  constexpr std::size_t lanes = batch::size;
  std::size_t i = 0;
  alignas(64) std::uint32_t hi[lanes], lo[lanes];
  alignas(64) std::uint32_t iota[lanes];
  for (std::size_t l = 0; l < lanes; ++l) iota[l] = static_cast<std::uint32_t>(l);
  batch const step = batch::load_aligned(iota);
  for (; i + lanes <= n; i += lanes) {
    std::uint64_t const c = first + i;
    batch x0, x1;
    if (static_cast<std::uint32_t>(c) <= 0xFFFFFFFFu - (lanes - 1)) {  // one high word for all lanes
      x0 = batch(static_cast<std::uint32_t>(c >> 32));
      x1 = batch(static_cast<std::uint32_t>(c)) + step;
    } else {
      for (std::size_t l = 0; l < lanes; ++l) {
        hi[l] = static_cast<std::uint32_t>((c + l) >> 32);
        lo[l] = static_cast<std::uint32_t>(c + l);
      }
      x0 = batch::load_aligned(hi);
      x1 = batch::load_aligned(lo);
    }
    threefry_rounds(key.w0, key.w1, x0, x1);
    x0.store_unaligned(out0 + i);
    x1.store_unaligned(out1 + i);
  }
  for (; i < n; ++i) {
    std::uint64_t const c = first + i;
    auto const r = threefry2x32(key, {static_cast<std::uint32_t>(c >> 32), static_cast<std::uint32_t>(c)});
    out0[i] = r.w0;
    out1[i] = r.w1;
  }
}

}  // namespace tessera::random::detail
