// tessera::tree_map of two trees shaped differently (jax.tree.map raises "Custom node type
// mismatch" or "Tuple arity mismatch"): a compile error in our words.
// EXPECT: tessera::tree_map: the trees have different structures
#include <tuple>
#include <utility>

#include <tessera/tessera.hpp>

int main() {
  std::tuple<int, int> const a{1, 2};
#ifdef TESSERA_FIXED
  std::tuple<int, int> const b{3, 4};
#else
  std::tuple<int, int, int> const b{3, 4, 5};
#endif
  auto const r = tessera::tree_map([](int x, int y) { return x + y; }, a, b);
  (void)r;
}
