#pragma once
// The few pieces of jax.random an example needs to draw the same numbers as a
// seed's notebook: jax.random.key(seed), split(key, n) and normal(key, shape)
// in float32, as JAX does them with its default threefry2x32 generator
// (jax_threefry_partitionable=True, the default since JAX 0.5).
//
// normal() follows JAX's formula, sqrt(2) * erfinv(u) with u uniform in
// (-1, 1), and XLA's float32 erfinv polynomial; XLA's own log1p may differ
// from the C library's in the last bit, so a value can be an ulp away.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xtensor/xtensor.hpp>

namespace examples::jax_random {

/// A raw key: the two 32-bit words of JAX's threefry key data.
using key_t = std::array<std::uint32_t, 2>;

/// Threefry-2x32 with 20 rounds (Salmon et al. 2011), the block cipher behind jax.random.
inline key_t threefry2x32(key_t key, key_t x) {
  auto rotl = [](std::uint32_t v, int r) { return (v << r) | (v >> (32 - r)); };
  std::uint32_t const ks[3] = {key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDAu};
  constexpr int rotations[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  x[0] += ks[0];
  x[1] += ks[1];
  for (std::uint32_t i = 0; i < 5; ++i) {
    for (int r : rotations[i % 2]) {
      x[0] += x[1];
      x[1] = rotl(x[1], r) ^ x[0];
    }
    x[0] += ks[(i + 1) % 3];
    x[1] += ks[(i + 2) % 3] + i + 1;
  }
  return x;
}

/// jax.random.key(seed) for a 32-bit seed.
inline key_t key(std::uint32_t seed) { return {0u, seed}; }

/// jax.random.split(key, n): key i is the cipher of the counter i.
inline std::vector<key_t> split(key_t k, std::size_t n) {
  std::vector<key_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = threefry2x32(k, {0u, static_cast<std::uint32_t>(i)});
  return keys;
}

/// lax.erf_inv in float32 as XLA expands it (M. Giles, "Approximating the erfinv function").
inline float erf_inv(float x) {
  constexpr float small[9] = {2.81022636e-08f,  3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f, 0.00021858087f,
                              -0.00125372503f, -0.00417768164f, 0.246640727f,     1.50140941f};
  constexpr float large[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f, -0.00367342844f, 0.00573950773f,
                              -0.0076224613f,   0.00943887047f,  1.00167406f,     2.83297682f};
  float w = -std::log1p(x * -x);
  bool const lt = w < 5.0f;
  w = lt ? w - 2.5f : std::sqrt(w) - 3.0f;
  float p = lt ? small[0] : large[0];
  for (int i = 1; i < 9; ++i) p = (lt ? small[i] : large[i]) + p * w;
  return std::fabs(x) == 1.0f ? x * INFINITY : p * x;
}

/// jax.random.normal(key, shape) in float32: element i (row-major) comes from the counter i.
template <std::size_t N>
xt::xtensor<float, N> normal(key_t k, std::array<std::size_t, N> const& shape) {
  auto out = xt::xtensor<float, N>::from_shape(shape);
  float const lo = std::nextafter(-1.0f, 0.0f);
  for (std::size_t i = 0; i < out.size(); ++i) {
    auto const b = threefry2x32(k, {0u, static_cast<std::uint32_t>(i)});
    // uniform(lo, 1): 23 random mantissa bits make a float in [1, 2), shifted and scaled to [lo, 1).
    std::uint32_t const bits = ((b[0] ^ b[1]) >> 9) | 0x3F800000u;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    float const u = std::max(lo, (f - 1.0f) * (1.0f - lo) + lo);
    out.data()[i] = static_cast<float>(std::sqrt(2.0)) * erf_inv(u);
  }
  return out;
}

}  // namespace examples::jax_random
