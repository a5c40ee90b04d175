// x + y with x sharded P('X', None) and y P(None, 'X'): the merged spec P('X', 'X') would use
// X for both dimensions, which JAX calls an illegally sharded result.
// JAX: add operation with inputs: f32[8@X,8], f32[8,8@X] produces an illegally sharded result: f32[8@X,8@X]
// EXPECT: an element-wise operation's result would shard two dimensions on the same mesh axis
// EXPECT: result_would_use_a_mesh_axis_twice<tessera::op::add, 1, (tessera::axis_name)?{("X"|{88(, 0)*})}>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's result would shard
// EXPECT: reshard one operand so the axis shards one dimension: tessera::reshard
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
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
  auto b = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "X">{}));
#ifdef TESSERA_FIXED
  tessera::array r = a + tessera::reshard(b, P<none, "Y">{});  // float32[8@X,8@Y]
#else
  tessera::array r = a + b;
#endif
  return tessera::type_of(r) == "float32[8@X,8@Y]" ? 0 : 1;
}
