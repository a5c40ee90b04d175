// Seed 004's distributed training loop ("Real-World Application: Distributed
// Training"), with the gradients from tessera::grad as the seed takes them from
// jax.grad: a linear model, weights 1000 x 100 (the seed's jnp.ones((1000, 100))),
// trained with SGD (learning rate 0.01) on the mean squared error, 5 steps, on 8
// devices with a batch of 32 examples per device (256 in all). The data is sharded
// over the batch axis, P("devices", None), and the parameters are replicated, P():
// each device differentiates the loss on its own 32 rows, and the partial gradients
// are summed once, the all-reduce that the seed's jax.lax.pmean(grads) writes out.
//
// Differences from the seed, kept small:
//   - the parameters are a tree of two leaves, w and a bias b (zeros; the seed's
//     model has w alone), in a struct written as a class template over its field
//     types, so that grad can call the loss with tracers in it (docs/autodiff.md);
//     the update is tessera::tree_map, as jax.tree.map;
//   - the parameters are replicated, where the seed puts them on P('devices', None)
//     before averaging the gradients with pmean (the layout of data parallelism,
//     which the averaged update assumes);
//   - one batch, drawn once: the loss then falls from step to step (by about 0.2%
//     a step), where on a fresh batch each step, as the seed draws, that is hidden
//     by the batch-to-batch spread of the loss (several percent);
//   - jax.value_and_grad in place of the seed's grad_fn and loss_fn: the loss of
//     each step comes from the forward pass the gradient needs, not a second one.
// The gradient of the first step is checked against the same gradient computed on
// the host with plain xtensor (in double), and its type against the parameters'.
// The same loop in JAX 0.12 (8 CPU devices, Mesh(devices, ('devices',))) prints
//     Step 0, Loss: 980.206238    Step 1, Loss: 978.288757    Step 2, Loss: 976.375427
//     Step 3, Loss: 974.466492    Step 4, Loss: 972.562256
// and max |grad_w| = 0.143685 at step 0; the losses here agree to the one decimal
// printed (their last float32 digits depend on the order of the sums).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr std::size_t devices = 8;
constexpr std::size_t batch = 32 * devices;  // 32 examples per device
constexpr std::size_t n_in = 1000;
constexpr std::size_t n_out = 100;
constexpr float learning_rate = 0.01f;
constexpr int steps = 5;

// The model's parameters, a tree (params = {"w": ..., "b": ...}). A class template over its field
// types: grad fills it with tracers, and its gradient is a params of the same field types.
template <class W, class B>
struct params {
  W w;
  B b;
};

// def loss_fn(params, x, y):
//     preds = jnp.matmul(x, params["w"]) + params["b"]
//     return jnp.mean((preds - y) ** 2)
// Generic, so that grad can call it with tracers in p (and we with arrays).
auto const loss_fn = [](auto const& p, auto const& x, auto const& y) {
  auto const d = tessera::matmul(x, p.w) + p.b - y;
  return tessera::mean(d * d);
};

// The gradient of loss_fn on the host, in double, with plain loops over xtensor's storage:
//     r = x @ w + b - y;  grad_w = 2 / (batch * n_out) * x.T @ r;  grad_b = 2 / (batch * n_out) * sum(r, axis=0)
std::pair<xt::xtensor<double, 2>, xt::xtensor<double, 1>> host_gradient(xt::xtensor<float, 2> const& w,
                                                                         xt::xtensor<float, 1> const& b,
                                                                         xt::xtensor<float, 2> const& x,
                                                                         xt::xtensor<float, 2> const& y) {
  double const scale = 2.0 / static_cast<double>(batch * n_out);
  xt::xtensor<double, 2> gw = xt::zeros<double>({n_in, n_out});
  xt::xtensor<double, 1> gb = xt::zeros<double>({n_out});
  std::vector<double> r(n_out);
  for (std::size_t i = 0; i < batch; ++i) {
    float const* xi = x.data() + i * n_in;
    for (std::size_t j = 0; j < n_out; ++j) r[j] = static_cast<double>(b(j)) - static_cast<double>(y(i, j));
    for (std::size_t k = 0; k < n_in; ++k) {
      float const* wk = w.data() + k * n_out;
      for (std::size_t j = 0; j < n_out; ++j) r[j] += static_cast<double>(xi[k]) * static_cast<double>(wk[j]);
    }
    for (std::size_t j = 0; j < n_out; ++j) {
      r[j] *= scale;
      gb(j) += r[j];
    }
    for (std::size_t k = 0; k < n_in; ++k) {
      double* gk = gw.data() + k * n_out;
      for (std::size_t j = 0; j < n_out; ++j) gk[j] += static_cast<double>(xi[k]) * r[j];
    }
  }
  return {gw, gb};
}

}  // namespace

