// grad through a shard_map body that calls pmax (JAX: pmax has no transpose rule under
// shard_map's grad): a compile error in our words.
// EXPECT: tessera::pmax is not differentiable
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto const mesh = tessera::make_mesh<"X">({2});
  xt::xtensor<double, 1> const h = {1.0, 2.0, 3.0, 4.0};
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"X">{}));
#ifdef TESSERA_FIXED
  auto const sm = tessera::shard_map([](auto const& v) { return tessera::psum<"X">(tessera::sum(v)); }, mesh,
                                     tessera::in_specs(tessera::P<"X">{}), tessera::out_specs(tessera::P<>{}));
#else
  auto const sm = tessera::shard_map([](auto const& v) { return tessera::pmax<"X">(tessera::sum(v)); }, mesh,
                                     tessera::in_specs(tessera::P<"X">{}), tessera::out_specs(tessera::P<>{}));
#endif
  auto const g = tessera::grad([&](auto const& v) { return sm(v); })(x);
  (void)g;
}
