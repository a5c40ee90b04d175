#pragma once
// Parameters that carry their partitioning (flax.linen's nn.with_partitioning and logical axis
// rules): each parameter dimension is named, by a mesh axis or by a logical name ('embed',
// 'mlp', 'heads') that a table of rules maps to mesh axes, and the parameter is created directly
// in the sharding the names resolve to. The rules are a type, so the resolution happens when
// the program compiles and the parameter's sharding is a P<...> like any other: a model is
// switched between data, tensor and FSDP parallelism by passing another rules type.

#include <array>
#include <cstddef>
#include <string>
#include <stdexcept>
#include <string_view>
#include <tuple>
#include <vector>
#include <type_traits>
#include <utility>

#include "tessera/core/named_sharding.hpp"
#include "tessera/core/partition_spec.hpp"

namespace tessera::nn {

/// The names of a parameter's dimensions (the tuple in `nn.with_partitioning(init, ('embed', 'mlp'))`):
/// `names<"embed", "mlp">`, `none` for an unnamed (replicated) dimension, `axes<"x", "y">` for
/// several mesh axes on one dimension. A name is a logical name of the rules in use, or a mesh axis.
template <dim_spec... Names>
struct names {
  static constexpr std::size_t size = sizeof...(Names);
  static constexpr std::array<dim_spec, size> dims{Names...};
};

/// One logical axis rule, `('batch', 'data')` in Flax's table: `rule<"batch", "data">`,
/// `rule<"embed", none>` (replicated), `rule<"batch", axes<"data", "model">>`.
template <axis_name Logical, dim_spec MeshAxes>
struct rule {
  static constexpr axis_name logical = Logical;
  static constexpr dim_spec mesh_axes = MeshAxes;
};

namespace detail {
struct rule_entry {
  axis_name logical{};
  dim_spec mesh_axes{};
};
}  // namespace detail

/// nn.logical_axis_rules(rules) as a type: the ordered rules, first match first, later rules for
/// the same name being fallbacks where the first one's mesh axes are taken (Flax's priority).
template <class... Rules>
struct logical_axis_rules {
  static constexpr std::size_t size = sizeof...(Rules);
  static constexpr std::array<detail::rule_entry, size> table{detail::rule_entry{Rules::logical, Rules::mesh_axes}...};
};

/// No rules: every name is a mesh axis (seed 003's `('data', 'model')`).
using no_rules = logical_axis_rules<>;

template <class T>
struct is_logical_axis_rules : std::false_type {};
template <class... R>
struct is_logical_axis_rules<logical_axis_rules<R...>> : std::true_type {};

namespace detail {

enum class resolve_error { ok, unknown_name, same_mesh_axis };

/// The outcome of resolving K names: the spec, or the error with the values it names.
template <std::size_t K>
struct resolution {
  std::array<dim_spec, K> spec{};
  resolve_error error = resolve_error::ok;
  axis_name name{};        // the unknown name, or the first of the two names sharing a mesh axis
  axis_name other{};       // the second name sharing it
  axis_name mesh_axis{};   // the shared mesh axis
};

template <class Table>
constexpr bool has_rule(Table const& table, axis_name const& n) {
  for (auto const& r : table)
    if (r.logical == n) return true;
  return false;
}

/// Flax's _logical_to_mesh_axes, with two differences: a name no rule mentions is a mesh axis
/// (or an error when the mesh has no such axis, where Flax replicates silently), and a name whose
/// every rule clashes with another dimension's mesh axes is an error (Flax replicates silently).
template <std::size_t K, class Table, class HasAxis>
constexpr resolution<K> resolve(std::array<dim_spec, K> const& names, Table const& table, HasAxis has_axis) {
  resolution<K> out;
  std::array<bool, K> assigned{};
  std::array<axis_name, K> label{};  // what each dimension was called, for messages
  for (std::size_t i = 0; i < K; ++i) {
    dim_spec const& d = names[i];
    label[i] = d.count() > 0 ? d.axis(0) : axis_name{};
    if (d.count() != 1 || !has_rule(table, d.axis(0))) {
      for (std::size_t a = 0; a < d.count(); ++a)
        if (!has_axis(d.axis(a))) {
          out.error = resolve_error::unknown_name;
          out.name = d.axis(a);
          return out;
        }
      out.spec[i] = d;  // none, or mesh axes
      assigned[i] = true;
    }
  }
  auto owner_of = [&](axis_name const& ax) -> std::size_t {
    for (std::size_t j = 0; j < K; ++j)
      if (assigned[j] && out.spec[j].uses(ax)) return j;
    return K;
  };
  auto clash = [&](std::size_t i, std::size_t j, axis_name const& ax) {
    out.error = resolve_error::same_mesh_axis;
    out.name = label[j];
    out.other = label[i];
    out.mesh_axis = ax;
  };
  // Mesh axes named directly: each at most once.
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t a = 0; assigned[i] && a < out.spec[i].count(); ++a)
      for (std::size_t j = 0; j < i; ++j)
        if (assigned[j] && out.spec[j].uses(out.spec[i].axis(a))) {
          clash(i, j, out.spec[i].axis(a));
          return out;
        }
  // Logical names: the rules in order, a rule applying where its mesh axes are still free.
  for (auto const& r : table) {
    for (std::size_t i = 0; i < K; ++i) {
      if (assigned[i] || !(label[i] == r.logical)) continue;
      bool free = true;
      for (std::size_t a = 0; a < r.mesh_axes.count(); ++a) {
        if (!has_axis(r.mesh_axes.axis(a))) {
          out.error = resolve_error::unknown_name;
          out.name = r.mesh_axes.axis(a);
          return out;
        }
        free = free && owner_of(r.mesh_axes.axis(a)) == K;
      }
      if (free) {
        out.spec[i] = r.mesh_axes;
        assigned[i] = true;
      }
    }
  }
  // A logical name left over: every rule for it wants a mesh axis another dimension holds.
  for (std::size_t i = 0; i < K; ++i) {
    if (assigned[i]) continue;
    for (auto const& r : table) {
      if (!(r.logical == label[i])) continue;
      for (std::size_t a = 0; a < r.mesh_axes.count(); ++a) {
        std::size_t const j = owner_of(r.mesh_axes.axis(a));
        if (j != K) {
          clash(i, j, r.mesh_axes.axis(a));
          return out;
        }
      }
    }
    // A logical name repeated in one parameter (Flax: "occur more than once in array names").
    for (std::size_t j = 0; j < K; ++j)
      if (j != i && label[j] == label[i]) {
        clash(i, j, out.spec[j].count() ? out.spec[j].axis(0) : axis_name{});
        return out;
      }
  }
  return out;
}

}  // namespace detail

