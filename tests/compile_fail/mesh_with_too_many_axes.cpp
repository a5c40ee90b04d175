// A mesh of 17 axes: a collective's signature gives each axis index 4 bits.
// EXPECT: a mesh has at most 16 axes
#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{1};
#ifdef TESSERA_FIXED
  std::array<int, 16> sizes{};
  sizes.fill(1);
  auto mesh = tessera::make_mesh<"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p">(sizes);
#else
  std::array<int, 17> sizes{};
  sizes.fill(1);
  auto mesh = tessera::make_mesh<"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q">(sizes);
#endif
  return static_cast<int>(mesh.num_devices()) - 1;
}
