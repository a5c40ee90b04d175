#pragma once
// The scans of expr/scan.hpp on a device's block inside shard_map (`tessera::cumsum<0>(blk)` in a
// body): the block's own running sum, product, maximum or minimum along an axis of the block,
// with the same per-line code as the global view; the result keeps the block's vma. A scan over a
// sharded dimension of the global array is the body's to write, as in JAX (an all_gather of the
// blocks' totals, then a fold of those before the device's own). Under grad the same names take
// local tracers (autodiff/scan_rules.hpp).

#include <cstddef>
#include <type_traits>

#include "tessera/core/scan_diagnostics.hpp"
#include "tessera/expr/scan.hpp"
#include "tessera/parallel/block_functions.hpp"

namespace tessera {

namespace detail {
/// The scan by Op of a device's block along Axis (negative from the end).
template <class Op, int Axis, bool Reverse, class X>
auto scan_plain(X const& x) {
  constexpr std::size_t N = static_rank_v<X>;
  using T = std::remove_cv_t<typename std::remove_cvref_t<X>::value_type>;
  using R = scan_type_t<T>;
  constexpr bool numbers = !std::is_same_v<T, bool> || std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::prod>;
  static_assert(diagnostic::cummax_and_cummin_take_numbers<numbers>::value);
  constexpr bool in_range = axis_in_range(Axis, N);
  static_assert(diagnostic::scan_axis_out_of_range_for_the_operand<Axis, N, in_range>::value);
  auto const v = values_of(x);
  auto y = make_value<R>(v.shape);
  if constexpr (numbers && in_range)
    scan_block<Op, Reverse, R, T>(v.data(), y.data(), lines_of(v.shape, normalize_axis(Axis, N)), nullptr);
  return plain_result<plain_vma<X>>(std::move(y));
}
}  // namespace detail

/// jnp.cumsum(blk, axis=Axis) of a device's block (reverse: jax.lax.cumsum's reverse=True).
template <int Axis, bool Reverse = false, plain_block X>
auto cumsum(X const& x) {
  return detail::scan_plain<op::sum, Axis, Reverse>(x);
}
/// jnp.cumprod(blk, axis=Axis) of a device's block.
template <int Axis, bool Reverse = false, plain_block X>
auto cumprod(X const& x) {
  return detail::scan_plain<op::prod, Axis, Reverse>(x);
}
/// jax.lax.cummax(blk, Axis) of a device's block.
template <int Axis, bool Reverse = false, plain_block X>
auto cummax(X const& x) {
  return detail::scan_plain<op::max, Axis, Reverse>(x);
}
/// jax.lax.cummin(blk, Axis) of a device's block.
template <int Axis, bool Reverse = false, plain_block X>
auto cummin(X const& x) {
  return detail::scan_plain<op::min, Axis, Reverse>(x);
}

}  // namespace tessera
