#pragma once
// jax.make_mesh: a mesh over the current runtime's devices.

#include <array>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/core/mesh.hpp"
#include "tessera/runtime/runtime.hpp"

namespace tessera {

namespace detail {
template <class Mesh, std::size_t R>
Mesh mesh_on_runtime(std::array<int, R> const& sizes, std::vector<int> ids, bool explicit_ids) {
  auto const pool = current_pool();
  int const have = pool->global_size();  // a mesh may span processes (process-major ids)
  if (!explicit_ids) {
    // Sizes below 1 are left to the mesh's own message; the product of the others is checked
    // for overflow (three axes of 2^31 - 1 do not fit in 64 bits).
    long long product = 1;
    bool overflow = false, positive = true;
    for (int s : sizes) {
      if (s < 1) positive = false;
      else overflow = overflow || __builtin_mul_overflow(product, static_cast<long long>(s), &product);
    }
    if (positive && (overflow || product > have))
      throw std::invalid_argument("tessera::make_mesh: axis sizes " + join_ints(sizes) + " need " +
                                  (overflow ? std::string("more than 2^63") : std::to_string(product)) +
                                  " devices but the runtime has " + std::to_string(have) +
                                  (overflow ? std::string("") : "; create tessera::runtime{" + std::to_string(product) +
                                                                    "} or set TESSERA_NUM_DEVICES"));
    if (positive) {
      ids.resize(static_cast<std::size_t>(product));
      std::iota(ids.begin(), ids.end(), 0);  // the first N devices, as jax.make_mesh takes them
    }
  }
  Mesh m(sizes, std::move(ids), pool->id());
  if (m.devices_needed() > have)
    throw std::invalid_argument("tessera::make_mesh: the device grid uses device id " +
                                std::to_string(m.devices_needed() - 1) + " but the runtime has " +
                                std::to_string(have) + " devices");
  return m;
}
}  // namespace detail

/// jax.make_mesh(sizes, names): a mesh of Auto axes over the first prod(sizes) devices (JAX 0.12 makes Explicit ones: docs/differences-from-jax.md).
template <axis_name... Names>
auto make_mesh(std::array<int, sizeof...(Names)> const& sizes) {
  return detail::mesh_on_runtime<mesh<mesh_axis(Names)...>>(sizes, {}, false);
}
/// jax.make_mesh(sizes, names, axis_types=(T,)*n): every axis of type Tag::value.
template <axis_name... Names, class Tag>
  requires requires { Tag::value; }
auto make_mesh(std::array<int, sizeof...(Names)> const& sizes, Tag) {
  return detail::mesh_on_runtime<mesh<mesh_axis(Names, Tag::value)...>>(sizes, {}, false);
}
/// jax.make_mesh(sizes, names, axis_types=(...)) with one type per axis.
template <axis_name... Names, axis_type... Types>
auto make_mesh(std::array<int, sizeof...(Names)> const& sizes, axis_types<Types...>) {
  static_assert(sizeof...(Names) == sizeof...(Types), "tessera::make_mesh: give one axis type per mesh axis");
  return detail::mesh_on_runtime<mesh<mesh_axis(Names, Types)...>>(sizes, {}, false);
}
/// jax.sharding.Mesh(np.array(device_ids).reshape(sizes), names): an explicit device grid, any order.
template <axis_name... Names>
auto make_mesh(std::array<int, sizeof...(Names)> const& sizes, std::vector<int> device_ids) {
  return detail::mesh_on_runtime<mesh<mesh_axis(Names)...>>(sizes, std::move(device_ids), true);
}
/// An explicit device grid whose axes all have the type Tag::value.
template <axis_name... Names, class Tag>
  requires requires { Tag::value; }
auto make_mesh(std::array<int, sizeof...(Names)> const& sizes, std::vector<int> device_ids, Tag) {
  return detail::mesh_on_runtime<mesh<mesh_axis(Names, Tag::value)...>>(sizes, std::move(device_ids), true);
}

}  // namespace tessera
