#pragma once
// Compile-time errors of the cumulative reductions (cumsum, cumprod, cummax, cummin), in
// tessera's words. Each names the values in its arguments.

#include <cstddef>

namespace tessera::diagnostic {

/// Fires when a scan's axis argument is outside [-rank, rank).
template <int Axis, std::size_t Rank, bool Ok>
struct scan_axis_out_of_range_for_the_operand {
  static_assert(Ok,
                "tessera::cumsum/cumprod/cummax/cummin: the axis is out of range for the operand's rank (the axis "
                "and the rank are the arguments of 'scan_axis_out_of_range_for_the_operand<axis, rank>' above); "
                "axes go from -rank to rank - 1 (JAX: 'axis ... is out of bounds for array of shape ...')");
  static constexpr bool value = true;
};

/// Fires when the scanned dimension is sharded over an Explicit mesh axis (JAX's
/// _cumred_sharding_rule). On Auto axes tessera scans the blocks and exchanges their totals.
template <std::size_t Dim, std::size_t Rank, bool Ok>
struct scan_over_a_dimension_sharded_on_an_explicit_axis {
  static_assert(Ok,
                "tessera::cumsum/cumprod/cummax/cummin: the scanned dimension is sharded over an Explicit mesh axis "
                "(the dimension and the rank are the arguments of "
                "'scan_over_a_dimension_sharded_on_an_explicit_axis<dim, rank>' above); JAX: 'Input should be "
                "unsharded over the axis being reduced'. Reshard it first (tessera::reshard(x, P<...>{}) with None "
                "for that dimension), or use Auto axes, where tessera scans each block and exchanges only the "
                "blocks' totals");
  static constexpr bool value = true;
};

/// Fires when cummax or cummin is given booleans (lax.cummax accepts numbers only).
template <bool Ok>
struct cummax_and_cummin_take_numbers {
  static_assert(Ok,
                "tessera::cummax/cummin: the operand is boolean; JAX: 'cummax does not accept dtype bool. Accepted "
                "dtypes are subtypes of number'. Convert it first (tessera::astype<int>(x))");
  static constexpr bool value = true;
};

}  // namespace tessera::diagnostic
