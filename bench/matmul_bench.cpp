// Matrix products and resharding (issue 5), float32, in one run:
//
//   mm     c = a @ b, a and b [2048,2048]
//   seed   x @ x, x [4000,4000]: the comparison of seed 004 (a jitted jnp.matmul(x, x) with
//          x on one device against x sharded P('devices', None), JAX printed 0.88x)
//   rs     a [4096,4096] (64 MiB) moved from P('X', None) to P(None, 'X')
//
// Implementations (the second part of each benchmark name; the argument is the thread or
// device count):
//   openblas        cblas_sgemm on the whole product, openblas_set_num_threads(n) (set back to
//                   1 afterwards: tessera's devices call OpenBLAS with 1 thread each)
//   kernel          tessera::detail::gemm_kernel, tessera's own xsimd kernel (the backend of a
//                   build without BLAS), one thread
//   rows            tessera::matmul(a, b), a P('X', None), b replicated: no communication
//   k               a P(None, 'X'), b P('X', None): partial products, then an all-reduce into
//                   the replicated result (the default)
//   kscatter        with_sharding_constraint(matmul(a, b), P('X', None)) of the same: a
//                   reduce-scatter
//   klocal, ksum,   phases of k and kscatter: the local products alone (matmul(a, b).partial()),
//   ksumrs          the all-reduce alone, the reduce-scatter alone (detail::sum_partials on the
//                   partial products computed beforehand)
//   single          (seed) x replicated on a 1-device mesh: one device, as JAX's unsharded x
//   sharded         (seed) x P('X', None): the rule gives way on b (its contracting dim on X
//                   would use X twice), so b = x is all-gathered, then each device multiplies
//                   its rows
//   gather, local   phases of sharded: the all-gather of x alone (reshard(x, P())), the local
//                   products alone (matmul(x, x_replicated))
//   tessera         (rs) device_put(a, P(None, 'X')) from P('X', None)
//   memcpy          (rs) std::memcpy of the 64 MiB into a buffer touched beforehand, on n
//                   threads (spawned and joined per call), each copying 1/n
//
// Every benchmark checks its result once (64 sampled entries of each product against a
// double-precision dot product; resharded arrays against the source), reports GFLOP/s or
// bytes/s and "cores" (the process's CPU time over the wall time of its loop: whether it had
// the machine), and tessera's carry the collectives explain() plans as their label.
// bench/run_matmul.sh runs this with repetitions and prints the ratios.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#if defined(TESSERA_MATMUL_BENCH_OPENBLAS)
// OpenBLAS's own entry points (LP64), declared here so that no <cblas.h> is needed: 101 =
// CblasRowMajor, 111 = CblasNoTrans.
extern "C" void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, float const* a,
                            int lda, float const* b, int ldb, float beta, float* c, int ldc);
extern "C" void openblas_set_num_threads(int);
#endif

// Every benchmark: milliseconds of wall time (the work runs on other threads than the caller).
#define MM_BENCH(...) BENCHMARK(__VA_ARGS__)->Unit(benchmark::kMillisecond)->UseRealTime()

