// A host xt::xtensor mixed into a sharded expression: it has no sharding, so tessera cannot
// tell where its elements live. device_put it first (jnp would do so implicitly; tessera
// asks for the placement to be written down).
// EXPECT: an operand of a sharded expression is neither a tessera::array, a tessera expression nor a number
// EXPECT: device_put host arrays first
// EXPECT: operand_must_be_a_sharded_array_or_a_number<xt::xtensor_container<
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an operand of a sharded expression is neither
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const bias = xt::reshape_view(xt::arange<int>(8), {1, 8});
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(32), {4, 8});
  auto x = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  tessera::array y = x + tessera::device_put(bias, tessera::named_sharding(mesh, P<none, "Y">{}));  // int32[4@X,8@Y]
#else
  tessera::array y = x + bias;
#endif
  return tessera::to_host(y) == xt::xtensor<int, 2>(host + bias) ? 0 : 1;
}
