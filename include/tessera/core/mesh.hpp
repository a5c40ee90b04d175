#pragma once
// The device mesh: axis names and types in the type, sizes and device ids at run time.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstddef>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/core/axis_type.hpp"
#include "tessera/core/fixed_string.hpp"

namespace tessera {

/// One named mesh axis with its type; `mesh_axis("x")` is an Auto axis (the seeds' default; JAX 0.12's make_mesh defaults to Explicit).
struct mesh_axis {
  axis_name name{};
  axis_type type = axis_type::auto_;
  constexpr mesh_axis() = default;
  constexpr mesh_axis(axis_name n, axis_type t = axis_type::auto_) : name(n), type(t) {}
  template <std::size_t N>
  constexpr mesh_axis(char const (&s)[N]) : name(s) {}  // NOLINT: literals are the common spelling
  friend constexpr bool operator==(mesh_axis const&, mesh_axis const&) = default;
};

namespace detail {
/// The most axes a mesh may have: a collective's signature, and the key a shard_map body keeps
/// its groups by, give each axis index 4 bits (runtime/team.hpp's sign_axes).
inline constexpr std::size_t max_mesh_axes = 16;

/// The coordinate along axis `axis` of the device at row-major position `pos` of a grid whose
/// axis sizes are `sizes` (a mesh's, or a sharding's layout_view's).
inline std::size_t grid_coordinate(std::span<int const> sizes, std::size_t pos, std::size_t axis) {
  std::size_t stride = 1;
  for (std::size_t i = sizes.size(); i-- > axis + 1;) stride *= static_cast<std::size_t>(sizes[i]);
  return (pos / stride) % static_cast<std::size_t>(sizes[axis]);
}

inline std::string join_ints(auto const& xs) {
  std::ostringstream os;
  os << '(';
  bool first = true;
  for (auto x : xs) {
    os << (first ? "" : ", ") << x;
    first = false;
  }
  if (xs.size() == 1) os << ',';
  os << ')';
  return os.str();
}
}  // namespace detail

/// jax.sharding.Mesh: an N-d grid of logical devices whose axes have names and types.
/// The axes are template arguments (so specs are checked against them at compile time);
/// the axis sizes and the device ids are run-time values, validated on construction.
template <mesh_axis... Axes>
class mesh {
 public:
  /// Number of mesh axes (len(mesh.axis_names)).
  static constexpr std::size_t rank = sizeof...(Axes);
  /// The axes as a constexpr array, for compile-time lookups.
  static constexpr std::array<mesh_axis, rank> axes{Axes...};

  /// Position of an axis in the mesh, or nullopt (a plain constexpr search so checks stay cheap).
  static constexpr std::optional<std::size_t> index_of(axis_name const& n) {
    for (std::size_t i = 0; i < rank; ++i)
      if (axes[i].name == n) return i;
    return std::nullopt;
  }
  /// Whether the mesh has an axis named `n` (`n in mesh.axis_names`).
  static constexpr bool has_axis(axis_name const& n) { return index_of(n).has_value(); }
  /// The type of axis `n` (mesh.axis_types).
  static constexpr axis_type type_of(std::size_t i) { return axes[i].type; }

  static_assert([] {
    for (std::size_t i = 0; i < rank; ++i) {
      if (axes[i].name.empty()) return false;
      for (std::size_t j = i + 1; j < rank; ++j)
        if (axes[i].name == axes[j].name) return false;
    }
    return true;
  }(), "tessera: a mesh's axis names must be non-empty and distinct (as in jax.make_mesh)");
  static_assert(rank <= detail::max_mesh_axes,
                "tessera: a mesh has at most 16 axes (a collective names each of its axes in 4 bits)");

