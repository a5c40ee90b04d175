// Seed 004's tour of collective operations (all-reduce, all-gather, all-to-all)
// on a 1-D mesh of 8 CPU devices, plus the reduce-scatter it lists. The seed
// calls the collectives inside jax.jit, where their axis name is unbound; the
// collectives need a shard_map around them, so each cell here is one.
#include <cstdio>
#include <exception>
#include <iostream>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xstrided_view.hpp>

#include <tessera/parallel.hpp>

#include "numpy_print.hpp"

using examples::print;
using tessera::none;
using tessera::P;

namespace {
bool report(char const* what, bool ok) {
  std::printf("%s matches unsharded: %s\n", what, ok ? "true" : "false");
  return ok;
}
}  // namespace

int main() {
  tessera::runtime rt{8};  // XLA_FLAGS=--xla_force_host_platform_device_count=8
  std::printf("Available devices: [");
  for (int d : tessera::devices()) std::printf(d ? ", CpuDevice(id=%d)" : "CpuDevice(id=%d)", d);
  std::printf("]\nDevice count: %d\n", tessera::device_count());

  // mesh_1d = Mesh(devices, axis_names=('devices',))
  auto const mesh_1d = tessera::make_mesh<"devices">({8});
  std::cout << "1D Mesh: " << mesh_1d << "\n";
  // mesh_2d = Mesh(np.array(devices[:4]).reshape((2, 2)), axis_names=('rows', 'cols'))
  std::cout << "2D Mesh: " << tessera::make_mesh<"rows", "cols">({2, 2}, std::vector<int>{0, 1, 2, 3}) << "\n";
  bool ok = true;

  // --- All-reduce --------------------------------------------------------
  // sharded_values = jnp.arange(1, n_devices + 1).reshape((n_devices, 1)), sharded P('devices', None):
  // device i holds [[i + 1]].
  int const n_devices = tessera::device_count();
  xt::xtensor<int, 2> const sharded_values = xt::reshape_view(xt::arange<int>(1, n_devices + 1), {n_devices, 1});
  auto const sharded_array =
      tessera::device_put(sharded_values, tessera::named_sharding(mesh_1d, P<"devices", none>{}));

  // jax.lax.psum(x, axis_name='devices'). out_specs names 'devices' so that each device's copy shows.
  auto all_reduce_sum = tessera::shard_map([](auto x) { return tessera::psum<"devices">(x); }, mesh_1d,
                                           tessera::in_specs(P<"devices", none>{}),
                                           tessera::out_specs(P<"devices", none>{}));
  auto const summed = tessera::to_host(all_reduce_sum(sharded_array));
  std::printf("Original values:\n");
  print(sharded_values);
  std::printf("After all-reduce sum:\n");
  print(summed);
  int const expected_sum = xt::sum(sharded_values)();
  std::printf("Expected sum: %d\n", expected_sum);
  ok &= report("all-reduce", summed == xt::xtensor<int, 2>(xt::ones<int>({n_devices, 1}) * expected_sum));

  // --- All-gather --------------------------------------------------------
  // jax.lax.all_gather(x, axis_name='devices', axis=0): every device gets all 8 blocks, stacked on a new
  // axis 0, so out_specs=P() (the result is the same on every device).
  auto all_gather = tessera::shard_map([](auto x) { return tessera::all_gather<"devices">(x, 0); }, mesh_1d,
                                       tessera::in_specs(P<"devices", none>{}), tessera::out_specs(P<>{}));
  auto const gathered = tessera::to_host(all_gather(sharded_array));
  std::printf("Original values:\n");
  print(sharded_values);
  std::printf("After all-gather:\n");
  print(gathered);
  auto const expected_gather = xt::reshape_view(xt::arange<int>(1, n_devices + 1), {n_devices, 1});
  std::printf("Expected result:\n");
  print(expected_gather);
  ok &= report("all-gather", xt::reshape_view(gathered, {n_devices, 1}) == expected_gather);

  // tiled=True concatenates instead of stacking: the (8, 1) array itself.
  auto all_gather_tiled =
      tessera::shard_map([](auto x) { return tessera::all_gather<"devices">(x, 0, tessera::tiled); }, mesh_1d,
                         tessera::in_specs(P<"devices", none>{}), tessera::out_specs(P<>{}));
  auto const gathered_tiled = tessera::to_host(all_gather_tiled(sharded_array));
  std::printf("After all-gather (tiled=True):\n");
  print(gathered_tiled);
  ok &= report("all-gather (tiled)", gathered_tiled == sharded_values);

  // --- All-to-all --------------------------------------------------------
  // data = jnp.arange(n_devices * n_devices).reshape((n_devices, n_devices)), rows over 'devices'.
  xt::xtensor<int, 2> const data = xt::reshape_view(xt::arange<int>(n_devices * n_devices), {n_devices, n_devices});
  auto const row_sharding = tessera::named_sharding(mesh_1d, P<"devices", none>{});
  auto const sharded_data = tessera::device_put(data, row_sharding);

  // The seed's jax.lax.all_to_all(x, 'devices', split_axis=0, concat_axis=1) splits each device's (1, 8)
  // row into 8 along a dimension of size 1; JAX refuses that, and so does tessera:
  auto seed_all_to_all =
      tessera::shard_map([](auto x) { return tessera::all_to_all<"devices">(x, 0, 1); }, mesh_1d,
                         tessera::in_specs(P<"devices", none>{}), tessera::out_specs(P<"devices", none>{}));
  try {
    (void)seed_all_to_all(sharded_data);
    ok = false;
  } catch (tessera::device_error const& e) {
    // Every device throws the same message; show one.
    try {
      std::rethrow_exception(e.failures().front().second);
    } catch (std::exception const& first) {
      std::printf("split_axis=0, concat_axis=1: %s\n", first.what());
    }
  }

  // Splitting the 8 columns instead sends column j of every row to device j, which stacks them by
  // source device along axis 0: device j ends up with column j. The data is unchanged and its
  // sharding goes from rows to columns, which is what the seed wants:
  //   jax.lax.all_to_all(x, 'devices', split_axis=1, concat_axis=0), out_specs=P(None, 'devices')
  auto all_to_all = tessera::shard_map([](auto x) { return tessera::all_to_all<"devices">(x, 1, 0); }, mesh_1d,
                                       tessera::in_specs(P<"devices", none>{}),
                                       tessera::out_specs(P<none, "devices">{}));
  auto const result = all_to_all(sharded_data);
  std::printf("Original data:\n");
  print(data);
  std::printf("After all-to-all:\n");
  print(tessera::to_host(result));
  std::cout << "Original sharding: " << sharded_data.sharding() << "\n";
  std::cout << "Result sharding: " << result.sharding() << "\n";
  ok &= report("all-to-all", tessera::to_host(result) == data);

  // The same exchange seen from one device: its block before (a row) and after (a column).
  auto const shards_before = sharded_data.addressable_shards();
  auto const shards_after = result.addressable_shards();
  auto const& before = shards_before[1];
  auto const& after = shards_after[1];
  std::printf("device 1 before: shape (%zu, %zu)\n", before.data.shape()[0], before.data.shape()[1]);
  print(before.data);
  std::printf("device 1 after: shape (%zu, %zu)\n", after.data.shape()[0], after.data.shape()[1]);
  print(after.data);

  // --- Reduce-scatter ----------------------------------------------------
  // jax.lax.psum_scatter(x, 'devices', scatter_dimension=1, tiled=True): the sum of every device's row,
  // of which device j keeps column j; out_specs=P(None, 'devices') lays those out as the column sums.
  auto reduce_scatter = tessera::shard_map(
      [](auto x) { return tessera::psum_scatter<"devices">(x, 1, tessera::tiled); }, mesh_1d,
      tessera::in_specs(P<"devices", none>{}), tessera::out_specs(P<none, "devices">{}));
  auto const column_sums = tessera::to_host(reduce_scatter(sharded_data));
  std::printf("After reduce-scatter (column sums):\n");
  print(column_sums);
  ok &= report("reduce-scatter", column_sums == xt::xtensor<int, 2>(xt::sum(data, {0}, xt::keep_dims)));

  return ok ? 0 : 1;
}
