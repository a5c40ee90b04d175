// transpose with axes that are not a permutation of the operand's dimensions:
// jnp.transpose(x, (0, 0)), which JAX rejects.
// EXPECT: tessera::transpose: the axes are not a permutation of the operand's dimensions
// EXPECT: list each of 0 to rank - 1 once
// EXPECT: transpose_axes_must_permute_the_dimensions<2, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::transpose: the axes are not a permutation
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> const host = xt::reshape_view(xt::arange<int>(32), {4, 8});
  auto x = tessera::device_put(host, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  tessera::array t = tessera::transpose<1, 0>(x);  // int32[8,4@X]
#else
  tessera::array t = tessera::transpose<0, 0>(x);
#endif
  return tessera::to_host(t) == xt::xtensor<int, 2>(xt::transpose(host)) ? 0 : 1;
}
