// What tessera::trace costs (issue 18): a small element-wise expression, a shard_map psum and a
// device_put/to_host round trip on 2 devices, each with no trace alive (the hooks cost one
// relaxed atomic load per span) and with a trace recording. bench/run_trace.sh runs this binary
// and bench_trace_bench_no_hooks, the same source built with TESSERA_NO_TRACE (the hooks
// compiled out), and prints the ratios.
#include <benchmark/benchmark.h>

#include <memory>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace {

using tessera::P;

// arg 0: no trace alive; arg 1: a trace records every span (its events are dropped each 4096
// iterations, so the vector does not grow without bound).
std::unique_ptr<tessera::trace> maybe_trace(long on) { return on ? std::make_unique<tessera::trace>() : nullptr; }

// An empty task on every device, and wait: a task span and a dispatch span when tracing.
void BM_dispatch(benchmark::State& state) {
  tessera::runtime rt{2};
  auto& pool = rt.pool();
  auto t = maybe_trace(state.range(0));
  long i = 0;
  for (auto _ : state) {
    pool.run_all([](int) {});
    if (t && ++i % 4096 == 0) t = maybe_trace(1);
  }
}
BENCHMARK(BM_dispatch)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_expression(benchmark::State& state) {
  tessera::runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> const h = xt::arange<float>(1024.0f);
  auto const a = tessera::device_put(h, tessera::named_sharding(m, P<"x">{}));
  auto t = maybe_trace(state.range(0));
  long i = 0;
  for (auto _ : state) {
    tessera::array r = 2.0f * a + 1.0f;
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    if (t && ++i % 4096 == 0) t = maybe_trace(1);
  }
}
BENCHMARK(BM_expression)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_psum(benchmark::State& state) {
  tessera::runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(2.0f)), tessera::named_sharding(m, P<"x">{}));
  auto f = tessera::shard_map([](auto blk) { return tessera::psum<"x">(xt::xtensor<float, 1>(blk)); }, m,
                              tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  auto t = maybe_trace(state.range(0));
  long i = 0;
  for (auto _ : state) {
    auto r = f(x);
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    if (t && ++i % 4096 == 0) t = maybe_trace(1);
  }
}
BENCHMARK(BM_psum)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_put_get(benchmark::State& state) {
  tessera::runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  xt::xtensor<float, 1> const h = xt::arange<float>(1024.0f);
  auto const s = tessera::named_sharding(m, P<"x">{});
  auto t = maybe_trace(state.range(0));
  long i = 0;
  for (auto _ : state) {
    auto back = tessera::to_host(tessera::device_put(h, s));
    benchmark::DoNotOptimize(back);
    if (t && ++i % 4096 == 0) t = maybe_trace(1);
  }
}
BENCHMARK(BM_put_get)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
