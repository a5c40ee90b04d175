#pragma once
// Compile-time errors of the indexing operations (iota, tril/triu, one_hot, take,
// take_along_axis), in tessera's words, quoting JAX's where JAX refuses the same program. Each
// names the values in its arguments.

#include <cstddef>

#include "tessera/core/partition_spec.hpp"

namespace tessera::diagnostic {

/// Fires when one_hot's out_sharding shards the dimensions of x differently from x (Explicit axes).
template <std::size_t Dim, dim_spec XEntry, dim_spec OutEntry, bool Ok>
struct one_hot_out_sharding_must_keep_the_spec_of_x {
  static_assert(Ok,
                "tessera::one_hot: the out_sharding shards a dimension of x differently from x (the dimension, x's "
                "entry and the out_sharding's entry are the arguments of "
                "'one_hot_out_sharding_must_keep_the_spec_of_x<dim, x_entry, out_entry>' above); only the new "
                "class dimension may differ (JAX: 'The input part of spec in out_sharding should match the spec of "
                "`x`')");
  static constexpr bool value = true;
};

/// Fires when the indices of take (or take_along_axis) are not integers.
template <class IndexType, bool Ok>
struct indices_must_be_integers {
  static_assert(Ok,
                "tessera::take: the indices are not integers (their element type is the argument of "
                "'indices_must_be_integers<type>' above); convert them: tessera::astype<int32_t>(ids)");
  static constexpr bool value = true;
};

/// Fires when take's indices are sharded over a mesh axis the table also uses (Explicit axes):
/// the result would use the axis twice, or each device would hold other rows than its indices name.
template <std::size_t IndexDim, axis_name Axis, bool Ok>
struct take_indices_use_a_mesh_axis_of_the_table {
  static_assert(Ok,
                "tessera::take: the indices are sharded over a mesh axis that also shards the table (the indices' "
                "dimension and the axis are the arguments of 'take_indices_use_a_mesh_axis_of_the_table<dim, "
                "axis>' above); reshard the indices off that axis: tessera::reshard(ids, tessera::P<...>{})");
  static constexpr bool value = true;
};

/// Fires when take_along_axis's axis of x is sharded on Explicit axes.
template <std::size_t Axis, axis_name MeshAxis, bool Ok>
struct take_along_axis_axis_must_be_unsharded {
  static_assert(Ok,
                "tessera::take_along_axis: x is sharded along the axis it is indexed on (the axis and its mesh axis "
                "are the arguments of 'take_along_axis_axis_must_be_unsharded<axis, mesh_axis>' above); each device "
                "needs that dimension whole: reshard x to None there (JAX: 'Use `.at[...].get(out_sharding=)` to "
                "provide output PartitionSpec for the gather indexing ...')");
  static constexpr bool value = true;
};

/// Fires when x and the indices of take_along_axis shard a batch dimension differently (Explicit axes).
template <std::size_t Dim, dim_spec XEntry, dim_spec IndexEntry, bool Ok>
struct take_along_axis_batch_dimension_sharded_differently {
  static_assert(Ok,
                "tessera::take_along_axis: x and the indices shard a dimension other than the axis differently (the "
                "dimension and both entries are the arguments of "
                "'take_along_axis_batch_dimension_sharded_differently<dim, x_entry, indices_entry>' above); reshard "
                "one of them so they agree, or leave one None there");
  static constexpr bool value = true;
};

/// Fires when tril/triu get an operand of rank below 2.
template <std::size_t Rank, bool Ok>
struct tril_triu_need_rank_at_least_2 {
  static_assert(Ok,
                "tessera::tril/triu: the operand has rank below 2 (its rank is the argument of "
                "'tril_triu_need_rank_at_least_2<rank>' above); they mask the last two dimensions (JAX: 'Argument "
                "to jax.numpy.tril must be at least 2D')");
  static constexpr bool value = true;
};

/// Fires when take_along_axis gets operands of different ranks.
template <std::size_t Rank, std::size_t IndexRank, bool Ok>
struct take_along_axis_ranks_must_match {
  static_assert(Ok,
                "tessera::take_along_axis: x and the indices have different ranks (both are the arguments of "
                "'take_along_axis_ranks_must_match<rank, indices_rank>' above); JAX: 'indices and arr must have the "
                "same number of dimensions'");
  static constexpr bool value = true;
};

}  // namespace tessera::diagnostic
