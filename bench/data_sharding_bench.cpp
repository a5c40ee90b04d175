// Data-sharding benchmarks: device_put / to_host bandwidth against memcpy of the
// same bytes, and the device pool's dispatch round trip against the peers a user
// would otherwise reach for (an OpenMP parallel region, std::thread spawn+join).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <tessera/tessera.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace {

constexpr std::size_t kElems = std::size_t{1} << 24;  // 64 MiB of float: past the caches

xt::xtensor<float, 1> const& host_data() {
  static xt::xtensor<float, 1> h = xt::arange<float>(static_cast<float>(kElems));
  return h;
}

void BM_memcpy(benchmark::State& state) {
  auto const& h = host_data();
  std::vector<float> dst(kElems);
  std::memset(dst.data(), 1, kElems * sizeof(float));
  for (auto _ : state) {
    std::memcpy(dst.data(), h.data(), kElems * sizeof(float));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kElems * sizeof(float)));
}
BENCHMARK(BM_memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

// The peer of a device_put into new arrays: copying into a new host buffer
// (what `std::vector<float> copy(begin, end)` costs: the copy plus the page faults).
void BM_memcpy_fresh(benchmark::State& state) {
  auto const& h = host_data();
  for (auto _ : state) {
    std::unique_ptr<float[]> dst(new float[kElems]);
    std::memcpy(dst.get(), h.data(), kElems * sizeof(float));
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kElems * sizeof(float)));
}
BENCHMARK(BM_memcpy_fresh)->Unit(benchmark::kMillisecond)->UseRealTime();

// device_put into new arrays; the device caches reuse the blocks of the arrays freed before.
void BM_device_put(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto s = tessera::named_sharding(mesh, tessera::P<"x">{});
  auto const& h = host_data();
  for (auto _ : state) {
    auto a = tessera::device_put(h, s);
    benchmark::DoNotOptimize(a.block_data(0));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kElems * sizeof(float)));
}
BENCHMARK(BM_device_put)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// to_host into an existing host array (np.copyto), against BM_memcpy.
void BM_to_host(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto a = tessera::device_put(host_data(), tessera::named_sharding(mesh, tessera::P<"x">{}));
  xt::xtensor<float, 1> h = xt::zeros<float>({kElems});
  for (auto _ : state) {
    tessera::to_host(a, h);
    benchmark::DoNotOptimize(h.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kElems * sizeof(float)));
}
BENCHMARK(BM_to_host)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// An empty task on every device, and wait: the fixed cost of every sharded operation.
void BM_dispatch(benchmark::State& state) {
  tessera::runtime rt{static_cast<int>(state.range(0))};
  auto& pool = rt.pool();
  for (auto _ : state) pool.run_all([](int) {});
}
BENCHMARK(BM_dispatch)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

#if defined(_OPENMP)
void BM_openmp_parallel_region(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  for (auto _ : state) {
#pragma omp parallel num_threads(n)
    { benchmark::DoNotOptimize(omp_get_thread_num()); }
  }
}
BENCHMARK(BM_openmp_parallel_region)->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

void BM_thread_spawn_join(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<std::thread> ts;
    ts.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ts.emplace_back([] {});
    for (auto& t : ts) t.join();
  }
}
BENCHMARK(BM_thread_spawn_join)->Arg(2)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
