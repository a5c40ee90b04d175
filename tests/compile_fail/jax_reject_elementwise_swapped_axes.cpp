// pjit_test's broadcasting error: x * y with x sharded P('x', 'y') and y P('y', 'x'), on an
// Explicit (2, 2) mesh: both dimensions conflict; tessera names the first.
// JAX: mul got incompatible shardings for broadcasting: ('x', 'y'), ('y', 'x').
// EXPECT: an element-wise operation's operands shard the same dimension on different mesh axes
// EXPECT: operands_shard_a_dimension_on_different_axes<tessera::op::multiply, 0, (tessera::axis_name)?{("x"|{120(, 0)*})}, (tessera::axis_name)?{("y"|{121(, 0)*})}>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera: an element-wise operation's operands shard the same dimension
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(16.0f), {8, 2});
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<"x", "y">{}));
  auto b = tessera::device_put(h, tessera::named_sharding(mesh, P<"y", "x">{}));
#ifdef TESSERA_FIXED
  tessera::array r = a * tessera::reshard(b, P<"x", "y">{});  // float32[8@x,2@y]
#else
  tessera::array r = a * b;
#endif
  return tessera::type_of(r) == "float32[8@x,2@y]" ? 0 : 1;
}
