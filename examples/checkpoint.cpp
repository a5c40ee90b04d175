// Stop and resume (issue 34): seed 004's training loop (a linear model trained with SGD on the
// mean squared error, data sharded over the batch, parameters replicated) checkpointed as an
// Orbax user does it, then restored into another sharding and trained on.
//
//   1. 6 steps on 8 devices without stopping: the reference losses;
//   2. 3 steps on 8 devices with a tessera::checkpoint_manager saving every step in the
//      background (max_to_keep = 2), then the process "stops";
//   3. a fresh start on 4 devices, w now sharded over its columns (P(None, "devices")): the
//      latest step restored into that sharding (mgr.restore(step, target) with
//      tessera::shape_dtype targets, Orbax's ShapeDtypeStruct restore args), 3 more steps, and
//      the same losses as the uninterrupted run (to float32 rounding: the sums run in another
//      order on 4 devices).
// Each file holds one dataset per leaf, named by its tree path (a plain struct's fields by index:
// "0" is w, "1" is b), with the global array, which h5py reads as `h5py.File(path)["0"][...]`.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/autodiff.hpp>
#include <tessera/checkpoint.hpp>
#include <tessera/random.hpp>

#include "checkpoint_model.hpp"

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

using namespace checkpoint_model;

namespace {

/// One SGD step; returns the loss.
template <class Params, class X, class Y>
float step(Params& p, X const& x, Y const& y) {
  return tessera::to_host(sgd_step(p, x, y))();
}

}  // namespace

int main() {
  tessera::runtime rt{8};
  bool ok = true;
  auto const [k1, k2] = jr::split(jr::PRNGKey(4));
  xt::xtensor<float, 2> const x_host = jr::normal(k1, tessera::shape_t<2>{batch, n_in});
  xt::xtensor<float, 2> const y_host = jr::normal(k2, tessera::shape_t<2>{batch, n_out});
  xt::xtensor<float, 2> const w0 = xt::ones<float>({n_in, n_out}) * 0.1f;
  xt::xtensor<float, 1> const b0 = xt::zeros<float>({n_out});

  auto const mesh8 = tessera::make_mesh<"devices">({8});
  auto const x8 = tessera::device_put(x_host, tessera::named_sharding(mesh8, P<"devices", none>{}));
  auto const y8 = tessera::device_put(y_host, tessera::named_sharding(mesh8, P<"devices", none>{}));
  auto fresh8 = [&] {
    return params{tessera::device_put(w0, tessera::named_sharding(mesh8, P<none, none>{})),
                  tessera::device_put(b0, tessera::named_sharding(mesh8, P<none>{}))};
  };

  std::printf("1. six steps without stopping (8 devices)\n");
  std::vector<float> reference;
  {
    auto p = fresh8();
    for (int s = 0; s < 6; ++s) {
      reference.push_back(step(p, x8, y8));
      std::printf("Step %d, Loss: %.4f\n", s, static_cast<double>(reference.back()));
    }
  }

  auto const dir = std::filesystem::temp_directory_path() / ("tessera_checkpoint_example_" + std::to_string(::getpid()));
  std::printf("\n2. three steps, a checkpoint after each (in the background, the newest 2 kept)\n");
  {
    tessera::checkpoint_manager mgr{dir, {.max_to_keep = 2}};
    auto p = fresh8();
    for (int s = 0; s < 3; ++s) {
      float const l = step(p, x8, y8);
      mgr.save(s + 1, p);  // copies the blocks to host memory and returns; a thread writes them
      std::printf("Step %d, Loss: %.4f (saving step %d)\n", s, static_cast<double>(l), s + 1);
    }
    mgr.wait();
    std::printf("checkpoints kept:");
    for (auto s : mgr.all_steps()) std::printf(" %lld", static_cast<long long>(s));
    std::printf("\nthe job stops here\n");
  }

  std::printf("\n3. a fresh start on 4 devices, w sharded over its columns\n");
  {
    tessera::checkpoint_manager mgr{dir, {.max_to_keep = 2}};
    auto const mesh4 = tessera::make_mesh<"devices">({4});
    auto const w_s = tessera::named_sharding(mesh4, P<none, "devices">{});
    auto const b_s = tessera::named_sharding(mesh4, P<none>{});
    auto const latest = mgr.latest_step().value();
    auto p = mgr.restore(latest, params{tessera::shape_dtype<float, 2>(w_s), tessera::shape_dtype<float, 1>(b_s)});
    std::printf("restored step %lld: w %s\n", static_cast<long long>(latest), tessera::type_of(p.w).c_str());
    auto const x4 = tessera::device_put(x_host, tessera::named_sharding(mesh4, P<"devices", none>{}));
    auto const y4 = tessera::device_put(y_host, tessera::named_sharding(mesh4, P<"devices", none>{}));
    double worst = 0;
    for (int s = 3; s < 6; ++s) {
      float const l = step(p, x4, y4);
      worst = std::max(worst, std::fabs(static_cast<double>(l - reference[static_cast<std::size_t>(s)])) /
                                  static_cast<double>(reference[static_cast<std::size_t>(s)]));
      std::printf("Step %d, Loss: %.4f\n", s, static_cast<double>(l));
    }
    bool const same = worst <= 1e-5;
    std::printf("the losses are those of the run that did not stop (relative difference <= 1e-5): %s\n",
                same ? "yes" : "no");
    ok = ok && same;
  }
  std::filesystem::remove_all(dir);
  return ok ? 0 : 1;
}
