#pragma once
// Partial results (JAX's `unreduced`, DTensor's `Partial`): every device holds
// a block of values that still have to be summed over some mesh axes. This is
// where they are summed, straight into the layout asked for: each destination
// device combines the matching regions of its peers' partial blocks in place
// (shared memory), so a replicated destination is an all-reduce and one sharded
// over the partial axes a reduce-scatter, in one pass, with no staging copy.

#include <algorithm>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"

namespace tessera::detail {

/// The array laid out by `to` whose values are those of `p`'s blocks combined by `op` over the
/// mesh axes `unreduced` (p's block on a device is that device's partial value of its block).
/// Both shardings are on one mesh.
template <class T, std::size_t N, class S1, class S2>
array<T, N, S2> sum_partials(array<T, N, S1> const& p, dim_spec const& unreduced, S2 const& to, reduce_op op) {
  using Mesh = typename S1::mesh_type;
  S1 const& from = p.sharding();
  Mesh const& m = from.mesh();
  if (!(m == to.mesh()))
    throw std::invalid_argument("tessera: a partial result on mesh " + [&] {
      std::ostringstream os;
      os << m << " cannot be summed onto mesh " << to.mesh();
      return os.str();
    }());
  auto const shape = p.shape();
  auto const events = reshard_events<T, N>(shape, from, unreduced, to);
  record_collectives(events);
  trace_as const label = trace_collectives(events, "sum of partial results");
  // Axes neither sharding the partial blocks nor summed over: a device reads the copies of its own row of them.
  std::vector<std::size_t> free_axes;
  for (std::size_t a = 0; a < Mesh::rank; ++a) {
    bool used = unreduced.uses(Mesh::axes[a].name);
    for (auto const& d : S1::spec_dims) used = used || d.uses(Mesh::axes[a].name);
    if (!used) free_axes.push_back(a);
  }
  std::size_t const n = m.num_devices();
  return build_array<T, N, S2>(to, shape, "sum of partial results", [&](std::size_t pos, std::array<slice, N> const& tb, T* out) {
    // Every device combines its contributions in the same order (device position), so every
    // copy of a replicated element has the same bits, as the runtime's all-reduce guarantees.
    bool started = false;
    std::array<slice, N> region{};
    for (std::size_t q = 0; q < n; ++q) {
      if constexpr (Mesh::rank > 1) {  // one axis is always used (g++ 12 warns of bounds otherwise)
        bool same_row = true;
        for (std::size_t a : free_axes) same_row = same_row && m.coordinate(q, a) == m.coordinate(pos, a);
        if (!same_row) continue;
      }
      auto const sb = from.block(q, shape);
      if (!intersect(sb, tb, region)) continue;
      if (!started && region == tb) {
        copy_region(p.block_data(q), sb, out, tb, tb);
      } else {
        if (!started) std::fill(out, out + element_count(block_shape(tb)), identity_of<T>(op));
        visit_region(p.block_data(q), sb, out, tb, region,
                     [op](T const* s, T* d, std::size_t len) { combine_into(op, d, s, len); });
      }
      started = true;
    }
    if (!started) std::fill(out, out + element_count(block_shape(tb)), identity_of<T>(op));
  });
}

}  // namespace tessera::detail
