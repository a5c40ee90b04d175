// concatenate along a sharded axis (issue 31's target: within 1.5x of the memory-bandwidth floor
// for the bytes it must move), float32:
//
//   concat   y = concatenate<0>(a, b), a and b 8 Mi elements (32 MiB) each, P('x') over 8
//            devices: each device writes its 8 MiB block of y, copying the rows of a and b it
//            needs from the devices that hold them (half of them another device's)
//   memcpy   the same 64 MiB copied by std::memcpy on one thread, into a buffer allocated
//            once: the floor for the bytes a concatenate reads and writes
//   memcpy_threads  the same copy split over n std::threads (spawned per call)
//
// The argument is the device (or thread) count. bench/jax/concatenate.py is JAX's number on the
// same machine (jax.jit of jnp.concatenate on 8 CPU devices).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/expr.hpp>
#include <tessera/expr/join_cut.hpp>

namespace {

constexpr std::size_t elements = std::size_t{8} << 20;  // 32 MiB of float32 per operand

void concat(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto const mesh = tessera::make_mesh<"x">({n});
  auto const s = tessera::named_sharding(mesh, tessera::P<"x">{});
  xt::xtensor<float, 1> const h = xt::arange<float>(static_cast<float>(elements));
  auto const a = tessera::device_put(h, s);
  auto const b = tessera::device_put(h, s);
  for (auto _ : state) {
    auto y = tessera::eval(tessera::concatenate<0>(a, b));
    benchmark::DoNotOptimize(y.block_data(0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * elements * sizeof(float)));
}

void copy(benchmark::State& state) {
  std::vector<float> src(2 * elements, 1.0f), dst(2 * elements, 0.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size() * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * elements * sizeof(float)));
}

void copy_threads(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  std::vector<float> src(2 * elements, 1.0f), dst(2 * elements, 0.0f);
  std::size_t const part = src.size() / n;
  for (auto _ : state) {
    std::vector<std::thread> ts;
    for (std::size_t t = 0; t < n; ++t)
      ts.emplace_back([&, t] { std::memcpy(dst.data() + t * part, src.data() + t * part, part * sizeof(float)); });
    for (auto& t : ts) t.join();
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * elements * sizeof(float)));
}

}  // namespace

BENCHMARK(concat)->Name("concat/tessera")->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(copy)->Name("concat/memcpy")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(copy_threads)->Name("concat/memcpy_threads")->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
