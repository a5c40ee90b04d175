// The same axis twice inside one multi-axis entry: P(('x', 'x'),).
// EXPECT: a PartitionSpec uses the same mesh axis twice
#include <tessera/tessera.hpp>

int main() {
#ifdef TESSERA_FIXED
  using spec = tessera::P<tessera::axes<"x", "y">>;
#else
  using spec = tessera::P<tessera::axes<"x", "x">>;
#endif
  return static_cast<int>(spec::size) - 1;
}
