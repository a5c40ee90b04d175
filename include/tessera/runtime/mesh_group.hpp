#pragma once
// Which devices a collective over some mesh axes runs among: those that share
// the caller's coordinates on every other axis (a row of the mesh, for one axis).

#include <cstddef>
#include <span>
#include <vector>

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
/// in the order given (JAX's axis_index over several axes).
inline group group_along(std::size_t pos, std::span<std::size_t const> sizes, std::span<std::size_t const> axes) {
  auto const mine = coordinates(pos, sizes);
  std::size_t k = 1;
  for (std::size_t a : axes) k *= sizes[a];
  group g;
  g.members.resize(k);
  std::vector<std::size_t> c = mine;
  for (std::size_t r = 0; r < k; ++r) {
    std::size_t rest = r;
    for (std::size_t i = axes.size(); i-- > 0;) {
      c[axes[i]] = rest % sizes[axes[i]];
      rest /= sizes[axes[i]];
    }
    std::size_t p = 0;
    for (std::size_t i = 0; i < c.size(); ++i) p = p * sizes[i] + c[i];
    g.members[r] = p;
  }
  std::size_t rank = 0;
  for (std::size_t a : axes) rank = rank * sizes[a] + mine[a];
  g.rank = rank;
  return g;
}

}  // namespace tessera::detail
