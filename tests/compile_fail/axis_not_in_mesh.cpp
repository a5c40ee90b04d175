// A PartitionSpec that names an axis the mesh does not have.
// EXPECT: the PartitionSpec names a mesh axis that is not in the mesh
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
#ifdef TESSERA_FIXED
  auto s = tessera::named_sharding(mesh, tessera::P<"x", "y">{});
#else
  auto s = tessera::named_sharding(mesh, tessera::P<"x", "z">{});
#endif
  return static_cast<int>(s.num_devices()) - 8;
}
