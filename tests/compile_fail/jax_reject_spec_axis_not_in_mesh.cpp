// device_put with P('Z', None) onto a mesh of axes X and Y.
// JAX: Resource axis: Z of P('Z', None) is not found in mesh: ('X', 'Y').
// EXPECT: the PartitionSpec names a mesh axis that is not in the mesh
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
#ifdef TESSERA_FIXED
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"Y", none>{}));  // float32[8@Y,8]
#else
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"Z", none>{}));
#endif
  return tessera::type_of(r) == "float32[8@Y,8]" ? 0 : 1;
}