namespace diagnostic {
/// Fires when a parameter's name is neither a logical name of the rules nor an axis of the mesh
/// (the name, the rules and the mesh are its arguments, so the compiler prints them).
template <axis_name Name, class Rules, class Mesh, bool Ok>
struct name_must_be_a_logical_name_of_the_rules_or_a_mesh_axis {
  static_assert(Ok,
                "tessera::nn::with_partitioning: a name is neither a logical name of the logical_axis_rules nor an "
                "axis of the mesh (the name is the first argument of "
                "'name_must_be_a_logical_name_of_the_rules_or_a_mesh_axis<name, rules, mesh>' above); add a rule "
                "for it or use one of the mesh's axes");
  static constexpr bool value = true;
};
/// Fires when two dimensions of one parameter map to the same mesh axis.
template <axis_name Name, axis_name OtherName, axis_name MeshAxis, bool Ok>
struct names_of_one_parameter_must_map_to_different_mesh_axes {
  static_assert(Ok,
                "tessera::nn::with_partitioning: two dimensions of one parameter map to the same mesh axis (the "
                "names and the mesh axis are the arguments of "
                "'names_of_one_parameter_must_map_to_different_mesh_axes<name, other name, mesh axis>' above); a "
                "mesh axis may shard one dimension of an array: change a rule, or map one name to None");
  static constexpr bool value = true;
};
/// False when a with_partitioning has a different number of names than the parameter has dimensions.
template <std::size_t Names, std::size_t Rank>
inline constexpr bool with_partitioning_needs_one_name_per_dimension = Names == Rank;
}  // namespace diagnostic

namespace detail {
template <class Mesh, class Rules, class Names>
constexpr auto resolution_of =
    resolve(Names::dims, Rules::table, [](axis_name const& a) { return Mesh::has_axis(a); });

}  // namespace detail

