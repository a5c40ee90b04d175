// Collective benchmarks (issue 3): psum, all_gather and all_to_all inside
// shard_map on 1-D meshes of 2, 4 and 8 devices, 4 KiB and 4 MiB per device;
// the bandwidth they are bounded by (STREAM copy and triad on every core); and
// the fixed costs (a team barrier, a dispatch, an empty shard_map) that say how
// many barrier phases an empty shard_map costs.
//
// bench/mpi/collectives_mpi.cpp measures OpenMPI on the same element counts and
// bench/run_collectives.sh prints both side by side. Collective timings are per
// call: one shard_map runs `reps` calls back to back, so the dispatch and the end
// of the body are spread over them, as they are over an MPI program's loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

/// Reports `us_per_call` when each benchmark iteration makes `calls_per_iteration` calls;
/// the Time column stays per iteration (Google Benchmark's min time is counted in iterations).
void report_per_call(benchmark::State& state, double seconds, int calls_per_iteration) {
  double const calls = static_cast<double>(state.iterations()) * calls_per_iteration;
  state.counters["us_per_call"] = calls == 0 ? 0.0 : seconds / calls * 1e6;
  state.counters["calls_per_iter"] = calls_per_iteration;
}

// ---------------------------------------------------------------------------
// STREAM (McCalpin) copy and triad, one slice per core. Bytes are counted as
// STREAM counts them (read + written, no write-allocate), which is also how the
// collectives' floors below count. Copy runs at several footprints (both arrays
// together): the classic one, far past the caches, and the footprints of the
// 4 MiB collectives (inputs + outputs of all devices), which may partly fit in
// the last-level cache and then move faster than DRAM allows.
// ---------------------------------------------------------------------------

int core_count() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

template <class Kernel>
void stream(benchmark::State& state, std::size_t elems, int arrays, Kernel kernel) {
  int const cores = core_count();
  tessera::runtime rt{cores};
  auto& pool = rt.pool();
  std::vector<double> a(elems), b(elems), c(elems);
  auto slice = [&](int d, auto fn) {
    fn(elems * static_cast<std::size_t>(d) / static_cast<std::size_t>(cores),
       elems * static_cast<std::size_t>(d + 1) / static_cast<std::size_t>(cores));
  };
  pool.run_all([&](int d) {  // each core touches its own slices first
    slice(d, [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) a[i] = 1.0, b[i] = 2.0, c[i] = 0.0;
    });
  });
  std::size_t const bytes = static_cast<std::size_t>(arrays) * elems * sizeof(double);
  int const reps = static_cast<int>(std::max<std::size_t>(4, (std::size_t{256} << 20) / bytes));
  for (auto _ : state) {
    pool.run_all([&](int d) {
      slice(d, [&](std::size_t lo, std::size_t hi) {
        for (int r = 0; r < reps; ++r) {
          kernel(a.data(), b.data(), c.data(), lo, hi);
          benchmark::ClobberMemory();
        }
      });
    });
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * reps * static_cast<std::int64_t>(bytes));
  state.counters["cores"] = cores;
  state.counters["footprint_bytes"] = static_cast<double>(bytes);
}

// Arg: footprint in MiB (both arrays).
void BM_stream_copy(benchmark::State& state) {
  std::size_t const elems = (static_cast<std::size_t>(state.range(0)) << 20) / 2 / sizeof(double);
  stream(state, elems, 2, [](double* a, double*, double* c, std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) c[i] = a[i];
  });
}
BENCHMARK(BM_stream_copy)->Arg(256)->Arg(16)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

// Three arrays of 128 MiB.
void BM_stream_triad(benchmark::State& state) {
  stream(state, std::size_t{1} << 24, 3, [](double* a, double* b, double* c, std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0 * c[i];
  });
}
BENCHMARK(BM_stream_triad)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);

// ---------------------------------------------------------------------------
// Fixed costs: one team barrier phase, one dispatch, one empty shard_map.
// ---------------------------------------------------------------------------

