// x + v with x [8, 4] sharded P(None, 'X') and v [4] sharded P('Y'): broadcasting aligns v
// with x's last dimension, which would be split over X and over Y.
// JAX: add got incompatible shardings for broadcasting: (None, 'X'), (None, 'Y').
// EXPECT: an element-wise operation's operands shard the same dimension on different mesh axes
// EXPECT: operands_shard_a_dimension_on_different_axes<tessera::op::add, 1, (tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's operands shard the same dimension
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
  xt::xtensor<float, 1> const hv = xt::reshape_view(xt::arange<float>(4.0f), {4});
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "X">{}));
  auto v = tessera::device_put(hv, tessera::named_sharding(mesh, P<"Y">{}));
#ifdef TESSERA_FIXED
  tessera::array r = a + tessera::reshard(v, P<"X">{});  // float32[8,4@X]
#else
  tessera::array r = a + v;
#endif
  return tessera::type_of(r) == "float32[8,4@X]" ? 0 : 1;
}
