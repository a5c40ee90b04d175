// tessera::grad of a function whose result is not a scalar (jax.grad raises "Gradient only
// defined for scalar-output functions. Output had shape: (4,)"): a compile error in our words.
// EXPECT: tessera::grad: the function must return a scalar, a tessera array of rank 0
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto const mesh = tessera::make_mesh<"X">({2});
  xt::xtensor<float, 1> const h = {1.0f, 2.0f, 3.0f, 4.0f};
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"X">{}));
#ifdef TESSERA_FIXED
  auto const g = tessera::grad([](auto const& v) { return tessera::sum(tessera::sin(v)); })(x);
#else
  auto const g = tessera::grad([](auto const& v) { return tessera::sin(v); })(x);
#endif
  (void)g;
}
