// An element-wise operation whose result would shard two dimensions on one Explicit mesh
// axis: a is sharded over X along dimension 0, b over X along dimension 1, so a + b would be
// int32[8@X,8@X]. JAX's explicit mode refuses it; so does tessera, at compile time.
// EXPECT: an element-wise operation's result would shard two dimensions on the same mesh axis
// EXPECT: reshard one operand so the axis shards one dimension: tessera::reshard
// The diagnostic names the operation, the dimension and the axis (g++ prints an axis as
// tessera::axis_name{"X"}, clang++ 14 as its characters' codes, {{88, 0, ...}}):
// EXPECT: result_would_use_a_mesh_axis_twice<tessera::op::add, 1, (tessera::axis_name)?{("X"|{88(, 0)*})}>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's result would shard
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(64), {8, 8});
  auto a = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  auto b = tessera::device_put(host, tessera::named_sharding(mesh, P<none, "Y">{}));  // a + b: int32[8@X,8@Y]
#else
  auto b = tessera::device_put(host, tessera::named_sharding(mesh, P<none, "X">{}));
#endif
  auto sum = a + b;
  return tessera::to_host(tessera::array(sum)) == xt::xtensor<int, 2>(2 * host) ? 0 : 1;
}
