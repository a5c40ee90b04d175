#pragma once
// Gathering a sharded array back into one host array.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/block_layout.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera {

namespace detail {

/// to_host's copies, compiled once per element type and rank: each device holding the first
/// replica of a non-empty block (`data[p]`) copies it into place in `dst`, in parallel.
template <class T, std::size_t N>
void gather_blocks(device_pool& pool, shape_t<N> const& shape, block_layout<N> const& l,
                   std::vector<T const*> const& data, T* dst) {
  auto const whole = full_block(shape);
  std::vector<int> writers;
  std::vector<std::size_t> pos_of(static_cast<std::size_t>(pool.global_size()), 0);
  for (std::size_t p = 0; p < l.ids.size(); ++p) {
    if (l.replica[p] != 0 || element_count(block_shape(l.blocks[p])) == 0) continue;
    writers.push_back(l.ids[p]);
    pos_of[static_cast<std::size_t>(l.ids[p])] = p;
  }
  pool.run(std::span<int const>(writers), [&](int d) {
    std::size_t const p = pos_of[static_cast<std::size_t>(d)];
    auto const& block = l.blocks[p];
    trace_span span("transfer", "to_host", element_count(block_shape(block)) * sizeof(T));
    copy_region(data[p], block, dst, whole, block);
  });
}

}  // namespace detail

/// np.copyto(out, x): writes the global array into an existing host array, resized
/// to x's shape if needed. Each device holding the first replica of a block copies
/// it into place, in parallel; reusing `out` avoids the host's page faults.
template <class T, std::size_t N, class S>
void to_host(array<T, N, S> const& x, xt::xtensor<T, N>& out) {
  if (!x.is_fully_addressable())
    throw std::invalid_argument(
        "tessera::to_host: the array has blocks on devices of other processes (it is not fully addressable); "
        "gather it with tessera::process_allgather(x), as multihost_utils.process_allgather");
  if (out.shape() != x.shape()) out.resize(x.shape());
  detail::gather_blocks<T, N>(*x.pool(), x.shape(), detail::layout_of(x.sharding(), x.shape()),
                              detail::local_block_data(x), out.data());
}

/// np.asarray(x) / jax.device_get(x): the global array in a new host array.
template <class T, std::size_t N, class S>
xt::xtensor<T, N> to_host(array<T, N, S> const& x) {
  auto out = xt::xtensor<T, N>::from_shape(x.shape());
  to_host(x, out);
  return out;
}

}  // namespace tessera
