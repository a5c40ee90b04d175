#pragma once
// Boost.Hana parameter trees for tree/tree_util.hpp: a Hana struct (BOOST_HANA_DEFINE_STRUCT or
// BOOST_HANA_ADAPT_STRUCT, a model of hana::Struct) and a hana::map are tree nodes, the C++ forms
// of the seeds' `params = {"w": ..., "b": ...}` that keep their keys. Hana is optional: where
// <boost/hana.hpp> cannot be included this header only sets TESSERA_HAS_HANA to 0, and trees are
// what they were (tuples, pairs, std::arrays, plain structs). Whether Hana is there is the same for
// every translation unit of a build (it is the include path, not a macro the user sets), so no two
// translation units disagree about what a node is.
//
// tree_util.hpp includes this header at its end: the Hana parts specialise its extension point
// detail::hana_node, which must be declared first, and every user of trees (tree_map, device_put
// of a tree, grad) then sees Hana nodes without including anything more. Only the Hana headers used
// here are included (map, pair, accessors, keys, at_key, unpack: about 0.1 s of the umbrella's 2 s).

#include "tessera/core/tuple_traits.hpp"
#include "tessera/tree/tree_util.hpp"

#if __has_include(<boost/hana.hpp>)
/// 1 where Boost.Hana was found and its structs and maps are tree nodes, else 0 (read it, never set it).
#define TESSERA_HAS_HANA 1
#else
#define TESSERA_HAS_HANA 0
#endif

#if TESSERA_HAS_HANA

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/accessors.hpp>
#include <boost/hana/at_key.hpp>
#include <boost/hana/concept/struct.hpp>
#include <boost/hana/core/tag_of.hpp>
#include <boost/hana/first.hpp>
#include <boost/hana/keys.hpp>
#include <boost/hana/map.hpp>
#include <boost/hana/pair.hpp>
#include <boost/hana/second.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/unpack.hpp>

namespace tessera::detail {

namespace hana = boost::hana;

/// The elements of a Hana sequence (hana::keys) as a std::tuple of their types: a type list that
/// std::tuple_element reads. Only called in decltype.
struct hana_types_of {
  template <class... X>
  std::type_identity<std::tuple<std::remove_cvref_t<X>...>> operator()(X const&...) const {
    return {};
  }
};
template <class Seq>
using hana_types = typename decltype(hana::unpack(std::declval<Seq>(), hana_types_of{}))::type;

/// The names (hana::first) of hana::accessors' pairs as a std::tuple of their types.
struct hana_names_of {
  template <class... P>
  std::type_identity<std::tuple<std::remove_cvref_t<decltype(hana::first(std::declval<P const&>()))>...>> operator()(
      P const&...) const {
    return {};
  }
};
/// The value types of map M at keys K..., as a std::tuple.
template <class M, class Keys>
struct hana_values_at;
template <class M, class... K>
struct hana_values_at<M, std::tuple<K...>> {
  using type = std::tuple<std::remove_cvref_t<decltype(hana::at_key(std::declval<M const&>(), std::declval<K>()))>...>;
};
/// The types of the members the accessors (hana::second of each pair) of S reach.
template <class S>
struct hana_members_of {
  template <class... P>
  std::type_identity<std::tuple<std::remove_cvref_t<decltype(hana::second(std::declval<P const&>())(std::declval<S&>()))>...>>
  operator()(P const&...) const {
    return {};
  }
};

/// A hana::map (hana::map_tag), whatever its keys and values.
template <class T>
concept hana_map = std::is_same_v<hana::tag_of_t<T>, hana::map_tag>;
/// A model of hana::Struct: BOOST_HANA_DEFINE_STRUCT, BOOST_HANA_ADAPT_STRUCT or accessors_impl.
template <class T>
concept hana_struct = hana::Struct<T>::value && !hana_map<T>;

/// S<F...> as a class template whose arguments can be replaced (tracers, device arrays).
template <class T>
struct hana_class_template : std::false_type {};
template <template <class...> class S, class... F>
struct hana_class_template<S<F...>> : std::true_type {
  template <class... G>
  using with = S<G...>;
};
/// Whether A and B are instances of one class template.
template <class A, class B>
struct same_class_template : std::false_type {};
template <template <class...> class S, class... F, class... G>
struct same_class_template<S<F...>, S<G...>> : std::true_type {};

/// False, but only once instantiated: a static_assert that fires in the branch taken.
template <class>
inline constexpr bool hana_always_false = false;

/// A hana::map node: children are the values in the order of hana::keys(map) (with Boost 1.74,
/// the order the pairs were written in make_map); the rebuilt map has the same keys, in that order.
template <hana_map M>
struct hana_node<M> {
  static constexpr bool value = true;
  /// The key types, in hana::keys order (keys are compile-time values: strings, types, integers).
  using keys = hana_types<decltype(hana::keys(std::declval<M const&>()))>;
  /// The value types, in the same order.
  using values = typename hana_values_at<M, keys>::type;

