#pragma once
// jax.typeof: the array type with its sharding, `float32[4@x,8@y]`.

#include <cstddef>
#include <string>

#include "tessera/detail/linkage.hpp"
#include "tessera/detail/xtensor/xexpression.hpp"

#include "tessera/array/array.hpp"

namespace tessera {

namespace detail {
TESSERA_LINKAGE std::string dim_with_axes(std::size_t n, dim_spec const& d);
}  // namespace detail

/// jax.typeof(x): dtype and shape, each sharded dimension followed by @ and its mesh axes.
/// Spelled type_of because `typeof` is a keyword under GNU extensions (-std=gnu++20);
/// in standard mode (-std=c++20) tessera::typeof is provided as well.
template <class T, std::size_t N, class S>
std::string type_of(array<T, N, S> const& x) {
  std::string s(dtype_name<T>());
  s += '[';
  for (std::size_t i = 0; i < N; ++i) {
    if (i) s += ',';
    s += detail::dim_with_axes(x.shape()[i], i < S::spec_size ? S::spec_dims[i] : dim_spec{});
  }
  return s += ']';
}

/// An xtensor expression (what type_of prints as an unsharded host value).
template <class E>
concept host_expression = xt::is_xexpression<std::decay_t<E>>::value;

namespace detail {
template <class E>
std::string host_type_text(E const& e) {
  std::string s(dtype_name<std::remove_cv_t<typename E::value_type>>());
  s += '[';
  for (std::size_t i = 0; i < e.dimension(); ++i) (s += (i ? "," : "")) += std::to_string(e.shape()[i]);
  return s += ']';
}
}  // namespace detail

/// jax.typeof of a host (xtensor) value: unsharded, `int32[4,2]`.
template <host_expression E>
std::string type_of(E const& e) {
  return detail::host_type_text(e);
}

#if defined(__STRICT_ANSI__) || !defined(__GNUC__)
/// jax.typeof(x), JAX's own spelling (standard C++ mode only; see type_of).
template <class X>
  requires requires(X const& x) { type_of(x); }
std::string typeof(X const& x) {
  return type_of(x);
}
#endif

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE std::string detail::dim_with_axes(std::size_t n, dim_spec const& d) {
  std::string s = std::to_string(n);
  if (d.is_none()) return s;
  s += '@';
  if (d.count() == 1) return s += d.axis(0).view();
  s += '(';
  for (std::size_t a = 0; a < d.count(); ++a) (s += (a ? "," : "")) += d.axis(a).view();
  return s += ')';
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
