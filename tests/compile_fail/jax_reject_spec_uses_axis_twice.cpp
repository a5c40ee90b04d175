// device_put with P('X', 'X'): one mesh axis for two dimensions.
// JAX: A single NamedSharding spec specification can map every mesh axis to at most one positional dimension, but P('X', 'X') has duplicate entries for `X`
// EXPECT: a PartitionSpec uses the same mesh axis twice
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
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));  // float32[8@X,8@Y]
#else
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "X">{}));
#endif
  return tessera::type_of(r) == "float32[8@X,8@Y]" ? 0 : 1;
}
