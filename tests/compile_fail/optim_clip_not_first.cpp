// optax.chain(optax.adam(1e-3), optax.clip_by_global_norm(1.0)): optax clips Adam's updates.
// tessera runs every transformation of a chain in one pass per leaf, so the norm can only be
// taken of the gradients, before the pass: clip_by_global_norm comes first.
// EXPECT: clip_by_global_norm comes first in a chain
#include <tessera/optim.hpp>

int main() {
  namespace optim = tessera::optim;
#ifdef TESSERA_FIXED
  auto const tx = optim::chain(optim::clip_by_global_norm(1.0), optim::adam(1e-3));
#else
  auto const tx = optim::chain(optim::adam(1e-3), optim::clip_by_global_norm(1.0));
#endif
  (void)tx;
  return 0;
}
