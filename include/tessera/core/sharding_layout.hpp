#pragma once
// A sharding's layout as plain values (its mesh's axis sizes, its device ids and each spec
// entry's mesh axes), and the block arithmetic over it: compiled once for every sharding type,
// so that code which only needs blocks and replica ids is not compiled again per sharding
// (issue 31: compile time).

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "tessera/core/mesh.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/core/slice.hpp"

namespace tessera::detail {

/// A spec entry's mesh axes as indices into the mesh, major to minor.
struct spec_entry_axes {
  std::array<std::size_t, dim_spec::max_axes> axis{};
  std::size_t count = 0;
};

/// A sharding as plain values: the mesh's axis sizes (row-major), the spec's entries (array
/// dimensions past them are replicated) and the device ids in mesh order. It refers to the
/// sharding's own storage: it lives no longer than the sharding.
struct sharding_layout_view {
  std::span<int const> mesh_sizes;
  std::span<spec_entry_axes const> entries;
  std::vector<int> const* ids = nullptr;
};

/// How many blocks array dimension `dim` is cut into: the product of its axes' sizes.
inline std::size_t view_num_shards(sharding_layout_view const& v, std::size_t dim) {
  if (dim >= v.entries.size()) return 1;
  auto const& e = v.entries[dim];
  std::size_t k = 1;
  for (std::size_t a = 0; a < e.count; ++a) k *= static_cast<std::size_t>(v.mesh_sizes[e.axis[a]]);
  return k;
}

/// Which block along `dim` the device at mesh position `pos` holds (axes major to minor).
inline std::size_t view_shard_index(sharding_layout_view const& v, std::size_t pos, std::size_t dim) {
  if (dim >= v.entries.size()) return 0;
  auto const& e = v.entries[dim];
  std::size_t idx = 0;
  for (std::size_t a = 0; a < e.count; ++a) {
    std::size_t const ax = e.axis[a];
    idx = idx * static_cast<std::size_t>(v.mesh_sizes[ax]) + grid_coordinate(v.mesh_sizes, pos, ax);
  }
  return idx;
}

/// The block of a shape (`rank` sizes at `shape`) held by the device at mesh position `pos`,
/// one slice per dimension written at `out`.
inline void view_block(sharding_layout_view const& v, std::size_t pos, std::size_t const* shape, std::size_t rank,
                       slice* out) {
  for (std::size_t i = 0; i < rank; ++i) out[i] = block_range(shape[i], view_num_shards(v, i), view_shard_index(v, pos, i));
}

/// The replica id of the device at `pos`: its row-major index over the mesh axes no entry uses.
inline int view_replica_id(sharding_layout_view const& v, std::size_t pos) {
  int id = 0;
  for (std::size_t ax = 0; ax < v.mesh_sizes.size(); ++ax) {
    bool used = false;
    for (auto const& e : v.entries)
      for (std::size_t a = 0; a < e.count; ++a) used = used || e.axis[a] == ax;
    if (used) continue;
    id = id * v.mesh_sizes[ax] + static_cast<int>(grid_coordinate(v.mesh_sizes, pos, ax));
  }
  return id;
}

/// Every device's block of `shape`, in mesh order (compiled once per rank).
template <std::size_t N>
std::vector<std::array<slice, N>> view_blocks(sharding_layout_view const& v, std::array<std::size_t, N> const& shape) {
  std::size_t const n = v.ids->size();
  std::vector<std::array<slice, N>> blocks(n);
  for (std::size_t p = 0; p < n; ++p) view_block(v, p, shape.data(), N, blocks[p].data());
  return blocks;
}

}  // namespace tessera::detail