  /// Mesh over the given device ids laid out row-major over the axis sizes, of the runtime
  /// numbered `runtime_id` (make_mesh gives it; 0: whichever runtime is current when used).
  mesh(std::array<int, rank> const& sizes, std::vector<int> device_ids, std::uint64_t runtime_id = 0)
      : sizes_(sizes), device_ids_(std::move(device_ids)), runtime_id_(runtime_id) {
    std::size_t product = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      if (sizes_[i] < 1)
        throw std::invalid_argument("tessera::mesh: axis '" + std::string(axes[i].name.view()) +
                                    "' has size " + std::to_string(sizes_[i]) + "; axis sizes must be at least 1");
      product *= static_cast<std::size_t>(sizes_[i]);
    }
    if (product != device_ids_.size())
      throw std::invalid_argument("tessera::mesh: axis sizes " + detail::join_ints(sizes_) + " make " +
                                  std::to_string(product) + " devices but " + std::to_string(device_ids_.size()) +
                                  " device ids were given");
    auto sorted = device_ids_;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] < 0)
        throw std::invalid_argument("tessera::mesh: device id " + std::to_string(sorted[i]) + " is negative");
      if (i > 0 && sorted[i] == sorted[i - 1])
        throw std::invalid_argument("tessera::mesh: device id " + std::to_string(sorted[i]) +
                                    " appears twice in the device grid");
    }
  }

  /// Size of mesh axis i (mesh.shape[name]).
  int size(std::size_t i) const { return sizes_[i]; }
  /// All axis sizes, in axis order (mesh.axis_sizes).
  std::array<int, rank> const& sizes() const { return sizes_; }
  /// Total number of devices in the mesh (mesh.size).
  std::size_t num_devices() const { return device_ids_.size(); }
  /// Device ids in row-major mesh order (mesh.devices.flat).
  std::vector<int> const& device_ids() const { return device_ids_; }
  /// The largest device id + 1: how many runtime devices the mesh needs (INT_MAX + 1 fits).
  long long devices_needed() const {
    long long m = 0;
    for (int d : device_ids_) m = std::max(m, static_cast<long long>(d) + 1);
    return m;
  }
  /// The runtime whose devices these are (runtime::id()), or 0 for the current one.
  std::uint64_t runtime_id() const { return runtime_id_; }

  /// Mesh coordinate along axis `axis` of the device at row-major position `pos`.
  int coordinate(std::size_t pos, std::size_t axis) const {
    return static_cast<int>(detail::grid_coordinate(sizes_, pos, axis));
  }
  /// Row-major position of device id `d` in the mesh, or nullopt if the mesh does not use it.
  std::optional<std::size_t> position_of(int d) const {
    auto it = std::find(device_ids_.begin(), device_ids_.end(), d);
    if (it == device_ids_.end()) return std::nullopt;
    return static_cast<std::size_t>(it - device_ids_.begin());
  }

  friend bool operator==(mesh const& a, mesh const& b) {
    // Devices of two runtimes are different devices, however alike the grids (as in JAX).
    return a.sizes_ == b.sizes_ && a.device_ids_ == b.device_ids_ && a.runtime_id_ == b.runtime_id_;
  }
  template <mesh_axis... B>
  friend bool operator==(mesh const&, mesh<B...> const&) {
    return false;  // different axes or axis types: never the same mesh
  }

  /// str(mesh) as JAX prints it, also inside NamedSharding's repr:
  /// `Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto))` (JAX shows the axis types always, since 0.5.3).
  friend std::ostream& operator<<(std::ostream& os, mesh const& m) {
    os << "Mesh(";
    for (std::size_t i = 0; i < rank; ++i) os << '\'' << axes[i].name.view() << "': " << m.sizes_[i] << ", ";
    os << "axis_types=(";
    for (std::size_t i = 0; i < rank; ++i) os << (i ? ", " : "") << to_string(axes[i].type);
    os << (rank == 1 ? ",)" : ")");
    return os << ')';
  }

 private:
  std::array<int, rank> sizes_;
  std::vector<int> device_ids_;
  std::uint64_t runtime_id_ = 0;
};

/// Per-axis types for make_mesh, `axis_types=(AxisType.Explicit, AxisType.Auto)` in JAX.
template <axis_type... T>
struct axis_types {};

}  // namespace tessera
