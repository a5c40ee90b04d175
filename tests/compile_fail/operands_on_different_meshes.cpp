// The operands of one expression live on meshes of different types (axes X, Y and axes
// rows, cols): there is no mesh for the result to live on. device_put one of them onto the
// other's mesh first.
// EXPECT: the operands of an expression are on different meshes
// EXPECT: device_put one onto the other's mesh
// The diagnostic names both meshes (g++ prints an axis as tessera::axis_name{"rows"},
// clang++ 14 as its characters' codes, {{114, 111, 119, 115, 0, ...}, 4}):
// EXPECT: operands_must_be_on_the_same_mesh<tessera::mesh<[^>]*>, tessera::mesh<[^>]*(axis_name{"rows"}|{{114, 111, 119, 115(, 0)*}})
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: the operands of an expression are on different meshes
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const host = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto a = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  auto b = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", none>{}));
#else
  auto other = tessera::make_mesh<"rows", "cols">({2, 4}, tessera::explicit_axes);
  auto b = tessera::device_put(host, tessera::named_sharding(other, P<"rows", none>{}));
#endif
  tessera::array product = a * b;  // float32[4@X,8@Y]
  return tessera::to_host(product) == xt::xtensor<float, 2>(host * host) ? 0 : 1;
}
