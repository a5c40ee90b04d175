// Asynchronous collectives within one process (issue 33): what a start + wait costs against the
// blocking collective (a 4 KiB psum and a 4 MiB all_gather on 2 devices), and seed 003's
// pattern (all_gather_async + local work + wait against all_gather + the same work) on 2
// devices. Both devices compute on the 2 cores here, so the pattern cannot overlap: an
// in-process all-gather is each device's own copy, made at wait() on its own core, and the
// ratio shows only what the asynchronous path costs. Across processes, where the transfer is
// MPI's: bench/mpi/async_bench.cpp (bench/run_async.sh).
#include <benchmark/benchmark.h>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

namespace {

using tessera::none;
using tessera::P;

float local_work(float seed, long iters) {
  float a[8];
  for (int j = 0; j < 8; ++j) a[j] = seed + static_cast<float>(j);
  for (long i = 0; i < iters; ++i)
    for (int j = 0; j < 8; ++j) a[j] = a[j] * 0.999999f + 0.5f;
  float s = 0;
  for (float v : a) s += v;
  return s;
}

// arg 0: the blocking collective; arg 1: started asynchronously and waited on at once.
void BM_psum_4KiB(benchmark::State& state) {
  tessera::runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::ones<float>({2048})), tessera::named_sharding(m, P<"x">{}));
  bool const async = state.range(0) != 0;
  auto f = tessera::shard_map(
      [async](auto b) {
        if (async) return xt::xtensor<float, 1>(tessera::psum_async<"x">(b).wait());
        return xt::xtensor<float, 1>(tessera::psum<"x">(b));
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}), tessera::no_check_vma);
  for (auto _ : state) {
    auto y = f(x);
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
}
BENCHMARK(BM_psum_4KiB)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

// arg 0: all_gather then the work; arg 1: all_gather_async, the work, wait. 4 MiB per device.
void BM_seed003_pattern(benchmark::State& state) {
  tessera::runtime rt{2};
  auto const m = tessera::make_mesh<"x">({2});
  auto const x = tessera::device_put(xt::xtensor<float, 1>(xt::ones<float>({std::size_t{2} << 20})),
                                     tessera::named_sharding(m, P<"x">{}));
  bool const async = state.range(0) != 0;
  long const iters = 1 << 20;
  auto f = tessera::shard_map(
      [async, iters](auto b) {
        if (async) {
          auto future = tessera::all_gather_async<"x">(b, 0, tessera::tiled);
          float const w = local_work(b(0), iters);
          auto g = future.wait();
          return xt::xtensor<float, 1>(xt::view(g, xt::range(0, 4)) + w * 0.0f);
        }
        auto g = tessera::all_gather<"x">(b, 0, tessera::tiled);
        float const w = local_work(b(0), iters);
        return xt::xtensor<float, 1>(xt::view(g, xt::range(0, 4)) + w * 0.0f);
      },
      m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}), tessera::no_check_vma);
  for (auto _ : state) {
    auto y = f(x);
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
}
BENCHMARK(BM_seed003_pattern)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
