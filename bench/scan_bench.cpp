// Scan benchmarks (issue 31), float32, 64 MiB (16 Mi elements) on 8 devices:
//
//   cumsum_sharded     cumsum<0>(x), x 1-D P('x'): the scanned dimension sharded. Each device
//                      folds its block into chunk totals, the totals (64 floats in all) are
//                      all-gathered, and each device scans its block from their fold: the
//                      operand is read twice and the result written once.
//   cumsum_sharded_2d  cumsum<0>(a), a [4096, 4096] P('x', None): the same along rows (one total
//                      per column and device, 4096 x 8 gathered).
//   cumsum_local       cumsum<1>(a), a [4096, 4096] P('x', None): along an unsharded dimension
//                      (a local scan, read once, written once).
//   memcpy             std::memcpy of the same 64 MiB into a buffer allocated and touched once:
//                      the floor, with 1 and with 2 threads (the machine's cores).
//
// SetBytesProcessed counts the 128 MiB a copy moves (read + write) for every benchmark, so the
// bytes_per_second columns compare directly; the scan's own floor is 1.5 times a copy's
// (it must read its operand once more to know the totals before it writes).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace {

constexpr std::size_t n = std::size_t{16} << 20;  // 64 MiB of float32
constexpr std::size_t side = 4096;                // [4096, 4096] = the same bytes

void copy_bytes(benchmark::State& state) { state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * n * sizeof(float))); }

void BM_cumsum_sharded(benchmark::State& state) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  xt::xtensor<float, 1> const h = xt::ones<float>({n}) * 1e-3f;
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"x">{}));
  for (auto _ : state) {
    auto y = tessera::eval(tessera::cumsum<0>(x));
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
  copy_bytes(state);
}

void BM_cumsum_sharded_2d(benchmark::State& state) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  xt::xtensor<float, 2> const h = xt::ones<float>({side, side}) * 1e-3f;
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  for (auto _ : state) {
    auto y = tessera::eval(tessera::cumsum<0>(x));
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
  copy_bytes(state);
}

void BM_cumsum_local(benchmark::State& state) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  xt::xtensor<float, 2> const h = xt::ones<float>({side, side}) * 1e-3f;
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  for (auto _ : state) {
    auto y = tessera::eval(tessera::cumsum<1>(x));
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
  copy_bytes(state);
}

void BM_memcpy(benchmark::State& state) {
  std::size_t const threads = static_cast<std::size_t>(state.range(0));
  std::vector<float> src(n, 1e-3f), dst(n, 0.0f);
  for (auto _ : state) {
    std::vector<std::thread> ts;
    std::size_t const per = n / threads;
    for (std::size_t t = 1; t < threads; ++t)
      ts.emplace_back([&, t] { std::memcpy(dst.data() + t * per, src.data() + t * per, per * sizeof(float)); });
    std::memcpy(dst.data(), src.data(), per * sizeof(float));
    for (auto& t : ts) t.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  copy_bytes(state);
}

}  // namespace

BENCHMARK(BM_cumsum_sharded)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cumsum_sharded_2d)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_cumsum_local)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_memcpy)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
