// Issue 31's transformer written with tessera::nn's layers (issue 32): Embed, LayerNorm,
// MultiHeadDotProductAttention (causal), Dense, with logical axis names on every parameter,
// trained for 20 steps of optim::adam(3e-3) through a TrainState; the program of
// tools/jax_reference/transformer_flax.py (JAX 0.12, Flax 0.12, optax 0.2) module for module.
//
// The parameters come from Flax's keys (nn::scope: fold_in of the module path's SHA-1), so they
// are Flax's values; the data is issue 31's tokens. The model is trained three times on the 2x4
// ("data", "model") mesh, and the only thing that changes is the logical axis rules type
// (examples/transformer_layers_model.hpp):
//   data_parallel    batch over both axes, every parameter replicated;
//   tensor_parallel  batch over "data"; heads, MLP units and vocabulary over "model" (Megatron);
//   fsdp             batch over both axes, every weight split over both along "embed".
// Each layout prints the types of a few parameters and its step's collectives (explain()); the
// losses of the three agree with each other and with Flax's for the same rules within 1e-4
// relative (the example fails otherwise). examples/mpi/transformer_layers.cpp runs the same
// across processes.
#include <iostream>

#include "transformer_layers_model.hpp"

int main() {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  bool const ok = transformer_layers::train_three_layouts(mesh, std::cout, std::cerr);
  std::cout << (ok ? "every layout's losses within 1e-4 of each other and of Flax's\n"
                   : "a loss differs from Flax's or between layouts\n");
  return ok ? 0 : 1;
}