  /// The values (references into m), in hana::keys order.
  template <class X>
  static auto children(X& m) {
    return hana::unpack(hana::keys(m), [&](auto const&... k) { return std::tie(hana::at_key(m, k)...); });
  }

  /// A map with M's keys and these values, as f returned them (arrays where M had host arrays,
  /// tracers in grad, numbers of another type), except that an array that converts to M's array
  /// there (the same element type and rank, another spelling of the same layout: evaluating
  /// `p - lr * g` on a P() array gives P(None)) takes M's type, so that an SGD step gives back the
  /// params' type, as a struct's fields do.
  template <class... C>
  static auto rebuild(C&&... c) {
    static_assert(sizeof...(C) == std::tuple_size_v<keys>);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      static_assert((std::is_default_constructible_v<std::tuple_element_t<I, keys>> && ...),
                    "tessera: a hana::map in a tree must have keys that are compile-time values (BOOST_HANA_STRING, "
                    "hana::type_c, hana::int_c), which tessera makes again for the mapped map");
      return hana::make_map(hana::make_pair(std::tuple_element_t<I, keys>{},
                                            value_as<std::tuple_element_t<I, values>>(std::forward<C>(c)))...);
    }(std::index_sequence_for<C...>{});
  }

  /// c as V where it is an array converting to array type V, else as it is (a copy or a move).
  template <class V, class C>
  static auto value_as(C&& c) {
    using R = std::remove_cvref_t<C>;
    if constexpr (array_type<R> && array_type<V> && !std::is_same_v<R, V> && std::is_convertible_v<C&&, V>)
      return V(std::forward<C>(c));
    else
      return R(std::forward<C>(c));
  }

  /// Another map with the same keys in the same order (the values are compared as subtrees).
  template <class B>
  static constexpr bool same_node() {
    if constexpr (!hana_map<B>) return false;
    else return std::is_same_v<keys, typename hana_node<B>::keys>;
  }
};

/// A Hana struct node: children are its members in the order of hana::accessors (declaration order
/// for BOOST_HANA_DEFINE_STRUCT, the macro's order for BOOST_HANA_ADAPT_STRUCT).
template <hana_struct S>
struct hana_node<S> {
  static constexpr bool value = true;
  /// The member names (hana::strings), in hana::accessors order.
  using names = typename decltype(hana::unpack(hana::accessors<S>(), hana_names_of{}))::type;
  /// The member types, in the same order.
  using members = typename decltype(hana::unpack(hana::accessors<S>(), hana_members_of<S>{}))::type;

  /// The members (references into s), in hana::accessors order.
  template <class X>
  static auto children(X& s) {
    return hana::unpack(hana::accessors<S>(), [&](auto const&... p) { return std::tie(hana::second(p)(s)...); });
  }

