#pragma once
// Compile-time errors of the shape, joining and indexing operations, in tessera's words (the
// other operations' are in diagnostics.hpp). Each names the values in its arguments.

#include <cstddef>

namespace tessera::diagnostic {

/// Fires when reshape is given a sharded operand and no out_sharding.
template <std::size_t Rank, std::size_t NewRank, bool Ok>
struct reshape_of_a_sharded_operand_needs_its_out_sharding {
  static_assert(Ok,
                "tessera::reshape: the operand is sharded, and which of its sharded dimensions a reshape keeps "
                "depends on sizes tessera knows only at run time (the operand's and the result's ranks are the "
                "arguments of 'reshape_of_a_sharded_operand_needs_its_out_sharding<rank, new_rank>' above); give "
                "the result's sharding, as JAX's out_sharding: tessera::reshape(x, shape, tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when an axis argument is outside [-rank, rank).
template <int First, int Second, std::size_t Rank, bool Ok>
struct axis_out_of_range_for_the_operand {
  static_assert(Ok,
                "tessera: an axis argument is out of range for the operand's rank (the axes and the rank are the "
                "arguments of 'axis_out_of_range_for_the_operand<axis, axis, rank>' above); axes go from -rank to "
                "rank - 1 (JAX: 'axis ... is out of bounds for array of dimension ...')");
  static constexpr bool value = true;
};

/// Fires when broadcast_to is asked for fewer dimensions than the operand has.
template <std::size_t Rank, std::size_t NewRank, bool Ok>
struct broadcast_to_a_lower_rank {
  static_assert(Ok,
                "tessera::broadcast_to: the shape has fewer dimensions than the operand (the operand's rank and "
                "the shape's are the arguments of 'broadcast_to_a_lower_rank<rank, new_rank>' above); JAX: "
                "'Cannot broadcast to shape with fewer dimensions'");
  static constexpr bool value = true;
};

}  // namespace tessera::diagnostic
