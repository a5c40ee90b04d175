#pragma once
// Which mesh axes a per-device value varies over inside shard_map (JAX's
// "vma", checked by check_vma=True), as a type. A block of an argument varies
// over the axes its in_spec names; psum<"x"> makes a value the same along 'x';
// ppermute<"x"> makes it vary along 'x'. shard_map compares the result's set
// with its out_spec when the program is compiled.
//
// A plain number or xt container does not say where it came from. Its type
// gets `unknown_except<...>`: "whatever the inputs vary over, minus the axes
// reduced since". shard_map resolves that against the axes its in_specs use.
//
// The set logic is constexpr functions over a plain value (`axis_set`); the
// types are only its spelling, so that errors print `varying<"x">`.

#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "tessera/core/fixed_string.hpp"

namespace tessera {

/// The mesh axes a value's type knows about; `in_mesh<>` when the type does not know its mesh.
template <axis_name... A>
struct in_mesh {};
/// The mesh axes a per-device value varies over (JAX 0.12: the `{V:x}` in `float32[4]{V:x}`).
template <axis_name... A>
struct varying {};
/// Part of the value came from a plain number or container: it varies over what shard_map's
/// inputs vary over, except the listed axes (reduced since).
template <axis_name... A>
struct unknown_except {};
/// Every part of the value is tracked by its type.
struct fully_known {};

/// Everything tessera knows at compile time about how a per-device value differs between devices.
template <class Mesh, class Varying, class Unknown = fully_known>
struct vma {};

namespace detail {

/// A set of axis names as a plain constexpr value.
struct axis_set {
  static constexpr std::size_t capacity = 16;
  std::array<axis_name, capacity> names{};
  std::size_t size = 0;

  constexpr bool contains(axis_name const& n) const {
    for (std::size_t i = 0; i < size; ++i)
      if (names[i] == n) return true;
    return false;
  }
  constexpr void add(axis_name const& n) {
    if (!contains(n) && size < capacity) names[size++] = n;
  }
  constexpr axis_set joined(axis_set const& o) const {
    axis_set r = *this;
    for (std::size_t i = 0; i < o.size; ++i) r.add(o.names[i]);
    return r;
  }
  constexpr axis_set without(axis_set const& o) const {
    axis_set r;
    for (std::size_t i = 0; i < size; ++i)
      if (!o.contains(names[i])) r.add(names[i]);
    return r;
  }
  constexpr axis_set common(axis_set const& o) const {
    axis_set r;
    for (std::size_t i = 0; i < size; ++i)
      if (o.contains(names[i])) r.add(names[i]);
    return r;
  }
  constexpr bool subset_of(axis_set const& o) const { return without(o).size == 0; }
};

template <axis_name... A>
constexpr axis_set make_axis_set() {
  axis_set s;
  (s.add(A), ...);
  return s;
}

/// The state a `vma<...>` type spells.
struct vma_state {
  axis_set mesh;          // empty: the mesh is not known
  axis_set vary;
  bool unknown = false;   // part of the value is untracked
  axis_set except;        // ...and that part is known not to vary over these
};

template <class>
struct axis_list_of;
template <template <axis_name...> class L, axis_name... A>
struct axis_list_of<L<A...>> {
  static constexpr axis_set value = make_axis_set<A...>();
};

template <class V>
struct vma_state_of;
template <class M, class V>
struct vma_state_of<vma<M, V, fully_known>> {
  static constexpr vma_state value{axis_list_of<M>::value, axis_list_of<V>::value, false, {}};
};
template <class M, class V, axis_name... X>
struct vma_state_of<vma<M, V, unknown_except<X...>>> {
  static constexpr vma_state value{axis_list_of<M>::value, axis_list_of<V>::value, true, make_axis_set<X...>()};
};

/// Two values combined elementwise: the result varies where either does.
constexpr vma_state join(vma_state const& a, vma_state const& b) {
  vma_state r;
  r.mesh = a.mesh.size ? a.mesh : b.mesh;
  r.vary = a.vary.joined(b.vary);
  r.unknown = a.unknown || b.unknown;
  if (a.unknown && b.unknown) r.except = a.except.common(b.except);
  else if (a.unknown) r.except = a.except;
  else if (b.unknown) r.except = b.except;
  return r;
}

/// After a reduction over `axes` (psum, pmax, all_gather): the same along them.
constexpr vma_state reduced_over(vma_state s, axis_set const& axes) {
  s.vary = s.vary.without(axes);
  if (s.unknown) s.except = s.except.joined(axes);
  return s;
}

/// After psum_scatter, all_to_all, ppermute or axis_index over `axes`: varies along them.
constexpr vma_state varied_over(vma_state s, axis_set const& axes) {
  s.vary = s.vary.joined(axes);
  return s;
}

/// The axes the value varies over, given the axes shard_map's inputs vary over.
constexpr axis_set resolve(vma_state const& s, axis_set const& inputs_vary) {
  return s.unknown ? s.vary.joined(inputs_vary.without(s.except)) : s.vary;
}

/// The first axis of `s` that `allowed` lacks (empty name when none).
constexpr axis_name first_outside(axis_set const& s, axis_set const& allowed) {
  axis_set const d = s.without(allowed);
  return d.size ? d.names[0] : axis_name{};
}

template <template <axis_name...> class L, axis_set Set, std::size_t... I>
L<Set.names[I]...> spell_list(std::index_sequence<I...>);

/// The `vma<...>` type of a state (the inverse of vma_state_of).
template <vma_state S>
struct vma_type {
  using mesh = decltype(spell_list<in_mesh, S.mesh>(std::make_index_sequence<S.mesh.size>{}));
  using vary = decltype(spell_list<varying, S.vary>(std::make_index_sequence<S.vary.size>{}));
  using unknown = std::conditional_t<
      S.unknown, decltype(spell_list<unknown_except, S.except>(std::make_index_sequence<S.except.size>{})),
      fully_known>;
  using type = vma<mesh, vary, unknown>;
};
template <vma_state S>
using vma_type_t = typename vma_type<S>::type;

/// What a plain number or container is: untracked, mesh unknown.
using untracked_vma = vma<in_mesh<>, varying<>, unknown_except<>>;
/// What a constant is (a literal in an expression, xt::zeros): the same everywhere.
using invariant_vma = vma<in_mesh<>, varying<>, fully_known>;

}  // namespace detail
}  // namespace tessera
