// v @ w of two vectors, v sharded over X and w over Y: their elements do not line up.
// JAX: Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec=('X',) and rhs_contracting_spec=('Y',)
// EXPECT: tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right operands
// EXPECT: matmul_contracting_dimension_sharded_on_different_axes<(tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right operands
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 1> const h = xt::reshape_view(xt::arange<float>(8.0f), {8});
  auto v = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));
  auto w = tessera::device_put(h, tessera::named_sharding(mesh, P<"Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::matmul(v, tessera::reshard(w, P<>{}));  // float32[]
#else
  tessera::array r = tessera::matmul(v, w);
#endif
  return tessera::type_of(r) == "float32[]" ? 0 : 1;
}
