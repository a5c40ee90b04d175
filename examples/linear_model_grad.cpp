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
//
// Then the same 5 steps as the seed's distributed_training_step writes them: a
// shard_map over "devices" whose body takes grad of loss_fn on the device's blocks
// (w and b whole, 32 rows of x and y), averages the gradients with
// tessera::pmean<"devices">, applies the SGD update and averages the loss with pmean.
// The body runs with tessera::no_check_vma (JAX's check_vma=False), the semantics the
// seed's grad-then-pmean assumes: grad gives each device its local gradient. Under
// shard_map's default check_vma=True, grad (as in JAX 0.12) already psums the gradient
// of a replicated parameter over the devices, and pmean would then give 8 times the
// average. Its losses and weights are checked against the first loop's. Differences
// from the seed's step, beyond those above:
//   - the seed wraps sharded_update in jax.jit alone, where pmean's axis_name needs a
//     shard_map binding "devices" (JAX 0.12 raises "NameError: Found an unbound axis
//     name: devices"); here it is that shard_map, over the parameters P() and the
//     data P("devices", None);
//   - value_and_grad in the body too, where the seed calls loss_fn a second time: a
//     device's plain blocks have no tessera::matmul or tessera::mean outside grad
//     (the body's tessera:: operations are those of grad's local tracers);
//   - the update is written per leaf (w and b), the gradients' pmean with tree_map:
//     tree_map cannot rebuild the params struct of blocks from an update expression.
#include <algorithm>
#include <array>
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

#include <tessera/autodiff.hpp>
#include <tessera/random.hpp>

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
  std::array<float, steps> first_losses{};
  for (int step = 0; step < steps; ++step) {
    tessera::collective_counter counter;
    auto const [loss, grads] = tessera::value_and_grad(loss_fn)(p, x, y);
    // A gradient has its parameter's type: the same tree, element types, ranks and shardings.
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(grads)>, params_t>);
    p = tessera::tree_map([](auto const& a, auto const& g) { return a - learning_rate * g; }, p, grads);
    std::size_t const collectives = counter.count(), all_reduces = counter.count("all-reduce");

    float const l = tessera::to_host(loss)();
    first_losses[static_cast<std::size_t>(step)] = l;
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

  // --- The seed's distributed_training_step: grad inside a shard_map body, then pmean ----------
  // @jax.jit                  # here: shard_map over 'devices', params P(), x and y P('devices', None)
  // def sharded_update(params, x, y):
  //     grads = grad_fn(params, x, y)                          # this device's own 32 rows
  //     grads = jax.lax.pmean(grads, axis_name='devices')      # averaged over the 8 devices
  //     new_params = params - learning_rate * grads
  //     loss = loss_fn(params, x, y)                           # here: from value_and_grad (see the top)
  //     avg_loss = jax.lax.pmean(loss, axis_name='devices')
  //     return new_params, avg_loss
  // The body sees each device's blocks: w and b whole (P()), 32 rows of x and y. It runs with
  // no_check_vma, JAX's check_vma=False, because that is what the seed means: grad of the local
  // loss is the device's own gradient, and pmean averages the 8 of them. Under shard_map's default
  // (check_vma=True, as in JAX 0.12) grad already psums a replicated parameter's gradient over
  // the devices, and pmean of that would be 8 times the average. Each device's loss is the mean
  // over its 32 x 100 elements, and the blocks are equal, so pmean of the 8 is the global mean:
  // the same numbers as the loop above, from the same data and starting point.
  auto const sharded_update = tessera::shard_map(
      [](auto const& w_, auto const& b_, auto const& x_, auto const& y_) {
        params<std::remove_cvref_t<decltype(w_)>, std::remove_cvref_t<decltype(b_)>> const local_p{w_, b_};
        auto const [loss, local_grads] = tessera::value_and_grad(loss_fn)(local_p, x_, y_);
        // jax.lax.pmean of a tree is the pmean of each leaf.
        auto const grads = tessera::tree_map([](auto const& g) { return tessera::pmean<"devices">(g); }, local_grads);
        return std::make_tuple(local_p.w - learning_rate * grads.w, local_p.b - learning_rate * grads.b,
                               tessera::pmean<"devices">(loss));
      },
      mesh, tessera::in_specs(P<none, none>{}, P<none>{}, P<"devices", none>{}, P<"devices", none>{}),
      tessera::out_specs(P<none, none>{}, P<none>{}, P<>{}), tessera::no_check_vma);

  std::printf("\nthe same steps as the seed writes them: grad inside shard_map, then pmean\n");
  auto w_sm = tessera::device_put(w0, w_sharding);
  auto b_sm = tessera::device_put(b0, b_sharding);
  double loss_diff = 0;  // the largest relative difference from the first loop's losses
  for (int step = 0; step < steps; ++step) {
    tessera::collective_counter counter;
    auto const [new_w, new_b, loss] = sharded_update(w_sm, b_sm, x, y);
    std::size_t const collectives = counter.count(), all_reduces = counter.count("all-reduce");
    w_sm = new_w;
    b_sm = new_b;
    float const l = tessera::to_host(loss)();
    float const l_first = first_losses[static_cast<std::size_t>(step)];
    loss_diff = std::max(loss_diff, std::fabs(static_cast<double>(l) - l_first) / l_first);
    std::printf("Step %d, Loss: %.1f\n", step, static_cast<double>(l));
    if (step == 0) {
      // The three pmeans (grad w, grad b, the loss); grad itself communicates nothing here.
      bool const three = collectives == 3 && all_reduces == 3;
      std::printf("collectives in one step: %zu all-reduces (pmean of grad w, grad b, the loss), nothing else: %s\n",
                  all_reduces, three ? "yes" : "no");
      ok = ok && three;
    }
  }
  // The losses and the weights against the first loop's: the same up to the order of float32 sums.
  bool const losses_match = loss_diff <= 1e-5;
  std::printf("the losses match the first loop's (relative difference <= 1e-5): %s\n", losses_match ? "yes" : "no");
  ok = ok && losses_match;
  auto const w_first = tessera::to_host(p.w);
  auto const b_first = tessera::to_host(p.b);
  double const largest = std::max(xt::amax(xt::abs(w_first))(), xt::amax(xt::abs(b_first))());
  double const diff = std::max(xt::amax(xt::abs(tessera::to_host(w_sm) - w_first))(),
                               xt::amax(xt::abs(tessera::to_host(b_sm) - b_first))());
  bool const weights_match = diff <= 1e-5 * largest;
  std::printf("weights match the first loop's (max abs difference <= 1e-5 * max |w|, |b|): %s\n",
              weights_match ? "yes" : "no");
  ok = ok && weights_match;
  return ok ? 0 : 1;
}
