#pragma once
// jax.tree_util for C++ parameter structures: the seeds keep parameters in pytrees
// (`params = {"w": ..., "b": ...}`, `jax.tree.map(lambda a, g: a - lr * g, p, grad)`), and
// grad (issue 17) takes and returns them. A tree node is a std::tuple, std::pair, std::array
// or a plain aggregate struct (`struct params { array<...> w; array<...> b; };`, up to 12
// fields, read by structured bindings); where Boost.Hana is installed, a Hana struct or a
// hana::map (`{"w": ..., "b": ...}` with its keys) is one too (tree/hana_tree.hpp, included at the
// end). Everything else is a leaf. The structure is known when the program compiles, so two trees
// that do not match fail to compile.

#include <array>
#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/array/device_put.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"

namespace tessera {

namespace detail {

/// Converts to anything: counts an aggregate's fields by the braces it accepts.
struct any_field {
  template <class U>
  operator U() const;  // never defined: only used in unevaluated contexts
};

template <class T, class... A>
concept brace_constructible = requires { T{std::declval<A>()...}; };

template <class T, std::size_t... I>
constexpr bool braces_take(std::index_sequence<I...>) {
  return brace_constructible<T, decltype((void)I, any_field{})...>;
}

/// The number of fields of aggregate T: the most initialisers its braces accept, searched from
/// 12 down (fewer may fail too, where a later field has no default constructor, as arrays do).
template <class T, std::size_t N = 12>
constexpr std::size_t field_count() {
  if constexpr (N == 0) return 0;
  else if constexpr (braces_take<T>(std::make_index_sequence<N>{})) return N;
  else return field_count<T, N - 1>();
}

/// The extension point for Boost.Hana nodes: tree/hana_tree.hpp specialises it for hana::map and
/// hana::Struct models (value, children(x), rebuild(children...), same_node<B>()) where Hana is
/// installed; for every other type, and everywhere without Hana, nothing is a Hana node.
template <class T>
struct hana_node {
  static constexpr bool value = false;
};

template <class T>
struct is_std_array : std::false_type {};
template <class T, std::size_t N>
struct is_std_array<std::array<T, N>> : std::true_type {};
template <class T>
struct is_tuple_like : std::false_type {};
template <class... T>
struct is_tuple_like<std::tuple<T...>> : std::true_type {};
template <class A, class B>
struct is_tuple_like<std::pair<A, B>> : std::true_type {};

/// A plain struct of public fields (no base class, no constructor): a tree node.
template <class T>
constexpr bool is_struct_node() {
  if constexpr (!std::is_class_v<T> || !std::is_aggregate_v<T> || is_std_array<T>::value || std::is_empty_v<T>) {
    return false;
  } else {
    constexpr std::size_t n = field_count<T>();
    return n >= 1 && n <= 12;
  }
}

/// The fields of a struct node as a tuple of references.
template <class T>
auto fields_of(T& x) {
  constexpr std::size_t n = field_count<std::remove_cv_t<T>>();
  // clang-format off
  if constexpr (n == 1) { auto& [a] = x; return std::tie(a); }
  else if constexpr (n == 2) { auto& [a, b] = x; return std::tie(a, b); }
  else if constexpr (n == 3) { auto& [a, b, c] = x; return std::tie(a, b, c); }
  else if constexpr (n == 4) { auto& [a, b, c, d] = x; return std::tie(a, b, c, d); }
  else if constexpr (n == 5) { auto& [a, b, c, d, e] = x; return std::tie(a, b, c, d, e); }
  else if constexpr (n == 6) { auto& [a, b, c, d, e, f] = x; return std::tie(a, b, c, d, e, f); }
  else if constexpr (n == 7) { auto& [a, b, c, d, e, f, g] = x; return std::tie(a, b, c, d, e, f, g); }
  else if constexpr (n == 8) { auto& [a, b, c, d, e, f, g, h] = x; return std::tie(a, b, c, d, e, f, g, h); }
  else if constexpr (n == 9) { auto& [a, b, c, d, e, f, g, h, i] = x; return std::tie(a, b, c, d, e, f, g, h, i); }
  else if constexpr (n == 10) { auto& [a, b, c, d, e, f, g, h, i, j] = x; return std::tie(a, b, c, d, e, f, g, h, i, j); }
  else if constexpr (n == 11) { auto& [a, b, c, d, e, f, g, h, i, j, k] = x; return std::tie(a, b, c, d, e, f, g, h, i, j, k); }
  else { auto& [a, b, c, d, e, f, g, h, i, j, k, l] = x; return std::tie(a, b, c, d, e, f, g, h, i, j, k, l); }
  // clang-format on
}

/// The children of a node as a tuple of references (tuple, pair, std::array, struct, or a Hana
/// struct or map: Hana first, since a BOOST_HANA_DEFINE_STRUCT struct is an aggregate too).
template <class T>
auto children_of(T& x) {
  using U = std::remove_cv_t<T>;
  if constexpr (hana_node<U>::value) {
    return hana_node<U>::children(x);
  } else if constexpr (is_tuple_like<U>::value) {
    return tessera::detail::apply([](auto&... c) { return std::tie(c...); }, x);
  } else if constexpr (is_std_array<U>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return std::tie(x[I]...); }(
               std::make_index_sequence<std::tuple_size_v<U>>{});
  } else {
    return fields_of(x);
  }
}

/// A mapped leaf as JAX returns it: an expression is evaluated into an array.
template <class R>
auto as_leaf(R&& r) {
  if constexpr (expression_node<R>) return eval(r);
  else return std::forward<R>(r);
}

}  // namespace detail