// One barrier phase of a team of n devices (what every collective costs at least once).
void BM_team_barrier(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  std::vector<int> ids(static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) ids[static_cast<std::size_t>(d)] = d;
  constexpr int reps = 1000;
  double seconds = 0;
  for (auto _ : state) {
    tessera::detail::team t(static_cast<std::size_t>(n), ids);
    auto const t0 = clock_type::now();
    rt.pool().run_all([&](int d) {
      for (int i = 0; i < reps; ++i) t.arrive_and_wait(static_cast<std::size_t>(d));
    });
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  report_per_call(state, seconds, reps);
}
BENCHMARK(BM_team_barrier)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

// A dispatch round trip: wake every device and wait for all to finish.
void BM_dispatch(benchmark::State& state) {
  tessera::runtime rt{static_cast<int>(state.range(0))};
  for (auto _ : state) rt.pool().run_all([](int) {});
}
BENCHMARK(BM_dispatch)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

template <class V>
auto sharded_arange(int n, std::size_t per_device) {
  auto const mesh = tessera::make_mesh<"x">({n});
  xt::xtensor<V, 1> const host = xt::arange<V>(static_cast<V>(static_cast<std::size_t>(n) * per_device));
  return tessera::device_put(host, tessera::named_sharding(mesh, tessera::P<"x">{}));
}

// shard_map of the identity on one element per device: dispatch, body, end-of-body check, output array.
void BM_shard_map_empty(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto const mesh = tessera::make_mesh<"x">({n});
  auto const x = sharded_arange<float>(n, 1);
  auto f = tessera::shard_map([](auto blk) { return blk; }, mesh, tessera::in_specs(tessera::P<"x">{}),
                              tessera::out_specs(tessera::P<"x">{}));
  for (auto _ : state) {
    auto y = f(x);
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
}
BENCHMARK(BM_shard_map_empty)->Arg(2)->Arg(4)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---------------------------------------------------------------------------
// Collectives. Args: devices, bytes per device (float32). Each reports
// `floor_bytes`: what the operation must read and write in memory per call,
// over all devices, counted as STREAM counts; run_collectives.sh divides it by
// BM_stream_copy's bandwidth. With k devices and n bytes per device:
//   psum:       2kn  (every input read once, every output written once)
//   all_gather: 2k^2 n (each device writes k blocks of n, each read from its source)
//   all_to_all: 2kn  (each device reads k chunks of n/k and writes them once)
// and `footprint_bytes`, its inputs plus outputs, to pick the STREAM copy
// measured at the nearest footprint.
// ---------------------------------------------------------------------------

/// Calls per shard_map: enough that the shard_map's own cost (a dispatch, the end of the
/// body: tens of microseconds) is spread thin.
int reps_for(std::size_t bytes) { return bytes < (std::size_t{1} << 20) ? 200 : 4; }

/// Runs `op(blk)` `reps` times per shard_map; the iteration is one shard_map, `us_per_call` one call.
template <class Op>
void collective(benchmark::State& state, Op op, double floor_factor, double footprint_factor, int reps) {
  int const n = static_cast<int>(state.range(0));
  std::size_t const bytes = static_cast<std::size_t>(state.range(1));
  std::size_t const count = bytes / sizeof(float);
  tessera::runtime rt{n};
  auto const mesh = tessera::make_mesh<"x">({n});
  auto const x = sharded_arange<float>(n, count);
  auto f = tessera::shard_map(
      [&](auto blk) {
        for (int i = 0; i < reps; ++i) {
          auto r = op(blk);
          benchmark::DoNotOptimize(r);
        }
        return xt::xtensor<float, 1>{0.0f};
      },
      mesh, tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<"x">{}));
  (void)f(x);  // first touch of every buffer, outside the timing
  double seconds = 0;
  for (auto _ : state) {
    auto const t0 = clock_type::now();
    auto y = f(x);
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  report_per_call(state, seconds, reps);
  state.counters["floor_bytes"] = floor_factor * static_cast<double>(bytes);
  state.counters["footprint_bytes"] = footprint_factor * static_cast<double>(bytes);
}

void BM_psum(benchmark::State& state) {
  double const k = static_cast<double>(state.range(0));
  collective(state, [](auto const& blk) { return tessera::psum<"x">(blk); }, 2 * k, 2 * k,
             reps_for(static_cast<std::size_t>(state.range(1))));
}

void BM_all_gather(benchmark::State& state) {
  double const k = static_cast<double>(state.range(0));
  // Untiled: the [k, n] result is the MPI_Allgather receive buffer, byte for byte.
  collective(state, [](auto const& blk) { return tessera::all_gather<"x">(blk, 0); }, 2 * k * k, k + k * k,
             reps_for(static_cast<std::size_t>(state.range(1))));
}

void BM_all_to_all(benchmark::State& state) {
  double const k = static_cast<double>(state.range(0));
  // Split the block into k chunks, chunk j to device j, received chunks concatenated: MPI_Alltoall.
  collective(state, [](auto const& blk) { return tessera::all_to_all<"x">(blk, 0, 0, tessera::tiled); }, 2 * k, 2 * k,
             reps_for(static_cast<std::size_t>(state.range(1))));
}

void collective_args(benchmark::internal::Benchmark* b) {
  for (int n : {2, 4, 8})
    for (std::int64_t bytes : {std::int64_t{4} << 10, std::int64_t{4} << 20}) b->Args({n, bytes});
  b->ArgNames({"devices", "bytes"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}
BENCHMARK(BM_psum)->Apply(collective_args);
BENCHMARK(BM_all_gather)->Apply(collective_args);
BENCHMARK(BM_all_to_all)->Apply(collective_args);

// The same collectives one layer down, as an MPI program makes them: the runtime's
// collectives on buffers allocated (and first touched) once per device and reused by
// every call, where psum<"x">(v) allocates its result each time. Per call, over reps calls.
template <class Call>
void runtime_collective(benchmark::State& state, std::size_t out_factor, Call call) {
  int const n = static_cast<int>(state.range(0));
  std::size_t const count = static_cast<std::size_t>(state.range(1)) / sizeof(float);
  int const reps = reps_for(static_cast<std::size_t>(state.range(1)));
  tessera::runtime rt{n};
  std::vector<std::vector<float>> in(static_cast<std::size_t>(n)), out(static_cast<std::size_t>(n));
  std::vector<tessera::detail::group> groups(static_cast<std::size_t>(n));
  rt.pool().run_all([&](int d) {
    std::size_t const pos = static_cast<std::size_t>(d);
    in[pos].assign(count, static_cast<float>(d));
    out[pos].assign(count * out_factor, 0.0f);
    groups[pos].members.resize(static_cast<std::size_t>(n));
    for (std::size_t q = 0; q < groups[pos].size(); ++q) groups[pos].members[q] = q;
    groups[pos].rank = pos;
  });
  std::vector<int> ids(static_cast<std::size_t>(n));
  for (int d = 0; d < n; ++d) ids[static_cast<std::size_t>(d)] = d;
  double seconds = 0;
  for (auto _ : state) {
    tessera::detail::team t(static_cast<std::size_t>(n), ids);
    auto const t0 = clock_type::now();
    rt.pool().run_all([&](int d) {
      std::size_t const pos = static_cast<std::size_t>(d);
      for (int i = 0; i < reps; ++i) {
        tessera::detail::op_signature sig;
        sig.seq = static_cast<std::uint32_t>(i);
        sig.kind = 1;
        sig.count = count;
        call(t, pos, groups[pos], sig, in[pos].data(), out[pos].data(), count, static_cast<std::size_t>(n));
      }
    });
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
  }
  report_per_call(state, seconds, reps);
}

void BM_runtime_psum(benchmark::State& state) {
  runtime_collective(state, 1, [](auto& t, std::size_t pos, auto const& g, auto const& sig, float const* in, float* out,
                                   std::size_t count, std::size_t) {
    tessera::detail::all_reduce(t, pos, g, sig, in, out, count, tessera::detail::reduce_op::sum);
  });
}

void BM_runtime_all_gather(benchmark::State& state) {
  runtime_collective(state, static_cast<std::size_t>(state.range(0)),
                     [](auto& t, std::size_t pos, auto const& g, auto const& sig, float const* in, float* out,
                        std::size_t count, std::size_t) { tessera::detail::all_gather(t, pos, g, sig, in, out, 1, count); });
}

void BM_runtime_all_to_all(benchmark::State& state) {
  runtime_collective(state, 1, [](auto& t, std::size_t pos, auto const& g, auto const& sig, float const* in, float* out,
                                   std::size_t count, std::size_t) {
    std::size_t const shape[1] = {count};
    tessera::detail::all_to_all(t, pos, g, sig, in, out, std::span<std::size_t const>(shape), 0, 0);
  });
}
BENCHMARK(BM_runtime_psum)->Apply(collective_args);
BENCHMARK(BM_runtime_all_gather)->Apply(collective_args);
BENCHMARK(BM_runtime_all_to_all)->Apply(collective_args);

// What a user sees for one small psum: a whole shard_map whose body is one psum.
void BM_shard_map_one_psum(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  std::size_t const count = static_cast<std::size_t>(state.range(1)) / sizeof(float);
  tessera::runtime rt{n};
  auto const mesh = tessera::make_mesh<"x">({n});
  auto const x = sharded_arange<float>(n, count);
  auto f = tessera::shard_map([](auto blk) { return tessera::psum<"x">(blk); }, mesh,
                              tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<"x">{}));
  for (auto _ : state) {
    auto y = f(x);
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
}
BENCHMARK(BM_shard_map_one_psum)
    ->Args({2, 4 << 10})
    ->Args({8, 4 << 10})
    ->ArgNames({"devices", "bytes"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// The results must be right before their speed means anything: checked once per run.
void check_results() {
  for (int n : {2, 8}) {
    tessera::runtime rt{n};
    auto const mesh = tessera::make_mesh<"x">({n});
    std::size_t const count = std::size_t{1} << 18;  // 1 MiB: the split all-reduce path
    auto const x = sharded_arange<float>(n, count);
    auto f = tessera::shard_map([](auto blk) { return tessera::psum<"x">(blk); }, mesh,
                                tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<>{}));
    auto const got = tessera::to_host(f(x));
    for (std::size_t i = 0; i < count; i += 4099) {
      double want = 0;
      for (int d = 0; d < n; ++d) want += static_cast<double>(static_cast<std::size_t>(d) * count + i);
      if (static_cast<double>(got(i)) != static_cast<float>(want))
        throw std::runtime_error("collectives_bench: psum on " + std::to_string(n) + " devices is wrong at " +
                                 std::to_string(i));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  check_results();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
