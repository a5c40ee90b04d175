#pragma once
// jax.random keys for the default threefry2x32 generator: key / PRNGKey from a seed, key_data,
// wrap_key_data, split and fold_in, with JAX's partitionable counters (the default since JAX 0.5).

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/random/threefry.hpp"

namespace tessera::random {

/// A jax.random key (`key<fry>`): the two 32-bit words jax.random.key_data returns. Keys are
/// values: copying one and using both copies gives the same numbers, as in JAX.
class prng_key {
 public:
  constexpr prng_key() = default;
  /// jax.random.wrap_key_data([w0, w1]).
  constexpr prng_key(std::uint32_t w0, std::uint32_t w1) : words_{w0, w1} {}
  /// The first word (the high half of a 64-bit seed).
  constexpr std::uint32_t w0() const { return words_.w0; }
  /// The second word (the low half of the seed).
  constexpr std::uint32_t w1() const { return words_.w1; }
  /// The words as the cipher takes them.
  constexpr detail::word_pair words() const { return words_; }
  friend constexpr bool operator==(prng_key const&, prng_key const&) = default;
  /// Prints as JAX prints a key array's data: `key<fry>[0 42]`.
  friend std::ostream& operator<<(std::ostream& os, prng_key const& k) {
    return os << "key<fry>[" << k.w0() << ' ' << k.w1() << ']';
  }

 private:
  detail::word_pair words_{};
};

/// Tag for key(seed, x64): the seed is kept 64 bits wide, as under jax_enable_x64.
struct x64_t {
  explicit constexpr x64_t() = default;
};
/// The tag value: random::key(seed, random::x64).
inline constexpr x64_t x64{};

/// jax.random.key(seed) without x64 (JAX's default): the seed becomes an int32, so only its low
/// 32 bits count; key data [0, seed mod 2^32].
constexpr prng_key key(std::int64_t seed) { return {0u, static_cast<std::uint32_t>(seed)}; }

/// jax.random.key(seed) under jax_enable_x64: key data [high 32 bits, low 32 bits] of the seed.
constexpr prng_key key(std::int64_t seed, x64_t) {
  auto const u = static_cast<std::uint64_t>(seed);
  return {static_cast<std::uint32_t>(u >> 32), static_cast<std::uint32_t>(u)};
}

/// jax.random.PRNGKey(seed): the legacy raw key; the same words as key(seed).
constexpr prng_key PRNGKey(std::int64_t seed) { return key(seed); }

/// jax.random.key_data(key): the two uint32 words.
constexpr std::array<std::uint32_t, 2> key_data(prng_key k) { return {k.w0(), k.w1()}; }

/// jax.random.wrap_key_data(data): a key from two uint32 words.
constexpr prng_key wrap_key_data(std::array<std::uint32_t, 2> const& data) { return {data[0], data[1]}; }

/// jax.random.fold_in(key, data): a new key from a key and a 32-bit number (a step, a device's
/// axis_index). Equals split(key, n)[data] for any n > data, as in JAX.
constexpr prng_key fold_in(prng_key k, std::uint32_t data) {
  auto const r = detail::threefry2x32(k.words(), {0u, data});
  return {r.w0, r.w1};
}

/// fold_in for any integer: JAX converts it to uint32, and refuses values that do not fit.
template <std::integral I>
  requires(!std::same_as<I, std::uint32_t> && !std::same_as<I, bool>)
constexpr prng_key fold_in(prng_key k, I data) {
  if (data < 0 || static_cast<std::uint64_t>(data) > std::numeric_limits<std::uint32_t>::max())
    throw std::out_of_range("tessera::random::fold_in: data " + std::to_string(data) +
                            " does not fit in uint32 (0 to 4294967295), as jnp.uint32(data) requires");
  return fold_in(k, static_cast<std::uint32_t>(data));
}

/// jax.random.split(key, num): num new keys; key i is the cipher of the 64-bit counter i.
inline std::vector<prng_key> split(prng_key k, std::size_t num) {
  std::vector<prng_key> out;
  out.reserve(num);
  for (std::size_t i = 0; i < num; ++i) {
    auto const c = static_cast<std::uint64_t>(i);
    auto const r = detail::threefry2x32(k.words(), {static_cast<std::uint32_t>(c >> 32), static_cast<std::uint32_t>(c)});
    out.emplace_back(r.w0, r.w1);
  }
  return out;
}

/// jax.random.split(key, Num) with the count in the type, for structured bindings:
/// `auto [k1, k2] = random::split(key);` (JAX's default num=2).
template <std::size_t Num = 2>
constexpr std::array<prng_key, Num> split(prng_key k) {
  std::array<prng_key, Num> out{};
  for (std::size_t i = 0; i < Num; ++i) out[i] = fold_in(k, static_cast<std::uint32_t>(i));
  return out;
}

}  // namespace tessera::random
