#pragma once
// What every sharding answers, as one concept the array layer is written against.

#include <array>
#include <concepts>
#include <cstddef>
#include <vector>

#include "tessera/core/named_sharding.hpp"
#include "tessera/core/single_device_sharding.hpp"

namespace tessera {

/// jax.sharding.Sharding: a layout of arrays over devices (NamedSharding or SingleDeviceSharding).
template <class S>
concept sharding = requires(S const& s, std::array<std::size_t, 2> shape) {
  { S::spec_size } -> std::convertible_to<std::size_t>;
  { s.device_ids() } -> std::convertible_to<std::vector<int> const&>;
  { s.num_devices() } -> std::convertible_to<std::size_t>;
  { s.block(std::size_t{}, shape) } -> std::same_as<std::array<slice, 2>>;
  { s.replica_id(std::size_t{}) } -> std::convertible_to<int>;
  { s.num_shards(std::size_t{}) } -> std::convertible_to<std::size_t>;
  { s.shard_index(std::size_t{}, std::size_t{}) } -> std::convertible_to<std::size_t>;
  { s.is_fully_replicated() } -> std::convertible_to<bool>;
  { s.layout_view() } -> std::same_as<detail::sharding_layout_view>;
};

}  // namespace tessera
