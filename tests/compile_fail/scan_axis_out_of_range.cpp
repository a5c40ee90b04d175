// jax.lax.cummax(x, 2) with x of rank 2.
// JAX: axis 2 is out of bounds for array of shape (8, 4)
// EXPECT: tessera::cumsum/cumprod/cummax/cummin: the axis is out of range for the operand's rank
// EXPECT: scan_axis_out_of_range_for_the_operand<2, 2, false>
// EXPECT: axes go from -rank to rank - 1
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::cummax<-1>(x);
#else
  tessera::array r = tessera::cummax<2>(x);
#endif
  return tessera::type_of(r) == "float32[8@X,4@Y]" ? 0 : 1;
}
