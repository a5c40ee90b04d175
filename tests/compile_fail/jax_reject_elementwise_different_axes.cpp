// x + y with dimension 0 sharded over X in x and over Y in y, on an Explicit (2, 4) mesh:
// JAX's broadcasting rule does not pick one (tests/golden/jax_typeof.json); nor does tessera.
// JAX: add got incompatible shardings for broadcasting: ('X', None), ('Y', None).
// EXPECT: an element-wise operation's operands shard the same dimension on different mesh axes
// EXPECT: operands_shard_a_dimension_on_different_axes<tessera::op::add, 0, (tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's operands shard the same dimension
// EXPECT: reshard one of them: tessera::reshard
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
  auto b = tessera::device_put(h, tessera::named_sharding(mesh, P<"Y", none>{}));
#ifdef TESSERA_FIXED
  tessera::array r = a + tessera::reshard(b, P<"X", none>{});  // float32[8@X,4]
#else
  tessera::array r = a + b;
#endif
  return tessera::type_of(r) == "float32[8@X,4]" ? 0 : 1;
}
