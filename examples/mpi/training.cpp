// Seed 002's data-parallel training loop across processes (JAX's multi-controller SPMD):
//     mpirun -np P ./example_mpi_training K        (P processes of K device threads, P x K = 8)
// Every process runs this same program. The mesh spans the 8 devices of all processes
// (process-major ids, as JAX numbers them); each process puts only its own rows of the data on
// its devices (make_array_from_process_local_data); the gradients come from tessera::grad, and
// their sums over the batch run between the processes where the devices are not in one process.
// Process 0 prints, and what it prints is what examples/training.cpp prints on one process:
// ctest runs it as 1 x 8, 2 x 4 and 4 x 2 against one expected output.
//
//     jax.distributed.initialize()
//     mesh = jax.make_mesh((8,), ("X",))
//     x = multihost_utils.host_local_array_to_global_array(local_rows, mesh, P("X", None))
//     grad = jax.grad(loss_fn)(params, x, y); params = params - LEARNING_RATE * grad
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <tuple>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr int devices = 8;
constexpr std::size_t B = 128 * devices;
constexpr std::size_t D = 32;
constexpr float learning_rate = 0.01f;
constexpr int steps = 100;

// loss_fn(p) = jnp.mean((sigmoid(x @ w + b) - y) ** 2)
template <class W, class Bias, class X, class Y>
auto loss(W const& w, Bias const& b, X const& x, Y const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::mean(d * d);
}

// A replicated value, read from this process's first block (every process holds a copy).
template <class A>
auto local_copy(A const& a) {
  return a.addressable_shards().front().data;
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
  bool const printer = rt.process_index() == 0;
  std::ostringstream out;

  // The same data on every process (the same key); each process keeps its own rows.
  auto const key = jr::key(1701);
  xt::xtensor<float, 2> const X = jr::normal(key, {B, D});
  xt::xtensor<float, 2> const w_true = jr::normal(key, tessera::shape_t<2>{D, 1});
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) {
    float z = 0;
    for (std::size_t k = 0; k < D; ++k) z += X(i, k) * w_true(k, 0);
    y(i, 0) = z > 0 ? 1.0f : 0.0f;
  }
  out << "B = " << B << " (" << B / devices << " per device), D = " << D << ", "
      << static_cast<int>(xt::sum(y)()) << " positive labels\n";

  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const data_sharding = tessera::named_sharding(mesh, P<"X", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  // This process's rows: its devices hold rows [first, first + rows) of the global batch.
  std::size_t const rows = B / static_cast<std::size_t>(rt.process_count());
  std::size_t const first = rows * static_cast<std::size_t>(rt.process_index());
  xt::xtensor<float, 2> const X_local = xt::view(X, xt::range(first, first + rows), xt::all());
  xt::xtensor<float, 2> const y_local = xt::view(y, xt::range(first, first + rows), xt::all());
  auto const X_sharded = tessera::make_array_from_process_local_data(data_sharding, X_local, {B, D});
  auto const y_sharded = tessera::make_array_from_process_local_data(data_sharding, y_local, {B, std::size_t{1}});
  auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
  auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
  out << "X: " << tessera::type_of(X_sharded) << ", y: " << tessera::type_of(y_sharded)
      << ", w: " << tessera::type_of(w) << ", b: " << tessera::type_of(b) << "\n";

  auto const train_step = tessera::jit(
      [](auto const& w_, auto const& b_, auto const& x, auto const& y_) {
        auto const [gw, gb] = tessera::grad<0, 1>([&](auto const& wt, auto const& bt) { return loss(wt, bt, x, y_); })(w_, b_);
        return std::make_tuple(w_ - learning_rate * gw, b_ - learning_rate * gb);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));
  auto const loss_fn = tessera::jit([](auto const& w_, auto const& b_, auto const& x, auto const& y_) {
    return loss(w_, b_, x, y_);
  });

  out << "\nstep  loss    (4 decimals)\n";
  for (int step = 0; step <= steps; ++step) {
    if (step % 10 == 0) {
      float const l = local_copy(loss_fn(w, b, X_sharded, y_sharded))();
      char line[32];
      std::snprintf(line, sizeof line, "%4d  %.4f\n", step, static_cast<double>(l));
      out << line;
    }
    if (step == steps) break;
    std::tie(w, b) = train_step(w, b, X_sharded, y_sharded);
  }
  auto const wl = local_copy(w);
  auto const bl = local_copy(b);
  char line[96];
  std::snprintf(line, sizeof line, "w[:4] = [%.4f %.4f %.4f %.4f], b = [%.4f]\n", static_cast<double>(wl(0, 0)),
                static_cast<double>(wl(1, 0)), static_cast<double>(wl(2, 0)), static_cast<double>(wl(3, 0)),
                static_cast<double>(bl(0)));
  out << line;
  if (printer) std::cout << out.str();
  return 0;
}
