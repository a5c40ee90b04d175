// A two-entry spec for a one-dimensional array.
// EXPECT: the PartitionSpec has more entries than the array has dimensions
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
  xt::xtensor<float, 1> v = {1, 2, 3, 4, 5, 6, 7, 8};
#ifdef TESSERA_FIXED
  auto a = tessera::device_put(v, tessera::named_sharding(mesh, tessera::P<"x">{}));
#else
  auto a = tessera::device_put(v, tessera::named_sharding(mesh, tessera::P<"x", "y">{}));
#endif
  return static_cast<int>(a.size()) - 8;
}
