// jax.random in tessera (issue 16): normal, uniform and bits of 2^22 elements made in place on
// 1, 2 and 4 devices (and, issue 32, truncated_normal and nn::initializers::lecun_normal of a
// 2048x2048 kernel, the initializer layers call most), against what a C++ user would write instead: std::mt19937 with
// std::normal_distribution / uniform_real_distribution on one thread, and the same with one
// engine per std::thread (whose numbers then depend on the thread count, unlike tessera's).
// bench/run_random.sh adds JAX itself (bench/jax/random_jax.py) and prints ratios.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include <tessera/array.hpp>
#include <tessera/nn/initializers.hpp>
#include <tessera/random.hpp>

namespace {

constexpr std::size_t kElems = std::size_t{1} << 22;
namespace rnd = tessera::random;

template <class Make>
void sharded(benchmark::State& state, Make make) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto s = tessera::named_sharding(mesh, tessera::P<"x">{});
  auto key = rnd::key(1701);
  for (auto _ : state) {
    auto a = make(key, s);
    tessera::block_until_ready(a);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kElems));
}

void BM_tessera_normal(benchmark::State& state) {
  sharded(state, [](auto k, auto const& s) { return rnd::normal(k, tessera::shape_t<1>{kElems}, s); });
}
void BM_tessera_uniform(benchmark::State& state) {
  sharded(state, [](auto k, auto const& s) { return rnd::uniform(k, tessera::shape_t<1>{kElems}, s); });
}
void BM_tessera_bits(benchmark::State& state) {
  sharded(state, [](auto k, auto const& s) { return rnd::bits(k, tessera::shape_t<1>{kElems}, s); });
}
void BM_tessera_truncated_normal(benchmark::State& state) {
  sharded(state, [](auto k, auto const& s) { return rnd::truncated_normal(k, -2.0f, 2.0f, tessera::shape_t<1>{kElems}, s); });
}
void BM_tessera_lecun_normal(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto s = tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{});
  auto key = rnd::key(1701);
  tessera::nn::initializers::lecun_normal const init;
  for (auto _ : state) {
    auto a = init(key, {2048, 2048}, s);
    tessera::block_until_ready(a);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(a);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kElems));
}
BENCHMARK(BM_tessera_truncated_normal)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tessera_lecun_normal)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tessera_normal)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tessera_uniform)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tessera_bits)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

/// One std::mt19937 per thread over its share of the elements (threads spawned per call, as a
/// hand-written loop would).
template <class Dist>
void std_threads(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  std::vector<float> out(kElems);
  for (auto _ : state) {
    std::vector<std::thread> ts;
    std::size_t const per = kElems / static_cast<std::size_t>(n);
    for (int t = 0; t < n; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 gen(1701u + static_cast<unsigned>(t));
        Dist d;
        for (std::size_t i = per * static_cast<std::size_t>(t); i < per * static_cast<std::size_t>(t + 1); ++i)
          out[i] = d(gen);
      });
    for (auto& t : ts) t.join();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kElems));
}
void BM_std_mt19937_normal(benchmark::State& state) { std_threads<std::normal_distribution<float>>(state); }
void BM_std_mt19937_uniform(benchmark::State& state) { std_threads<std::uniform_real_distribution<float>>(state); }
BENCHMARK(BM_std_mt19937_normal)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_std_mt19937_uniform)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
