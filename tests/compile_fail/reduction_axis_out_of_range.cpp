// A reduction over a dimension the operand does not have: jnp.sum(x, axis=2) on a 2-D array.
// EXPECT: a reduction \(sum, mean, max, min, prod\) names a dimension that is out of range for its operand
// EXPECT: use dimensions 0 to rank - 1, each once
// EXPECT: reduction_axes_must_be_distinct_dimensions_of_the_operand<tessera::op::sum, 2, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: a reduction \(sum, mean, max, min, prod\) names a dimension
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const host = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto x = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array rows = tessera::sum<1>(x);  // float32[4@X], summed over Y
#else
  tessera::array rows = tessera::sum<2>(x);
#endif
  return tessera::to_host(rows) == xt::xtensor<float, 1>(xt::sum(host, {1})) ? 0 : 1;
}
