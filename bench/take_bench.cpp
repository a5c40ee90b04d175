// take from a vocabulary-sharded table (issue 31's target: within 1.5x of the memory-bandwidth
// floor for the bytes it must move), float32, 8 devices:
//
//   take/tessera       y = take<0>(table, ids): table [32768, 256] (32 MiB) P('x', None), the
//                      vocabulary over 8 devices; ids [4096] int32 replicated; y [4096, 256]
//                      (4 MiB) replicated. Megatron's lookup, as JAX compiles it: each device
//                      looks up the ids in its rows (0 for the others), then an all-reduce sums
//                      the 8 partial results into every device's copy.
//   take/memcpy_result the floor: std::memcpy of the bytes the result holds on all 8 devices
//                      (8 x 4 MiB, from one 4 MiB source, so the source stays in cache as the
//                      table rows would not: a generous floor), one thread.
//   take/memcpy_allreduce  the floor of the Megatron scheme itself: the 8 partial results
//                      written (8 x 4 MiB), read once by a reduce-scatter, the sums written once
//                      (4 MiB) and copied to the 7 other devices (28 MiB read, 28 written):
//                      124 MiB of traffic, about what std::memcpy of 16 x 4 MiB moves, one thread.
//
// SetBytesProcessed counts the result's bytes on all devices (8 x 4 MiB) for each, so the
// bytes_per_second columns compare directly. bench/jax/take.py is JAX's number on the same
// machine (jax.jit of jnp.take on 8 CPU devices, the same shapes and shardings).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace {

constexpr std::size_t vocab = 32768, width = 256, tokens = 4096, devices = 8;
constexpr std::size_t result_bytes = devices * tokens * width * sizeof(float);

xt::xtensor<std::int32_t, 1> token_ids() {
  xt::xtensor<std::int32_t, 1> ids = xt::zeros<std::int32_t>({tokens});
  std::uint32_t s = 12345;
  for (auto& v : ids) {
    s = s * 1664525u + 1013904223u;  // spread over the whole vocabulary: every device looks some up
    v = static_cast<std::int32_t>(s >> 8) % static_cast<std::int32_t>(vocab);
  }
  return ids;
}

void take_tessera(benchmark::State& state) {
  tessera::runtime rt{static_cast<int>(devices)};
  auto const mesh = tessera::make_mesh<"x">({static_cast<int>(devices)});
  xt::xtensor<float, 2> const h = xt::ones<float>({vocab, width});
  auto const table = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  auto const ids = tessera::device_put(token_ids(), tessera::named_sharding(mesh, tessera::P<>{}));
  for (auto _ : state) {
    auto y = tessera::eval(tessera::take<0>(table, ids));
    benchmark::DoNotOptimize(y.block_data(0));
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(result_bytes));
}

/// `count` copies of `bytes` (from one source, or each from its own), on one thread: no thread
/// is started per call, so that on a loaded machine the floor is not a scheduler's delay.
void copies(benchmark::State& state, std::size_t count, std::size_t bytes, bool one_source) {
  std::size_t const n = bytes / sizeof(float);
  std::vector<float> src(one_source ? n : count * n, 1.0f), dst(count * n, 0.0f);
  for (auto _ : state) {
    for (std::size_t c = 0; c < count; ++c)
      std::memcpy(dst.data() + c * n, src.data() + (one_source ? 0 : c * n), n * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(result_bytes));
}

void memcpy_result(benchmark::State& state) { copies(state, devices, tokens * width * sizeof(float), true); }
void memcpy_allreduce(benchmark::State& state) { copies(state, 2 * devices, tokens * width * sizeof(float), false); }

}  // namespace

BENCHMARK(take_tessera)->Name("take/tessera")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(memcpy_result)->Name("take/memcpy_result")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(memcpy_allreduce)->Name("take/memcpy_allreduce")->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
