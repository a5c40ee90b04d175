// pjit_test's test_dot_general_error 'fail1': P('x', None) @ P(None, 'x') on an Explicit (2, 2)
// mesh; the result's rows and columns would both be split over x.
// JAX: dot_general operation with inputs: f32[8@x,2], f32[2,8@x] produces an illegally sharded result: f32[8@x,8@x]
// EXPECT: tessera::matmul: the result would use one mesh axis twice
// EXPECT: matmul_result_would_use_a_mesh_axis_twice<1, (tessera::axis_name)?{("x"|{120(, 0)*})}, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the result would use one mesh axis twice
// EXPECT: tessera::matmul: the result would use one mesh axis twice, in two dimensions or in a dimension and the partial sum
// EXPECT: reshard one operand
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
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"x", none>{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<none, "x">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::matmul(a, tessera::reshard(b, P<none, "y">{}));  // float32[8@x,8@y]
#else
  tessera::array r = tessera::matmul(a, b);
#endif
  return tessera::type_of(r) == "float32[8@x,8@y]" ? 0 : 1;
}
