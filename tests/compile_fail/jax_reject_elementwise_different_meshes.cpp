// x + y with x on a (2, 4) mesh ('X', 'Y') and y on a (4, 2) mesh ('rows', 'cols').
// JAX: Mesh for all inputs should be equal. Got one mesh: AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu) and another mesh: AbstractMesh('rows': 4, 'cols': 2, axis_types=(Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu)
// EXPECT: the operands of an expression are on different meshes
// EXPECT: device_put one onto the other's mesh
// EXPECT: operands_must_be_on_the_same_mesh<tessera::mesh<[^>]*>, tessera::mesh<[^>]*(axis_name{"rows"}|{{114, 111, 119, 115(, 0)*}})
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: the operands of an expression are on different meshes
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
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto other = tessera::make_mesh<"rows", "cols">({4, 2}, tessera::explicit_axes);
  auto b = tessera::device_put(h, tessera::named_sharding(other, P<"rows", none>{}));
#ifdef TESSERA_FIXED
  tessera::array r = a + tessera::device_put(b, tessera::named_sharding(mesh, P<>{}));  // float32[8@X,4@Y]
#else
  tessera::array r = a + b;
#endif
  return tessera::type_of(r) == "float32[8@X,4@Y]" ? 0 : 1;
}
