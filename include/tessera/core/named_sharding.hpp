#pragma once
// NamedSharding: a mesh plus a PartitionSpec, and the index arithmetic that
// answers which block of a global array each device holds.

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <ostream>
#include <type_traits>
#include <vector>

#include "tessera/core/diagnostics.hpp"
#include "tessera/core/mesh.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/core/sharding_layout.hpp"
#include "tessera/core/slice.hpp"

namespace tessera {

template <class T>
struct is_mesh : std::false_type {};
template <mesh_axis... A>
struct is_mesh<mesh<A...>> : std::true_type {};
/// A tessera::mesh<...> type.
template <class T>
concept mesh_type = is_mesh<std::remove_cvref_t<T>>::value;

template <class T>
struct is_partition_spec : std::false_type {};
template <dim_spec... D>
struct is_partition_spec<P<D...>> : std::true_type {};
/// A tessera::P<...> type.
template <class T>
concept partition_spec_type = is_partition_spec<std::remove_cvref_t<T>>::value;

namespace detail {
/// The first axis of Spec that Mesh does not have; an empty name when there is none.
template <class Mesh, class Spec>
constexpr axis_name first_axis_not_in_mesh() {
  for (dim_spec const& d : Spec::dims)
    for (std::size_t a = 0; a < d.count(); ++a)
      if (!Mesh::has_axis(d.axis(a))) return d.axis(a);
  return {};
}
}  // namespace detail

/// jax.sharding.NamedSharding: how an array is laid out over `Mesh` according to `Spec`.
template <mesh_type Mesh, partition_spec_type Spec>
class named_sharding {
  // A plain static_assert (not a failing class template) so clang reports one error, not three.
  static_assert(diagnostic::spec_axis_must_be_in_mesh<detail::first_axis_not_in_mesh<Mesh, Spec>(), Mesh>,
                "tessera: named_sharding(mesh, spec): the PartitionSpec names a mesh axis that is not in the mesh "
                "(the axis is the first argument of 'spec_axis_must_be_in_mesh<axis, mesh>'); "
                "use one of the mesh's axis names");

 public:
  using mesh_type = Mesh;
  using spec_type = Spec;
  /// Number of spec entries; array dimensions past it are replicated.
  static constexpr std::size_t spec_size = Spec::size;
  /// The spec entries as a constexpr array (what typeof and propagation read).
  static constexpr std::array<dim_spec, Spec::size> spec_dims = Spec::dims;

  /// Each spec entry's mesh axes as indices into the mesh, major to minor: found once per type,
  /// not by reading the entry's text on every block a device computes. (An axis the mesh lacks
  /// reads as 0 here; such a spec is refused at compile time with its own message.)
  using entry_axes_t = detail::spec_entry_axes;
  static constexpr std::array<entry_axes_t, Spec::size> entry_axes = [] {
    std::array<entry_axes_t, Spec::size> out{};
    for (std::size_t i = 0; i < Spec::size; ++i) {
      dim_spec const d = Spec::dims[i];
      out[i].count = std::min(d.count(), dim_spec::max_axes);
      for (std::size_t a = 0; a < out[i].count; ++a)
        out[i].axis[a] = Mesh::index_of(d.axis(a)).value_or(0);
    }
    return out;
  }();

  /// NamedSharding(mesh, spec).
  named_sharding(Mesh m, Spec = {}) : mesh_(std::move(m)) {}

  /// sharding.mesh
  Mesh const& mesh() const { return mesh_; }
  /// sharding.spec
  static constexpr Spec spec() { return {}; }
  /// Devices in mesh order (sharding.mesh.devices.flat); a device's position is its index here.
  std::vector<int> const& device_ids() const { return mesh_.device_ids(); }
  /// len(sharding.device_set)
  std::size_t num_devices() const { return mesh_.num_devices(); }