  /// The same struct type (each member converted, as plain structs are rebuilt), or, where the
  /// children have other types (tracers in grad, arrays from device_put of host arrays), the same
  /// class template over the children's types (`template <class W, class B> struct params`).
  template <class... C>
  static auto rebuild(C&&... c) {
    static_assert(sizeof...(C) == std::tuple_size_v<members>);
    constexpr bool keeps_type = []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::is_convertible_v<C&&, std::tuple_element_t<I, members>> && ...);
    }(std::index_sequence_for<C...>{});
    if constexpr (keeps_type) {
      return make(std::forward<C>(c)...);
    } else if constexpr (hana_class_template<S>::value) {
      using V = typename hana_class_template<S>::template with<std::remove_cvref_t<C>...>;
      if constexpr (std::is_same_v<V, S>) {
        static_assert(hana_always_false<V>, "tessera: a Boost.Hana struct in a tree cannot hold the mapped values");
      } else {
        constexpr bool over_members = [] {
          if constexpr (!hana_struct<V>) return false;
          else return std::is_same_v<typename hana_node<V>::members, std::tuple<std::remove_cvref_t<C>...>>;
        }();
        static_assert(over_members,
                      "tessera: a Boost.Hana struct that holds other types after tree_map, device_put or grad (arrays "
                      "for host arrays, tracers) must be a class template over its member types, in member order "
                      "(template <class W, class B> struct params { BOOST_HANA_DEFINE_STRUCT(params, (W, w), (B, b)); "
                      "};)");
        if constexpr (over_members) return hana_node<V>::make(std::forward<C>(c)...);
      }
    } else {
      static_assert(hana_always_false<S>,
                    "tessera: a Boost.Hana struct that holds other types after tree_map, device_put or grad (arrays "
                    "for host arrays, tracers) must be a class template over its member types "
                    "(template <class W, class B> struct params { BOOST_HANA_DEFINE_STRUCT(params, (W, w), (B, b)); };)");
    }
  }

  /// Another Hana struct of the same type, or of the same class template with the same member names
  /// (a struct of host arrays and the struct of their shardings, for device_put).
  template <class B>
  static constexpr bool same_node() {
    if constexpr (!hana_struct<B>) return false;
    else if constexpr (std::is_same_v<S, B>) return true;
    else return same_class_template<S, B>::value && std::is_same_v<names, typename hana_node<B>::names>;
  }

  /// S from values convertible to its members, in accessors order. Preferred: default-construct
  /// and assign through the accessors (right whatever order the members were adapted in). Else,
  /// for an aggregate whose only fields are these members (arrays have no default constructor):
  /// braces, which fill the fields in declaration order, then a check that the accessors' order is
  /// that order (BOOST_HANA_ADAPT_STRUCT may name members in any order).
  template <class... C>
  static auto make(C&&... c) {
    constexpr bool assignable = std::is_default_constructible_v<S> && []<std::size_t... I>(std::index_sequence<I...>) {
      return (std::is_move_assignable_v<std::tuple_element_t<I, members>> && ...);
    }(std::index_sequence_for<C...>{});
    constexpr bool braces = std::is_aggregate_v<S> && brace_constructible<S, C&&...> &&
                            !brace_constructible<S, C&&..., any_field>;  // no field beyond the members
    if constexpr (assignable) {
      S s{};
      auto fields = children(s);
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(fields) = std::tuple_element_t<I, members>(std::forward<C>(c))), ...);
      }(std::index_sequence_for<C...>{});
      return s;
    } else if constexpr (braces) {
      S s{std::forward<C>(c)...};
      check_declaration_order(s);
      return s;
    } else {
      static_assert(hana_always_false<S>,
                    "tessera: a Boost.Hana struct in a tree must be default-constructible, or an aggregate whose fields "
                    "are exactly its Hana members, so that tree_map, device_put and grad can build it again");
    }
  }

  /// Members declared later have higher addresses ([class.mem]; an aggregate's fields are all
  /// public): the accessors must reach them in increasing address order, or braces filled the wrong ones.
  static void check_declaration_order(S const& s) {
    void const* previous = nullptr;
    bool in_order = true;
    tessera::detail::apply(
        [&](auto const&... m) {
          ((in_order = in_order && (previous == nullptr || !std::less<void const*>{}(std::addressof(m), previous)),
            previous = std::addressof(m)),
           ...);
        },
        children(s));
    if (!in_order)
      throw std::logic_error(
          "tessera: a Boost.Hana struct in a tree lists its members in another order than it declares them "
          "(BOOST_HANA_ADAPT_STRUCT), and it has no default constructor, so tree_map, device_put and grad fill its "
          "fields with braces in declaration order; name the members in declaration order");
  }
};

}  // namespace tessera::detail

#endif  // TESSERA_HAS_HANA
