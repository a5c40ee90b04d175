// A value that is the same on every device (a psum) varies again after a ppermute, so an
// out_spec may not leave that axis out; the other axis of the mesh stays replicated.
// EXPECT: an out_spec claims the result is the same on every device along a mesh axis
// EXPECT: varies_over<0, (tessera::axis_name."x"|..120, )
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({4, 2});
  auto f = tessera::shard_map(
      [](auto blk) {
        auto total = tessera::psum<"x">(blk);  // the same along 'x', still varying along 'y'
        return tessera::ppermute<"x">(total, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
      },
#ifdef TESSERA_FIXED
      mesh, tessera::in_specs(tessera::P<tessera::axes<"x", "y">>{}), tessera::out_specs(tessera::P<tessera::axes<"x", "y">>{}));
#else
      mesh, tessera::in_specs(tessera::P<tessera::axes<"x", "y">>{}), tessera::out_specs(tessera::P<"y">{}));
#endif
  auto r = tessera::to_host(f(xt::arange<float>(16.0f)));
  return r.size() > 0 ? 0 : 1;
}
