#pragma once
// The path of each leaf of a tree, as jax.tree_util.keystr(path, simple=True, separator="/")
// writes it: a checkpoint names each leaf's dataset by it ("layers/0/w"). A tuple's, pair's or
// std::array's children are named by their index, a plain struct's fields by their index too (C++
// cannot read field names), a Hana struct's members by their names and a hana::map's values by
// their keys (a hana::string's text, an integral constant's value, else the position).

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/tree/tree_util.hpp"

#if TESSERA_HAS_HANA
#include <boost/hana/core/is_a.hpp>
#include <boost/hana/core/to.hpp>
#include <boost/hana/string.hpp>
#endif

namespace tessera {

namespace detail {

/// The name of child K of node U, as keystr(simple=True) writes it.
template <class U, std::size_t K>
std::string child_name() {
#if TESSERA_HAS_HANA
  if constexpr (hana_node<U>::value) {
    if constexpr (requires { typename hana_node<U>::names; }) {
      using name = std::tuple_element_t<K, typename hana_node<U>::names>;
      return boost::hana::to<char const*>(name{});
    } else {
      using key = std::tuple_element_t<K, typename hana_node<U>::keys>;
      if constexpr (boost::hana::is_a<boost::hana::string_tag, key>) return boost::hana::to<char const*>(key{});
      else if constexpr (requires { key::value; } && std::is_integral_v<std::remove_cv_t<decltype(key::value)>>)
        return std::to_string(key::value);
      else return std::to_string(K);
    }
  } else {
    return std::to_string(K);
  }
#else
  return std::to_string(K);
#endif
}

template <class T>
void leaf_paths_into(std::string const& prefix, std::vector<std::string>& out) {
  using U = std::remove_cvref_t<T>;
  if constexpr (!tree_node<U>) {
    out.push_back(prefix);
  } else {
    using C = decltype(children_of(std::declval<U&>()));
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((leaf_paths_into<std::tuple_element_t<K, C>>(prefix.empty() ? child_name<U, K>()
                                                                     : prefix + "/" + child_name<U, K>(),
                                                    out)),
       ...);
    }(std::make_index_sequence<std::tuple_size_v<C>>{});
  }
}

}  // namespace detail

/// [keystr(p, simple=True, separator="/") for p, _ in jax.tree_util.tree_leaves_with_path(tree)]:
/// each leaf's path, in tree_leaves order ("0", "layers/1/w"; "" for a tree that is one leaf).
template <class T>
std::vector<std::string> tree_leaf_paths() {
  std::vector<std::string> out;
  detail::leaf_paths_into<T>("", out);
  return out;
}
/// The same, for a tree at hand.
template <class T>
std::vector<std::string> tree_leaf_paths(T const&) {
  return tree_leaf_paths<T>();
}

}  // namespace tessera
