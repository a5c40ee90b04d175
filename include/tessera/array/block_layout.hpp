#pragma once
// A sharding's layout of one shape as plain values, and an array's blocks in this process:
// what the code that moves blocks (reshards, sums of partial results, to_host) reads, so that
// it is compiled once per element type and rank, not once per sharding (issue 14).

#include <array>
#include <cstddef>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/shape.hpp"
#include "tessera/core/sharding_layout.hpp"
#include "tessera/core/slice.hpp"

namespace tessera::detail {

/// A sharding's layout of one shape as plain values: its device ids, their blocks and replica ids.
template <std::size_t N>
struct block_layout {
  std::vector<int> ids;
  std::vector<std::array<slice, N>> blocks;
  std::vector<int> replica;
};

/// The layout of shape `shape` under the sharding `v` describes (compiled once per rank).
template <std::size_t N>
block_layout<N> layout_of_view(sharding_layout_view const& v, shape_t<N> const& shape) {
  block_layout<N> l;
  l.ids = *v.ids;
  l.blocks = view_blocks<N>(v, shape);
  l.replica.reserve(l.ids.size());
  for (std::size_t p = 0; p < l.ids.size(); ++p) l.replica.push_back(view_replica_id(v, p));
  return l;
}

/// The layout of shape `shape` under sharding s.
template <std::size_t N, class S>
block_layout<N> layout_of(S const& s, shape_t<N> const& shape) {
  return layout_of_view<N>(s.layout_view(), shape);
}

/// The blocks of array x in this process, by position (null for other processes' devices).
template <class T, std::size_t N, class S>
std::vector<T const*> local_block_data(array<T, N, S> const& x) {
  auto const& ids = x.sharding().device_ids();
  std::vector<T const*> data(ids.size(), nullptr);
  for (std::size_t p = 0; p < ids.size(); ++p)
    if (x.pool()->is_local(ids[p])) data[p] = x.block_data(p);
  return data;
}

}  // namespace tessera::detail
