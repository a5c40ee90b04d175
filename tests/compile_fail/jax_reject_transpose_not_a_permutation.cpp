// jnp.transpose(x, (0, 0)).
// JAX: transpose permutation isn't a permutation of operand dimensions, got permutation (0, 0) for operand shape (8, 4).
// EXPECT: tessera::transpose: the axes are not a permutation of the operand's dimensions
// EXPECT: transpose_axes_must_permute_the_dimensions<2, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::transpose: the axes are not a permutation
// EXPECT: list each of 0 to rank - 1 once
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
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::transpose<1, 0>(x);  // float32[4@Y,8@X]
#else
  tessera::array r = tessera::transpose<0, 0>(x);
#endif
  return tessera::type_of(r) == "float32[4@Y,8@X]" ? 0 : 1;
}
