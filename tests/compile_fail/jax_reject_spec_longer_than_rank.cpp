// device_put of a vector with the two-entry spec P('X', None).
// JAX: Length of sharding.spec (2) must be equal to aval's ndim (1). Got sharding.spec P('X', None), aval.ndim 1 and sharding NamedSharding(mesh=AbstractMesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu), spec=P('X', None))
// EXPECT: the PartitionSpec has more entries than the array has dimensions
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
#ifdef TESSERA_FIXED
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));  // float32[8@X]
#else
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
#endif
  return tessera::type_of(r) == "float32[8@X]" ? 0 : 1;
}
