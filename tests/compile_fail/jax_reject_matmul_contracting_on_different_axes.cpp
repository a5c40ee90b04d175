// pjit_test's test_dot_general_error 'fail2': P('x', 'y') @ P('x', 'y') on an Explicit (2, 2)
// mesh: the contracting dimension is split over y in the left operand and over x in the right.
// JAX: Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec=('y',) and rhs_contracting_spec=('x',)
// EXPECT: tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right operands
// EXPECT: matmul_contracting_dimension_sharded_on_different_axes<(tessera::axis_name)?{("y"|{121(, 0)*})}, (tessera::axis_name)?{("x"|{120(, 0)*})}, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right operands
// EXPECT: reshard one of them to the other's axis or to None: tessera::reshard
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes);
  xt::xtensor<float, 2> const ha = xt::reshape_view(xt::arange<float>(16.0f), {8, 2});
  xt::xtensor<float, 2> const hb = xt::reshape_view(xt::arange<float>(16.0f), {2, 8});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"x", "y">{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"x", "y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::matmul(a, tessera::reshard(b, P<none, "y">{}));  // float32[8@x,8@y]
#else
  tessera::array r = tessera::matmul(a, b);
#endif
  return tessera::type_of(r) == "float32[8@x,8@y]" ? 0 : 1;
}
