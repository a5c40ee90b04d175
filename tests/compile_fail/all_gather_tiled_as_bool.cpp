// jax.lax.all_gather(x, 'x', axis=1, tiled=True), written as a C++ user first tries it:
// all_gather<"x">(v, 1, true). tessera spells tiled=True as the tag tessera::tiled.
// EXPECT: JAX's tiled=True is written tessera::tiled in C\+\+
// EXPECT: tiled_must_be_passed_as_tessera_tiled<bool, false>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{4};
  auto mesh = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "x">{}));
  auto f = tessera::shard_map(
      // The lambda names its result type: clang gives a function whose static_assert failed no
      // deduced type, and shard_map's own checks of the body's result would add errors after ours.
      [](auto b) -> decltype(tessera::all_gather<"x">(b, 1, tessera::tiled)) {
#ifdef TESSERA_FIXED
        return tessera::all_gather<"x">(b, 1, tessera::tiled);
#else
        return tessera::all_gather<"x">(b, 1, true);
#endif
      },
      mesh, tessera::in_specs(P<none, "x">{}), tessera::out_specs(P<>{}));
  return tessera::type_of(f(x)) == "float32[4,8]" ? 0 : 1;
}
