// jnp.take_along_axis(x, idx, axis=1) with x: float32[8,8@Y] on Explicit axes.
// JAX: Use `.at[...].get(out_sharding=)` to provide output PartitionSpec for the gather indexing as out sharding could not be resolved unambiguously (or would require collectives on inputs).
// EXPECT: tessera::take_along_axis: x is sharded along the axis it is indexed on
// EXPECT: take_along_axis_axis_must_be_unsharded<1, (tessera::axis_name)?{("Y"|{89(, 0)*})}, false>
// EXPECT: reshard x to None there
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
  xt::xtensor<int, 2> const ih = xt::reshape_view(xt::arange<int>(32) % 8, {8, 4});
  auto i = tessera::device_put(ih, tessera::named_sharding(mesh, P<"X">{}));
#ifdef TESSERA_FIXED
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));
#else
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "Y">{}));
#endif
  tessera::array r = tessera::take_along_axis<1>(x, i);  // float32[8@X,4]
  return tessera::type_of(r) == "float32[8@X,4]" ? 0 : 1;
}