  /// How many blocks dimension `dim` is cut into: the product of its axes' sizes.
  std::size_t num_shards(std::size_t dim) const { return detail::view_num_shards(layout_view(), dim); }
  /// Which block along `dim` the device at mesh position `pos` holds (axes major to minor).
  std::size_t shard_index(std::size_t pos, std::size_t dim) const {
    return detail::view_shard_index(layout_view(), pos, dim);
  }
  /// The block (one slice per dimension) held by the device at mesh position `pos`.
  template <std::size_t N>
  std::array<slice, N> block(std::size_t pos, std::array<std::size_t, N> const& shape) const {
    std::array<slice, N> out{};
    detail::view_block(layout_view(), pos, shape.data(), N, out.data());
    return out;
  }
  /// sharding.shard_shape(global_shape): the largest block (all blocks when the shape divides evenly).
  template <std::size_t N>
  std::array<std::size_t, N> shard_shape(std::array<std::size_t, N> const& shape) const {
    std::array<std::size_t, N> out{};
    for (std::size_t i = 0; i < N; ++i) out[i] = block_range(shape[i], num_shards(i), 0).size();
    return out;
  }
  /// Replica id of the device at `pos`: its row-major index over the mesh axes the spec does not use.
  int replica_id(std::size_t pos) const { return detail::view_replica_id(layout_view(), pos); }
  /// The layout as plain values (tessera's own, no JAX name): what code compiled once for every
  /// sharding type reads (core/sharding_layout.hpp).
  detail::sharding_layout_view layout_view() const { return layout_view_on(mesh_); }
  /// The layout of this sharding type over mesh m as plain values (tessera's own), without
  /// making the sharding (no copy of the mesh): it refers to m.
  static detail::sharding_layout_view layout_view_on(Mesh const& m) {
    return {std::span<int const>(m.sizes()), std::span<detail::spec_entry_axes const>(entry_axes), &m.device_ids()};
  }
  /// Whether the spec shards anything over `axis`.
  static constexpr bool uses_axis(axis_name const& axis) {
    for (auto const& d : spec_dims)
      if (d.uses(axis)) return true;
    return false;
  }
  /// sharding.is_fully_replicated: every device holds the whole array.
  bool is_fully_replicated() const {
    for (std::size_t i = 0; i < spec_size; ++i)
      if (num_shards(i) > 1) return false;
    return true;
  }
  /// sharding.devices_indices_map(shape): device id -> its block.
  template <std::size_t N>
  std::map<int, std::array<slice, N>> devices_indices_map(std::array<std::size_t, N> const& shape) const {
    std::map<int, std::array<slice, N>> out;
    for (std::size_t p = 0; p < num_devices(); ++p) out.emplace(device_ids()[p], block(p, shape));
    return out;
  }
  /// Sorted ids of the devices holding exactly the block `index`.
  template <std::size_t N>
  std::vector<int> devices_holding(std::array<slice, N> const& index, std::array<std::size_t, N> const& shape) const {
    std::vector<int> out;
    for (std::size_t p = 0; p < num_devices(); ++p)
      if (block(p, shape) == index) out.push_back(device_ids()[p]);
    std::sort(out.begin(), out.end());
    return out;
  }

  /// Same mesh and the same layout (trailing Nones ignored), as JAX's `==` on shardings.
  template <class M2, class S2>
  friend bool operator==(named_sharding const& a, named_sharding<M2, S2> const& b) {
    if constexpr (std::is_same_v<Mesh, M2>) {
      return a.mesh() == b.mesh() && same_layout(spec_dims, named_sharding<M2, S2>::spec_dims);
    } else {
      return false;
    }
  }

  /// repr(sharding) as JAX prints it:
  /// `NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x', 'y'), memory_kind=device)`.
  /// Blocks live in the devices' own memory, JAX's default memory kind `device`.
  friend std::ostream& operator<<(std::ostream& os, named_sharding const& s) {
    return os << "NamedSharding(mesh=" << s.mesh_ << ", spec=" << Spec{} << ", memory_kind=device)";
  }

 private:
  Mesh mesh_;
};

template <class T>
struct is_named_sharding : std::false_type {};
template <class M, class S>
struct is_named_sharding<named_sharding<M, S>> : std::true_type {};

}  // namespace tessera
