// jnp.sum(x, axis=2) of a rank-2 x.
// JAX: axis 2 is out of bounds for array of dimension 2
// EXPECT: a reduction \(sum, mean, max, min, prod\) names a dimension that is out of range for its operand
// EXPECT: reduction_axes_must_be_distinct_dimensions_of_the_operand<tessera::op::sum, 2, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: a reduction \(sum, mean, max, min, prod\) names a dimension
// EXPECT: use dimensions 0 to rank - 1, each once
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
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::sum<1>(x);  // float32[8@X]
#else
  tessera::array r = tessera::sum<2>(x);
#endif
  return tessera::type_of(r) == "float32[8@X]" ? 0 : 1;
}
