// jnp.cumsum(x, axis=0) with x: float32[8@X,4@Y] on Explicit axes.
// JAX: Input should be unsharded over the axis being reduced. Got input type=float32[8@X,4@Y] and axis=0
// EXPECT: tessera::cumsum/cumprod/cummax/cummin: the scanned dimension is sharded over an Explicit mesh axis
// EXPECT: scan_over_a_dimension_sharded_on_an_explicit_axis<0, 2, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::cumsum/cumprod/cummax/cummin: the scanned dimension
// EXPECT: Input should be unsharded over the axis being reduced
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::cumsum<0>(tessera::reshard(x, P<none, "Y">{}));  // float32[8,4@Y]
  return tessera::type_of(r) == "float32[8,4@Y]" ? 0 : 1;
#else
  tessera::array r = tessera::cumsum<0>(x);
  return tessera::type_of(r) == "float32[8@X,4@Y]" ? 0 : 1;
#endif
}
