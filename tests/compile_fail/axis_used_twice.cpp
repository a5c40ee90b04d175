// One mesh axis sharding two dimensions of the same array.
// EXPECT: a PartitionSpec uses the same mesh axis twice
#include <tessera/tessera.hpp>

int main() {
#ifdef TESSERA_FIXED
  using spec = tessera::P<"x", "y">;
#else
  using spec = tessera::P<"x", "x">;
#endif
  return static_cast<int>(spec::size) - 2;
}
