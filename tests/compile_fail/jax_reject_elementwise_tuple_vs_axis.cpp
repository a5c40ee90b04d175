// pjit_test's broadcasting error: x * y with x sharded P('x', 'y') and y P(('x', 'y'), None):
// dimension 0 is split over x in one and over (x, y) in the other, a different layout.
// JAX: mul got incompatible shardings for broadcasting: ('x', 'y'), (('x', 'y'), None).
// EXPECT: an element-wise operation's operands shard the same dimension on different mesh axes
// EXPECT: operands_shard_a_dimension_on_different_axes<tessera::op::multiply, 0, 
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
  auto b = tessera::device_put(h, tessera::named_sharding(mesh, P<axes<"x", "y">, none>{}));
#ifdef TESSERA_FIXED
  tessera::array r = tessera::reshard(a, P<axes<"x", "y">, none>{}) * b;  // float32[8@(x,y),2]
#else
  tessera::array r = a * b;
#endif
  return tessera::type_of(r) == "float32[8@(x,y),2]" ? 0 : 1;
}
