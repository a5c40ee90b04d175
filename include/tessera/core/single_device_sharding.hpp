#pragma once
// SingleDeviceSharding: the whole array on one device (where uncommitted arrays live in JAX).

#include <array>
#include <cstddef>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/core/partition_spec.hpp"
#include "tessera/core/sharding_layout.hpp"
#include "tessera/core/slice.hpp"

namespace tessera {

/// jax.sharding.SingleDeviceSharding: one device holds the whole array.
class single_device_sharding {
 public:
  static constexpr std::size_t spec_size = 0;
  static constexpr std::array<dim_spec, 0> spec_dims{};

  /// SingleDeviceSharding(device)
  explicit single_device_sharding(int device = 0) : ids_{device} {
    if (device < 0) throw std::invalid_argument("tessera::single_device_sharding: device id " + std::to_string(device) + " is negative");
  }
  /// The device holding the array.
  int device() const { return ids_[0]; }
  std::vector<int> const& device_ids() const { return ids_; }
  std::size_t num_devices() const { return 1; }
  std::size_t num_shards(std::size_t) const { return 1; }
  std::size_t shard_index(std::size_t, std::size_t) const { return 0; }
  template <std::size_t N>
  std::array<slice, N> block(std::size_t, std::array<std::size_t, N> const& shape) const {
    std::array<slice, N> out{};
    for (std::size_t i = 0; i < N; ++i) out[i] = {0, shape[i]};
    return out;
  }
  template <std::size_t N>
  std::array<std::size_t, N> shard_shape(std::array<std::size_t, N> const& shape) const { return shape; }
  int replica_id(std::size_t) const { return 0; }
  /// The layout as plain values (tessera's own, no JAX name): no mesh axes, one device.
  detail::sharding_layout_view layout_view() const { return {{}, {}, &ids_}; }
  bool is_fully_replicated() const { return true; }
  template <std::size_t N>
  std::map<int, std::array<slice, N>> devices_indices_map(std::array<std::size_t, N> const& shape) const {
    return {{device(), block(0, shape)}};
  }
  template <std::size_t N>
  std::vector<int> devices_holding(std::array<slice, N> const& index, std::array<std::size_t, N> const& shape) const {
    return index == block(0, shape) ? ids_ : std::vector<int>{};
  }
  friend bool operator==(single_device_sharding const& a, single_device_sharding const& b) { return a.device() == b.device(); }
  /// `SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)`, as JAX prints it.
  friend std::ostream& operator<<(std::ostream& os, single_device_sharding const& s) {
    return os << "SingleDeviceSharding(device=CpuDevice(id=" << s.device() << "), memory_kind=unpinned_host)";
  }

 private:
  std::vector<int> ids_;
};

}  // namespace tessera
