// A matmul whose result would shard two dimensions on one Explicit mesh axis: a's rows and b's
// columns are both sharded on X, so a @ b would be float32[8@X,4@X]. JAX's explicit mode
// refuses it; so does tessera, at compile time.
// EXPECT: tessera::matmul: the result would use one mesh axis twice, in two dimensions or in a dimension and the partial sum
// EXPECT: reshard one operand
// The diagnostic names the result dimension and the axis (g++ prints an axis as
// tessera::axis_name{"X"}, clang++ 14 as its characters' codes, {{88, 0, ...}}):
// EXPECT: matmul_result_would_use_a_mesh_axis_twice<1, (tessera::axis_name)?{("X"|{88(, 0)*})}, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the result would use one mesh axis twice
#include <cstddef>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const ha = xt::reshape_view(xt::arange<float>(48.0f) * 0.5f, {8, 6});
  xt::xtensor<float, 2> const hb = xt::reshape_view(xt::arange<float>(24.0f) - 12.0f, {6, 4});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<none, "Y">{}));  // a @ b: float32[8@X,4@Y]
#else
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<none, "X">{}));
#endif
  tessera::array c = tessera::matmul(a, b);
  auto const hc = tessera::to_host(c);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      float want = 0;
      for (std::size_t k = 0; k < 6; ++k) want += ha(i, k) * hb(k, j);
      if (hc(i, j) != want) return 1;
    }
  return 0;
}
