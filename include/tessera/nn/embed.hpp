#pragma once
// flax.linen.Embed: a table of num_embeddings rows of `features`, looked up by integer ids
// (jnp.take), and `attend`, the tied output head query @ table.T.

#include <cstddef>

#include "tessera/autodiff.hpp"
#include "tessera/nn/dense.hpp"
#include "tessera/nn/initializers.hpp"
#include "tessera/nn/scope.hpp"

namespace tessera::nn {

/// Embed's parameters, Flax's {'embedding': ...}.
template <class E>
struct embed_params {
  E embedding;
};

/// Flax's default_embed_init: variance_scaling(1.0, 'fan_in', 'normal', out_axis=0), so the
/// standard deviation is 1/sqrt(features).
struct default_embed_init : initializers::variance_scaling {
  default_embed_init() : variance_scaling(1.0, "fan_in", "normal", -2, 0) {}
};

namespace detail {
/// attend's contraction: the query's last dimension with the table's features ("abc,zc->abz").
template <std::size_t R>
struct attend_subscripts {
  static constexpr std::size_t length = R + 1 + 2 + 2 + R + 1;
  struct text_t {
    char s[length];
  };
  static constexpr text_t text = [] {
    text_t t{};
    std::size_t p = 0;
    for (std::size_t i = 0; i < R; ++i) t.s[p++] = static_cast<char>('a' + i);
    t.s[p++] = ',';
    t.s[p++] = 'z';
    t.s[p++] = static_cast<char>('a' + R - 1);
    t.s[p++] = '-';
    t.s[p++] = '>';
    for (std::size_t i = 0; i + 1 < R; ++i) t.s[p++] = static_cast<char>('a' + i);
    t.s[p++] = 'z';
    t.s[p] = '\0';
    return t;
  }();
  static constexpr einsum_subscripts<length> value{text.s};
};
}  // namespace detail

/// flax.linen.Embed(num_embeddings, features, embedding_init=default_embed_init): apply(p, ids) is
/// jnp.take(embedding, ids, axis=0); a table sharded over its rows (a vocabulary-parallel
/// embedding) is looked up in place, each device its rows, and summed once.
template <class EmbedInit = default_embed_init>
struct Embed {
  std::size_t num_embeddings;
  std::size_t features;
  EmbedInit embedding_init{};

  Embed(std::size_t num_embeddings_, std::size_t features_, EmbedInit init = {})
      : num_embeddings(num_embeddings_), features(features_), embedding_init(std::move(init)) {}

  /// model.init(key, ids)['params']: the table, with Flax's key.
  template <class Key, class Ids>
  auto init(Key const& key, Ids const& ids) const {
    auto s = detail::scope_of(key, ids);
    auto e = param(s, embedding_init, shape_t<2>{num_embeddings, features});
    return embed_params<decltype(e)>{std::move(e)};
  }
  /// model.apply(p, ids): the rows of the table (ids of an integer type).
  template <class Params, class Ids>
  auto apply(Params const& p, Ids const& ids) const {
    return tessera::take(p.embedding, ids);
  }
  /// model.apply(p, query, method='attend'): query @ embedding.T, the logits of a tied head.
  template <class Params, class Q>
  auto attend(Params const& p, Q const& query) const {
    return tessera::einsum<detail::attend_subscripts<detail::rank_v<Q>>::value>(query, p.embedding);
  }
};

}  // namespace tessera::nn
