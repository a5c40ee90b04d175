// tessera::grad<2> of a function called with two arguments (jax.grad raises "argnums ... out of
// bounds"): a compile error in our words.
// EXPECT: tessera::grad: an argnum is not less than the number of arguments
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto const mesh = tessera::make_mesh<"X">({2});
  xt::xtensor<float, 1> const h = {1.0f, 2.0f, 3.0f, 4.0f};
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"X">{}));
  auto loss = [](auto const& a, auto const& b) { return tessera::sum(a * b); };
#ifdef TESSERA_FIXED
  auto const g = tessera::grad<1>(loss)(x, x);
#else
  auto const g = tessera::grad<2>(loss)(x, x);
#endif
  (void)g;
}
