// Seed 002's data-parallel training loop: logistic regression on 8 devices,
// B = 128 examples per device (1024 in all), D = 32 features, 100 steps of SGD
// with learning rate 0.01 on the mean squared error of sigmoid(x @ w + b).
// The data is sharded on the batch axis, P("X", None), the parameters are
// replicated, P(). JAX derives the gradients with jax.grad; here they are
// written by hand with matmul, transpose, sum and sigmoid:
//     p = sigmoid(x @ w + b)                   [B@X,1]
//     g = 2 (p - y) p (1 - p) / B              [B@X,1]   dL/dz, element-wise
//     grad_w = x.T @ g                         [D,1]     partial over "X": one all-reduce
//     grad_b = sum(g, axis=0)                  [1]       partial over "X": one all-reduce
// Each device multiplies its own 128 rows; the only communication is the sum
// of the per-device partial gradients, as seed 002 describes ("JAX
// automatically all-reduces those gradients"). explain() shows that plan
// before anything runs and a collective_counter checks that the run kept to it.
// The same loop run on the host with plain xtensor ends with the same weights.
//
// Then the loop as the seed writes it, with the gradients from tessera::grad
// (docs/autodiff.md) instead of by hand:
//     grad = jax.grad(loss_fn)(p)
//     return jax.tree.map(lambda a, g: a - LEARNING_RATE * g, p, grad)
// It ends with the hand-written loop's weights (to 1e-6) and one of its steps runs
// the same collectives as a hand-written step: the two all-reduces, nothing else
// (grad never evaluates the loss itself, so the loss's own all-reduce does not run).
//
// Last, the loop written per device, as seed 004's distributed_training_step averages
// with pmean: a shard_map whose body computes the device's loss on its 128 rows with
// tessera's operations and averages it over "X" with tessera::pmean<"X">, and grad of
// a function that calls it:
//     tessera::grad<0, 1>([&](auto const& w, auto const& b) { return sharded_loss(w, b, x, y); })(w, b)
// grad runs the body on per-device tracers and its transpose on every device; the
// gradient of each replicated parameter is summed over "X" by one all-reduce, as in JAX.
// It ends with the grad loop's weights (to 1e-6), and one of its steps runs a hand-written
// step's two all-reduces plus the forward pass's pmean, nothing else. (The body is
// written for grad: called outside grad, a device's plain blocks have no tessera::matmul
// or tessera::mean, so its final loss comes from the jit'd loss above.)
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <tuple>
#include <type_traits>

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
constexpr std::size_t B = 128 * devices;
constexpr std::size_t D = 32;
constexpr float learning_rate = 0.01f;
constexpr int steps = 100;

// The gradients of mean((sigmoid(x @ w + b) - y) ** 2) with respect to w and b, as expressions
// (nothing runs until they are used).
template <class W, class Bias, class X, class Y>
auto gradients(W const& w, Bias const& b, X const& x, Y const& y) {
  auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
  auto const g = (2.0f / static_cast<float>(B)) * (p - y) * p * (1.0f - p);
  return std::make_tuple(tessera::matmul(tessera::transpose(x), g), tessera::sum<0>(g));
}

// loss_fn(p) = jnp.mean((preds - y) ** 2)
template <class W, class Bias, class X, class Y>
auto loss(W const& w, Bias const& b, X const& x, Y const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::mean(d * d);
}

// --- The same loop on the host, with plain xtensor -----------------------------------------
struct host_params {
  xt::xtensor<float, 2> w;
  xt::xtensor<float, 1> b;
};

xt::xtensor<float, 1> host_sigmoid_logits(host_params const& p, xt::xtensor<float, 2> const& x) {
  xt::xtensor<float, 1> out = xt::zeros<float>({B});
  for (std::size_t i = 0; i < B; ++i) {
    float z = p.b(0);
    for (std::size_t k = 0; k < D; ++k) z += x(i, k) * p.w(k, 0);
    out(i) = 1.0f / (1.0f + std::exp(-z));
  }
  return out;
}

float host_loss(host_params const& p, xt::xtensor<float, 2> const& x, xt::xtensor<float, 2> const& y) {
  auto const pr = host_sigmoid_logits(p, x);
  double s = 0;
  for (std::size_t i = 0; i < B; ++i) s += double(pr(i) - y(i, 0)) * double(pr(i) - y(i, 0));
  return static_cast<float>(s / B);
}

