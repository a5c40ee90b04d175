// Stop and resume across processes (issue 34): examples/checkpoint.cpp's training loop (seed 004's
// linear model, SGD on the mean squared error, the batch sharded over 8 devices) as a job of
// several processes that checkpoints, stops, and is restarted with another number of processes.
//     mpirun -np 2 ./example_mpi_checkpoint 4 train  DIR    2 processes x 4 devices: 3 steps, a
//                                                            checkpoint after each (every process
//                                                            writes its devices' blocks into one
//                                                            HDF5 file, collectively), then stop
//     mpirun -np 1 ./example_mpi_checkpoint 8 resume DIR    1 process x 8 devices: the latest
//     mpirun -np 4 ./example_mpi_checkpoint 2 resume DIR    step restored with w sharded over its
//                                                            columns, each process reading its own
//                                                            blocks, and 3 more steps
// Each resumed run also trains 6 steps without stopping and says whether its losses are those of
// the run that did not stop. ctest runs the three in this order (examples/mpi/checkpoint_run.cmake)
// and compares what process 0 prints with examples/mpi/checkpoint.expected.
//
//     mngr = ocp.CheckpointManager(dir, options=ocp.CheckpointManagerOptions(max_to_keep=2))
//     mngr.save(step, args=ocp.args.StandardSave(params))        # every process
//     params = mngr.restore(mngr.latest_step(), args=ocp.args.StandardRestore(abstract_params))
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/autodiff.hpp>
#include <tessera/checkpoint.hpp>
#include <tessera/random.hpp>

#include "../checkpoint_model.hpp"

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

using namespace checkpoint_model;

namespace {

/// One SGD step; returns the loss (replicated: every process reads its own copy).
template <class Params, class X, class Y>
float step(Params& p, X const& x, Y const& y) {
  return sgd_step(p, x, y).addressable_shards().front().data();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s K train|resume DIR\n", argv[0]);
    return 2;
  }
  int const local = std::atoi(argv[1]);
  std::string const phase = argv[2];
  std::string const dir = argv[3];
  tessera::distributed::runtime rt{argc, argv, local};
  bool const printer = rt.process_index() == 0;
  auto say = [&](char const* fmt, auto... args) {
    if (!printer) return;
    if constexpr (sizeof...(args) == 0) std::fputs(fmt, stdout);  // no format: clang's -Wformat-security
    else std::printf(fmt, args...);
  };
  if (rt.device_count() != 8) {
    if (printer) std::fprintf(stderr, "run it as P processes of K devices with P x K = 8\n");
    return 2;
  }

  // The same data on every process (the same keys); each puts its own devices' rows.
  auto const [k1, k2] = jr::split(jr::PRNGKey(4));
  xt::xtensor<float, 2> const x_host = jr::normal(k1, tessera::shape_t<2>{batch, n_in});
  xt::xtensor<float, 2> const y_host = jr::normal(k2, tessera::shape_t<2>{batch, n_out});
  auto const mesh = tessera::make_mesh<"devices">({8});
  auto const rows = tessera::named_sharding(mesh, P<"devices", none>{});
  auto const x = tessera::device_put(x_host, rows);
  auto const y = tessera::device_put(y_host, rows);
  auto fresh = [&] {
    return params{tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({n_in, n_out}) * 0.1f),
                                      tessera::named_sharding(mesh, P<none, none>{})),
                  tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({n_out})), tessera::named_sharding(mesh, P<none>{}))};
  };
  tessera::checkpoint_manager mgr{dir, {.max_to_keep = 2}};

  if (phase == "train") {
    say("%d processes x %d devices: three steps, a checkpoint after each (the newest 2 kept)\n", rt.process_count(), local);
    auto p = fresh();
    for (int s = 0; s < 3; ++s) {
      float const l = step(p, x, y);
      mgr.save(s + 1, p);  // each process copies its blocks to host memory; a thread writes them
      say("Step %d, Loss: %.4f (saving step %d)\n", s, static_cast<double>(l), s + 1);
    }
    mgr.wait();
    say("checkpoints kept:");
    for (auto s : mgr.all_steps()) say(" %lld", static_cast<long long>(s));
    say("\nthe job stops here\n");
    return 0;
  }

  // resume: another number of processes; w sharded over its columns this time.
  say("\n%d process%s x %d devices: the latest checkpoint restored, w sharded over its columns\n", rt.process_count(),
      rt.process_count() == 1 ? "" : "es", local);
  std::vector<float> reference;
  {
    auto p = fresh();
    for (int s = 0; s < 6; ++s) reference.push_back(step(p, x, y));
  }
  auto const latest = mgr.latest_step().value();
  auto p = mgr.restore(latest, params{tessera::shape_dtype<float, 2>(tessera::named_sharding(mesh, P<none, "devices">{})),
                                      tessera::shape_dtype<float, 1>(tessera::named_sharding(mesh, P<none>{}))});
  say("restored step %lld: w %s\n", static_cast<long long>(latest), tessera::type_of(p.w).c_str());
  double worst = 0;
  for (int s = static_cast<int>(latest); s < 6; ++s) {
    float const l = step(p, x, y);
    double const ref = static_cast<double>(reference[static_cast<std::size_t>(s)]);
    worst = std::max(worst, std::fabs(static_cast<double>(l) - ref) / ref);
    say("Step %d, Loss: %.4f\n", s, static_cast<double>(l));
  }
  bool const same = worst <= 1e-5;
  say("the losses are those of the run that did not stop (relative difference <= 1e-5): %s\n", same ? "yes" : "no");
  return same ? 0 : 1;
}
