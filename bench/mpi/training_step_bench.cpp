// One step of seed 002's training across processes (issue 15): examples/mpi/training.cpp's
// train_step (a jit of tessera::grad of the logistic loss, then w - lr * gw, b - lr * gb;
// B = 1024 rows, 128 per device, D = 32, data P('X', None), w and b replicated) on the same
// 8 devices as P processes of K device threads. Run with
//   mpirun -np 1 bench_training_step 8   and   mpirun -np 2 bench_training_step 4   (bench/run_mpi.sh)
// It prints "training_step <processes> <devices per process> <seconds per step> <collectives>":
// the slowest process's time per step, the median of 5 timings of at least 0.5 s
// (bench/mpi/mpi_timing.hpp), each call one step of the loop with the parameters carried from
// one step to the next; and the collectives of one step as tessera::collective_counter counts
// them. On 1 x 8 the sums over the batch stay in the process; on 2 x 4 they go between the
// processes.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "mpi_timing.hpp"

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr int devices = 8;
constexpr std::size_t B = 128 * devices;
constexpr std::size_t D = 32;
constexpr float learning_rate = 0.01f;

// loss_fn(p) = jnp.mean((sigmoid(x @ w + b) - y) ** 2), as in examples/mpi/training.cpp
template <class W, class Bias, class X, class Y>
auto loss(W const& w, Bias const& b, X const& x, Y const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::mean(d * d);
}

}  // namespace

int main(int argc, char** argv) {
  int const local = argc > 1 ? std::atoi(argv[1]) : 8;
  tessera::distributed::runtime rt{argc, argv, local};
  if (rt.device_count() != devices) {
    if (rt.process_index() == 0)
      std::fprintf(stderr, "run it as P processes of K devices with P x K = %d (got %d x %d)\n", devices,
                   rt.process_count(), local);
    return 2;
  }
  MPI_Comm timing = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &timing);

  // The example's data: the same on every process, each keeping its own rows.
  auto const key = jr::key(1701);
  xt::xtensor<float, 2> const X = jr::normal(key, {B, D});
  xt::xtensor<float, 2> const w_true = jr::normal(key, tessera::shape_t<2>{D, 1});
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) {
    float z = 0;
    for (std::size_t k = 0; k < D; ++k) z += X(i, k) * w_true(k, 0);
    y(i, 0) = z > 0 ? 1.0f : 0.0f;
  }
  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const data_sharding = tessera::named_sharding(mesh, P<"X", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  std::size_t const rows = B / static_cast<std::size_t>(rt.process_count());
  std::size_t const first = rows * static_cast<std::size_t>(rt.process_index());
  xt::xtensor<float, 2> const X_local = xt::view(X, xt::range(first, first + rows), xt::all());
  xt::xtensor<float, 2> const y_local = xt::view(y, xt::range(first, first + rows), xt::all());
  auto const X_sharded = tessera::make_array_from_process_local_data(data_sharding, X_local, {B, D});
  auto const y_sharded = tessera::make_array_from_process_local_data(data_sharding, y_local, {B, std::size_t{1}});
  auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
  auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);

  auto const train_step = tessera::jit(
      [](auto const& w_, auto const& b_, auto const& x, auto const& y_) {
        auto const [gw, gb] =
            tessera::grad<0, 1>([&](auto const& wt, auto const& bt) { return loss(wt, bt, x, y_); })(w_, b_);
        return std::make_tuple(w_ - learning_rate * gw, b_ - learning_rate * gb);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));

  std::size_t collectives = 0;  // in one step, as tessera::collective_counter sees them
  {
    tessera::collective_counter counter;
    std::tie(w, b) = train_step(w, b, X_sharded, y_sharded);
    collectives = counter.count();
  }
  double const t = tessera_bench::median_per_call(
      timing, [&] { std::tie(w, b) = train_step(w, b, X_sharded, y_sharded); }, 0.5);
  if (rt.process_index() == 0)
    std::printf("training_step %d %d %.3g %zu\n", rt.process_count(), local, t, collectives);
  MPI_Comm_free(&timing);
  return 0;
}