/// Whether T is a tree node (a pytree node in JAX: std::tuple, std::pair, std::array, a plain
/// struct, and with Boost.Hana a Hana struct or a hana::map); anything else (an array, a number,
/// an xtensor container) is a leaf.
template <class T>
concept tree_node = detail::hana_node<std::remove_cvref_t<T>>::value ||
                    detail::is_tuple_like<std::remove_cvref_t<T>>::value ||
                    detail::is_std_array<std::remove_cvref_t<T>>::value ||
                    (detail::is_struct_node<std::remove_cvref_t<T>>() && !sharded_expression<T>);

namespace detail {

/// Whether two nodes are both Hana nodes of the same kind that match (a hana::map's keys in order,
/// a Hana struct's type or class template and member names), or both not Hana nodes.
template <class A, class B>
constexpr bool same_node_kind() {
  if constexpr (hana_node<A>::value) return hana_node<A>::template same_node<B>();
  else return !hana_node<B>::value;
}

template <class T, class U>
constexpr bool same_structure() {
  using A = std::remove_cvref_t<T>;
  using B = std::remove_cvref_t<U>;
  if constexpr (tree_node<A> != tree_node<B>) {
    return false;
  } else if constexpr (!tree_node<A>) {
    return true;
  } else if constexpr (!same_node_kind<A, B>()) {
    return false;
  } else {
    using CA = decltype(children_of(std::declval<A&>()));
    using CB = decltype(children_of(std::declval<B&>()));
    if constexpr (std::tuple_size_v<CA> != std::tuple_size_v<CB>) return false;
    else if constexpr (is_tuple_like<A>::value != is_tuple_like<B>::value || is_std_array<A>::value != is_std_array<B>::value)
      return false;
    else
      return []<std::size_t... I>(std::index_sequence<I...>) {
        return (same_structure<std::tuple_element_t<I, CA>, std::tuple_element_t<I, CB>>() && ...);
      }(std::make_index_sequence<std::tuple_size_v<CA>>{});
  }
}

/// Rebuilds node T from mapped children: the same struct type (each field converted, so an
/// evaluated expression becomes the field's array type), a tuple or pair of the results, a
/// std::array of them, or a Hana node (tree/hana_tree.hpp: a map with the same keys, the same
/// Hana struct or its class template over the results' types).
template <class T, class Children>
auto rebuild(Children&& c) {
  using U = std::remove_cvref_t<T>;
  if constexpr (hana_node<U>::value) {
    return tessera::detail::apply([](auto&&... r) { return hana_node<U>::rebuild(std::forward<decltype(r)>(r)...); },
                      std::forward<Children>(c));
  } else if constexpr (is_tuple_like<U>::value) {
    if constexpr (requires { typename U::first_type; })
      return std::pair{std::get<0>(std::forward<Children>(c)), std::get<1>(std::forward<Children>(c))};
    else
      return tessera::detail::apply([](auto&&... r) { return std::tuple{std::forward<decltype(r)>(r)...}; }, std::forward<Children>(c));
  } else if constexpr (is_std_array<U>::value) {
    return tessera::detail::apply([](auto&&... r) { return std::array{std::forward<decltype(r)>(r)...}; }, std::forward<Children>(c));
  } else {
    return tessera::detail::apply([](auto&&... r) { return U{std::forward<decltype(r)>(r)...}; }, std::forward<Children>(c));
  }
}

template <class F, class T, class... R>
auto tree_map_impl(F& f, T& t, R&... rest) {
  if constexpr (!tree_node<T>) {
    return as_leaf(f(t, rest...));
  } else {
    auto ct = children_of(t);
    auto cr = std::make_tuple(children_of(rest)...);
    constexpr std::size_t n = std::tuple_size_v<decltype(ct)>;
    auto child = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      return tessera::detail::apply([&](auto&... rc) { return tree_map_impl(f, std::get<K>(ct), std::get<K>(rc)...); }, cr);
    };
    // Braces: in order. A tuple is returned as it is made, not moved into another (each move
    // is a reference count's update and a destructor, per leaf).
    auto mapped = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<decltype(child(std::integral_constant<std::size_t, I>{}))...>{
          child(std::integral_constant<std::size_t, I>{})...};
    }(std::make_index_sequence<n>{});
    using U = std::remove_cvref_t<T>;
    if constexpr (is_tuple_like<U>::value && !requires { typename U::first_type; }) return mapped;
    else return rebuild<T>(std::move(mapped));
  }
}

