// device_put of an xt::xarray, whose rank the type does not fix, without naming the rank.
// EXPECT: the rank of x is only known at run time
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{2};
  auto mesh = tessera::make_mesh<"x">({2});
  xt::xarray<int> host = {{1, 2}, {3, 4}};
#ifdef TESSERA_FIXED
  auto a = tessera::device_put<2>(host, tessera::named_sharding(mesh, tessera::P<"x">{}));
#else
  auto a = tessera::device_put(host, tessera::named_sharding(mesh, tessera::P<"x">{}));
#endif
  return static_cast<int>(a.size()) - 4;
}
