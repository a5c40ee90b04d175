#pragma once
// flax.linen.Dropout: in training, each element kept with probability 1 - rate (a
// tessera::random::bernoulli mask, JAX's bits for the same key) and scaled by 1 / (1 - rate);
// in evaluation, the identity.

#include <stdexcept>
#include <string>

#include "tessera/autodiff.hpp"
#include "tessera/nn/dense.hpp"
#include "tessera/random.hpp"

namespace tessera::nn {

/// flax.linen.Dropout(rate): `apply(x, key)` in training (Flax's `deterministic=False` with
/// `rng=key`), `apply(x, key, true)` or `apply(x)` in evaluation, which returns x. No parameters.
/// broadcast_dims is not provided: the mask has x's shape and sharding (each device draws its block).
struct Dropout {
  float rate = 0.5f;

  explicit Dropout(float rate_) : rate(rate_) {
    if (!(rate >= 0.0f && rate <= 1.0f))
      throw std::invalid_argument("tessera::nn::Dropout: rate " + std::to_string(rate) + " is not in [0, 1]");
  }
  /// No parameters (an empty tuple, a tree without leaves).
  template <class Key, class X>
  std::tuple<> init(Key const&, X const&) const {
    return {};
  }
  /// Evaluation: x unchanged.
  template <class X>
  X apply(X const& x) const {
    return x;
  }
  /// select(bernoulli(key, 1 - rate, x.shape), x / (1 - rate), 0), or x where `deterministic`
  /// (the same type either way, so a run-time training flag works: every element is then kept).
  template <class X>
  auto apply(X const& x, random::prng_key key, bool deterministic = false) const {
    float const keep = 1.0f - rate;
    bool const identity = deterministic || rate == 0.0f;
    // rate 1 keeps nothing (Flax returns zeros); bernoulli(p=0) is all false.
    auto const mask = random::bernoulli(key, identity ? 2.0f : keep, x.shape(), x.sharding());
    // XLA turns Flax's x / keep_prob into x * (1 / keep_prob): JAX's bits.
    return tessera::where(mask, x * (identity ? 1.0f : (keep > 0.0f ? 1.0f / keep : 1.0f)), 0.0f);
  }
};

}  // namespace tessera::nn
