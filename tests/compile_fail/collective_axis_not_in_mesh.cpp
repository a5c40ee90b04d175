// A collective over a mesh axis the shard_map's mesh does not have.
// EXPECT: names a mesh axis that the shard_map's mesh does not have
// EXPECT: collective_axis_must_be_in_mesh
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
  auto f = tessera::shard_map(
      [](auto blk) {
#ifdef TESSERA_FIXED
        return tessera::psum<"y">(blk);
#else
        return tessera::psum<"z">(blk);
#endif
      },
      mesh, tessera::in_specs(tessera::P<"y">{}), tessera::out_specs(tessera::P<>{}));
  auto r = f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
  return tessera::to_host(r)(0) == 12.0f ? 0 : 1;
}
