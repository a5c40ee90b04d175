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

/// Fires when a PartitionSpec names an axis the mesh does not have.
template <axis_name Axis, class Mesh, bool Ok>
struct spec_axis_must_be_in_mesh {
  static_assert(Ok,
                "tessera: named_sharding(mesh, spec): the PartitionSpec names a mesh axis that is not in the mesh "
                "(the axis is the first argument of 'spec_axis_must_be_in_mesh<axis, mesh>' above); "
                "use one of the mesh's axis names");
  static constexpr bool value = true;  // the static_assert above is the check; no second error
};

/// Fires when a spec has more entries than the array has dimensions.
template <std::size_t SpecSize, std::size_t Rank, bool Ok>
struct spec_must_not_be_longer_than_rank {
  static_assert(Ok,
                "tessera: the PartitionSpec has more entries than the array has dimensions "
                "(spec length and array rank are the arguments of 'spec_must_not_be_longer_than_rank<spec, rank>' "
                "above); drop the extra entries");
  static constexpr bool value = true;  // the static_assert above is the check; no second error
};

/// Fires when a collective names an axis that the mesh of its argument does not have.
template <axis_name Axis, class MeshAxes, bool Ok>
struct collective_axis_must_be_in_mesh {
  static_assert(Ok,
                "tessera: a collective (psum, all_gather, ...) names a mesh axis that the shard_map's mesh does not "
                "have (the axis and the mesh's axes are the arguments of 'collective_axis_must_be_in_mesh<axis, "
                "in_mesh<...>>' above); use one of the mesh's axis names");
  static constexpr bool value = true;
};

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

}  // namespace tessera::diagnostic
