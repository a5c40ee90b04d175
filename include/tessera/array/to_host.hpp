#pragma once
// Gathering a sharded array back into one host array.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <vector>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera {

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
  auto const& s = x.sharding();
  auto const whole = detail::full_block(x.shape());
  std::vector<int> writers;
  std::vector<std::size_t> pos_of(static_cast<std::size_t>(x.pool()->global_size()), 0);
  for (std::size_t p = 0; p < s.num_devices(); ++p) {
    if (s.replica_id(p) != 0) continue;
    if (detail::element_count(detail::block_shape(s.block(p, x.shape()))) == 0) continue;
    writers.push_back(s.device_ids()[p]);
    pos_of[static_cast<std::size_t>(s.device_ids()[p])] = p;
  }
  T* dst = out.data();
  x.pool()->run(std::span<int const>(writers), [&](int d) {
    std::size_t const p = pos_of[static_cast<std::size_t>(d)];
    auto const block = s.block(p, x.shape());
    detail::trace_span span("transfer", "to_host",
                            detail::element_count(detail::block_shape(block)) * sizeof(T));
    detail::copy_region(x.block_data(p), block, dst, whole, block);
  });
}

/// np.asarray(x) / jax.device_get(x): the global array in a new host array.
template <class T, std::size_t N, class S>
xt::xtensor<T, N> to_host(array<T, N, S> const& x) {
  auto out = xt::xtensor<T, N>::from_shape(x.shape());
  to_host(x, out);
  return out;
}

}  // namespace tessera
