// jnp.reshape(x, (4, 2, 4)) of x: float32[4@X,8@Y]. JAX decides the result's sharding from the
// sizes (here it refuses: "This reshape is not supported. Please specify the sharding of the
// output via the `out_sharding` argument of jax.lax.reshape"); tessera knows the sizes only at
// run time, so a sharded operand's reshape always names its out_sharding.
// EXPECT: tessera::reshape: the operand is sharded
// EXPECT: reshape_of_a_sharded_operand_needs_its_out_sharding<2, 3, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::reshape: the operand is sharded
// EXPECT: tessera::reshape\(x, shape, tessera::P<...>\{\}\)
#include <xtensor/xbuilder.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::reshape(x, {4, 2, 4}, P<"X", none, "Y">{});  // float32[4@X,2,4@Y]
#else
  tessera::array r = tessera::reshape(x, {4, 2, 4});
#endif
  return tessera::type_of(r) == "float32[4@X,2,4@Y]" ? 0 : 1;
}
