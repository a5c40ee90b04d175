// jnp.roll(x, 3, axis=0) of x: float32[8@X,4] on Explicit axes.
// JAX: `a` cannot be sharded on the axis being rolled over. Got arr type=f32[8@X,4] and axis=(0,)
// EXPECT: tessera::roll: the rolled dimension is sharded on Explicit mesh axes
// EXPECT: roll_of_a_dimension_sharded_on_explicit_axes<0, false>
// EXPECT: '`a` cannot be sharded on the axis being rolled over'
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/expr.hpp>
#include <tessera/expr/join_cut.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::roll<1>(x, 3);  // float32[8@X,4]: the unsharded dimension
#else
  tessera::array r = tessera::roll<0>(x, 3);
#endif
  return tessera::type_of(r) == "float32[8@X,4]" ? 0 : 1;
}
