// examples/transformer_layers.cpp across processes (JAX's multi-controller SPMD):
//     mpirun -np P ./example_mpi_transformer_layers K     (P processes of K device threads, P x K = 8)
// Every process runs this same program on the 2x4 ("data", "model") mesh of all 8 devices: each
// initialises the same parameters from Flax's keys (making only its own devices' blocks) and
// trains the model under the data-parallel, tensor-parallel and FSDP rules; the collectives run
// between the processes where a group's devices are not in one process. Process 0 prints, and
// what it prints is what examples/transformer_layers.cpp prints: ctest runs it as 1 x 8, 2 x 4
// and 4 x 2 against one expected output, so every process layout gives Flax's losses.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "../transformer_layers_model.hpp"

int main(int argc, char** argv) {
  int const local = argc > 1 ? std::atoi(argv[1]) : 8;
  tessera::distributed::runtime rt{argc, argv, local};
  if (rt.device_count() != 8) {
    if (rt.process_index() == 0)
      std::fprintf(stderr, "run it as P processes of K devices with P x K = 8 (got %d x %d)\n", rt.process_count(), local);
    return 2;
  }
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  std::ostringstream out, note;
  bool const ok = transformer_layers::train_three_layouts(mesh, out, note);
  // Every process's losses count: the verdict is the processes' joint one.
  auto const all = tessera::process_allgather(xt::xtensor<int, 1>({ok ? 1 : 0}));
  bool const all_ok = xt::amin(all)() == 1;
  out << (all_ok ? "every layout's losses within 1e-4 of each other and of Flax's\n"
                 : "a loss differs from Flax's or between layouts\n");
  if (rt.process_index() == 0) std::cout << out.str() << std::flush, std::cerr << note.str();
  return all_ok ? 0 : 1;
}
