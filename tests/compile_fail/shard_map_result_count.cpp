// A body returning two results for one out_spec.
// EXPECT: shard_map: the body returns a different number of results than out_specs has entries
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto mesh = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> v = {1, 2, 3, 4};
#ifdef TESSERA_FIXED
  auto f = tessera::shard_map([](auto a) { return tessera::psum<"x">(a); }, mesh, tessera::in_specs(tessera::P<"x">{}),
                              tessera::out_specs(tessera::P<>{}));
#else
  auto f = tessera::shard_map([](auto a) { return std::make_tuple(tessera::psum<"x">(a), a * 2.0f); }, mesh,
                              tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<>{}));
#endif
  auto r = f(v);
  return static_cast<int>(r.size()) - 2;
}
