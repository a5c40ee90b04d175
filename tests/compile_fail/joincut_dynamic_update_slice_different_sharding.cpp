// jax.lax.dynamic_update_slice(x, u, (1, 0)) of x: float32[8@X,4] and u: float32[2,4] on Explicit axes.
// JAX: dynamic_update_slice operand sharding must be equal to update sharding, got operand sharding float32[8@X,4](...) and update sharding float32[2,4](...).
// EXPECT: tessera::dynamic_update_slice: the operand and the update are sharded differently on Explicit mesh axes
// EXPECT: dynamic_update_slice_operand_sharding_must_equal_update_sharding<0, false>
// EXPECT: 'dynamic_update_slice operand sharding must be equal to update sharding'
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
  xt::xtensor<float, 2> const uh = xt::zeros<float>({2, 4});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  auto u = tessera::device_put(uh, tessera::named_sharding(mesh, P<"X", none>{}));
#else
  auto u = tessera::device_put(uh, tessera::named_sharding(mesh, P<>{}));
#endif
  tessera::array r = tessera::dynamic_update_slice(x, u, {1, 0});  // float32[8@X,4]
  return tessera::type_of(r) == "float32[8@X,4]" ? 0 : 1;
}
