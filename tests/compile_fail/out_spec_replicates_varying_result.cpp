// out_specs=P() promises a result that is the same on every device, but the body returns
// its per-block sum without the psum (JAX's check_vma error, here at compile time).
// EXPECT: an out_spec claims the result is the same on every device along a mesh axis, but the result varies over that axis
// EXPECT: out_spec_must_name_every_axis_the_result_varies_over
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x">({8});
  auto f = tessera::shard_map(
      [](auto blk) {
#ifdef TESSERA_FIXED
        return tessera::psum<"x">(xt::sum(blk)());
#else
        return xt::sum(blk)();
#endif
      },
      mesh, tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<>{}));
  return tessera::to_host(f(xt::arange<int>(32)))() == 496 ? 0 : 1;
}
