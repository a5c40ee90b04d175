// An element-wise operation whose operands shard the same dimension on different Explicit
// mesh axes: a is sharded over X along dimension 0, b over Y. JAX's explicit mode refuses
// to guess which one to move; so does tessera, at compile time.
// EXPECT: an element-wise operation's operands shard the same dimension on different mesh axes
// EXPECT: reshard one of them: tessera::reshard
// The diagnostic names the operation, the dimension and both axes (g++ prints an axis as
// tessera::axis_name{"X"}, clang++ 14 as its characters' codes, {{88, 0, ...}}):
// EXPECT: operands_shard_a_dimension_on_different_axes<tessera::op::add, 0, (tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's operands shard the same dimension
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(32), {8, 4});
  auto a = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", none>{}));
  auto b = tessera::device_put(host, tessera::named_sharding(mesh, P<"Y", none>{}));
#ifdef TESSERA_FIXED
  tessera::array sum = a + tessera::reshard(b, P<"X", none>{});  // int32[8@X,4]
#else
  tessera::array sum = a + b;
#endif
  return tessera::to_host(sum) == xt::xtensor<int, 2>(2 * host) ? 0 : 1;
}
