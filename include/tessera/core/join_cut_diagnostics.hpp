#pragma once
// Compile-time errors of the joining and cutting operations (expr/join_cut.hpp), in tessera's
// words with JAX's text quoted. Each names the values in its arguments.

#include <cstddef>


namespace tessera::diagnostic {

/// Fires when concatenate or stack is given operands sharded differently on Explicit axes.
/// `Operand` is the index of the first operand whose spec differs from operand 0's, `Dim` the
/// first dimension where it does.
template <std::size_t Operand, std::size_t Dim, bool Ok>
struct all_operands_should_have_the_same_sharding {
  static_assert(Ok,
                "tessera::concatenate / tessera::stack: the operands are sharded differently on Explicit mesh axes "
                "(the index of the first operand that differs from operand 0 and the first dimension where it does "
                "are the arguments of 'all_operands_should_have_the_same_sharding<operand, dim>' above); JAX: "
                "'All operands should have the same sharding'; reshard them alike first: "
                "tessera::reshard(x, tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when joined operands have different ranks.
template <std::size_t Operand, std::size_t Rank, std::size_t FirstRank, bool Ok>
struct joined_operands_have_different_ranks {
  static_assert(Ok,
                "tessera::concatenate / tessera::stack: an operand's rank differs from operand 0's (the operand's "
                "index, its rank and operand 0's rank are the arguments of "
                "'joined_operands_have_different_ranks<operand, rank, first_rank>' above); JAX: 'all the input "
                "arrays must have same number of dimensions'");
  static constexpr bool value = true;
};

/// Fires when joined operands live on different meshes.
template <std::size_t Operand, bool Ok>
struct joined_operands_are_on_different_meshes {
  static_assert(Ok,
                "tessera::concatenate / tessera::stack / tessera::dynamic_update_slice: an operand lives on another "
                "mesh than operand 0 (its index is the argument of 'joined_operands_are_on_different_meshes<operand>' "
                "above); device_put it onto the same mesh first");
  static constexpr bool value = true;
};

/// Fires when dynamic_update_slice's operand and update are sharded differently on Explicit axes.
template <std::size_t Dim, bool Ok>
struct dynamic_update_slice_operand_sharding_must_equal_update_sharding {
  static_assert(Ok,
                "tessera::dynamic_update_slice: the operand and the update are sharded differently on Explicit mesh "
                "axes (the first dimension where they differ is the argument of "
                "'dynamic_update_slice_operand_sharding_must_equal_update_sharding<dim>' above); JAX: "
                "'dynamic_update_slice operand sharding must be equal to update sharding'; reshard the update: "
                "tessera::reshard(update, tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when dynamic_update_slice's operand and update have different element types or ranks.
template <std::size_t Rank, std::size_t UpdateRank, bool SameType, bool Ok>
struct dynamic_update_slice_update_must_match_the_operand {
  static_assert(Ok,
                "tessera::dynamic_update_slice: the update must have the operand's element type and rank (the "
                "operand's rank, the update's rank and whether the element types agree are the arguments of "
                "'dynamic_update_slice_update_must_match_the_operand<rank, update_rank, same_type>' above); JAX: "
                "'dynamic_update_slice update and operand dtypes must match'; use tessera::astype<T>(update)");
  static constexpr bool value = true;
};

/// Fires when roll is asked to roll a dimension sharded on Explicit axes.
template <int Axis, bool Ok>
struct roll_of_a_dimension_sharded_on_explicit_axes {
  static_assert(Ok,
                "tessera::roll: the rolled dimension is sharded on Explicit mesh axes (the axis is the argument of "
                "'roll_of_a_dimension_sharded_on_explicit_axes<axis>' above); JAX: '`a` cannot be sharded on the "
                "axis being rolled over'; reshard that dimension to None first: tessera::reshard(x, "
                "tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when stack's new axis is outside [-(rank + 1), rank].
template <int Axis, std::size_t Rank, bool Ok>
struct stack_axis_out_of_range {
  static_assert(Ok,
                "tessera::stack: the new axis is out of range (the axis and the operands' rank are the arguments of "
                "'stack_axis_out_of_range<axis, rank>' above); it goes from -(rank + 1) to rank (JAX: 'axis ... is "
                "out of bounds for array of dimension rank + 1')");
  static constexpr bool value = true;
};

}  // namespace tessera::diagnostic
