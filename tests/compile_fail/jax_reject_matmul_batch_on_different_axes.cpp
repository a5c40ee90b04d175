// pjit_test's test_dot_general_batch_error, as a matmul: [8, 4, 2] sharded P('X', 'Y', 'Z') @
// [8, 2, 4] sharded P('Y', 'Z', 'X') on an Explicit (2, 2, 2) mesh: batch dimension 0 is split
// over X on the left and over Y on the right.
// JAX: Incompatible types for matmul arguments: float32[8@X,4@Y,2@Z] and float32[8@Y,2@Z,4@X]
// EXPECT: tessera::matmul: a batch dimension is sharded on different mesh axes in the left and right operands
// EXPECT: matmul_batch_dimension_sharded_on_different_axes<0, (tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: a batch dimension is sharded on different mesh axes in the left and right operands
// EXPECT: batch dimensions must be sharded alike: reshard one operand
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes);
  xt::xtensor<float, 3> const ha = xt::reshape_view(xt::arange<float>(64.0f), {8, 4, 2});
  xt::xtensor<float, 3> const hb = xt::reshape_view(xt::arange<float>(64.0f), {8, 2, 4});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"X", "Y", "Z">{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"Y", "Z", "X">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::matmul(a, tessera::reshard(b, P<"X", none, "Z">{}));  // float32[8@X,4@Y,4@Z]
#else
  tessera::array r = tessera::matmul(a, b);
#endif
  return tessera::type_of(r) == "float32[8@X,4@Y,4@Z]" ? 0 : 1;
}
