#pragma once
// flax.linen.Dense and DenseGeneral: a kernel contracted with the input's last dimension(s),
// plus a bias. Their parameters are trees (structs whose fields carry Flax's names, 'kernel' and
// 'bias'), created in place in the shardings their initializers' partitioning gives.

#include <array>
#include <cstddef>
#include <type_traits>

#include "tessera/autodiff.hpp"
#include "tessera/nn/initializers.hpp"
#include "tessera/nn/partitioning.hpp"
#include "tessera/nn/scope.hpp"

namespace tessera::nn {

/// `use_bias=False`: passed as a layer's bias_init, the layer has no bias parameter.
struct no_bias_t {};
/// nn.Dense(..., use_bias=False) is `nn::Dense(features, kernel_init, nn::no_bias)`.
inline constexpr no_bias_t no_bias{};

/// Dense's and DenseGeneral's parameters, Flax's {'kernel': ..., 'bias': ...}.
template <class K, class B>
struct dense_params {
  K kernel;
  B bias;
};
/// The parameters of a layer made with nn::no_bias: {'kernel': ...}.
template <class K>
struct kernel_params {
  K kernel;
};

namespace detail {
/// The rank of an array, expression or grad tracer.
template <class X>
inline constexpr std::size_t rank_v = tessera::detail::einsum_rank_v<X>;

/// DenseGeneral's contraction as einsum subscripts: input dims a.., the last NIn contracted with
/// the kernel's first NIn, the kernel's NOut feature dims appended ("abc,cde->abde").
template <std::size_t R, std::size_t NIn, std::size_t NOut>
struct dense_general_subscripts {
  static_assert(NIn >= 1 && NIn <= R && R + NOut <= 26, "tessera::nn::DenseGeneral: too many dimensions");
  static constexpr std::size_t length = R + 1 + (NIn + NOut) + 2 + (R - NIn + NOut) + 1;
  struct text_t {
    char s[length];
  };
  static constexpr text_t text = [] {
    text_t t{};
    std::size_t p = 0;
    for (std::size_t i = 0; i < R; ++i) t.s[p++] = static_cast<char>('a' + i);
    t.s[p++] = ',';
    for (std::size_t i = R - NIn; i < R; ++i) t.s[p++] = static_cast<char>('a' + i);
    for (std::size_t j = 0; j < NOut; ++j) t.s[p++] = static_cast<char>('a' + R + j);
    t.s[p++] = '-';
    t.s[p++] = '>';
    for (std::size_t i = 0; i < R - NIn; ++i) t.s[p++] = static_cast<char>('a' + i);
    for (std::size_t j = 0; j < NOut; ++j) t.s[p++] = static_cast<char>('a' + R + j);
    t.s[p] = '\0';
    return t;
  }();
  static constexpr einsum_subscripts<length> value{text.s};
};

template <class X>
auto input_shape(X const& x) {
  return x.shape();
}
}  // namespace detail

/// flax.linen.Dense(features, use_bias=True, kernel_init=lecun_normal(), bias_init=zeros): y = x @ kernel + bias,
/// kernel (in, features) contracted with x's last dimension. `nn::Dense d{1024, nn::with_partitioning(
/// nn::initializers::lecun_normal(), nn::names<"data", "model">{})};` is seed 003's layer.
template <class KernelInit = initializers::lecun_normal, class BiasInit = initializers::zeros>
struct Dense {
  static constexpr bool use_bias = !std::is_same_v<BiasInit, no_bias_t>;
  std::size_t features;
  KernelInit kernel_init{};
  BiasInit bias_init{};

  explicit Dense(std::size_t features_, KernelInit k = {}, BiasInit b = {})
      : features(features_), kernel_init(std::move(k)), bias_init(std::move(b)) {}

  /// model.init(key, x)['params']: kernel then bias, with Flax's keys (`key` a random key, or a
  /// scope when the layer is part of a larger module).
  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    auto s = detail::scope_of(key, x);
    constexpr std::size_t R = detail::rank_v<X>;
    static_assert(R >= 1, "tessera::nn::Dense: the input needs at least one dimension");
    std::size_t const in = detail::input_shape(x)[R - 1];
    auto kernel = param(s, kernel_init, shape_t<2>{in, features});
    if constexpr (use_bias) {
      auto bias = param(s, bias_init, shape_t<1>{features});
      return dense_params<decltype(kernel), decltype(bias)>{std::move(kernel), std::move(bias)};
    } else {
      return kernel_params<decltype(kernel)>{std::move(kernel)};
    }
  }
  /// model.apply({'params': p}, x): x @ kernel (+ bias), on arrays, expressions or grad's tracers.
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    using sub = detail::dense_general_subscripts<detail::rank_v<X>, 1, 1>;
    if constexpr (use_bias) return tessera::einsum<sub::value>(x, p.kernel) + p.bias;
    else return tessera::einsum<sub::value>(x, p.kernel);
  }
};

template <class K>
Dense(std::size_t, K) -> Dense<K, initializers::zeros>;
template <class K, class B>
Dense(std::size_t, K, B) -> Dense<K, B>;

/// flax.linen.DenseGeneral(features, axis) for the last NIn axes (axis=-1, or (-2, -1) with
/// NIn = 2) and NOut feature dimensions: kernel (in dims..., features...), bias (features...),
/// initialized flattened to (prod(in), prod(features)) as Flax does, so the values are Flax's.
template <std::size_t NIn, std::size_t NOut, class KernelInit = initializers::lecun_normal,
          class BiasInit = initializers::zeros>
struct DenseGeneral {
  static constexpr bool use_bias = !std::is_same_v<BiasInit, no_bias_t>;
  std::array<std::size_t, NOut> features;
  KernelInit kernel_init{};
  BiasInit bias_init{};

  explicit DenseGeneral(std::array<std::size_t, NOut> features_, KernelInit k = {}, BiasInit b = {})
      : features(features_), kernel_init(std::move(k)), bias_init(std::move(b)) {}

  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    auto s = detail::scope_of(key, x);
    constexpr std::size_t R = std::tuple_size_v<std::remove_cvref_t<decltype(x.shape())>>;
    static_assert(R >= NIn, "tessera::nn::DenseGeneral: the input has fewer dimensions than the contracted axes");
    auto const xs = detail::input_shape(x);
    shape_t<NIn + NOut> kshape{};
    std::size_t in = 1, out = 1;
    for (std::size_t i = 0; i < NIn; ++i) in *= (kshape[i] = xs[R - NIn + i]);
    for (std::size_t j = 0; j < NOut; ++j) out *= (kshape[NIn + j] = features[j]);
    auto kernel = param(s, kernel_init, kshape, shape_t<2>{in, out});
    if constexpr (use_bias) {
      auto bias = param(s, bias_init, shape_t<NOut>(features), shape_t<1>{out});
      return dense_params<decltype(kernel), decltype(bias)>{std::move(kernel), std::move(bias)};
    } else {
      return kernel_params<decltype(kernel)>{std::move(kernel)};
    }
  }
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    using sub = detail::dense_general_subscripts<detail::rank_v<X>, NIn, NOut>;
    if constexpr (use_bias) return tessera::einsum<sub::value>(x, p.kernel) + p.bias;
    else return tessera::einsum<sub::value>(x, p.kernel);
  }
};

}  // namespace tessera::nn
