// examples/transformer.cpp across processes (JAX's multi-controller SPMD):
//     mpirun -np P ./example_mpi_transformer K     (P processes of K device threads, P x K = 8)
// Every process runs this same program on the 2x4 ("data", "model") mesh of all 8 devices
// (process-major ids): each makes the same parameters and data from the same keys and keeps
// its own devices' blocks; the all-reduces over "model" and "data" run between the processes
// where the devices of a group are not in one process. Process 0 prints, and what it prints is
// what examples/transformer.cpp prints: ctest runs it as 1 x 8, 2 x 4 and 4 x 2 against one
// expected output, so every layout gives JAX's losses.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "../transformer_model.hpp"

int main(int argc, char** argv) {
  using namespace transformer;
  int const local = argc > 1 ? std::atoi(argv[1]) : 8;
  tessera::distributed::runtime rt{argc, argv, local};
  if (rt.device_count() != 8) {
    if (rt.process_index() == 0)
      std::fprintf(stderr, "run it as P processes of K devices with P x K = 8 (got %d x %d)\n", rt.process_count(), local);
    return 2;
  }
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  auto params = init_params(mesh);
  auto const data = make_data(mesh);  // not a structured binding: the lambdas below capture it
  auto const& inputs = data.first;
  auto const& targets = data.second;
  auto const causal = tessera::iota<std::int32_t, 0>({S, S}, mesh) >= tessera::iota<std::int32_t, 1>({S, S}, mesh);

  auto loss = [&](auto const& p) { return loss_fn(p, inputs, targets, causal); };
  std::ostringstream out;
  bool ok = true;
  for (int step = 0; step < steps; ++step) {
    auto const [l, g] = tessera::value_and_grad(loss)(params);
    // The loss is replicated: every process reads its own copy.
    double const value = l.addressable_shards().front().data();
    double const rel = std::abs(value - jax_losses[step]) / jax_losses[step];
    ok = ok && rel <= 1e-4;
    char line[96];
    std::snprintf(line, sizeof line, "step %2d loss %.3f (JAX %.3f)%s\n", step, value, jax_losses[step],
                  rel <= 1e-4 ? "" : "  DIFFERS");
    out << line;
    params = tessera::tree_map([](auto const& a, auto const& d) { return a - lr * d; }, params, g);
  }
  auto const plan = tessera::explain(tessera::value_and_grad(loss), params);
  out << "\none training step (value_and_grad) runs " << plan.count() << " collectives:\n";
  for (auto const& [what, n] : count_collectives(plan)) out << "  " << n << " x " << what << '\n';
  // Every process's losses count: the verdict is the processes' joint one.
  auto const all = tessera::process_allgather(xt::xtensor<int, 1>({ok ? 1 : 0}));
  bool const all_ok = xt::amin(all)() == 1;
  out << (all_ok ? "every loss within 1e-4 of JAX's\n" : "a loss differs from JAX's\n");
  if (rt.process_index() == 0) std::cout << out.str();
  return all_ok ? 0 : 1;
}
