#pragma once
// jax.typeof of an expression: its result type, known before it runs
// (`int32[4@X,8@Y]`), read off the node's compile-time spec and its shape.

#include <cstddef>
#include <string>

#include "tessera/core/dtype.hpp"
#include "tessera/debug/typeof.hpp"
#include "tessera/expr/expression.hpp"

namespace tessera {

/// jax.typeof(expr): dtype and shape of the result, each sharded dimension followed by @ and its mesh axes.
template <expression_node E>
std::string type_of(E const& e) {
  using V = typename std::remove_cvref_t<E>::value_type;
  constexpr auto spec = std::remove_cvref_t<E>::spec;
  std::string s(dtype_name<V>());
  s += '[';
  auto const shape = e.shape();
  for (std::size_t i = 0; i < spec.size(); ++i) {
    if (i) s += ',';
    s += detail::dim_with_axes(shape[i], spec[i]);
  }
  return s += ']';
}

}  // namespace tessera
