#pragma once
// The collectives of a move between two named shardings of one mesh, for an
// array of a given shape and element type: what device_put, reshard and the
// sum of partial results record in a collective_counter, and what explain()
// lists before they run.

#include <cstddef>
#include <sstream>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/array/shape.hpp"
#include "tessera/core/communication_plan.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/detail/linkage.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera::detail {

/// Whether S is a NamedSharding (a spec over a mesh), the only layouts a plan describes.
template <class S>
concept has_spec = requires {
  S::spec_dims;
  typename S::mesh_type;
};

/// The collectives that take an array of `shape` (T elements) laid out by `from`, summed over
/// `unreduced` when it is partial, to `to` (none between two meshes).
template <class T, std::size_t N, class S1, class S2>
std::vector<collective_event> reshard_events(shape_t<N> const& shape, S1 const& from, dim_spec const& unreduced,
                                             S2 const& to) {
  if constexpr (has_spec<S1> && has_spec<S2>) {
    if constexpr (std::is_same_v<typename S1::mesh_type, typename S2::mesh_type>) {
      // A move between two meshes is a copy between device sets, not a collective of one mesh.
      if (!(from.mesh() == to.mesh())) return {};
      auto const m = plan_mesh_of(from.mesh());
      return reshard_plan(std::span<std::size_t const>(shape.data(), N), std::span<dim_spec const>(S1::spec_dims),
                          unreduced, std::span<dim_spec const>(S2::spec_dims), m, sizeof(T));
    } else {
      return {};
    }
  } else {
    (void)shape, (void)from, (void)unreduced, (void)to;
    return {};
  }
}

/// Labels the device spans of the array built next with the collectives that build it
/// ("all-gather", "all-reduce + all-gather", ...), or as `fallback` when there are none.
TESSERA_LINKAGE trace_as trace_collectives(std::vector<collective_event> const& events, char const* fallback);

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE trace_as trace_collectives(std::vector<collective_event> const& events, char const* fallback) {
  if (!tracing()) return trace_as("", "");
  if (events.empty()) return trace_as("evaluate", fallback);
  std::string name, detail;
  for (auto const& e : events) {
    name += (name.empty() ? "" : " + ") + e.kind;
    std::ostringstream os;
    os << e;
    detail += (detail.empty() ? "" : "; ") + os.str();
  }
  return trace_as("collective", std::move(name), std::move(detail));
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera::detail
