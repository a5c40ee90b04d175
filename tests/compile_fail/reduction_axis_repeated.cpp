// A reduction that names one dimension twice: jnp.sum(x, axis=(0, 0)), which JAX rejects
// as "duplicate value in 'axis'".
// EXPECT: a reduction \(sum, mean, max, min, prod\) names a dimension that is out of range for its operand, or names one twice
// EXPECT: use dimensions 0 to rank - 1, each once
// EXPECT: reduction_axes_must_be_distinct_dimensions_of_the_operand<tessera::op::max, 2, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: a reduction \(sum, mean, max, min, prod\) names a dimension
#include <xtensor/xbuilder.hpp>
#include <xtensor/xsort.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(32), {4, 8});
  auto x = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array largest = tessera::max<0, 1>(x);  // int32[], the largest element on every device
#else
  tessera::array largest = tessera::max<0, 0>(x);
#endif
  return tessera::to_host(largest)() == 31 ? 0 : 1;
}
