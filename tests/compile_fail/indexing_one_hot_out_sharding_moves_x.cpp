// jax.nn.one_hot(x, 8, out_sharding=P(None, None, 'Y')) with x: int32[8@X,4] on Explicit axes.
// JAX: The input part of spec in out_sharding should match the spec of `x`. Got typeof(x).spec=P('X', None) and out_sharding.spec=P(None, None)
// EXPECT: tessera::one_hot: the out_sharding shards a dimension of x differently from x
// EXPECT: one_hot_out_sharding_must_keep_the_spec_of_x<0, 
// EXPECT: The input part of spec in out_sharding should match the spec of `x`
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const h = xt::reshape_view(xt::arange<int>(32) % 8, {8, 4});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::one_hot(x, 8, P<"X", none, "Y">{});  // float32[8@X,4,8@Y]
#else
  tessera::array r = tessera::one_hot(x, 8, P<none, none, "Y">{});
#endif
  return tessera::type_of(r) == "float32[8@X,4,8@Y]" ? 0 : 1;
}
