#pragma once
// jax.random's samplers: bits, uniform, normal, truncated_normal, bernoulli and randint. Each
// comes in two forms: with a sharding, a sharded array whose devices each make their own block
// from its global indices, in parallel and without a collective (JAX's out_sharding); without
// one, an xt::xtensor on the host (also what a shard_map body calls for a per-device block).
// Shapes are shape_t<N> or braced lists ({4, 8}); the numbers are JAX's for any sharding.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/shape.hpp"
#include "tessera/core/sharding.hpp"
#include "tessera/random/block_fill.hpp"
#include "tessera/random/distributions.hpp"
#include "tessera/random/key.hpp"

namespace tessera::random {

namespace detail {

/// The whole array as one block.
template <std::size_t N>
std::array<slice, N> whole(shape_t<N> const& shape) {
  std::array<slice, N> b{};
  for (std::size_t d = 0; d < N; ++d) b[d] = {0, shape[d]};
  return b;
}

/// A host array of `shape` made by `kernel` from the counters under `keys`.
template <class T, std::size_t N, std::size_t K, class Kernel>
xt::xtensor<T, N> sample_host(std::array<prng_key, K> const& keys, shape_t<N> const& shape, char const* where,
                              Kernel const& kernel) {
  (void)tessera::detail::checked_element_count<T>(shape, where);
  auto out = xt::xtensor<T, N>::from_shape(shape);
  if (out.size() != 0) fill_block(keys, shape, whole(shape), out.data(), kernel);
  return out;
}

/// A sharded array of `shape`: every device fills its own block on its own thread.
template <class T, std::size_t N, class S, std::size_t K, class Kernel>
tessera::array<T, N, S> sample_sharded(std::array<prng_key, K> const& keys, shape_t<N> const& shape, S const& s,
                                       char const* where, Kernel const& kernel) {
  return tessera::detail::build_array<T, N, S, false>(
      s, shape, where, [&](std::size_t, std::array<slice, N> const& block, T* out) {
        fill_block(keys, shape, block, out, kernel);
      });
}

/// Braced shapes ({4, 8}): negative sizes are refused with the whole shape in the message.
template <std::integral I, std::size_t N>
shape_t<N> shape_of(I const (&dims)[N], char const* where) {
  return tessera::detail::checked_shape<I, N>(dims, where);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// bits
// ---------------------------------------------------------------------------------------------

/// jax.random.bits(key, shape, dtype): uniform random unsigned integers (uint8 to uint64).
template <class U = std::uint32_t, std::size_t N>
xt::xtensor<U, N> bits(prng_key k, shape_t<N> const& shape) {
  static_assert(detail::sample_bits<U>, "tessera::random::bits: the dtype must be uint8, uint16, uint32 or uint64");
  return detail::sample_host<U>(std::array{k}, shape, "random::bits", detail::bits_kernel<U>{});
}
/// jax.random.bits(key, shape, dtype, out_sharding=s).
template <class U = std::uint32_t, std::size_t N, sharding S>
tessera::array<U, N, S> bits(prng_key k, shape_t<N> const& shape, S const& s) {
  static_assert(detail::sample_bits<U>, "tessera::random::bits: the dtype must be uint8, uint16, uint32 or uint64");
  return detail::sample_sharded<U>(std::array{k}, shape, s, "random::bits", detail::bits_kernel<U>{});
}
/// bits with a braced shape.
template <class U = std::uint32_t, std::integral I, std::size_t N>
auto bits(prng_key k, I const (&shape)[N]) {
  return bits<U>(k, detail::shape_of(shape, "random::bits"));
}
/// bits with a braced shape and a sharding.
template <class U = std::uint32_t, std::integral I, std::size_t N, sharding S>
auto bits(prng_key k, I const (&shape)[N], S const& s) {
  return bits<U>(k, detail::shape_of(shape, "random::bits"), s);
}

// ---------------------------------------------------------------------------------------------
// uniform
// ---------------------------------------------------------------------------------------------

/// jax.random.uniform(key, shape, dtype, minval, maxval): floats in [minval, maxval).
template <class F = float, std::size_t N>
  requires(!sharding<F>)  // uniform(key, shape, s) is the sharded form
xt::xtensor<F, N> uniform(prng_key k, shape_t<N> const& shape, F minval = F(0), F maxval = F(1)) {
  static_assert(detail::sample_float<F>, "tessera::random::uniform: the dtype must be float or double");
  return detail::sample_host<F>(std::array{k}, shape, "random::uniform", detail::uniform_kernel<F>{minval, maxval});
}
/// jax.random.uniform(key, shape, dtype, minval, maxval, out_sharding=s).
template <class F = float, std::size_t N, sharding S>
tessera::array<F, N, S> uniform(prng_key k, shape_t<N> const& shape, F minval, F maxval, S const& s) {
  static_assert(detail::sample_float<F>, "tessera::random::uniform: the dtype must be float or double");
  return detail::sample_sharded<F>(std::array{k}, shape, s, "random::uniform",
                                   detail::uniform_kernel<F>{minval, maxval});
}
/// jax.random.uniform(key, shape, dtype, out_sharding=s): floats in [0, 1).
template <class F = float, std::size_t N, sharding S>
tessera::array<F, N, S> uniform(prng_key k, shape_t<N> const& shape, S const& s) {
  return uniform<F>(k, shape, F(0), F(1), s);
}
/// uniform with a braced shape.
template <class F = float, std::integral I, std::size_t N>
  requires(!sharding<F>)
auto uniform(prng_key k, I const (&shape)[N], F minval = F(0), F maxval = F(1)) {
  return uniform<F>(k, detail::shape_of(shape, "random::uniform"), minval, maxval);
}
/// uniform with a braced shape, bounds and a sharding.
template <class F = float, std::integral I, std::size_t N, sharding S>
auto uniform(prng_key k, I const (&shape)[N], F minval, F maxval, S const& s) {
  return uniform<F>(k, detail::shape_of(shape, "random::uniform"), minval, maxval, s);
}
/// uniform with a braced shape and a sharding.
template <class F = float, std::integral I, std::size_t N, sharding S>
auto uniform(prng_key k, I const (&shape)[N], S const& s) {
  return uniform<F>(k, detail::shape_of(shape, "random::uniform"), F(0), F(1), s);
}

// ---------------------------------------------------------------------------------------------
// normal
// ---------------------------------------------------------------------------------------------

/// jax.random.normal(key, shape, dtype): standard normal floats.
template <class F = float, std::size_t N>
xt::xtensor<F, N> normal(prng_key k, shape_t<N> const& shape) {
  static_assert(detail::sample_float<F>, "tessera::random::normal: the dtype must be float or double");
  return detail::sample_host<F>(std::array{k}, shape, "random::normal", detail::normal_kernel<F>{});
}
/// jax.random.normal(key, shape, dtype, out_sharding=s).
template <class F = float, std::size_t N, sharding S>
tessera::array<F, N, S> normal(prng_key k, shape_t<N> const& shape, S const& s) {
  static_assert(detail::sample_float<F>, "tessera::random::normal: the dtype must be float or double");
  return detail::sample_sharded<F>(std::array{k}, shape, s, "random::normal", detail::normal_kernel<F>{});
}
/// normal with a braced shape.
template <class F = float, std::integral I, std::size_t N>
auto normal(prng_key k, I const (&shape)[N]) {
  return normal<F>(k, detail::shape_of(shape, "random::normal"));
}
/// normal with a braced shape and a sharding.
template <class F = float, std::integral I, std::size_t N, sharding S>
auto normal(prng_key k, I const (&shape)[N], S const& s) {
  return normal<F>(k, detail::shape_of(shape, "random::normal"), s);
}

// ---------------------------------------------------------------------------------------------
// truncated_normal
// ---------------------------------------------------------------------------------------------

/// jax.random.truncated_normal(key, lower, upper, shape, dtype): normal floats in (lower, upper).
template <class F = float, std::size_t N>
xt::xtensor<F, N> truncated_normal(prng_key k, F lower, F upper, shape_t<N> const& shape) {
  static_assert(detail::sample_float<F>, "tessera::random::truncated_normal: the dtype must be float or double");
  return detail::sample_host<F>(std::array{k}, shape, "random::truncated_normal",
                                detail::truncated_normal_kernel<F>(lower, upper));
}
/// jax.random.truncated_normal(key, lower, upper, shape, dtype, out_sharding=s).
template <class F = float, std::size_t N, sharding S>
tessera::array<F, N, S> truncated_normal(prng_key k, F lower, F upper, shape_t<N> const& shape, S const& s) {
  static_assert(detail::sample_float<F>, "tessera::random::truncated_normal: the dtype must be float or double");
  return detail::sample_sharded<F>(std::array{k}, shape, s, "random::truncated_normal",
                                   detail::truncated_normal_kernel<F>(lower, upper));
}
/// truncated_normal with a braced shape.
template <class F = float, std::integral I, std::size_t N>
auto truncated_normal(prng_key k, F lower, F upper, I const (&shape)[N]) {
  return truncated_normal<F>(k, lower, upper, detail::shape_of(shape, "random::truncated_normal"));
}
/// truncated_normal with a braced shape and a sharding.
template <class F = float, std::integral I, std::size_t N, sharding S>
auto truncated_normal(prng_key k, F lower, F upper, I const (&shape)[N], S const& s) {
  return truncated_normal<F>(k, lower, upper, detail::shape_of(shape, "random::truncated_normal"), s);
}

// ---------------------------------------------------------------------------------------------
// bernoulli
// ---------------------------------------------------------------------------------------------

/// jax.random.bernoulli(key, p, shape): booleans that are true with probability p (mode "low";
/// p's type, float or double, is the uniform's, as in JAX).
template <class F = float, std::size_t N>
xt::xtensor<bool, N> bernoulli(prng_key k, F p, shape_t<N> const& shape) {
  static_assert(detail::sample_float<F>, "tessera::random::bernoulli: p must be a float or a double");
  return detail::sample_host<bool>(std::array{k}, shape, "random::bernoulli", detail::bernoulli_kernel<F>{p});
}
/// jax.random.bernoulli(key, p, shape, out_sharding=s).
template <class F = float, std::size_t N, sharding S>
tessera::array<bool, N, S> bernoulli(prng_key k, F p, shape_t<N> const& shape, S const& s) {
  static_assert(detail::sample_float<F>, "tessera::random::bernoulli: p must be a float or a double");
  return detail::sample_sharded<bool>(std::array{k}, shape, s, "random::bernoulli", detail::bernoulli_kernel<F>{p});
}
/// bernoulli with a braced shape.
template <class F = float, std::integral I, std::size_t N>
auto bernoulli(prng_key k, F p, I const (&shape)[N]) {
  return bernoulli<F>(k, p, detail::shape_of(shape, "random::bernoulli"));
}
/// bernoulli with a braced shape and a sharding.
template <class F = float, std::integral I, std::size_t N, sharding S>
auto bernoulli(prng_key k, F p, I const (&shape)[N], S const& s) {
  return bernoulli<F>(k, p, detail::shape_of(shape, "random::bernoulli"), s);
}

// ---------------------------------------------------------------------------------------------
// randint
// ---------------------------------------------------------------------------------------------

/// jax.random.randint(key, shape, minval, maxval, dtype): integers in [minval, maxval), the
/// bounds clipped to T's range (maxval one past it, so uint8 reaches 255); minval when
/// maxval <= minval. The bounds are taken as JAX takes them under x64 (int64).
template <class T = std::int32_t, std::size_t N>
xt::xtensor<T, N> randint(prng_key k, shape_t<N> const& shape, long long minval, long long maxval) {
  static_assert(detail::sample_int<T>, "tessera::random::randint: the dtype must be an integer of 8 to 64 bits");
  auto const keys = split<2>(k);
  return detail::sample_host<T>(keys, shape, "random::randint", detail::randint_plan<T>(minval, maxval));
}
/// jax.random.randint(key, shape, minval, maxval, dtype, out_sharding=s).
template <class T = std::int32_t, std::size_t N, sharding S>
tessera::array<T, N, S> randint(prng_key k, shape_t<N> const& shape, long long minval, long long maxval, S const& s) {
  static_assert(detail::sample_int<T>, "tessera::random::randint: the dtype must be an integer of 8 to 64 bits");
  auto const keys = split<2>(k);
  return detail::sample_sharded<T>(keys, shape, s, "random::randint", detail::randint_plan<T>(minval, maxval));
}
/// randint with a braced shape.
template <class T = std::int32_t, std::integral I, std::size_t N>
auto randint(prng_key k, I const (&shape)[N], long long minval, long long maxval) {
  return randint<T>(k, detail::shape_of(shape, "random::randint"), minval, maxval);
}
/// randint with a braced shape and a sharding.
template <class T = std::int32_t, std::integral I, std::size_t N, sharding S>
auto randint(prng_key k, I const (&shape)[N], long long minval, long long maxval, S const& s) {
  return randint<T>(k, detail::shape_of(shape, "random::randint"), minval, maxval, s);
}

}  // namespace tessera::random