void host_step(host_params& p, xt::xtensor<float, 2> const& x, xt::xtensor<float, 2> const& y) {
  auto const pr = host_sigmoid_logits(p, x);
  xt::xtensor<float, 2> gw = xt::zeros<float>({D, std::size_t{1}});
  float gb = 0;
  for (std::size_t i = 0; i < B; ++i) {
    float const g = 2.0f / static_cast<float>(B) * (pr(i) - y(i, 0)) * pr(i) * (1.0f - pr(i));
    for (std::size_t k = 0; k < D; ++k) gw(k, 0) += x(i, k) * g;
    gb += g;
  }
  p.w -= learning_rate * gw;
  p.b(0) -= learning_rate * gb;
}

}  // namespace

int main() {
  tessera::runtime rt{devices};
  bool ok = true;

  // key = jax.random.key(1701)
  // X = jax.random.normal(key, (B, D))
  // w_true = jax.random.normal(key, (D, 1))
  // y = (X @ w_true > 0).astype(jnp.float32)
  auto const key = jr::key(1701);
  xt::xtensor<float, 2> const X = jr::normal(key, {B, D});
  xt::xtensor<float, 2> const w_true = jr::normal(key, tessera::shape_t<2>{D, 1});
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) {
    float z = 0;
    for (std::size_t k = 0; k < D; ++k) z += X(i, k) * w_true(k, 0);
    y(i, 0) = z > 0 ? 1.0f : 0.0f;
  }
  std::printf("B = %zu (%zu per device), D = %zu, %d positive labels\n", B, B / devices, D,
              static_cast<int>(xt::sum(y)()));

  // mesh = jax.make_mesh((8,), ("X",))
  // data_sharding = NamedSharding(mesh, P("X", None)); params_sharding = NamedSharding(mesh, P())
  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const data_sharding = tessera::named_sharding(mesh, P<"X", none>{});
  // P() written out per rank, P(None, None) for w and P(None) for b: jit's results come back typed
  // with the full-length spec, and the loop assigns them to w and b.
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  auto const X_sharded = tessera::device_put(X, data_sharding);
  auto const y_sharded = tessera::device_put(y, data_sharding);
  // params = {"w": jnp.zeros((D, 1)), "b": jnp.zeros((1,))}, replicated
  auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
  auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
  std::cout << "X: " << tessera::typeof(X_sharded) << ", y: " << tessera::typeof(y_sharded)
            << ", w: " << tessera::typeof(w) << ", b: " << tessera::typeof(b) << "\n";

  // The communication plan of one gradient step, before anything runs.
  {
    auto const [grad_w, grad_b] = gradients(w, b, X_sharded, y_sharded);
    auto const plan_w = tessera::explain(grad_w);
    auto const plan_b = tessera::explain(grad_b);
    std::cout << "\nexplain(grad_w):\n" << plan_w << "explain(grad_b):\n" << plan_b;
    bool const one_each = plan_w.count() == 1 && plan_w.count("all-reduce") == 1 && plan_b.count() == 1 &&
                          plan_b.count("all-reduce") == 1;
    std::printf("one all-reduce per gradient: %s\n", one_each ? "yes" : "no");
    ok = ok && one_each;
  }

  // @partial(jax.jit, in_shardings=(params_sharding, data_sharding, data_sharding),
  //          out_shardings=params_sharding)
  // def train_step(p, x, y): ... return p - LEARNING_RATE * grad
  auto const train_step = tessera::jit(
      [](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const [grad_w, grad_b] = gradients(w, b, x, y);
        return std::make_tuple(w - learning_rate * grad_w, b - learning_rate * grad_b);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));
  auto const loss_fn = tessera::jit([](auto const& w, auto const& b, auto const& x, auto const& y) {
    return loss(w, b, x, y);
  });

  // The reference: the same loop on the host.
  host_params ref{xt::zeros<float>({D, std::size_t{1}}), xt::zeros<float>({std::size_t{1}})};

  std::size_t hand_collectives = 0, hand_all_reduces = 0;
  std::printf("\nstep  loss    (4 decimals)\n");
  float first_loss = 0, last_loss = 0;
  bool losses_match = true;
  for (int step = 0; step <= steps; ++step) {
    if (step % 10 == 0) {
      float const l = tessera::to_host(loss_fn(w, b, X_sharded, y_sharded))();
      float const l_ref = host_loss(ref, X, y);
      losses_match = losses_match && std::fabs(l - l_ref) < 1e-6f;
      std::printf("%4d  %.4f\n", step, static_cast<double>(l));
      if (step == 0) first_loss = l;
      last_loss = l;
    }
    if (step == steps) break;
    if (step == 0) {
      // The first step under a collective_counter: two all-reduces ran, those explain() listed.
      tessera::collective_counter counter;
      std::tie(w, b) = train_step(w, b, X_sharded, y_sharded);
      hand_collectives = counter.count();
      hand_all_reduces = counter.count("all-reduce");
      bool const two = hand_collectives == 2 && hand_all_reduces == 2;
      std::printf("collectives in one step: %zu all-reduces, nothing else: %s\n", hand_all_reduces,
                  two ? "yes" : "no");
      ok = ok && two;
    } else {
      std::tie(w, b) = train_step(w, b, X_sharded, y_sharded);
    }
    host_step(ref, X, y);
  }
  bool const falls = last_loss < first_loss;
  std::printf("the loss falls: %s\n", falls ? "yes" : "no");
  std::printf("the losses match the unsharded loop's (to 1e-6): %s\n", losses_match ? "yes" : "no");

  // The weights against the unsharded loop's.
  auto const w_host = tessera::to_host(w);
  auto const b_host = tessera::to_host(b);
  float const max_diff = std::max(xt::amax(xt::abs(w_host - ref.w))(), std::fabs(b_host(0) - ref.b(0)));
  bool const weights_match = max_diff < 1e-5f;
  std::printf("weights match the unsharded loop (max abs difference < 1e-5): %s\n", weights_match ? "yes" : "no");
  std::printf("w[:4] = [%.4f %.4f %.4f %.4f], b = [%.4f]\n", static_cast<double>(w_host(0, 0)),
              static_cast<double>(w_host(1, 0)), static_cast<double>(w_host(2, 0)),
              static_cast<double>(w_host(3, 0)), static_cast<double>(b_host(0)));
  ok = ok && falls && losses_match && weights_match;

  // --- The same loop with tessera::grad ---------------------------------------------------
  // def train_step(p, x, y):
  //     def loss_fn(p): ...                                  (loss above)
  //     grad = jax.grad(loss_fn)(p)
  //     return jax.tree.map(lambda a, g: a - LEARNING_RATE * g, p, grad)
  // grad<0, 1> differentiates with respect to w and b (argnums=(0, 1)); x and y are constants.
  // The jit'd function calls grad inside: jit calls it on the arrays themselves.
  std::printf("\nthe same loop with tessera::grad\n");
  {
    // explain() of the gradient: its collectives before anything runs, the hand-written plan's.
    auto const grads = tessera::grad<0, 1>([&](auto const& wt, auto const& bt) { return loss(wt, bt, X_sharded, y_sharded); });
    auto const plan = tessera::explain(grads, w, b);
    std::cout << "explain(grad<0, 1>(loss)):\n" << plan;
    bool const as_planned = plan.count() == hand_collectives && plan.count("all-reduce") == hand_all_reduces;
    std::printf("the same collectives as the hand-written gradients: %s\n", as_planned ? "yes" : "no");
    ok = ok && as_planned;
  }
  auto const grad_step = tessera::jit(
      [](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const grads = tessera::grad<0, 1>(
            [&](auto const& wt, auto const& bt) { return loss(wt, bt, x, y); })(w, b);
        // A gradient has its parameter's type: element type, rank and sharding.
        static_assert(std::is_same_v<std::tuple_element_t<0, std::remove_cvref_t<decltype(grads)>>,
                                     std::remove_cvref_t<decltype(w)>>);
        static_assert(std::is_same_v<std::tuple_element_t<1, std::remove_cvref_t<decltype(grads)>>,
                                     std::remove_cvref_t<decltype(b)>>);
        return std::make_tuple(w - learning_rate * std::get<0>(grads), b - learning_rate * std::get<1>(grads));
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));
  // The same starting point: zeros, replicated.
  auto w_g = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
  auto b_g = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
  for (int step = 0; step < steps; ++step) {
    if (step == 0) {
      tessera::collective_counter counter;
      std::tie(w_g, b_g) = grad_step(w_g, b_g, X_sharded, y_sharded);
      bool const same = counter.count() == hand_collectives && counter.count("all-reduce") == hand_all_reduces;
      std::printf("collectives in one grad step: %zu (%zu all-reduces), as in a hand-written step: %s\n",
                  counter.count(), counter.count("all-reduce"), same ? "yes" : "no");
      ok = ok && same;
    } else {
      std::tie(w_g, b_g) = grad_step(w_g, b_g, X_sharded, y_sharded);
    }
  }
  float const l_grad = tessera::to_host(loss_fn(w_g, b_g, X_sharded, y_sharded))();
  std::printf("loss after %d steps: %.4f\n", steps, static_cast<double>(l_grad));
  auto const w_grad_host = tessera::to_host(w_g);
  auto const b_grad_host = tessera::to_host(b_g);
  float const grad_diff = std::max(xt::amax(xt::abs(w_grad_host - w_host))(), std::fabs(b_grad_host(0) - b_host(0)));
  bool const grad_match = grad_diff < 1e-6f;
  std::printf("weights match the hand-written loop's (max abs difference < 1e-6): %s\n", grad_match ? "yes" : "no");
  std::printf("w[:4] = [%.4f %.4f %.4f %.4f], b = [%.4f]\n", static_cast<double>(w_grad_host(0, 0)),
              static_cast<double>(w_grad_host(1, 0)), static_cast<double>(w_grad_host(2, 0)),
              static_cast<double>(w_grad_host(3, 0)), static_cast<double>(b_grad_host(0)));
  ok = ok && grad_match;

  // --- The same loop with shard_map and pmean (seed 004's distributed_training_step) -------
  // The loss written per device: each device's mean over its own 128 rows, averaged over "X"
  // with pmean (the blocks are equal, so that is the mean over all 1024 rows). grad
  // differentiates through the shard_map: the backward pass runs the body's transpose on every
  // device, and the gradient of a replicated parameter, w or b, is summed over "X" once (the
  // transpose of the implicit pvary of a P() input), as JAX does.
  //     @partial(jax.shard_map, mesh=mesh, in_specs=(P(), P(), P("X"), P("X")), out_specs=P())
  //     def sharded_loss(w, b, x, y):
  //         return jax.lax.pmean(loss_fn(w, b, x, y), "X")
  //     grads = jax.grad(lambda w, b: sharded_loss(w, b, x, y), argnums=(0, 1))(w, b)
  std::printf("\nthe same loop with grad through shard_map (the loss averaged with pmean)\n");
  auto const sharded_loss = tessera::shard_map(
      [](auto const& w_, auto const& b_, auto const& x_, auto const& y_) {
        return tessera::pmean<"X">(loss(w_, b_, x_, y_));
      },
      mesh, tessera::in_specs(P<none, none>{}, P<none>{}, P<"X", none>{}, P<"X", none>{}), tessera::out_specs(P<>{}));
  auto const sm_step = tessera::jit(
      [&sharded_loss](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const [gw, gb] = tessera::grad<0, 1>([&](auto const& wt, auto const& bt) { return sharded_loss(wt, bt, x, y); })(w, b);
        return std::make_tuple(w - learning_rate * gw, b - learning_rate * gb);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));
  auto w_s = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
  auto b_s = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
  for (int step = 0; step < steps; ++step) {
    if (step == 0) {
      // The hand-written step's two all-reduces (grad w, grad b), and the forward pass's pmean,
      // which a hand-written step that never evaluates the loss does not run.
      tessera::collective_counter counter;
      std::tie(w_s, b_s) = sm_step(w_s, b_s, X_sharded, y_sharded);
      bool const same = counter.count() == hand_collectives + 1 && counter.count("all-reduce") == hand_all_reduces + 1;
      std::printf("collectives in one step: %zu all-reduces (the loss's pmean, grad w, grad b), a hand-written "
                  "step's and the pmean: %s\n",
                  counter.count("all-reduce"), same ? "yes" : "no");
      ok = ok && same;
    } else {
      std::tie(w_s, b_s) = sm_step(w_s, b_s, X_sharded, y_sharded);
    }
  }
  float const l_sm = tessera::to_host(loss_fn(w_s, b_s, X_sharded, y_sharded))();
  std::printf("loss after %d steps: %.4f\n", steps, static_cast<double>(l_sm));
  auto const w_sm_host = tessera::to_host(w_s);
  auto const b_sm_host = tessera::to_host(b_s);
  float const sm_diff =
      std::max(xt::amax(xt::abs(w_sm_host - w_grad_host))(), std::fabs(b_sm_host(0) - b_grad_host(0)));
  bool const sm_match = sm_diff < 1e-6f;
  std::printf("weights match the grad loop's (max abs difference < 1e-6): %s\n", sm_match ? "yes" : "no");
  ok = ok && sm_match;
  return ok ? 0 : 1;
}
