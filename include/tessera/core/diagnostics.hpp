#pragma once
// Compile-time errors in tessera's words. Each error is a class template whose
// arguments carry the offending values (the axis, the mesh, the spec), so the
// compiler's "in instantiation of" line names them next to the message.

#include <cstddef>

#include "tessera/core/fixed_string.hpp"

namespace tessera::diagnostic {

template <class...>
inline constexpr bool always_false = false;
template <auto...>
inline constexpr bool always_false_v = false;

/// False when a PartitionSpec names an axis the mesh does not have (`Axis`; empty when none),
/// so that named_sharding's static_assert prints the axis and the mesh.
template <axis_name Axis, class Mesh>
inline constexpr bool spec_axis_must_be_in_mesh = Axis.empty();

/// Fires when a spec has more entries than the array has dimensions.
template <std::size_t SpecSize, std::size_t Rank, bool Ok>
struct spec_must_not_be_longer_than_rank {
  static_assert(Ok,
                "tessera: the PartitionSpec has more entries than the array has dimensions "
                "(spec length and array rank are the arguments of 'spec_must_not_be_longer_than_rank<spec, rank>' "
                "above); drop the extra entries");
  static constexpr bool value = true;  // the static_assert above is the check; no second error
};

/// False when a collective names an axis (`Axis`; empty when none) that the mesh of its
/// argument does not have, so that the failing static_assert prints the axis and the mesh's axes.
template <axis_name Axis, class MeshAxes>
inline constexpr bool collective_axis_must_be_in_mesh = Axis.empty();

/// Fires when an out_spec leaves out a mesh axis the body's result still varies over (JAX's check_vma).
template <std::size_t Result, axis_name Axis, class OutSpec, bool Ok>
struct out_spec_must_name_every_axis_the_result_varies_over {
  static_assert(Ok,
                "tessera::shard_map: an out_spec claims the result is the same on every device along a mesh axis, "
                "but the result varies over that axis (the result's index, the axis and the out_spec are the "
                "arguments of 'out_spec_must_name_every_axis_the_result_varies_over<result, axis, spec>' above); "
                "reduce over that axis (psum) or name it in the out_spec");
  static constexpr bool value = true;
};

/// False, with the values of an element-wise conflict on Explicit axes as its arguments, so that
/// the failing static_assert (in expr/functions.hpp, which holds the message) prints them.
template <class Op, std::size_t Dim, axis_name LeftAxis, axis_name RightAxis>
inline constexpr bool operands_shard_a_dimension_on_different_axes = false;

/// False, with the values of an element-wise result that would use one Explicit axis twice.
template <class Op, std::size_t Dim, axis_name Axis>
inline constexpr bool result_would_use_a_mesh_axis_twice = false;

/// Fires when the operands of one expression live on meshes of different types.
template <class LeftMesh, class RightMesh, bool Ok>
struct operands_must_be_on_the_same_mesh {
  static_assert(Ok,
                "tessera: the operands of an expression are on different meshes (both meshes are the arguments of "
                "'operands_must_be_on_the_same_mesh<left, right>' above); device_put one onto the other's mesh");
  static constexpr bool value = true;
};

/// Fires when a reduction names a dimension the operand does not have, or one twice.
template <class Op, std::size_t Rank, bool Ok>
struct reduction_axes_must_be_distinct_dimensions_of_the_operand {
  static_assert(Ok,
                "tessera: a reduction (sum, mean, max, min, prod) names a dimension that is out of range for its "
                "operand, or names one twice (the reduction and the operand's rank are the arguments of "
                "'reduction_axes_must_be_distinct_dimensions_of_the_operand<op, rank>' above; the axes are the "
                "reduction's template arguments); use dimensions 0 to rank - 1, each once");
  static constexpr bool value = true;
};

/// Fires when transpose's axes are not a permutation of the operand's dimensions.
template <std::size_t Rank, bool Ok>
struct transpose_axes_must_permute_the_dimensions {
  static_assert(Ok,
                "tessera::transpose: the axes are not a permutation of the operand's dimensions (the rank is the "
                "argument of 'transpose_axes_must_permute_the_dimensions<rank>' above); list each of 0 to rank - 1 "
                "once");
  static constexpr bool value = true;
};

/// Fires when a sharded expression mixes in something that is neither a tessera array nor a number.
template <class Operand, bool Ok>
struct operand_must_be_a_sharded_array_or_a_number {
  static_assert(Ok,
                "tessera: an operand of a sharded expression is neither a tessera::array, a tessera expression nor a "
                "number (its type is the argument of 'operand_must_be_a_sharded_array_or_a_number<type>' above); "
                "device_put host arrays first");
  static constexpr bool value = true;
};

/// Fires when jit's in_shardings or out_shardings do not match the arguments or results in number.
template <std::size_t Given, std::size_t Expected, bool Ok>
struct jit_shardings_must_match_in_number {
  static_assert(Ok,
                "tessera::jit: the number of in_shardings (or out_shardings) differs from the number of arguments "
                "(or results) (the numbers given and expected are the arguments of "
                "'jit_shardings_must_match_in_number<given, expected>' above); give one sharding for each");
  static constexpr bool value = true;
};

/// Fires when matmul's operands shard the contracting dimension on different Explicit axes.
template <axis_name LeftAxis, axis_name RightAxis, bool Ok>
struct matmul_contracting_dimension_sharded_on_different_axes {
  static_assert(Ok,
                "tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right "
                "operands (the axes are the arguments of "
                "'matmul_contracting_dimension_sharded_on_different_axes<left, right>' above); reshard one of them "
                "to the other's axis or to None: tessera::reshard(x, tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when matmul's operands shard a batch dimension on different Explicit axes.
template <std::size_t Dim, axis_name LeftAxis, axis_name RightAxis, bool Ok>
struct matmul_batch_dimension_sharded_on_different_axes {
  static_assert(Ok,
                "tessera::matmul: a batch dimension is sharded on different mesh axes in the left and right operands "
                "(the result dimension and the axes are the arguments of "
                "'matmul_batch_dimension_sharded_on_different_axes<dim, left, right>' above); batch dimensions must "
                "be sharded alike: reshard one operand");
  static constexpr bool value = true;
};

/// Fires when matmul's result (or its partial sum) would use one Explicit mesh axis twice.
template <std::size_t Dim, axis_name Axis, bool Ok>
struct matmul_result_would_use_a_mesh_axis_twice {
  static_assert(Ok,
                "tessera::matmul: the result would use one mesh axis twice, in two dimensions or in a dimension "
                "and the partial sum over the contracting dimension (the result dimension and the axis are the "
                "arguments of 'matmul_result_would_use_a_mesh_axis_twice<dim, axis>' above); reshard one operand");
  static constexpr bool value = true;
};

/// Fires when matmul is given a rank-0 operand or a boolean one.
template <std::size_t LeftRank, std::size_t RightRank, bool Ok>
struct matmul_operands_must_be_numeric_arrays_of_rank_at_least_1 {
  static_assert(Ok,
                "tessera::matmul: both operands must have rank 1 or more and a numeric element type (the ranks are "
                "the arguments of 'matmul_operands_must_be_numeric_arrays_of_rank_at_least_1<left, right>' above); "
                "multiply by a scalar with *, and astype<int32_t> a bool array first");
  static constexpr bool value = true;
};

/// Fires when expand_dims names a position out of range for its result, or one twice.
template <std::size_t ResultRank, bool Ok>
struct expand_dims_axes_must_be_distinct_dimensions_of_the_result {
  static_assert(Ok,
                "tessera::expand_dims: an axis is out of range for the result, or named twice (the result's rank "
                "is the argument of 'expand_dims_axes_must_be_distinct_dimensions_of_the_result<rank>' above); "
                "name at least one position from -rank to rank - 1 of the result, each once");
  static constexpr bool value = true;
};

/// Fires when squeeze names a dimension out of range for its operand, or one twice.
template <std::size_t Rank, bool Ok>
struct squeeze_axes_must_be_distinct_dimensions_of_the_operand {
  static_assert(Ok,
                "tessera::squeeze: an axis is out of range for the operand, or named twice (the operand's rank is "
                "the argument of 'squeeze_axes_must_be_distinct_dimensions_of_the_operand<rank>' above); name at "
                "least one dimension from -rank to rank - 1, each once");
  static constexpr bool value = true;
};

/// Fires when a collective's tiled argument is not tessera::tiled (`all_gather<"x">(v, 1, true)`).
template <class Flag, bool Ok>
struct tiled_must_be_passed_as_tessera_tiled {
  static_assert(Ok,
                "tessera: JAX's tiled=True is written tessera::tiled in C++: all_gather<\"x\">(v, axis, "
                "tessera::tiled), psum_scatter<\"x\">(v, dim, tessera::tiled), all_to_all<\"x\">(v, split, concat, "
                "tessera::tiled); leave it out for tiled=False (the argument's type is the argument of "
                "'tiled_must_be_passed_as_tessera_tiled<type>' above)");
  static constexpr bool value = true;
};

}  // namespace tessera::diagnostic
