// Issue 32's target: the transformer's training step written with tessera::nn's layers within
// 1.05x of the hand-written one (examples/transformer_model.hpp). Both in one binary, so that
// bench/run_transformer.sh can interleave their repetitions on a shared machine:
//
//   hand_written_step   bench/transformer_bench.cpp's step: value_and_grad and the SGD update
//                       tree_map(p - 0.1 g), Megatron layout, B=16, S=32, 8 devices;
//   layered_step        the same model and update written with the layers
//                       (examples/transformer_layers_model.hpp, Transformer<false>: no biases, as
//                       the hand-written model has none), under the tensor_parallel rules, which
//                       give the hand-written layout;
//   layered_adam_step   examples/transformer_layers.cpp's step as it trains (Flax's defaults, with
//                       biases; optim::adam through TrainState.apply_gradients), for reference.
//
//   paired              the first two alternately in one runtime, each step timed on its own,
//                       reporting the median of the per-pair ratios layered / hand-written: a
//                       pair runs within a few tens of milliseconds, so it sees one load, which
//                       the separate benchmarks' repetitions on a shared machine do not.
//
// Every iteration starts from the same parameters.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "../examples/transformer_layers_model.hpp"
#include "../examples/transformer_model.hpp"

namespace {

void hand_written_step(benchmark::State& state) {
  using namespace transformer;
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  auto const params = init_params(mesh);
  auto const data = make_data(mesh);
  auto const& inputs = data.first;
  auto const& targets = data.second;
  auto const causal = tessera::iota<std::int32_t, 0>({S, S}, mesh) >= tessera::iota<std::int32_t, 1>({S, S}, mesh);
  auto loss = [&](auto const& p) { return loss_fn(p, inputs, targets, causal); };
  for (auto _ : state) {
    auto const [l, g] = tessera::value_and_grad(loss)(params);
    auto next = tessera::tree_map([](auto const& a, auto const& d) { return a - lr * d; }, params, g);
    tessera::block_until_ready(std::tie(next, l));  // the step queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(next);
    benchmark::DoNotOptimize(l);
  }
}

void layered_step(benchmark::State& state) {
  using namespace transformer_layers;
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  Transformer<false> const model;
  auto const data = make_data<tensor_parallel>(mesh);
  auto const& inputs = data.first;
  auto const& targets = data.second;
  auto const params = model.init(nn::scope(jr::key(0), mesh, tensor_parallel{}), inputs);
  auto loss = [&](auto const& p) { return cross_entropy(model.apply(p, inputs), targets); };
  for (auto _ : state) {
    auto const [l, g] = tessera::value_and_grad(loss)(params);
    auto next = tessera::tree_map([](auto const& a, auto const& d) { return a - transformer::lr * d; }, params, g);
    tessera::block_until_ready(std::tie(next, l));  // the step queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(next);
    benchmark::DoNotOptimize(l);
  }
}

void layered_adam_step(benchmark::State& state) {
  using namespace transformer_layers;
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  Transformer<> const model;
  auto const data = make_data<tensor_parallel>(mesh);
  auto const& inputs = data.first;
  auto const& targets = data.second;
  auto const apply_fn = [model](auto const& p, auto const& ids) { return model.apply(p, ids); };
  auto const start = tessera::optim::create_train_state(
      apply_fn, model.init(nn::scope(jr::key(0), mesh, tensor_parallel{}), inputs), tessera::optim::adam(lr));
  auto loss = [&](auto const& p) { return cross_entropy(model.apply(p, inputs), targets); };
  for (auto _ : state) {
    auto const [l, g] = tessera::value_and_grad(loss)(start.params);
    auto next = start.apply_gradients(g);
    tessera::block_until_ready(std::tie(next, l));  // the step queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(next);
    benchmark::DoNotOptimize(l);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void paired(benchmark::State& state) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  // The hand-written model.
  auto const hw_params = transformer::init_params(mesh);
  auto const hw_data = transformer::make_data(mesh);
  auto const causal = tessera::iota<std::int32_t, 0>({transformer::S, transformer::S}, mesh) >=
                      tessera::iota<std::int32_t, 1>({transformer::S, transformer::S}, mesh);
  auto hw_loss = [&](auto const& p) { return transformer::loss_fn(p, hw_data.first, hw_data.second, causal); };
  // The layered one.
  namespace tl = transformer_layers;
  tl::Transformer<false> const model;
  auto const data = tl::make_data<tl::tensor_parallel>(mesh);
  auto const params = model.init(tl::nn::scope(tl::jr::key(0), mesh, tl::tensor_parallel{}), data.first);
  auto loss = [&](auto const& p) { return tl::cross_entropy(model.apply(p, data.first), data.second); };

  auto sgd = [](auto const& a, auto const& d) { return a - transformer::lr * d; };
  auto hw_step = [&] {
    auto const [l, g] = tessera::value_and_grad(hw_loss)(hw_params);
    auto next = tessera::tree_map(sgd, hw_params, g);
    tessera::block_until_ready(next);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(next);
  };
  auto layered_step = [&] {
    auto const [l, g] = tessera::value_and_grad(loss)(params);
    auto next = tessera::tree_map(sgd, params, g);
    tessera::block_until_ready(next);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(next);
  };
  auto timed = [](auto const& f) {
    auto const t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> hw, ly, ratio;
  bool flip = false;
  for (auto _ : state) {
    double a = 0, b = 0;
    if (flip) b = timed(layered_step), a = timed(hw_step);  // alternate the order
    else a = timed(hw_step), b = timed(layered_step);
    flip = !flip;
    hw.push_back(a), ly.push_back(b), ratio.push_back(b / a);
  }
  state.counters["hand_written_ms"] = median(hw);
  state.counters["layered_ms"] = median(ly);
  state.counters["ratio"] = median(ratio);
  std::vector<double> sorted = ratio;
  std::sort(sorted.begin(), sorted.end());
  state.counters["ratio_q1"] = sorted[sorted.size() / 4];
  state.counters["ratio_q3"] = sorted[sorted.size() * 3 / 4];
}

BENCHMARK(hand_written_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(layered_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(layered_adam_step)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(paired)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(40);

}  // namespace

BENCHMARK_MAIN();