namespace detail {
template <class Mesh, class Rules, class Names, class = std::make_index_sequence<Names::size>>
struct logical_to_mesh_axes_impl;
template <class Mesh, class Rules, class Names, std::size_t... I>
struct logical_to_mesh_axes_impl<Mesh, Rules, Names, std::index_sequence<I...>> {
  static constexpr auto r = resolution_of<Mesh, Rules, Names>;
  static_assert(diagnostic::name_must_be_a_logical_name_of_the_rules_or_a_mesh_axis<
                resolution_of<Mesh, Rules, Names>.name, Rules, Mesh,
                resolution_of<Mesh, Rules, Names>.error != resolve_error::unknown_name>::value);
  static_assert(diagnostic::names_of_one_parameter_must_map_to_different_mesh_axes<
                resolution_of<Mesh, Rules, Names>.name, resolution_of<Mesh, Rules, Names>.other,
                resolution_of<Mesh, Rules, Names>.mesh_axis,
                resolution_of<Mesh, Rules, Names>.error != resolve_error::same_mesh_axis>::value);
  static constexpr bool ok = r.error == resolve_error::ok;
  // An unresolved parameter is typed P<>, so that our message is the only error.
  static constexpr std::array<dim_spec, Names::size> spec =
      ok ? r.spec : std::array<dim_spec, Names::size>{};
  using type = P<spec[I]...>;
};
}  // namespace detail

/// nn.logical_to_mesh_axes(names, rules) at compile time: the P<...> that `Names` (a
/// tessera::nn::names<...>) resolves to on `Mesh` under `Rules`.
template <class Mesh, class Rules, class Names>
using logical_to_mesh_axes_t = typename detail::logical_to_mesh_axes_impl<Mesh, Rules, Names>::type;

/// nn.logical_to_mesh_sharding(names, mesh, rules): the named_sharding `names` resolves to.
template <class Rules = no_rules, dim_spec... N, mesh_type Mesh>
auto logical_to_mesh_sharding(names<N...>, Mesh const& mesh, Rules = {}) {
  return named_sharding(mesh, logical_to_mesh_axes_t<Mesh, Rules, names<N...>>{});
}

/// An initializer whose parameter is created in the sharding its names resolve to
/// (nn.with_partitioning(init_fn, names) and nn.with_logical_partitioning).
template <class Init, class Names>
struct partitioned {
  Init init;
  using names_type = Names;
  /// The parameter's sharding on `mesh` under `Rules`, for a parameter of rank N.
  template <std::size_t N, class Rules, mesh_type Mesh>
  static auto sharding(Mesh const& mesh) {
    static_assert(diagnostic::with_partitioning_needs_one_name_per_dimension<Names::size, N>,
                  "tessera::nn::with_partitioning: the number of names differs from the parameter's rank (they are "
                  "the arguments of 'with_partitioning_needs_one_name_per_dimension<names, rank>'); name every "
                  "dimension, none for a replicated one");
    return named_sharding(mesh, logical_to_mesh_axes_t<Mesh, Rules, Names>{});
  }
};

/// nn.with_partitioning(init, names): `init` (any initializer `init(key, shape, sharding)`) whose
/// parameter is created sharded by `names`, each a mesh axis or a logical name of the rules.
template <class Init, dim_spec... N>
partitioned<Init, names<N...>> with_partitioning(Init init, names<N...>) {
  return {std::move(init)};
}

/// nn.with_logical_partitioning(init, names): the same as with_partitioning (names resolve
/// through the rules whenever the rules mention them).
template <class Init, dim_spec... N>
partitioned<Init, names<N...>> with_logical_partitioning(Init init, names<N...> n) {
  return with_partitioning(std::move(init), n);
}

template <class T>
struct is_partitioned : std::false_type {};
template <class I, class N>
struct is_partitioned<partitioned<I, N>> : std::true_type {};

namespace detail {
/// The initializer itself (without its partitioning).
template <class Init>
auto const& unboxed_init(Init const& i) {
  if constexpr (is_partitioned<Init>::value) return i.init;
  else return i;
}
/// A parameter's sharding: its names resolved, or replicated when it has none.
template <class Init, std::size_t N, class Rules, mesh_type Mesh>
auto param_sharding(Mesh const& mesh) {
  if constexpr (is_partitioned<Init>::value) return Init::template sharding<N, Rules>(mesh);
  else return named_sharding(mesh, P<>{});
}
}  // namespace detail

namespace detail {
inline axis_name runtime_axis_name(std::string_view s, char const* what) {
  if (s.size() >= axis_name::capacity || s.find(',') != std::string_view::npos)
    throw std::invalid_argument(std::string("tessera::nn::logical_to_mesh_axes: the ") + what + " '" + std::string(s) +
                                "' is longer than 31 characters or contains ','");
  axis_name n;
  for (std::size_t i = 0; i < s.size(); ++i) n.chars[i] = s[i];
  return n;
}
}  // namespace detail

