#pragma once
// jax.typeof inside a shard_map body: the block's type with the mesh axes it
// varies over, as JAX 0.12 prints it: `float32[4]{V:x}`, `float32[4]{V:(x,y)}`
// (axes in mesh order), and `float32[4]` for a value that is the same on every
// device. A value partly computed from plain numbers or containers shows `?`
// for "whatever the inputs vary over" (core/varying_axes.hpp), minus the axes
// reduced since: `{V:?}`, `{V:(x,?-y)}`; JAX has no such case, since it
// traces every value.

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.hpp"
#include "tessera/debug/typeof.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/parallel/vma_of.hpp"

namespace tessera {

namespace detail {
/// Whether a state says more than "constant" or "untracked host data".
constexpr bool says_something(vma_state const& s) { return s.mesh.size || s.vary.size || s.except.size; }

/// E holds a tessera per-device value (a block, a collective's result), not only constants or host data.
template <class E>
concept tracked_value =
    is_local_block<std::remove_cvref_t<E>>::value || says_something(vma_of<std::remove_cvref_t<E>>::value);

/// The names of `set` in mesh order, as JAX prints them. The order comes from the mesh the type
/// knows, else from the shard_map body this thread runs (axis_index's type does not name its
/// mesh); a name neither knows keeps its place after the others.
inline std::vector<std::string_view> in_mesh_order(axis_set const& set, axis_set const& mesh) {
  std::vector<std::string_view> order;
  if (mesh.size)
    for (std::size_t i = 0; i < mesh.size; ++i) order.push_back(mesh.names[i].view());
  else if (current_frame)
    order.assign(current_frame->axis_names.begin(), current_frame->axis_names.end());
  auto const rank = [&](std::string_view n) {
    return static_cast<std::size_t>(std::find(order.begin(), order.end(), n) - order.begin());
  };
  std::vector<std::string_view> names;
  for (std::size_t i = 0; i < set.size; ++i) names.push_back(set.names[i].view());
  std::stable_sort(names.begin(), names.end(), [&](auto a, auto b) { return rank(a) < rank(b); });
  return names;
}

/// `x` for one item, `(x,y)` for several: JAX's spelling of an axis tuple in a type.
inline std::string axis_tuple_text(std::vector<std::string> const& items) {
  std::string t = items.size() == 1 ? "" : "(";
  for (std::size_t i = 0; i < items.size(); ++i) (t += (i ? "," : "")) += items[i];
  return items.size() == 1 ? t : t + ")";
}

/// `{V:x}`, `{V:(x,y)}`, nothing for an invariant value, or `{V:(x,?-y)}` (partly untracked) for E.
template <class E>
std::string vma_text() {
  constexpr vma_state s = vma_of<std::remove_cvref_t<E>>::value;
  std::vector<std::string> items;
  for (std::string_view n : in_mesh_order(s.vary, s.mesh)) items.emplace_back(n);
  if (s.unknown) {
    std::vector<std::string> except;
    for (std::string_view n : in_mesh_order(s.except, s.mesh)) except.emplace_back(n);
    items.push_back(except.empty() ? "?" : "?-" + axis_tuple_text(except));
  }
  return items.empty() ? std::string() : "{V:" + axis_tuple_text(items) + "}";
}
}  // namespace detail

/// jax.typeof of a per-device value in a shard_map body: `float32[4]{V:x}`, or `float32[4]`
/// when it is the same on every device.
template <host_expression E>
  requires detail::tracked_value<E>
std::string type_of(E const& e) {
  return detail::host_type_text(e) + detail::vma_text<E>();
}

/// jax.typeof of a number a collective returned: `int32[]{V:x}`.
template <class T, class Vma>
std::string type_of(local_scalar<T, Vma> const&) {
  return std::string(dtype_name<T>()) + "[]" + detail::vma_text<local_scalar<T, Vma>>();
}

}  // namespace tessera
