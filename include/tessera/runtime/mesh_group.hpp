#pragma once
// Which devices a collective over some mesh axes runs among: those that share
// the caller's coordinates on every other axis (a row of the mesh, for one axis).

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <span>
#include <vector>

#include "tessera/core/mesh.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// Coordinates of mesh position `pos`, row-major over `sizes`.
inline std::vector<std::size_t> coordinates(std::size_t pos, std::span<std::size_t const> sizes) {
  std::vector<std::size_t> c(sizes.size());
  for (std::size_t i = sizes.size(); i-- > 0;) {
    c[i] = pos % sizes[i];
    pos /= sizes[i];
  }
  return c;
}

/// The devices that share position `pos`'s coordinates off `axes`, ranked row-major over `axes`
/// in the order given (JAX's axis_index over several axes). The coordinates live on the stack
/// (a mesh has at most max_mesh_axes axes): one allocation, the members', per group.
inline group group_along(std::size_t pos, std::span<std::size_t const> sizes, std::span<std::size_t const> axes) {
  if (sizes.size() > max_mesh_axes)
    throw std::logic_error("tessera: internal: a mesh of " + std::to_string(sizes.size()) + " axes (at most " +
                           std::to_string(max_mesh_axes) + ")");
  std::array<std::size_t, max_mesh_axes> mine{};
  for (std::size_t i = sizes.size(), rest = pos; i-- > 0;) {
    mine[i] = rest % sizes[i];
    rest /= sizes[i];
  }
  std::size_t k = 1;
  for (std::size_t a : axes) k *= sizes[a];
  group g;
  g.members.resize(k);
  std::array<std::size_t, max_mesh_axes> c = mine;
  for (std::size_t r = 0; r < k; ++r) {
    std::size_t rest = r;
    for (std::size_t i = axes.size(); i-- > 0;) {
      c[axes[i]] = rest % sizes[axes[i]];
      rest /= sizes[axes[i]];
    }
    std::size_t p = 0;
    for (std::size_t i = 0; i < sizes.size(); ++i) p = p * sizes[i] + c[i];
    g.members[r] = p;
  }
  std::size_t rank = 0;
  for (std::size_t a : axes) rank = rank * sizes[a] + mine[a];
  g.rank = rank;
  return g;
}

}  // namespace tessera::detail