int main() {
  tessera::runtime rt{devices};
  bool ok = true;

  // mesh_1d = Mesh(devices, axis_names=('devices',))
  auto const mesh = tessera::make_mesh<"devices">({devices});
  auto const data_sharding = tessera::named_sharding(mesh, P<"devices", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});

  // rng_key = jax.random.PRNGKey(42)
  // model_params = create_model(rng_key)          # jnp.ones((1000, 100)), and b = jnp.zeros((100,))
  // rng_key, subkey = jax.random.split(rng_key)
  // x = jax.random.normal(subkey, (batch_size, 1000))
  // y = jax.random.normal(subkey, (batch_size, 100))
  auto const [rng_key, subkey] = jr::split(jr::PRNGKey(42));
  xt::xtensor<float, 2> const x_host = jr::normal(subkey, tessera::shape_t<2>{batch, n_in});
  xt::xtensor<float, 2> const y_host = jr::normal(subkey, tessera::shape_t<2>{batch, n_out});
  xt::xtensor<float, 2> const w0 = xt::ones<float>({n_in, n_out});
  xt::xtensor<float, 1> const b0 = xt::zeros<float>({n_out});

  // x = jax.device_put(x, NamedSharding(mesh, P('devices', None))), y likewise; the parameters replicated
  auto const x = tessera::device_put(x_host, data_sharding);
  auto const y = tessera::device_put(y_host, data_sharding);
  auto w = tessera::device_put(w0, w_sharding);
  auto b = tessera::device_put(b0, b_sharding);
  using params_t = params<decltype(w), decltype(b)>;
  params_t p{w, b};
  std::cout << "x: " << tessera::typeof(x) << ", y: " << tessera::typeof(y) << ", w: " << tessera::typeof(p.w)
            << ", b: " << tessera::typeof(p.b) << "\n";

  // for step in range(5):
  //     loss, grads = jax.value_and_grad(loss_fn)(params, x, y)   # the seed: grad_fn, then loss_fn
  //     params = jax.tree.map(lambda a, g: a - learning_rate * g, params, grads)
  std::printf("\n");
  float previous_loss = 0;
  bool falls = true;
  for (int step = 0; step < steps; ++step) {
    tessera::collective_counter counter;
    auto const [loss, grads] = tessera::value_and_grad(loss_fn)(p, x, y);
    // A gradient has its parameter's type: the same tree, element types, ranks and shardings.
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(grads)>, params_t>);
    p = tessera::tree_map([](auto const& a, auto const& g) { return a - learning_rate * g; }, p, grads);
    std::size_t const collectives = counter.count(), all_reduces = counter.count("all-reduce");

    float const l = tessera::to_host(loss)();
    // print(f"Step {step}, Loss: {loss:.6f}"): one decimal here, as the float32 mean of 25600 squares near
    // 1000 depends on the order of its sums past that (see JAX's figures at the top).
    std::printf("Step %d, Loss: %.1f\n", step, static_cast<double>(l));
    if (step == 0) {
      // One step's communication: the gradients of w and b are partial sums over "devices", each summed
      // by one all-reduce (as the seed's pmean), and the loss (the value) by a third.
      bool const three = collectives == 3 && all_reduces == 3;
      std::printf("collectives in one step: %zu all-reduces (grad w, grad b, the loss), nothing else: %s\n",
                  all_reduces, three ? "yes" : "no");
      ok = ok && three;

      // The gradient of this step against the host's, in double.
      auto const [gw_host, gb_host] = host_gradient(w0, b0, x_host, y_host);
      auto const gw = tessera::to_host(grads.w);
      auto const gb = tessera::to_host(grads.b);
      double const largest = std::max(xt::amax(xt::abs(gw_host))(), xt::amax(xt::abs(gb_host))());
      double const diff = std::max(xt::amax(xt::abs(xt::cast<double>(gw) - gw_host))(),
                                   xt::amax(xt::abs(xt::cast<double>(gb) - gb_host))());
      bool const same = diff < 1e-5 * largest;
      std::printf("the gradient matches the host's (max abs difference < 1e-5 * max |gradient| = %.1e): %s\n",
                  1e-5 * largest, same ? "yes" : "no");
      ok = ok && same;
    } else {
      falls = falls && l < previous_loss;
    }
    previous_loss = l;
  }
  std::printf("the loss falls at every step: %s\n", falls ? "yes" : "no");
  ok = ok && falls;
  return ok ? 0 : 1;
}
