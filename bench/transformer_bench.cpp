// One training step of examples/transformer.cpp's model (issue 31's target: no slower than
// JAX 0.12's jitted step on 8 CPU devices of one process): value_and_grad of the loss and the
// SGD update, Megatron-sharded on the 2x4 ("data", "model") mesh, B=16, S=32. Every step starts
// from the same parameters, as bench/jax/transformer_step.py's calls do; bench/run_transformer.sh
// runs both and prints the ratio.
#include <benchmark/benchmark.h>

#include "../examples/transformer_model.hpp"

namespace {

void transformer_step(benchmark::State& state) {
  using namespace transformer;
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  auto const params = init_params(mesh);
  auto const data = make_data(mesh);  // not a structured binding: the lambdas below capture it
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
  state.counters["devices"] = 8;
}
BENCHMARK(transformer_step)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
