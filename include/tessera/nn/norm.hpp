#pragma once
// flax.linen.LayerNorm and RMSNorm over the last dimension, with Flax's defaults (epsilon 1e-6,
// a scale of ones and a bias of zeros, the fast variance E[x^2] - E[x]^2 clamped at 0).

#include <cstddef>

#include "tessera/autodiff.hpp"
#include "tessera/nn/dense.hpp"
#include "tessera/nn/initializers.hpp"
#include "tessera/nn/scope.hpp"

namespace tessera::nn {

/// LayerNorm's parameters, Flax's {'scale': ..., 'bias': ...}.
template <class S, class B>
struct norm_params {
  S scale;
  B bias;
};
/// RMSNorm's parameters, Flax's {'scale': ...}.
template <class S>
struct scale_params {
  S scale;
};

namespace detail {
template <class X>
std::size_t last_dim(X const& x) {
  return x.shape()[rank_v<X> - 1];
}
}  // namespace detail

/// flax.linen.LayerNorm(epsilon=1e-6, use_bias=True, use_scale=True) over the last axis:
/// (x - mean) * (rsqrt(var + epsilon) * scale) + bias, var = max(0, mean(x^2) - mean(x)^2).
template <class ScaleInit = initializers::ones, class BiasInit = initializers::zeros>
struct LayerNorm {
  float epsilon = 1e-6f;
  ScaleInit scale_init{};
  BiasInit bias_init{};

  explicit LayerNorm(float epsilon_ = 1e-6f, ScaleInit s = {}, BiasInit b = {})
      : epsilon(epsilon_), scale_init(std::move(s)), bias_init(std::move(b)) {}

  /// model.init(key, x)['params']: scale, then bias (Flax's order and keys).
  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    auto s = detail::scope_of(key, x);
    auto scale = param(s, scale_init, shape_t<1>{detail::last_dim(x)});
    auto bias = param(s, bias_init, shape_t<1>{detail::last_dim(x)});
    return norm_params<decltype(scale), decltype(bias)>{std::move(scale), std::move(bias)};
  }
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    auto const mean = tessera::mean<-1>(x, tessera::keepdims);
    auto const mean2 = tessera::mean<-1>(x * x, tessera::keepdims);
    auto const var = tessera::maximum(mean2 - mean * mean, 0.0f);
    return (x - mean) * (tessera::rsqrt(var + epsilon) * p.scale) + p.bias;
  }
};

/// flax.linen.RMSNorm(epsilon=1e-6, use_scale=True) over the last axis: x * (rsqrt(mean(x^2) + epsilon) * scale).
template <class ScaleInit = initializers::ones>
struct RMSNorm {
  float epsilon = 1e-6f;
  ScaleInit scale_init{};

  explicit RMSNorm(float epsilon_ = 1e-6f, ScaleInit s = {}) : epsilon(epsilon_), scale_init(std::move(s)) {}

  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    auto s = detail::scope_of(key, x);
    auto scale = param(s, scale_init, shape_t<1>{detail::last_dim(x)});
    return scale_params<decltype(scale)>{std::move(scale)};
  }
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    auto const var = tessera::mean<-1>(x * x, tessera::keepdims);
    return x * (tessera::rsqrt(var + epsilon) * p.scale);
  }
};

}  // namespace tessera::nn
