// tessera::grad with respect to an integer array (jax.grad raises "grad requires real- or
// complex-valued inputs (input dtype that is a sub-dtype of np.inexact), but got int32"): a
// compile error in our words.
// EXPECT: tessera::grad: a differentiated argument holds a leaf that is not an array of float32 or float64
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto const mesh = tessera::make_mesh<"X">({2});
#ifdef TESSERA_FIXED
  xt::xtensor<float, 1> const h = {1, 2, 3, 4};
#else
  xt::xtensor<int, 1> const h = {1, 2, 3, 4};
#endif
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"X">{}));
  auto const g = tessera::grad([](auto const& v) { return tessera::sum(v * v); })(x);
  (void)g;
}
