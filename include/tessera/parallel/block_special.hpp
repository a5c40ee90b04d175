#pragma once
// The special functions of expr/special_functions.hpp on a device's block inside shard_map
// (`tessera::gelu(blk)` in a body), element by element with the same scalar code as the
// global-view nodes, so a body gives the global view's values; the result keeps the block's vma.
// Under grad the same names take local tracers (autodiff/local_special.hpp).

#include <type_traits>

#include "tessera/expr/special_functions.hpp"
#include "tessera/parallel/block_functions.hpp"

namespace tessera {

namespace detail {
/// Op applied to every element of a device's block (integers computed in floating point, as in JAX).
template <class Op, class X>
auto map_special(X const& x) {
  using T = std::remove_cv_t<typename std::remove_cvref_t<X>::value_type>;
  using F = float_of_t<T>;
  auto v = values_of(x);
  local_value<F, static_rank_v<X>> out{std::vector<F>(v.v.size()), v.shape};
  for (std::size_t i = 0; i < v.v.size(); ++i) out.v[i] = Op::apply(static_cast<F>(v.v[i]));
  return plain_result<plain_vma<X>>(std::move(out));
}
}  // namespace detail

/// jax.lax.erf of a device's block.
template <plain_block X>
auto erf(X const& x) {
  return detail::map_special<op::erf>(x);
}
/// jax.lax.erfc of a device's block.
template <plain_block X>
auto erfc(X const& x) {
  return detail::map_special<op::erfc>(x);
}
/// jax.nn.gelu of a device's block (gelu<false>: approximate=False).
template <bool Approximate = true, plain_block X>
auto gelu(X const& x) {
  return detail::map_special<std::conditional_t<Approximate, op::gelu_tanh, op::gelu_erf>>(x);
}
/// jax.nn.silu of a device's block.
template <plain_block X>
auto silu(X const& x) {
  return detail::map_special<op::silu>(x);
}
/// jax.nn.swish of a device's block: silu.
template <plain_block X>
auto swish(X const& x) {
  return detail::map_special<op::silu>(x);
}
/// jax.nn.softplus of a device's block.
template <plain_block X>
auto softplus(X const& x) {
  return detail::map_special<op::softplus>(x);
}

}  // namespace tessera
