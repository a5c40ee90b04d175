// jnp.take(table, ids, axis=0) with table: float32[16@X,8] and ids: int32[4@X,6] on Explicit axes: the
// indices are sharded over the axis that shards the table's rows.
// JAX: Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather indexing as out sharding could not be resolved unambiguously (or would require collectives on inputs).
// EXPECT: tessera::take: the indices are sharded over a mesh axis that also shards the table
// EXPECT: take_indices_use_a_mesh_axis_of_the_table<0, (tessera::axis_name)?{("X"|{88(, 0)*})}, false>
// EXPECT: reshard the indices off that axis
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(128.0f), {16, 8});
  xt::xtensor<int, 2> const ih = xt::reshape_view(xt::arange<int>(24) % 16, {4, 6});
  auto t = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));
#ifdef TESSERA_FIXED
  auto i = tessera::device_put(ih, tessera::named_sharding(mesh, P<"Y">{}));
  tessera::array r = tessera::take(t, i);  // partial over X, summed: float32[4@Y,6,8]
  return tessera::type_of(r) == "float32[4@Y,6,8]" ? 0 : 1;
#else
  auto i = tessera::device_put(ih, tessera::named_sharding(mesh, P<"X">{}));
  tessera::array r = tessera::take(t, i);
  return tessera::type_of(r) == "float32[4@X,6,8]" ? 0 : 1;
#endif
}
