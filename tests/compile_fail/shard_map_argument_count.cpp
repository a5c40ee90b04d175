// A shard_map with one in_spec called with two arguments.
// EXPECT: shard_map: the number of arguments differs from the number of in_specs
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto mesh = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> v = {1, 2, 3, 4};
  auto f = tessera::shard_map([](auto a) { return tessera::psum<"x">(a); }, mesh, tessera::in_specs(tessera::P<"x">{}),
                              tessera::out_specs(tessera::P<>{}));
#ifdef TESSERA_FIXED
  auto r = f(v);
#else
  auto r = f(v, v);
#endif
  return static_cast<int>(r.size()) - 2;
}