namespace {

using tessera::none;
using tessera::P;

constexpr std::size_t kMM = 2048;    // mm: a, b, c [2048,2048]
constexpr std::size_t kSeed = 4000;  // seed: x [4000,4000]
constexpr std::size_t kRS = 4096;    // rs: [4096,4096], 64 MiB

// ---------------------------------------------------------------------------
// Inputs: deterministic (std::minstd_rand), uniform in [-1, 1]; made once, on first use.
// ---------------------------------------------------------------------------

template <std::size_t N, unsigned Seed>
xt::xtensor<float, 2> const& input() {
  static xt::xtensor<float, 2> const h = [] {
    xt::xtensor<float, 2> x({N, N});
    std::minstd_rand gen(Seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (auto& v : x) v = dist(gen);
    return x;
  }();
  return h;
}
xt::xtensor<float, 2> const& mm_a() { return input<kMM, 1>(); }
xt::xtensor<float, 2> const& mm_b() { return input<kMM, 2>(); }
xt::xtensor<float, 2> const& seed_x() { return input<kSeed, 3>(); }
xt::xtensor<float, 2> const& rs_a() { return input<kRS, 4>(); }

// ---------------------------------------------------------------------------
// Checks: 64 entries of a product (row-major, n x n) against a dot product in double, within
// 1e-5 * sum |a||b| (float32 sums of n terms); every 997th entry of a copy.
// ---------------------------------------------------------------------------

template <class Get>
bool check_product(benchmark::State& state, xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b, Get got) {
  std::size_t const n = a.shape()[0];
  for (std::size_t s = 0; s < 64; ++s) {
    std::size_t const i = (s * 733 + 5) % n, j = (s * 1171 + 11) % n;
    double want = 0, mag = 0;
    for (std::size_t k = 0; k < n; ++k) {
      want += double(a(i, k)) * double(b(k, j));
      mag += std::fabs(double(a(i, k)) * double(b(k, j)));
    }
    double const g = got(i, j);
    if (!(std::fabs(g - want) <= 1e-5 * mag + 1e-6)) {
      state.SkipWithError(("wrong product at (" + std::to_string(i) + ", " + std::to_string(j) +
                           "): " + std::to_string(g) + " instead of " + std::to_string(want))
                              .c_str());
      return false;
    }
  }
  return true;
}

template <class Arr>
bool check_array_product(benchmark::State& state, Arr const& c, xt::xtensor<float, 2> const& a,
                         xt::xtensor<float, 2> const& b) {
  auto const h = tessera::to_host(c);
  return check_product(state, a, b, [&](std::size_t i, std::size_t j) { return double(h(i, j)); });
}

template <class Get>
bool check_copy(benchmark::State& state, xt::xtensor<float, 2> const& src, Get got) {
  for (std::size_t k = 0; k < src.size(); k += (k < 100 ? 1 : 997)) {
    if (got(k) != src.data()[k]) {
      state.SkipWithError(("wrong copy at flat index " + std::to_string(k)).c_str());
      return false;
    }
  }
  return true;
}

void set_flops(benchmark::State& state, std::size_t m, std::size_t n, std::size_t k) {
  double const flop = 2.0 * double(m) * double(n) * double(k);
  state.counters["GFLOP/s"] = benchmark::Counter(flop * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["threads"] = static_cast<double>(state.range(0));
}

/// The collectives explain() plans for an expression, as the benchmark's label.
template <class E>
void label_plan(benchmark::State& state, E const& e) {
  auto const plan = tessera::explain(e);
  std::string l = plan.result + ":";
  for (auto const& c : plan.collectives) l += " " + c.kind + " " + std::to_string(c.bytes_per_device >> 10) + " KiB/dev;";
  if (plan.collectives.empty()) l += " no collective";
  state.SetLabel(l);
}

void set_bytes(benchmark::State& state, std::size_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["threads"] = static_cast<double>(state.range(0));
}

/// Runs body() once per iteration, and records "cores": the process's CPU time over the wall time
/// of the loop (about n for n busy threads on an idle machine; less when other work takes the
/// cores, so it shows how much of the machine a measurement had).
template <class Body>
void timed_loop(benchmark::State& state, Body body) {
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  double const cpu0 = cpu_seconds();
  auto const t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    body();
    benchmark::ClobberMemory();
  }
  double const wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  state.counters["cores"] = wall > 0 ? (cpu_seconds() - cpu0) / wall : 0.0;
}

// ===========================================================================
// Local products on one thread, and OpenBLAS on n threads: the peers
// ===========================================================================

/// c = a @ b of n x n row-major matrices with OpenBLAS on `threads` threads.
#if defined(TESSERA_MATMUL_BENCH_OPENBLAS)
void openblas_product(benchmark::State& state, xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  int const threads = static_cast<int>(state.range(0));
  int const n = static_cast<int>(a.shape()[0]);
  std::vector<float> c(a.size(), 0.0f);
  openblas_set_num_threads(threads);
  cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);  // warm-up
  timed_loop(state, [&] { cblas_sgemm(101, 111, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  openblas_set_num_threads(1);  // tessera's devices each call OpenBLAS single-threaded
  std::size_t const un = a.shape()[0];
  if (!check_product(state, a, b, [&](std::size_t i, std::size_t j) { return double(c[i * un + j]); })) return;
  set_flops(state, un, un, un);
}

void BM_mm_openblas(benchmark::State& state) { openblas_product(state, mm_a(), mm_b()); }
MM_BENCH(BM_mm_openblas)->Arg(1)->Arg(2);
void BM_seed_openblas(benchmark::State& state) { openblas_product(state, seed_x(), seed_x()); }
MM_BENCH(BM_seed_openblas)->Arg(1)->Arg(2);
#endif

void BM_mm_kernel(benchmark::State& state) {
  auto const& a = mm_a();
  auto const& b = mm_b();
  std::vector<float> c(a.size(), 0.0f);
  timed_loop(state, [&] {
    tessera::detail::gemm_kernel<float>(kMM, kMM, kMM, a.data(), kMM, b.data(), kMM, c.data(), kMM, false);
  });
  if (!check_product(state, a, b, [&](std::size_t i, std::size_t j) { return double(c[i * kMM + j]); })) return;
  set_flops(state, kMM, kMM, kMM);
}
MM_BENCH(BM_mm_kernel)->Arg(1);

// ===========================================================================
// tessera: every benchmark times run() (an evaluation, or one phase of it) in a new runtime
// of n devices, labelled with the collectives explain() plans for `expr`, its first call
// checked by ok(result) (that call also fills the devices' caches of freed blocks, as the
// peers' outputs are allocated and touched before their loops).
// ===========================================================================

template <class Expr, class Run, class Ok>
bool time_eval(benchmark::State& state, Expr const& expr, Run run, Ok ok) {
  label_plan(state, expr);
  if (!ok(run())) return false;
  timed_loop(state, [&] {
    auto c = run();
    tessera::block_until_ready(c);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(c);
  });
  return true;
}

/// ok() for an array holding a @ b.
auto is_product(benchmark::State& state, xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  return [&state, &a, &b](auto const& c) { return check_array_product(state, c, a, b); };
}
/// ok() for an array holding a copy of `src`.
auto is_copy(benchmark::State& state, xt::xtensor<float, 2> const& src) {
  return [&state, &src](auto const& c) {
    auto const h = tessera::to_host(c);
    return check_copy(state, src, [&](std::size_t k) { return h.data()[k]; });
  };
}

// ===========================================================================
// mm: a @ b, [2048,2048] each
// ===========================================================================

// Rows: a P('X', None), b replicated; each device multiplies its rows of a by the whole b.
void BM_mm_rows(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"X">({n});
  auto a = tessera::device_put(mm_a(), tessera::named_sharding(mesh, P<"X", none>{}));
  auto b = tessera::device_put(mm_b(), tessera::named_sharding(mesh, P<>{}));
  if (time_eval(state, tessera::matmul(a, b), [&] { return tessera::eval(tessera::matmul(a, b)); },
                is_product(state, mm_a(), mm_b())))
    set_flops(state, kMM, kMM, kMM);
}
MM_BENCH(BM_mm_rows)->Arg(1)->Arg(2)->Arg(4);

// The contracting dimension sharded: a P(None, 'X'), b P('X', None). Mode 0: the default
// (all-reduce into the replicated result); 1: under a P('X', None) constraint
// (reduce-scatter); 2: the local products alone; 3: the all-reduce alone; 4: the
// reduce-scatter alone (3 and 4 on the local products computed beforehand).
template <int Mode>
void BM_mm_k(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"X">({n});
  auto a = tessera::device_put(mm_a(), tessera::named_sharding(mesh, P<none, "X">{}));
  auto b = tessera::device_put(mm_b(), tessera::named_sharding(mesh, P<"X", none>{}));
  auto const rows = tessera::named_sharding(mesh, P<"X", none>{});
  using node = decltype(tessera::matmul(a, b));
  static_assert(!node::unreduced.is_none(), "the products are partial over X");
  auto const partial = tessera::matmul(a, b).partial();
  auto sum = [&](auto const& p, auto const& to) {
    return tessera::detail::sum_partials(p, node::unreduced, to, tessera::detail::reduce_op::sum);
  };
  auto const replicated = typename node::sharding_type(mesh);
  bool ok = true;
  if constexpr (Mode == 0)
    ok = time_eval(state, tessera::matmul(a, b), [&] { return tessera::eval(tessera::matmul(a, b)); },
                   is_product(state, mm_a(), mm_b()));
  else if constexpr (Mode == 1)
    ok = time_eval(state, tessera::with_sharding_constraint(tessera::matmul(a, b), rows),
                   [&] { return tessera::eval(tessera::with_sharding_constraint(tessera::matmul(a, b), rows)); },
                   is_product(state, mm_a(), mm_b()));
  else if constexpr (Mode == 2)
    ok = time_eval(state, tessera::matmul(a, b), [&] { return tessera::matmul(a, b).partial(); },
                   [&](auto const& p) { return is_product(state, mm_a(), mm_b())(sum(p, replicated)); });
  else if constexpr (Mode == 3)
    ok = time_eval(state, tessera::matmul(a, b), [&] { return sum(partial, replicated); }, is_product(state, mm_a(), mm_b()));
  else
    ok = time_eval(state, tessera::with_sharding_constraint(tessera::matmul(a, b), rows), [&] { return sum(partial, rows); },
                   is_product(state, mm_a(), mm_b()));
  if (!ok) return;
  if constexpr (Mode <= 2) {
    set_flops(state, kMM, kMM, kMM);
  } else {
    // Each device reads the n partial blocks of its destination block and writes that block.
    std::size_t const out = kMM * kMM * sizeof(float) / (Mode == 3 ? 1 : static_cast<std::size_t>(n));
    set_bytes(state, static_cast<std::size_t>(n) * out * static_cast<std::size_t>(n + 1));
  }
}
MM_BENCH(BM_mm_k<0>)->Name("BM_mm_k")->Arg(2)->Arg(4);
MM_BENCH(BM_mm_k<1>)->Name("BM_mm_kscatter")->Arg(2)->Arg(4);
MM_BENCH(BM_mm_k<2>)->Name("BM_mm_klocal")->Arg(2)->Arg(4);
MM_BENCH(BM_mm_k<3>)->Name("BM_mm_ksum")->Arg(2)->Arg(4);
MM_BENCH(BM_mm_k<4>)->Name("BM_mm_ksumrs")->Arg(2)->Arg(4);

// ===========================================================================
// seed: x @ x, [4000,4000], one device against x sharded on rows
// ===========================================================================

void BM_seed_single(benchmark::State& state) {
  tessera::runtime rt{1};
  auto mesh = tessera::make_mesh<"X">({1});
  auto x = tessera::device_put(seed_x(), tessera::named_sharding(mesh, P<>{}));
  if (time_eval(state, tessera::matmul(x, x), [&] { return tessera::eval(tessera::matmul(x, x)); },
                is_product(state, seed_x(), seed_x())))
    set_flops(state, kSeed, kSeed, kSeed);
}
MM_BENCH(BM_seed_single)->Arg(1);

// Mode 0: matmul(x, x), x P('X', None) (the seed's sharded case); 1: the all-gather of x alone;
// 2: the local products alone (x times a replicated copy made beforehand).
template <int Mode>
void BM_seed_sharded(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"X">({n});
  auto x = tessera::device_put(seed_x(), tessera::named_sharding(mesh, P<"X", none>{}));
  auto const xr = tessera::eval(tessera::reshard(x, P<>{}));
  bool ok = true;
  if constexpr (Mode == 0)
    ok = time_eval(state, tessera::matmul(x, x), [&] { return tessera::eval(tessera::matmul(x, x)); },
                   is_product(state, seed_x(), seed_x()));
  else if constexpr (Mode == 1)
    ok = time_eval(state, tessera::reshard(x, P<>{}), [&] { return tessera::eval(tessera::reshard(x, P<>{})); },
                   is_copy(state, seed_x()));
  else
    ok = time_eval(state, tessera::matmul(x, xr), [&] { return tessera::eval(tessera::matmul(x, xr)); },
                   is_product(state, seed_x(), seed_x()));
  if (!ok) return;
  if constexpr (Mode == 1) set_bytes(state, kSeed * kSeed * sizeof(float));
  else set_flops(state, kSeed, kSeed, kSeed);
}
MM_BENCH(BM_seed_sharded<0>)->Name("BM_seed_sharded")->Arg(2)->Arg(4);
MM_BENCH(BM_seed_sharded<1>)->Name("BM_seed_gather")->Arg(2);
MM_BENCH(BM_seed_sharded<2>)->Name("BM_seed_local")->Arg(2);

// ===========================================================================
// rs: 64 MiB from P('X', None) to P(None, 'X')
// ===========================================================================

void BM_rs_tessera(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"X">({n});
  auto x = tessera::device_put(rs_a(), tessera::named_sharding(mesh, P<"X", none>{}));
  auto const cols = tessera::named_sharding(mesh, P<none, "X">{});
  if (time_eval(state, tessera::reshard(x, P<none, "X">{}), [&] { return tessera::device_put(x, cols); },
                is_copy(state, rs_a())))
    set_bytes(state, kRS * kRS * sizeof(float));
}
MM_BENCH(BM_rs_tessera)->Arg(1)->Arg(2)->Arg(4);

void BM_rs_memcpy(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  auto const& a = rs_a();
  std::size_t const bytes = a.size() * sizeof(float);
  std::vector<float> y(a.size(), 0.0f);
  auto const* src = reinterpret_cast<char const*>(a.data());
  auto* dst = reinterpret_cast<char*>(y.data());
  timed_loop(state, [&] {
    if (n == 1) {
      std::memcpy(dst, src, bytes);
      return;
    }
    std::vector<std::thread> ts;
    for (int t = 0; t < n; ++t) {
      std::size_t const lo = bytes / 64 * static_cast<std::size_t>(t) / static_cast<std::size_t>(n) * 64;
      std::size_t const hi =
          t + 1 == n ? bytes : bytes / 64 * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(n) * 64;
      ts.emplace_back([=] { std::memcpy(dst + lo, src + lo, hi - lo); });
    }
    for (auto& th : ts) th.join();
  });
  if (!check_copy(state, a, [&](std::size_t k) { return y[k]; })) return;
  set_bytes(state, bytes);
}
MM_BENCH(BM_rs_memcpy)->Arg(1)->Arg(2);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("matmul_backend", tessera::matmul_backend());
#if defined(TESSERA_MATMUL_BENCH_OPENBLAS)
  benchmark::AddCustomContext("openblas_peer", "1");
#else
  benchmark::AddCustomContext("openblas_peer", "0 (no OpenBLAS found at configure time)");
#endif
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