/// nn.logical_to_mesh_axes(names, rules) at run time, for names and rules read from a
/// configuration: per dimension, the mesh axes it is sharded over (empty: None). `names` holds
/// one logical name or mesh axis per dimension ("" for None); `rules` are (logical name, mesh
/// axes) pairs in priority order; `mesh_axes` the mesh's axis names. Throws
/// std::invalid_argument naming the name that is neither a logical name of the rules nor a mesh
/// axis, or the two names that map to one mesh axis (the compile-time form's two errors).
/// Shardings are types in tessera: to build arrays from a run-time table, select one of the
/// rule types the program was compiled with (rules_table below).
inline std::vector<std::vector<std::string>> logical_to_mesh_axes(
    std::vector<std::string> const& names, std::vector<std::pair<std::string, std::vector<std::string>>> const& rules,
    std::vector<std::string> const& mesh_axes) {
  constexpr std::size_t max_rank = 8;
  if (names.size() > max_rank)
    throw std::invalid_argument("tessera::nn::logical_to_mesh_axes: " + std::to_string(names.size()) +
                                " names; at most 8 dimensions are resolved at run time");
  std::array<dim_spec, max_rank> dims{};
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!names[i].empty()) dims[i].push(detail::runtime_axis_name(names[i], "name"));
  std::vector<detail::rule_entry> table;
  for (auto const& [logical, axes] : rules) {
    detail::rule_entry e{detail::runtime_axis_name(logical, "logical name"), {}};
    if (axes.size() > dim_spec::max_axes)
      throw std::invalid_argument("tessera::nn::logical_to_mesh_axes: the rule for '" + logical + "' names " +
                                  std::to_string(axes.size()) + " mesh axes; at most 4");
    for (auto const& a : axes) e.mesh_axes.push(detail::runtime_axis_name(a, "mesh axis"));
    table.push_back(e);
  }
  auto const r = detail::resolve(dims, table, [&](axis_name const& a) {
    for (auto const& m : mesh_axes)
      if (m == a.view()) return true;
    return false;
  });
  std::string mesh_list;
  for (auto const& m : mesh_axes) mesh_list += (mesh_list.empty() ? "'" : ", '") + m + "'";
  if (r.error == detail::resolve_error::unknown_name)
    throw std::invalid_argument("tessera::nn::logical_to_mesh_axes: '" + std::string(r.name.view()) +
                                "' is neither a logical name of the rules nor an axis of the mesh (" + mesh_list +
                                "); add a rule for it or use one of the mesh's axes");
  if (r.error == detail::resolve_error::same_mesh_axis)
    throw std::invalid_argument("tessera::nn::logical_to_mesh_axes: '" + std::string(r.name.view()) + "' and '" +
                                std::string(r.other.view()) + "' both map to mesh axis '" +
                                std::string(r.mesh_axis.view()) +
                                "' in one parameter; a mesh axis may shard one dimension of an array");
  std::vector<std::vector<std::string>> out(names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    for (std::size_t a = 0; a < r.spec[i].count(); ++a) out[i].emplace_back(r.spec[i].axis(a).view());
  return out;
}

/// A table of logical axis rules read at run time (from a configuration), which selects one of
/// the compile-time rule types `Alternatives` by name: shardings are types in tessera, so a
/// run-time table can only choose among rule sets the program was compiled with.
/// `visit(name, f)` calls `f(Rules{})` for the alternative called `name`, and throws
/// std::invalid_argument naming the value and the choices otherwise.
template <class... Alternatives>
struct rules_table {
  std::array<std::string_view, sizeof...(Alternatives)> labels;
  template <class F>
  decltype(auto) visit(std::string_view name, F&& f) const {
    static_assert(sizeof...(Alternatives) > 0, "tessera::nn::rules_table needs at least one rule set");
    using R = decltype(f(std::declval<std::tuple_element_t<0, std::tuple<Alternatives...>>>()));
    std::size_t i = 0;
    std::size_t const found = [&] {
      for (; i < labels.size(); ++i)
        if (labels[i] == name) return i;
      return labels.size();
    }();
    if (found == labels.size()) {
      std::string known;
      for (auto l : labels) known += (known.empty() ? "'" : ", '") + std::string(l) + "'";
      throw std::invalid_argument("tessera::nn::rules_table: no rule set named '" + std::string(name) +
                                  "'; the program was compiled with " + known);
    }
    return call<R>(found, f, std::index_sequence_for<Alternatives...>{});
  }

 private:
  template <class R, class F, std::size_t... I>
  static R call(std::size_t k, F& f, std::index_sequence<I...>) {
    if constexpr (std::is_void_v<R>) {
      ((k == I ? (void)f(Alternatives{}) : void()), ...);
    } else {
      R out{};
      ((k == I ? (void)(out = f(Alternatives{})) : void()), ...);
      return out;
    }
  }
};

}  // namespace tessera::nn
