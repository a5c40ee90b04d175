// A mesh whose two axes have the same name.
// EXPECT: a mesh's axis names must be non-empty and distinct
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{8};
#ifdef TESSERA_FIXED
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
#else
  auto mesh = tessera::make_mesh<"x", "x">({2, 4});
#endif
  return static_cast<int>(mesh.num_devices()) - 8;
}
