#pragma once
// flax.linen.Sequential: layers applied in order; a plain function in the list (nn.relu) is
// applied as it is and has no parameters.

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/autodiff.hpp"
#include "tessera/nn/scope.hpp"

namespace tessera::nn {

namespace detail {
struct init_probe {
  int init;
};
template <class L>
struct init_detect : L, init_probe {};
/// Whether L has a member named init (a layer): then init_detect<L>::init is ambiguous.
template <class L>
concept layer_like = std::is_class_v<L> && !requires { &init_detect<L>::init; };
}  // namespace detail

/// flax.linen.Sequential([layers...]): `Sequential seq{nn::Dense(8), relu_fn, nn::Dense(3)}`.
/// Its parameters are a tuple of the parametrized layers' parameters, in order; layer i's keys
/// come from the path 'layers_i' (i counting functions too), as in Flax.
template <class... Layers>
struct Sequential {
  std::tuple<Layers...> layers;

  explicit Sequential(Layers... ls) : layers(std::move(ls)...) {}

  template <class Key, class X>
  auto init(Key const& key, X const& x) const {
    auto s = detail::scope_of(key, x);
    return init_from<0>(s, x);
  }
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    return apply_from<0, 0>(p, x);
  }

 private:
  template <class L>
  static constexpr bool is_function = !detail::layer_like<L>;

  template <std::size_t I, class S, class X>
  auto init_from(S const& s, X const& x) const {
    if constexpr (I == sizeof...(Layers)) {
      return std::tuple<>{};
    } else {
      auto const& l = std::get<I>(layers);
      using L = std::tuple_element_t<I, std::tuple<Layers...>>;
      if constexpr (is_function<L>) {
        tessera::array y = l(x);
        return init_from<I + 1>(s, y);
      } else {
        auto p = l.init(s.push("layers_" + std::to_string(I)), x);
        tessera::array y = l.apply(p, x);
        return std::tuple_cat(std::tuple{std::move(p)}, init_from<I + 1>(s, y));
      }
    }
  }
  template <std::size_t I, std::size_t K, class Params, class X>
  auto apply_from(Params const& p, X const& x) const {
    if constexpr (I == sizeof...(Layers)) {
      return x;
    } else {
      auto const& l = std::get<I>(layers);
      using L = std::tuple_element_t<I, std::tuple<Layers...>>;
      if constexpr (is_function<L>) return apply_from<I + 1, K>(p, l(x));
      else return apply_from<I + 1, K + 1>(p, l.apply(std::get<K>(p), x));
    }
  }
};

}  // namespace tessera::nn