/// A list of types: the leaves' types, concatenated by `+` in folds.
template <class... X>
struct leaf_type_list {};
template <class... A, class... B>
constexpr leaf_type_list<A..., B...> operator+(leaf_type_list<A...>, leaf_type_list<B...>) {
  return {};
}

/// The types of T's leaves in order, as a leaf_type_list.
template <class T>
auto leaf_types() {
  using U = std::remove_cv_t<T>;
  if constexpr (!tree_node<U>) {
    return leaf_type_list<U>{};
  } else {
    return []<class... C>(std::type_identity<std::tuple<C...>>) {
      return (leaf_type_list<>{} + ... + leaf_types<std::remove_reference_t<C>>());
    }(std::type_identity<decltype(children_of(std::declval<T&>()))>{});
  }
}

template <class... X>
constexpr std::size_t leaf_list_size(leaf_type_list<X...>) {
  return sizeof...(X);
}

/// Stores the address of each leaf of t at out[Off], out[Off + 1], ... in order.
template <std::size_t Off, class T, std::size_t N>
void collect_leaves(T& t, std::array<void const*, N>& out) {
  if constexpr (!tree_node<std::remove_cv_t<T>>) {
    out[Off] = static_cast<void const*>(std::addressof(t));
  } else {
    auto c = children_of(t);
    using C = decltype(c);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      // Where each child's leaves start: the leaf counts of the children before it.
      constexpr std::array<std::size_t, sizeof...(I) + 1> start = [] {
        std::array<std::size_t, sizeof...(I) + 1> s{};
        std::size_t const counts[] = {
            leaf_list_size(decltype(leaf_types<std::remove_reference_t<std::tuple_element_t<I, C>>>()){})..., 0};
        for (std::size_t i = 0; i < sizeof...(I); ++i) s[i + 1] = s[i] + counts[i];
        return s;
      }();
      (collect_leaves<Off + start[I]>(std::get<I>(c), out), ...);
    }(std::make_index_sequence<std::tuple_size_v<C>>{});
  }
}

/// The leaves of t as a tuple of copies. Built from their addresses in one constructor call:
/// std::tuple_cat of the children's tuples instantiates work quadratic in the leaf count, and
/// g++'s -Wsequence-point (in -Wall) walks each of its nested calls (a tree of 130 leaves, the
/// 8-block transformer of bench/init_bench.cpp, took 15 s more to compile that way with -Wall).
template <class T>
auto leaves_impl(T& t) {
  using L = decltype(leaf_types<T>());
  constexpr std::size_t n = leaf_list_size(L{});
  std::array<void const*, n> at{};
  collect_leaves<0>(t, at);
  return [&]<class... X, std::size_t... I>(leaf_type_list<X...>, std::index_sequence<I...>) {
    return std::tuple<X...>{*static_cast<X const*>(at[I])...};
  }(L{}, std::make_index_sequence<n>{});
}

}  // namespace detail

/// jax.tree.map(f, tree, *rest): f applied to each leaf of `tree` and the leaves at the same
/// places in `rest` (trees of the same structure, or a compile error saying so). The result has
/// tree's structure; a leaf that f returns as an expression is evaluated into an array.
template <class F, class T, class... R>
auto tree_map(F&& f, T const& tree, R const&... rest) {
  static_assert((detail::same_structure<T, R>() && ...),
                "tessera::tree_map: the trees have different structures (node types, field counts, hana::map keys, "
                "Hana struct types or leaves where the first tree has nodes); map trees shaped alike, as jax.tree.map "
                "requires");
  if constexpr ((detail::same_structure<T, R>() && ...)) return detail::tree_map_impl(f, tree, rest...);
}

/// jax.tree.leaves(tree): the leaves in order (depth first, fields in declaration order, a Hana
/// struct's members in hana::accessors order, a hana::map's values in hana::keys order), as a
/// std::tuple of copies (arrays share their blocks, so a copy costs no data).
template <class T>
auto tree_leaves(T const& tree) {
  return detail::leaves_impl(tree);
}

/// The number of leaves (len(jax.tree.leaves(tree))), known when the program compiles.
template <class T>
constexpr std::size_t tree_leaf_count = detail::leaf_list_size(decltype(detail::leaf_types<T const>()){});

/// jax.device_put(tree, shardings): every host leaf of `tree` put with the sharding at the same
/// place in `shardings`, a tree of the same structure.
template <tree_node T, tree_node S>
auto device_put(T const& tree, S const& shardings) {
  return tree_map([](auto const& host, auto const& sharding) { return device_put(host, sharding); }, tree, shardings);
}

}  // namespace tessera

// Boost.Hana structs and maps as nodes, where <boost/hana.hpp> can be included (TESSERA_HAS_HANA).
#include "tessera/tree/hana_tree.hpp"
