// [2, 8, 8] sharded P('X') @ [8, 8] sharded P(None, 'X'): the result [2, 8, 8] would be split
// over X along its batch dimension and its columns.
// JAX: dot_general operation with inputs: f32[2@X,8,8], f32[8,8@X] produces an illegally sharded result: f32[2@X,8,8@X]
// EXPECT: tessera::matmul: the result would use one mesh axis twice
// EXPECT: matmul_result_would_use_a_mesh_axis_twice<2, (tessera::axis_name)?{("X"|{88(, 0)*})}, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the result would use one mesh axis twice
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 3> const ha = xt::reshape_view(xt::arange<float>(128.0f), {2, 8, 8});
  xt::xtensor<float, 2> const hb = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"X">{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<none, "X">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::matmul(a, tessera::reshard(b, P<none, "Y">{}));  // float32[2@X,8,8@Y]
#else
  tessera::array r = tessera::matmul(a, b);
#endif
  return tessera::type_of(r) == "float32[2@X,8,8@Y]" ? 0 : 1;
}
