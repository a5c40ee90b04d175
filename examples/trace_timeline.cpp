// What every device did during one of seed 002's training steps (jax.profiler.trace):
// logistic regression on 8 devices, the batch sharded on "X", the parameters replicated,
// gradients written with matmul, transpose and sum (as in examples/training.cpp). One step
// runs under a tessera::trace, which writes trace_timeline.json (open it in
// ui.perfetto.dev or chrome://tracing) and trace_timeline.svg, a timeline drawn by
// tessera::write_trace_svg: a row per device, the fused passes in blue, the two gradient
// all-reduces in orange (darker for the time a device waited for the others), the
// transfers in green. What it prints does not depend on timing, so it is checked; the
// timings are in the files.
#include <cstddef>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>
#include <tessera/random.hpp>

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr std::size_t devices = 8;
constexpr std::size_t B = 128 * devices;
constexpr std::size_t D = 32;
constexpr float learning_rate = 0.01f;

template <class W, class Bias, class X, class Y>
auto gradients(W const& w, Bias const& b, X const& x, Y const& y) {
  auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
  auto const g = (2.0f / static_cast<float>(B)) * (p - y) * p * (1.0f - p);
  return std::make_tuple(tessera::matmul(tessera::transpose(x), g), tessera::sum<0>(g));
}

}  // namespace

int main() {
  tessera::runtime rt{devices};
  auto const key = jr::key(1701);
  xt::xtensor<float, 2> const X = jr::normal(key, {B, D});
  xt::xtensor<float, 2> const y = xt::cast<float>(jr::bernoulli(jr::split(key)[1], 0.5f, tessera::shape_t<2>{B, 1}));

  auto const mesh = tessera::make_mesh<"X">({devices});
  auto const data_sharding = tessera::named_sharding(mesh, P<"X", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  auto const train_step = tessera::jit(
      [](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const [grad_w, grad_b] = gradients(w, b, x, y);
        return std::make_tuple(w - learning_rate * grad_w, b - learning_rate * grad_b);
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));

  std::map<std::string, std::size_t> spans;  // "category name" -> how many
  std::set<int> tracks;
  {
    tessera::trace t{"trace_timeline.json"};  // written when t ends
    auto const x = tessera::device_put(X, data_sharding);
    auto const yy = tessera::device_put(y, data_sharding);
    auto w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({D, std::size_t{1}})), w_sharding);
    auto b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
    std::tie(w, b) = train_step(w, b, x, yy);
    auto const w_host = tessera::to_host(w);
    b.block_until_ready();  // the step's last update, queued (async dispatch): in the trace too
    t.stop();
    for (auto const& e : t.events()) {
      ++spans[e.category + " " + e.name];
      tracks.insert(e.device);
    }
    tessera::write_trace_svg(t, "trace_timeline.svg");
    std::printf("w[0] after one step: %.6f\n", static_cast<double>(w_host(0, 0)));
  }
  std::printf("tracks: %zu devices and the host thread\n", tracks.size() - (tracks.count(-1) ? 1 : 0));
  for (auto const& [what, n] : spans)
    if (what.rfind("dispatch", 0) != 0) std::printf("%-26s %zu spans\n", what.c_str(), n);
  std::printf("wrote trace_timeline.json (ui.perfetto.dev) and trace_timeline.svg\n");
  bool const ok = tracks.size() == devices + 1 && spans["collective all-reduce"] == 2 * devices;
  return ok ? 0 : 1;
}
