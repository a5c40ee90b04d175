#pragma once
// Asynchronous collectives between processes (parallel/async_collectives.hpp): where one is
// mapped onto a single nonblocking MPI call, the start posts it and the future completes it.
// Each function gives an empty optional where the collective is not mapped so; the caller then
// runs the blocking collective at the start.

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "tessera/parallel/collective_future.hpp"
#include "tessera/parallel/collectives.hpp"

namespace tessera::detail {

template <bool Tiled, axis_name... A, class V>
auto mpi_gather_async(V const& v, std::size_t axis) {
  if constexpr (Tiled)
    return std::optional<collective_future<decltype(all_gather<A...>(v, axis, tiled))>>{};
  else
    return std::optional<collective_future<decltype(all_gather<A...>(v, axis))>>{};
}

template <class Vma, axis_name... A, class V>
auto mpi_reduce_async(V const& v, op_kind, reduce_op, bool) {
  return std::optional<collective_future<decltype(pmax<A...>(v))>>{};
}

template <bool Tiled, axis_name... A, class V>
auto mpi_scatter_async(V const& v, std::size_t dim) {
  if constexpr (Tiled)
    return std::optional<collective_future<decltype(psum_scatter<A...>(v, dim, tiled))>>{};
  else
    return std::optional<collective_future<decltype(psum_scatter<A...>(v, dim))>>{};
}

template <class Vma, axis_name... A, class V>
auto mpi_permute_async(V const& v, std::vector<std::pair<int, int>> const& perm) {
  return std::optional<collective_future<decltype(ppermute<A...>(v, perm))>>{};
}

}  // namespace tessera::detail
