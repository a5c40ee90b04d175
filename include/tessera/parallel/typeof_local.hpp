#pragma once
// jax.typeof inside a shard_map body: the block's type with the mesh axes it
// varies over, as JAX's jaxprs write it: `float32[4]{x}`; `{}` is the same on
// every device. A value partly computed from plain numbers or containers shows
// `?` for "whatever the inputs vary over" (core/varying_axes.hpp).

#include <string>

#include "tessera/core/dtype.hpp"
#include "tessera/debug/typeof.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/vma_of.hpp"

namespace tessera {

namespace detail {
/// Whether a state says more than "constant" or "untracked host data".
constexpr bool says_something(vma_state const& s) { return s.mesh.size || s.vary.size || s.except.size; }

/// E holds a tessera per-device value (a block, a collective's result), not only constants or host data.
template <class E>
concept tracked_value =
    is_local_block<std::remove_cvref_t<E>>::value || says_something(vma_of<std::remove_cvref_t<E>>::value);

/// `{x,y}`, `{}`, or `{x,?}` (partly untracked) for the vma of E.
template <class E>
std::string vma_text() {
  constexpr vma_state s = vma_of<std::remove_cvref_t<E>>::value;
  std::string t = "{";
  for (std::size_t i = 0; i < s.vary.size; ++i) (t += (i ? "," : "")) += s.vary.names[i].view();
  if (s.unknown) {
    t += s.vary.size ? ",?" : "?";
    for (std::size_t i = 0; i < s.except.size; ++i) (t += (i ? "," : "-")) += s.except.names[i].view();
  }
  return t += '}';
}
}  // namespace detail

/// jax.typeof of a per-device value in a shard_map body: `float32[4]{x}`.
template <host_expression E>
  requires detail::tracked_value<E>
std::string type_of(E const& e) {
  return detail::host_type_text(e) + detail::vma_text<E>();
}

/// jax.typeof of a number a collective returned: `int32[]{x}`.
template <class T, class Vma>
std::string type_of(local_scalar<T, Vma> const&) {
  return std::string(dtype_name<T>()) + "[]" + detail::vma_text<local_scalar<T, Vma>>();
}

}  // namespace tessera
