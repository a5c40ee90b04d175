// jnp.concatenate([x, y]) of x: float32[8@X,4] and y: float32[8,4] on Explicit axes.
// JAX: All operands should have the same sharding. Got shardings NamedSharding(... spec=P('X', None)), NamedSharding(... spec=P(None, None))
// EXPECT: tessera::concatenate / tessera::stack: the operands are sharded differently on Explicit mesh axes
// EXPECT: all_operands_should_have_the_same_sharding<1, 0, false>
// EXPECT: 'All operands should have the same sharding'
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
  auto y = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
#else
  auto y = tessera::device_put(h, tessera::named_sharding(mesh, P<>{}));
#endif
  tessera::array r = tessera::concatenate<0>(x, y);  // float32[16@X,4]
  return tessera::type_of(r) == "float32[16@X,4]" ? 0 : 1;
}
