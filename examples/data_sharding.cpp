// The seeds' "Key concept: Data sharding": an array on one device, then the
// same array laid out over a 2x4 mesh of CPU devices.
#include <iostream>

#include <tessera/array.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xstrided_view.hpp>

int main() {
  tessera::runtime rt{8};  // 8 logical CPU devices, like jax_num_cpu_devices=8
  std::cout << "devices: " << tessera::device_count() << "\n";

  // arr = jnp.arange(32.0).reshape(4, 8): uncommitted, on device 0.
  auto arr = tessera::device_put(xt::reshape_view(xt::arange<float>(32), {4, 8}));
  std::cout << "arr.devices(): {";
  for (int d : arr.devices()) std::cout << "CpuDevice(id=" << d << ")";
  std::cout << "}\n";
  std::cout << arr.sharding() << "\n";
  tessera::visualize_array_sharding(arr);

  // mesh = jax.make_mesh((2, 4), ('x', 'y')); sharding = NamedSharding(mesh, P('x', 'y'))
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
  auto sharding = tessera::named_sharding(mesh, tessera::P<"x", "y">{});
  std::cout << sharding << "\n";

  auto arr_sharded = tessera::device_put(arr, sharding);
  std::cout << tessera::typeof(arr_sharded) << "\n";
  std::cout << tessera::to_host(arr_sharded) << "\n";
  tessera::visualize_array_sharding(arr_sharded);

  // Each device's block: where it sits in the global array and what it holds.
  for (auto const& sh : arr_sharded.addressable_shards()) {
    std::cout << "device " << sh.device << " index (" << sh.index[0] << ", " << sh.index[1] << ") replica "
              << sh.replica_id << ": " << xt::flatten(sh.data) << "\n";
  }

  // P('x', None): blocks of rows, each held by the 4 devices along 'y'.
  auto rows = tessera::device_put(arr, tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  std::cout << tessera::typeof(rows) << "\n";
  tessera::visualize_array_sharding(rows);
}
