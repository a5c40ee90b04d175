// Asynchronous dispatch (issue 33): a loop of small jitted steps, seed 002's training step as
// examples/training.cpp writes it (hand-written gradients, jit with in/out shardings; B = 128
// per device, D = 32), with asynchronous dispatch on and off (tessera::set_async_dispatch).
// Prints, per mode, the loop's time per step (the loop of STEPS steps, then one
// block_until_ready) and the host's time per step (until the loop returns, before the wait:
// the per-step host overhead JAX's async dispatch measures, bench/jax/dispatch.py). The modes
// alternate over REPS repetitions and the median is reported, so a drift of the machine shows
// in both. bench/run_dispatch.sh builds and runs it beside JAX's.
//
//   TESSERA_NUM_DEVICES=8 build/bench-dispatch/dispatch_bench [steps] [reps]
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

// Built against a tessera without asynchronous dispatch (the baseline before issue 33), the
// "synchronous" figures are that version's and the "asynchronous" ones repeat them.
#if !__has_include(<tessera/runtime/dispatch_queue.hpp>)
namespace tessera {
inline bool set_async_dispatch(bool) { return false; }
template <class X>
X const& block_until_ready(X const& x) { return x; }
}  // namespace tessera
#endif

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr std::size_t D = 32;
constexpr float learning_rate = 0.01f;

template <class W, class Bias, class X, class Y>
auto gradients(W const& w, Bias const& b, X const& x, Y const& y, std::size_t B) {
  auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
  auto const g = (2.0f / static_cast<float>(B)) * (p - y) * p * (1.0f - p);
  return std::make_tuple(tessera::matmul(tessera::transpose(x), g), tessera::sum<0>(g));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int const steps = argc > 1 ? std::atoi(argv[1]) : 1000;
  int const reps = argc > 2 ? std::atoi(argv[2]) : 5;
  tessera::runtime rt;
  std::size_t const devices = static_cast<std::size_t>(rt.local_device_count());
  std::size_t const B = 128 * devices;
  auto const key = jr::key(1701);
  xt::xtensor<float, 2> const X = jr::normal(key, {B, D});
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) y(i, 0) = (i * 7919) % 3 == 0 ? 1.0f : 0.0f;

  auto const mesh = tessera::make_mesh<"X">({static_cast<int>(devices)});
  auto const data_sharding = tessera::named_sharding(mesh, P<"X", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  auto const xs = tessera::device_put(X, data_sharding);
  auto const ys = tessera::device_put(y, data_sharding);
  auto const train_step = tessera::jit(
      [B](auto const& w, auto const& b, auto const& x, auto const& yy) {
        auto const [grad_w, grad_b] = gradients(w, b, x, yy, B);
        return std::make_tuple(w - learning_rate * grad_w, b - learning_rate * grad_b);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));

  using clock = std::chrono::steady_clock;
  struct result {
    std::vector<double> loop_us, host_us;
    xt::xtensor<float, 2> w;
  };
  auto run = [&](bool async) {
    tessera::set_async_dispatch(async);
    auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
    auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
    for (int i = 0; i < 20; ++i) std::tie(w, b) = train_step(w, b, xs, ys);  // warm the caches
    tessera::block_until_ready(std::make_tuple(w, b));
    auto const t0 = clock::now();
    for (int i = 0; i < steps; ++i) std::tie(w, b) = train_step(w, b, xs, ys);
    auto const t1 = clock::now();
    tessera::block_until_ready(std::make_tuple(w, b));
    auto const t2 = clock::now();
    return std::make_tuple(std::chrono::duration<double, std::micro>(t2 - t0).count() / steps,
                           std::chrono::duration<double, std::micro>(t1 - t0).count() / steps, tessera::to_host(w));
  };
  result on, off;
  for (int r = 0; r < reps; ++r) {
    for (bool async : {false, true}) {
      auto [loop, host, w] = run(async);
      result& res = async ? on : off;
      res.loop_us.push_back(loop);
      res.host_us.push_back(host);
      res.w = w;
    }
  }
  // Per step, the dispatches the host waits for (round trips) and those it only queues.
  auto count = [&](bool async) {
    tessera::set_async_dispatch(async);
    auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
    auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
    tessera::trace tr;
    std::tie(w, b) = train_step(w, b, xs, ys);
    tr.stop();
    tessera::block_until_ready(std::make_tuple(w, b));
    int waited = 0, queued = 0;
    for (auto const& e : tr.events()) {
      waited += e.category == "dispatch" && e.name == "dispatch";
      queued += e.category == "dispatch" && e.name == "enqueue";
    }
    return std::make_pair(waited, queued);
  };
  auto const [sync_waited, sync_queued] = count(false);
  auto const [async_waited, async_queued] = count(true);
  bool const same = on.w == off.w;
  std::printf("tessera dispatch: %zu devices, %d steps, median of %d; seed 002 train step (B = %zu, D = %zu)\n",
              devices, steps, reps, B, D);
  std::printf("  synchronous : %8.1f us/step loop, %8.1f us/step host\n", median(off.loop_us), median(off.host_us));
  std::printf("  asynchronous: %8.1f us/step loop, %8.1f us/step host\n", median(on.loop_us), median(on.host_us));
  std::printf("  dispatches per step: synchronous %d waited + %d queued; asynchronous %d waited + %d queued\n",
              sync_waited, sync_queued, async_waited, async_queued);
  std::printf("  speedup (sync loop / async loop): %.2f; same weights: %s\n", median(off.loop_us) / median(on.loop_us),
              same ? "yes" : "NO");
  std::printf("RESULT tessera devices=%zu sync_loop_us=%.2f async_loop_us=%.2f async_host_us=%.2f speedup=%.3f\n",
              devices, median(off.loop_us), median(on.loop_us), median(on.host_us),
              median(off.loop_us) / median(on.loop_us));
  return same ? 0 : 1;
}
