#pragma once
// flax.linen.MultiHeadDotProductAttention for self-attention on [batch, length, features]:
// query, key and value DenseGeneral projections to (heads, head_dim), scaled dot products,
// an optional causal mask (Flax's make_causal_mask), softmax over the keys, and the 'out'
// DenseGeneral over (heads, head_dim). With the heads sharded (logical name 'heads'), each
// device computes its own heads and the output projection's partial sums are summed once.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "tessera/autodiff.hpp"
#include "tessera/nn/dense.hpp"
#include "tessera/nn/scope.hpp"

namespace tessera::nn {

/// MultiHeadDotProductAttention's parameters, Flax's {'query', 'key', 'value', 'out'}.
template <class Q, class K, class V, class O>
struct attention_params {
  Q query;
  K key;
  V value;
  O out;
};

/// flax.linen.MultiHeadDotProductAttention(num_heads, kernel_init, out_kernel_init, bias_init,
/// out_bias_init, qkv_features=None, out_features=None) for self-attention, `causal` adding
/// mask=make_causal_mask(x). QKVInit initializes the query, key and value kernels (in, heads,
/// head_dim), OutInit the output kernel (heads, head_dim, out), QKVBiasInit their biases (heads,
/// head_dim) and OutBiasInit the output bias (out), so that each can carry its own partitioning
/// names; nn::no_bias as both bias initializers is Flax's use_bias=False.
template <class QKVInit = initializers::lecun_normal, class OutInit = initializers::lecun_normal,
          class QKVBiasInit = initializers::zeros, class OutBiasInit = initializers::zeros>
struct MultiHeadDotProductAttention {
  std::size_t num_heads;
  std::size_t qkv_features = 0;  // 0: the input's features
  std::size_t out_features = 0;  // 0: the input's features
  bool causal = false;
  QKVInit qkv_init{};
  OutInit out_init{};
  QKVBiasInit qkv_bias_init{};
  OutBiasInit out_bias_init{};

  explicit MultiHeadDotProductAttention(std::size_t heads, bool causal_ = false, QKVInit q = {}, OutInit o = {},
                                        QKVBiasInit qb = {}, OutBiasInit ob = {}, std::size_t qkv_features_ = 0,
                                        std::size_t out_features_ = 0)
      : num_heads(heads), qkv_features(qkv_features_), out_features(out_features_), causal(causal_),
        qkv_init(std::move(q)), out_init(std::move(o)), qkv_bias_init(std::move(qb)), out_bias_init(std::move(ob)) {}

  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    static_assert(detail::rank_v<X> == 3, "tessera::nn::MultiHeadDotProductAttention: the input is [batch, length, features]");
    auto s = detail::scope_of(key, x);
    auto const [qkv, out, head_dim] = sizes(x.shape()[2]);
    DenseGeneral<1, 2, QKVInit, QKVBiasInit> const proj{{num_heads, head_dim}, qkv_init, qkv_bias_init};
    auto q = proj.init(s.push("query"), x);
    auto k = proj.init(s.push("key"), x);
    auto v = proj.init(s.push("value"), x);
    // The output projection's example input: [batch, length, heads, head_dim], only its shape is read.
    struct heads_shape {
      shape_t<4> sh;
      shape_t<4> const& shape() const { return sh; }
    } const o_in{{x.shape()[0], x.shape()[1], num_heads, head_dim}};
    (void)qkv;
    DenseGeneral<2, 1, OutInit, OutBiasInit> const o_proj{{out}, out_init, out_bias_init};
    auto o = o_proj.init(s.push("out"), o_in);
    return attention_params<decltype(q), decltype(k), decltype(v), decltype(o)>{std::move(q), std::move(k),
                                                                                std::move(v), std::move(o)};
  }

  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    auto const head_dim = p.query.kernel.shape()[2];
    DenseGeneral<1, 2, QKVInit, QKVBiasInit> const proj{{num_heads, head_dim}, qkv_init, qkv_bias_init};
    DenseGeneral<2, 1, OutInit, OutBiasInit> const o_proj{{p.out.kernel.shape()[2]}, out_init, out_bias_init};
    // Flax scales the query, not the scores: query / sqrt(depth).
    auto const q = proj.apply(p.query, x) / std::sqrt(static_cast<float>(head_dim));
    auto const k = proj.apply(p.key, x);
    auto const v = proj.apply(p.value, x);
    auto const scores = tessera::einsum<"bqhd,bkhd->bhqk">(q, k);
    // make_causal_mask: key position <= query position; without it every position is kept.
    std::size_t const len = x.shape()[1];
    auto const& mesh = detail::mesh_of_input(tessera::detail::ad::primal_of(x));
    auto const shift = static_cast<std::int32_t>(causal ? 0 : len);
    auto const mask = tessera::iota<std::int32_t, 0>({len, len}, mesh) + shift >=
                      tessera::iota<std::int32_t, 1>({len, len}, mesh);
    auto const masked = tessera::where(mask, scores, std::numeric_limits<float>::lowest());
    auto const o = tessera::einsum<"bhqk,bkhd->bqhd">(tessera::softmax<-1>(masked), v);
    return o_proj.apply(p.out, o);
  }

 private:
  struct sizes_t {
    std::size_t qkv, out, head_dim;
  };
  sizes_t sizes(std::size_t in) const {
    std::size_t const qkv = qkv_features ? qkv_features : in;
    if (num_heads == 0 || qkv % num_heads != 0)
      throw std::invalid_argument("tessera::nn::MultiHeadDotProductAttention: qkv_features " + std::to_string(qkv) +
                                  " is not a multiple of num_heads " + std::to_string(num_heads));
    return {qkv, out_features ? out_features : in, qkv / num_heads};
  }
};

}  // namespace tessera::nn
