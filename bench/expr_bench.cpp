// Expression benchmarks (issue 4), float32: tessera's global-view expressions
// (one fused pass per device, xsimd rows, broadcast operands read in place)
// against the peers a user would pick instead, in one run:
//
//   sin    y = 2*sin(x)+1, x of 16 Mi elements (1-D, P('x'))
//   add    y = a + c, a and c [4096,4096] (P('x', None)): STREAM add, the reference
//          the broadcast rows are read against
//   brow   y = a + b, b [1,4096] replicated (a row broadcast over the rows)
//   bcol   y = a + b, b [4096,1] replicated (stride 0 along the contiguous dimension)
//   chain  y = ((a + b) * c - a) * 0.5 + b, 1-D 16 Mi (5 ops, 3 inputs: fusion)
//   sum1   sum<1>(a), a [4096,4096] P('x', None): a row sum per device, no communication
//   sum0   sum<0>(a): column sums per device, then an all-reduce over 'x'
//
// Implementations (the second part of each benchmark name):
//   tessera            n devices (a tessera::runtime of n), the result a new array each time
//                      (its blocks come from the devices' caches of freed blocks)
//   tessera_unfused    (chain only) each op evaluated into an array: what fusion saves
//   xtensor            `xt::xtensor<float, N> y = expr;` a new result each time (1 thread)
//   xtensor_noalias    `xt::noalias(y) = expr;` into a result allocated once (1 thread)
//   xtensor_temps      (chain only) each op evaluated into its own xtensor
//   xtensor_immediate  (sums only) xt::sum(a, {k}, xt::evaluation_strategy::immediate)
//   thread             std::thread per slice, spawned and joined per call, plain C++ loop
//                      (g++ vectorises the arithmetic; std::sin stays a scalar libm call)
//   thread_xsimd       std::thread per slice, the loop on xsimd batches: the same kernel
//                      as tessera's, so the difference is tessera's own overhead
//   omp                #pragma omp parallel for simd num_threads(n), plain C++ loop
//   omp_xsimd          #pragma omp parallel for num_threads(n) over xsimd batches
//   eigen              Eigen::Tensor with a ThreadPoolDevice of n threads (where Eigen is installed)
//
// The argument of each benchmark is its thread (or device) count. Outputs of the
// peers are allocated and touched once, outside the timed loop, as tessera's
// device caches are after the first call. bench/run_expr.sh builds this file twice
// (the second time with -DXTENSOR_USE_XSIMD, xtensor's peers only) and prints the
// ratios.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY)
#include <tessera/tessera.hpp>
#endif

#if defined(_OPENMP)
#include <omp.h>
#endif

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY) && __has_include(<unsupported/Eigen/CXX11/Tensor>)
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>
#define TESSERA_EXPR_BENCH_EIGEN 1
#endif

// Every benchmark: milliseconds of wall time (the work runs on other threads than the caller).
#define EXPR_BENCH(...) BENCHMARK(__VA_ARGS__)->Unit(benchmark::kMillisecond)->UseRealTime()

namespace {

constexpr std::size_t kLen = std::size_t{1} << 24;  // 1-D: 16 Mi floats, 64 MiB
constexpr std::size_t kRows = 4096, kCols = 4096;   // 2-D: 64 MiB

// ---------------------------------------------------------------------------
// Inputs: deterministic, |x| < 8 (sin's cheap range reduction, as for most data).
// ---------------------------------------------------------------------------

float value_at(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h % 16001u) / 1000.0f - 8.0f;
}

template <std::size_t N>
xt::xtensor<float, N> host_input(std::array<std::size_t, N> shape, std::uint32_t seed) {
  xt::xtensor<float, N> h(shape);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = value_at(i, seed);
  return h;
}

xt::xtensor<float, 1> const& x1(int k) {  // three 1-D inputs
  static xt::xtensor<float, 1> h[3] = {host_input<1>({kLen}, 1), host_input<1>({kLen}, 2), host_input<1>({kLen}, 3)};
  return h[k];
}
xt::xtensor<float, 2> const& a2() {
  static xt::xtensor<float, 2> h = host_input<2>({kRows, kCols}, 4);
  return h;
}
xt::xtensor<float, 2> const& c2() {
  static xt::xtensor<float, 2> h = host_input<2>({kRows, kCols}, 5);
  return h;
}
xt::xtensor<float, 2> const& brow() {
  static xt::xtensor<float, 2> h = host_input<2>({1, kCols}, 6);
  return h;
}
xt::xtensor<float, 2> const& bcol() {
  static xt::xtensor<float, 2> h = host_input<2>({kRows, 1}, 7);
  return h;
}

// What each benchmark computes, element by element (the peers' loops spell it out).
inline float sin_op(float x) { return 2.0f * std::sin(x) + 1.0f; }
inline float chain_op(float a, float b, float c) { return ((a + b) * c - a) * 0.5f + b; }

// Results are checked once per benchmark against a plain loop, so a fast wrong
// kernel does not make the table.
bool close(float got, float want) { return std::fabs(got - want) <= 1e-4f * (1.0f + std::fabs(want)); }

template <class Get>
bool check(benchmark::State& state, std::size_t n, Get get_and_want) {
  for (std::size_t i = 0; i < n; i += (i < 100 ? 1 : 997)) {
    auto [got, want] = get_and_want(i);
    if (!close(got, want)) {
      state.SkipWithError(("wrong result at " + std::to_string(i) + ": " + std::to_string(got) + " instead of " +
                           std::to_string(want))
                              .c_str());
      return false;
    }
  }
  return true;
}

// Column sums and row sums in double, for the checks.
std::vector<float> ref_sum(int axis) {
  auto const& a = a2();
  std::vector<double> r(axis == 0 ? kCols : kRows, 0.0);
  for (std::size_t i = 0; i < kRows; ++i)
    for (std::size_t j = 0; j < kCols; ++j) r[axis == 0 ? j : i] += a(i, j);
  return {r.begin(), r.end()};
}
std::vector<float> const& ref_sum0() {
  static auto r = ref_sum(0);
  return r;
}
std::vector<float> const& ref_sum1() {
  static auto r = ref_sum(1);
  return r;
}
bool close_sum(float got, float want) { return std::fabs(got - want) <= 1e-3f * (64.0f + std::fabs(want)); }

void set_counters(benchmark::State& state, std::size_t elems, std::size_t bytes) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(elems));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  state.counters["threads"] = static_cast<double>(state.range(0));
}

// Bytes each benchmark must move (read + written, no write-allocate, as STREAM counts).
constexpr std::size_t kB1 = kLen * sizeof(float), kB2 = kRows * kCols * sizeof(float);

// ---------------------------------------------------------------------------
// Hand-written parallel loops: std::thread per slice (spawned and joined per call,
// as a user writing std::thread would), and OpenMP.
// ---------------------------------------------------------------------------

/// f(lo, hi) on n threads over [0, total), slices aligned to `align` elements.
template <class F>
void threads_for(int n, std::size_t total, std::size_t align, F f) {
  std::vector<std::thread> ts;
  ts.reserve(static_cast<std::size_t>(n));
  std::size_t const units = total / align;
  for (int t = 0; t < n; ++t) {
    std::size_t const lo = units * static_cast<std::size_t>(t) / static_cast<std::size_t>(n) * align;
    std::size_t const hi = t + 1 == n ? total : units * static_cast<std::size_t>(t + 1) / static_cast<std::size_t>(n) * align;
    ts.emplace_back([=] { f(lo, hi); });
  }
  for (auto& th : ts) th.join();
}

using fbatch = xsimd::batch<float>;
constexpr std::size_t W = fbatch::size;

// ===========================================================================
// 1. y = 2*sin(x)+1
// ===========================================================================

void BM_sin_xtensor(benchmark::State& state) {
  auto const& x = x1(0);
  for (auto _ : state) {
    xt::xtensor<float, 1> y = 2 * xt::sin(x) + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_xtensor)->Arg(1);

void BM_sin_xtensor_noalias(benchmark::State& state) {
  auto const& x = x1(0);
  xt::xtensor<float, 1> y = xt::zeros<float>({kLen});
  for (auto _ : state) {
    xt::noalias(y) = 2 * xt::sin(x) + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y(i), sin_op(x(i))}; })) return;
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_xtensor_noalias)->Arg(1);

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY)

// The kernels on xsimd batches, over [lo, hi), the tail scalar (as tessera's rows).
void sin_xsimd(float const* x, float* y, std::size_t lo, std::size_t hi) {
  std::size_t i = lo;
  fbatch const two(2.0f), one(1.0f);
  for (; i + W <= hi; i += W) (two * xsimd::sin(fbatch::load_unaligned(x + i)) + one).store_unaligned(y + i);
  for (; i < hi; ++i) y[i] = sin_op(x[i]);
}
void sin_plain(float const* x, float* y, std::size_t lo, std::size_t hi) {
  for (std::size_t i = lo; i < hi; ++i) y[i] = sin_op(x[i]);
}

void BM_sin_tessera(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto x = tessera::device_put(x1(0), tessera::named_sharding(mesh, tessera::P<"x">{}));
  {  // the first call, checked; it also fills the devices' caches of freed blocks, as the
     // peers' outputs are allocated and touched before their loops
    tessera::array y = 2 * tessera::sin(x) + 1;
    auto const h = tessera::to_host(y);
    if (!check(state, kLen, [&](std::size_t i) { return std::pair{h(i), sin_op(x1(0)(i))}; })) return;
  }
  for (auto _ : state) {
    tessera::array y = 2 * tessera::sin(x) + 1;
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_tessera)->Arg(1)->Arg(2)->Arg(4);

template <class Kernel>
void sin_threads(benchmark::State& state, Kernel kernel) {
  int const n = static_cast<int>(state.range(0));
  auto const& x = x1(0);
  std::vector<float> y(kLen, 0.0f);
  for (auto _ : state) {
    threads_for(n, kLen, 64, [&](std::size_t lo, std::size_t hi) { kernel(x.data(), y.data(), lo, hi); });
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y[i], sin_op(x(i))}; })) return;
  set_counters(state, kLen, 2 * kB1);
}
void BM_sin_thread(benchmark::State& state) { sin_threads(state, sin_plain); }
void BM_sin_thread_xsimd(benchmark::State& state) { sin_threads(state, sin_xsimd); }
EXPR_BENCH(BM_sin_thread)->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_sin_thread_xsimd)->Arg(1)->Arg(2)->Arg(4);

#if defined(_OPENMP)
void BM_sin_omp(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* x = x1(0).data();
  std::vector<float> yv(kLen, 0.0f);
  float* y = yv.data();
  for (auto _ : state) {
#pragma omp parallel for simd num_threads(n)
    for (std::size_t i = 0; i < kLen; ++i) y[i] = 2.0f * std::sin(x[i]) + 1.0f;
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y[i], sin_op(x[i])}; })) return;
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_omp)->Arg(1)->Arg(2)->Arg(4);

void BM_sin_omp_xsimd(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* x = x1(0).data();
  std::vector<float> yv(kLen, 0.0f);
  float* y = yv.data();
  for (auto _ : state) {
    fbatch const two(2.0f), one(1.0f);
#pragma omp parallel for num_threads(n)
    for (std::size_t i = 0; i < kLen; i += W) (two * xsimd::sin(fbatch::load_unaligned(x + i)) + one).store_unaligned(y + i);
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y[i], sin_op(x[i])}; })) return;
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_omp_xsimd)->Arg(1)->Arg(2)->Arg(4);
#endif

#if defined(TESSERA_EXPR_BENCH_EIGEN)
void BM_sin_eigen(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  Eigen::ThreadPool tp(n);
  Eigen::ThreadPoolDevice dev(&tp, n);
  Eigen::TensorMap<Eigen::Tensor<float const, 1>> x(x1(0).data(), static_cast<Eigen::Index>(kLen));
  Eigen::Tensor<float, 1> y(static_cast<Eigen::Index>(kLen));
  y.setZero();
  for (auto _ : state) {
    // The Tensor module has no sin(); its unaryExpr with Eigen's own functor runs the vectorised psin.
    y.device(dev) = 2.0f * x.unaryExpr(Eigen::internal::scalar_sin_op<float>()) + 1.0f;
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y(static_cast<Eigen::Index>(i)), sin_op(x1(0)(i))}; }))
    return;
  set_counters(state, kLen, 2 * kB1);
}
EXPR_BENCH(BM_sin_eigen)->Arg(1)->Arg(2)->Arg(4);
#endif

#endif  // !TESSERA_EXPR_BENCH_XTENSOR_ONLY

// ===========================================================================
// 2. a + c (STREAM add), a + b[1,4096], a + b[4096,1]
// ===========================================================================

// which: 0 = c (full), 1 = brow, 2 = bcol.
xt::xtensor<float, 2> const& other(int which) { return which == 0 ? c2() : which == 1 ? brow() : bcol(); }
float other_at(int which, std::size_t i, std::size_t j) {
  return which == 0 ? c2()(i, j) : which == 1 ? brow()(0, j) : bcol()(i, 0);
}
std::size_t bcast_bytes(int which) { return which == 0 ? 3 * kB2 : 2 * kB2; }

template <int Which>
void BM_add2_xtensor(benchmark::State& state) {
  auto const& a = a2();
  auto const& b = other(Which);
  for (auto _ : state) {
    xt::xtensor<float, 2> y = a + b;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, kRows * kCols, bcast_bytes(Which));
}
template <int Which>
void BM_add2_xtensor_noalias(benchmark::State& state) {
  auto const& a = a2();
  auto const& b = other(Which);
  xt::xtensor<float, 2> y = xt::zeros<float>({kRows, kCols});
  for (auto _ : state) {
    xt::noalias(y) = a + b;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (!check(state, kRows * kCols, [&](std::size_t k) {
        std::size_t const i = k / kCols, j = k % kCols;
        return std::pair{y(i, j), a(i, j) + other_at(Which, i, j)};
      }))
    return;
  set_counters(state, kRows * kCols, bcast_bytes(Which));
}
EXPR_BENCH(BM_add2_xtensor<0>)->Name("BM_add_xtensor")->Arg(1);
EXPR_BENCH(BM_add2_xtensor_noalias<0>)->Name("BM_add_xtensor_noalias")->Arg(1);
EXPR_BENCH(BM_add2_xtensor<1>)->Name("BM_brow_xtensor")->Arg(1);
EXPR_BENCH(BM_add2_xtensor_noalias<1>)->Name("BM_brow_xtensor_noalias")->Arg(1);
EXPR_BENCH(BM_add2_xtensor<2>)->Name("BM_bcol_xtensor")->Arg(1);
EXPR_BENCH(BM_add2_xtensor_noalias<2>)->Name("BM_bcol_xtensor_noalias")->Arg(1);

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY)

template <int Which>
void BM_add2_tessera(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto a = tessera::device_put(a2(), tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  auto b = [&] {
    if constexpr (Which == 0)  // both sharded on rows: STREAM add
      return tessera::device_put(c2(), tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
    else  // replicated: every device reads the whole small operand in place
      return tessera::device_put(other(Which), tessera::named_sharding(mesh, tessera::P<>{}));
  }();
  {  // the first call, checked; it also fills the devices' caches of freed blocks, as the
     // peers' outputs are allocated and touched before their loops
    tessera::array y = a + b;
    auto const h = tessera::to_host(y);
    if (!check(state, kRows * kCols, [&](std::size_t k) {
          std::size_t const i = k / kCols, j = k % kCols;
          return std::pair{h(i, j), a2()(i, j) + other_at(Which, i, j)};
        }))
      return;
  }
  for (auto _ : state) {
    tessera::array y = a + b;
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
  }
  set_counters(state, kRows * kCols, bcast_bytes(Which));
}
EXPR_BENCH(BM_add2_tessera<0>)->Name("BM_add_tessera")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_tessera<1>)->Name("BM_brow_tessera")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_tessera<2>)->Name("BM_bcol_tessera")->Arg(1)->Arg(2)->Arg(4);

// Rows [r0, r1) of y = a + b, b full, [1, kCols] or [kCols, 1]; g++ vectorises each row loop.
template <int Which>
void add2_rows(float const* a, float const* b, float* y, std::size_t r0, std::size_t r1) {
  for (std::size_t i = r0; i < r1; ++i) {
    float const* ar = a + i * kCols;
    float* yr = y + i * kCols;
    if constexpr (Which == 0) {
      float const* br = b + i * kCols;
      for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + br[j];
    } else if constexpr (Which == 1) {
      for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + b[j];
    } else {
      float const bi = b[i];
      for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + bi;
    }
  }
}

template <int Which>
void check_add2(benchmark::State& state, std::vector<float> const& y) {
  if (!check(state, kRows * kCols, [&](std::size_t k) {
        std::size_t const i = k / kCols, j = k % kCols;
        return std::pair{y[k], a2()(i, j) + other_at(Which, i, j)};
      }))
    return;
  set_counters(state, kRows * kCols, bcast_bytes(Which));
}

template <int Which>
void BM_add2_thread(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* a = a2().data();
  float const* b = other(Which).data();
  std::vector<float> y(kRows * kCols, 0.0f);
  for (auto _ : state) {
    threads_for(n, kRows, 1, [&](std::size_t r0, std::size_t r1) { add2_rows<Which>(a, b, y.data(), r0, r1); });
    benchmark::ClobberMemory();
  }
  check_add2<Which>(state, y);
}
EXPR_BENCH(BM_add2_thread<0>)->Name("BM_add_thread")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_thread<1>)->Name("BM_brow_thread")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_thread<2>)->Name("BM_bcol_thread")->Arg(1)->Arg(2)->Arg(4);

#if defined(_OPENMP)
template <int Which>
void BM_add2_omp(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* a = a2().data();
  float const* b = other(Which).data();
  std::vector<float> yv(kRows * kCols, 0.0f);
  float* y = yv.data();
  for (auto _ : state) {
#pragma omp parallel for num_threads(n)
    for (std::size_t i = 0; i < kRows; ++i) {
      float const* ar = a + i * kCols;
      float* yr = y + i * kCols;
      if constexpr (Which == 0) {
        float const* br = b + i * kCols;
#pragma omp simd
        for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + br[j];
      } else if constexpr (Which == 1) {
#pragma omp simd
        for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + b[j];
      } else {
        float const bi = b[i];
#pragma omp simd
        for (std::size_t j = 0; j < kCols; ++j) yr[j] = ar[j] + bi;
      }
    }
    benchmark::ClobberMemory();
  }
  check_add2<Which>(state, yv);
}
EXPR_BENCH(BM_add2_omp<0>)->Name("BM_add_omp")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_omp<1>)->Name("BM_brow_omp")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_omp<2>)->Name("BM_bcol_omp")->Arg(1)->Arg(2)->Arg(4);
#endif

#if defined(TESSERA_EXPR_BENCH_EIGEN)
using rm2 = Eigen::TensorMap<Eigen::Tensor<float const, 2, Eigen::RowMajor>>;

template <int Which>
void BM_add2_eigen(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  Eigen::ThreadPool tp(n);
  Eigen::ThreadPoolDevice dev(&tp, n);
  auto const R = static_cast<Eigen::Index>(kRows), C = static_cast<Eigen::Index>(kCols);
  rm2 a(a2().data(), R, C);
  std::vector<float> yv(kRows * kCols, 0.0f);
  Eigen::TensorMap<Eigen::Tensor<float, 2, Eigen::RowMajor>> y(yv.data(), R, C);
  for (auto _ : state) {
    if constexpr (Which == 0) {
      y.device(dev) = a + rm2(c2().data(), R, C);
    } else if constexpr (Which == 1) {
      y.device(dev) = a + rm2(brow().data(), 1, C).broadcast(Eigen::array<Eigen::Index, 2>{R, 1});
    } else {
      y.device(dev) = a + rm2(bcol().data(), R, 1).broadcast(Eigen::array<Eigen::Index, 2>{1, C});
    }
    benchmark::ClobberMemory();
  }
  check_add2<Which>(state, yv);
}
EXPR_BENCH(BM_add2_eigen<0>)->Name("BM_add_eigen")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_eigen<1>)->Name("BM_brow_eigen")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_add2_eigen<2>)->Name("BM_bcol_eigen")->Arg(1)->Arg(2)->Arg(4);
#endif

#endif  // !TESSERA_EXPR_BENCH_XTENSOR_ONLY

// ===========================================================================
// 3. A chain of 5 element-wise ops over 3 inputs: ((a + b) * c - a) * 0.5 + b
// ===========================================================================

void BM_chain_xtensor_noalias(benchmark::State& state) {
  auto const &a = x1(0), &b = x1(1), &c = x1(2);
  xt::xtensor<float, 1> y = xt::zeros<float>({kLen});
  for (auto _ : state) {
    xt::noalias(y) = ((a + b) * c - a) * 0.5f + b;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y(i), chain_op(a(i), b(i), c(i))}; })) return;
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_xtensor_noalias)->Arg(1);

void BM_chain_xtensor(benchmark::State& state) {
  auto const &a = x1(0), &b = x1(1), &c = x1(2);
  for (auto _ : state) {
    xt::xtensor<float, 1> y = ((a + b) * c - a) * 0.5f + b;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_xtensor)->Arg(1);

// Each op evaluated into its own xtensor (what a chain costs without fusion).
void BM_chain_xtensor_temps(benchmark::State& state) {
  auto const &a = x1(0), &b = x1(1), &c = x1(2);
  for (auto _ : state) {
    xt::xtensor<float, 1> t1 = a + b;
    xt::xtensor<float, 1> t2 = t1 * c;
    xt::xtensor<float, 1> t3 = t2 - a;
    xt::xtensor<float, 1> t4 = t3 * 0.5f;
    xt::xtensor<float, 1> y = t4 + b;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_xtensor_temps)->Arg(1);

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY)

struct chain_inputs {
  explicit chain_inputs(int n)
      : rt(n),
        mesh(tessera::make_mesh<"x">({n})),
        a(tessera::device_put(x1(0), tessera::named_sharding(mesh, tessera::P<"x">{}))),
        b(tessera::device_put(x1(1), tessera::named_sharding(mesh, tessera::P<"x">{}))),
        c(tessera::device_put(x1(2), tessera::named_sharding(mesh, tessera::P<"x">{}))) {}
  tessera::runtime rt;
  decltype(tessera::make_mesh<"x">({1})) mesh;
  decltype(tessera::device_put(x1(0), tessera::named_sharding(mesh, tessera::P<"x">{}))) a, b, c;
};

void BM_chain_tessera(benchmark::State& state) {
  chain_inputs in(static_cast<int>(state.range(0)));
  auto const &a = in.a, &b = in.b, &c = in.c;
  {  // the first call, checked; it also fills the devices' caches of freed blocks, as the
     // peers' outputs are allocated and touched before their loops
    tessera::array y = ((a + b) * c - a) * 0.5f + b;
    auto const h = tessera::to_host(y);
    if (!check(state, kLen, [&](std::size_t i) { return std::pair{h(i), chain_op(x1(0)(i), x1(1)(i), x1(2)(i))}; }))
      return;
  }
  for (auto _ : state) {
    tessera::array y = ((a + b) * c - a) * 0.5f + b;
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_tessera)->Arg(1)->Arg(2)->Arg(4);

void BM_chain_tessera_unfused(benchmark::State& state) {
  chain_inputs in(static_cast<int>(state.range(0)));
  auto const &a = in.a, &b = in.b, &c = in.c;
  for (int warm = 0; warm < 2; ++warm) {  // fills the devices' caches of freed blocks (5 results)
    tessera::array t1 = a + b;
    tessera::array t2 = t1 * c;
    tessera::array t3 = t2 - a;
    tessera::array t4 = t3 * 0.5f;
    tessera::array y = t4 + b;
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
  }
  for (auto _ : state) {
    tessera::array t1 = a + b;
    tessera::array t2 = t1 * c;
    tessera::array t3 = t2 - a;
    tessera::array t4 = t3 * 0.5f;
    tessera::array y = t4 + b;
    tessera::block_until_ready(y);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(y);
    benchmark::ClobberMemory();
  }
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_tessera_unfused)->Arg(1)->Arg(2)->Arg(4);

void BM_chain_thread(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const *a = x1(0).data(), *b = x1(1).data(), *c = x1(2).data();
  std::vector<float> y(kLen, 0.0f);
  for (auto _ : state) {
    threads_for(n, kLen, 64, [&](std::size_t lo, std::size_t hi) {
      float* o = y.data();
      for (std::size_t i = lo; i < hi; ++i) o[i] = ((a[i] + b[i]) * c[i] - a[i]) * 0.5f + b[i];
    });
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y[i], chain_op(a[i], b[i], c[i])}; })) return;
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_thread)->Arg(1)->Arg(2)->Arg(4);

#if defined(_OPENMP)
void BM_chain_omp(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const *a = x1(0).data(), *b = x1(1).data(), *c = x1(2).data();
  std::vector<float> yv(kLen, 0.0f);
  float* y = yv.data();
  for (auto _ : state) {
#pragma omp parallel for simd num_threads(n)
    for (std::size_t i = 0; i < kLen; ++i) y[i] = ((a[i] + b[i]) * c[i] - a[i]) * 0.5f + b[i];
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) { return std::pair{y[i], chain_op(a[i], b[i], c[i])}; })) return;
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_omp)->Arg(1)->Arg(2)->Arg(4);
#endif

#if defined(TESSERA_EXPR_BENCH_EIGEN)
void BM_chain_eigen(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  Eigen::ThreadPool tp(n);
  Eigen::ThreadPoolDevice dev(&tp, n);
  auto const L = static_cast<Eigen::Index>(kLen);
  Eigen::TensorMap<Eigen::Tensor<float const, 1>> a(x1(0).data(), L), b(x1(1).data(), L), c(x1(2).data(), L);
  Eigen::Tensor<float, 1> y(L);
  y.setZero();
  for (auto _ : state) {
    y.device(dev) = ((a + b) * c - a) * 0.5f + b;
    benchmark::ClobberMemory();
  }
  if (!check(state, kLen, [&](std::size_t i) {
        auto const k = static_cast<Eigen::Index>(i);
        return std::pair{y(k), chain_op(a(k), b(k), c(k))};
      }))
    return;
  set_counters(state, kLen, 4 * kB1);
}
EXPR_BENCH(BM_chain_eigen)->Arg(1)->Arg(2)->Arg(4);
#endif

#endif  // !TESSERA_EXPR_BENCH_XTENSOR_ONLY

// ===========================================================================
// 4. sum<1>(a) (row sums: no communication) and sum<0>(a) (column sums: an all-reduce)
// ===========================================================================

template <int Axis>
bool check_sum(benchmark::State& state, float const* r) {
  auto const& want = Axis == 0 ? ref_sum0() : ref_sum1();
  for (std::size_t i = 0; i < want.size(); ++i)
    if (!close_sum(r[i], want[i])) {
      state.SkipWithError(("wrong sum at " + std::to_string(i) + ": " + std::to_string(r[i]) + " instead of " +
                           std::to_string(want[i]))
                              .c_str());
      return false;
    }
  return true;
}

template <int Axis>
void BM_sum_xtensor(benchmark::State& state) {
  auto const& a = a2();
  xt::xtensor<float, 1> r;
  for (auto _ : state) {
    r = xt::sum(a, {Axis});
    benchmark::DoNotOptimize(r.data());
    benchmark::ClobberMemory();
  }
  if (!check_sum<Axis>(state, r.data())) return;
  set_counters(state, kRows * kCols, kB2);
}
template <int Axis>
void BM_sum_xtensor_immediate(benchmark::State& state) {
  auto const& a = a2();
  xt::xtensor<float, 1> r;
  for (auto _ : state) {
    r = xt::sum(a, {Axis}, xt::evaluation_strategy::immediate);
    benchmark::DoNotOptimize(r.data());
    benchmark::ClobberMemory();
  }
  if (!check_sum<Axis>(state, r.data())) return;
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum_xtensor<1>)->Name("BM_sum1_xtensor")->Arg(1);
EXPR_BENCH(BM_sum_xtensor_immediate<1>)->Name("BM_sum1_xtensor_immediate")->Arg(1);
EXPR_BENCH(BM_sum_xtensor<0>)->Name("BM_sum0_xtensor")->Arg(1);
EXPR_BENCH(BM_sum_xtensor_immediate<0>)->Name("BM_sum0_xtensor_immediate")->Arg(1);

#if !defined(TESSERA_EXPR_BENCH_XTENSOR_ONLY)

template <int Axis>
void BM_sum_tessera(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  auto mesh = tessera::make_mesh<"x">({n});
  auto a = tessera::device_put(a2(), tessera::named_sharding(mesh, tessera::P<"x", tessera::none>{}));
  {  // the first call, checked; it also fills the devices' caches of freed blocks, as the
     // peers' outputs are allocated and touched before their loops
    auto const h = tessera::to_host(tessera::eval(tessera::sum<Axis>(a)));
    if (!check_sum<Axis>(state, h.data())) return;
  }
  for (auto _ : state) {
    auto s = tessera::eval(tessera::sum<Axis>(a));
    tessera::block_until_ready(s);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum_tessera<1>)->Name("BM_sum1_tessera")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_sum_tessera<0>)->Name("BM_sum0_tessera")->Arg(1)->Arg(2)->Arg(4);

// Row sums of rows [r0, r1): plain (a float sum g++ keeps in order: scalar) or xsimd.
void row_sums_plain(float const* a, float* r, std::size_t r0, std::size_t r1) {
  for (std::size_t i = r0; i < r1; ++i) {
    float s = 0.0f;
    for (std::size_t j = 0; j < kCols; ++j) s += a[i * kCols + j];
    r[i] = s;
  }
}
void row_sums_xsimd(float const* a, float* r, std::size_t r0, std::size_t r1) {
  for (std::size_t i = r0; i < r1; ++i) {
    fbatch s(0.0f);
    for (std::size_t j = 0; j < kCols; j += W) s += fbatch::load_unaligned(a + i * kCols + j);
    r[i] = xsimd::hadd(s);
  }
}
// Column sums of rows [r0, r1) into r (kCols floats, zeroed); g++ vectorises the inner loop.
void col_sums_plain(float const* a, float* r, std::size_t r0, std::size_t r1) {
  for (std::size_t i = r0; i < r1; ++i)
    for (std::size_t j = 0; j < kCols; ++j) r[j] += a[i * kCols + j];
}

template <int Axis, bool Simd>
void BM_sum_thread(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* a = a2().data();
  std::vector<float> r(Axis == 0 ? kCols : kRows, 0.0f);
  std::vector<std::vector<float>> partial(static_cast<std::size_t>(n), std::vector<float>(kCols));
  for (auto _ : state) {
    if constexpr (Axis == 1) {
      threads_for(n, kRows, 1, [&](std::size_t r0, std::size_t r1) {
        if constexpr (Simd) row_sums_xsimd(a, r.data(), r0, r1);
        else row_sums_plain(a, r.data(), r0, r1);
      });
    } else {
      // Each thread sums its rows into its own partial; the caller adds the partials.
      threads_for(n, kRows, 1, [&](std::size_t r0, std::size_t r1) {
        auto& p = partial[r0 * static_cast<std::size_t>(n) / kRows];
        std::fill(p.begin(), p.end(), 0.0f);
        col_sums_plain(a, p.data(), r0, r1);
      });
      std::copy(partial[0].begin(), partial[0].end(), r.begin());
      for (std::size_t t = 1; t < partial.size(); ++t)
        for (std::size_t j = 0; j < kCols; ++j) r[j] += partial[t][j];
    }
    benchmark::DoNotOptimize(r.data());
    benchmark::ClobberMemory();
  }
  if (!check_sum<Axis>(state, r.data())) return;
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum_thread<1, false>)->Name("BM_sum1_thread")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_sum_thread<1, true>)->Name("BM_sum1_thread_xsimd")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_sum_thread<0, false>)->Name("BM_sum0_thread")->Arg(1)->Arg(2)->Arg(4);

#if defined(_OPENMP)
void BM_sum1_omp(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* a = a2().data();
  std::vector<float> rv(kRows, 0.0f);
  float* r = rv.data();
  for (auto _ : state) {
#pragma omp parallel for num_threads(n)
    for (std::size_t i = 0; i < kRows; ++i) {
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (std::size_t j = 0; j < kCols; ++j) s += a[i * kCols + j];
      r[i] = s;
    }
    benchmark::ClobberMemory();
  }
  if (!check_sum<1>(state, r)) return;
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum1_omp)->Arg(1)->Arg(2)->Arg(4);

void BM_sum0_omp(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  float const* a = a2().data();
  std::vector<float> rv(kCols, 0.0f);
  float* r = rv.data();
  for (auto _ : state) {
    std::fill(rv.begin(), rv.end(), 0.0f);
#pragma omp parallel for reduction(+ : r[:kCols]) num_threads(n)
    for (std::size_t i = 0; i < kRows; ++i) {
#pragma omp simd
      for (std::size_t j = 0; j < kCols; ++j) r[j] += a[i * kCols + j];
    }
    benchmark::ClobberMemory();
  }
  if (!check_sum<0>(state, r)) return;
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum0_omp)->Arg(1)->Arg(2)->Arg(4);
#endif

#if defined(TESSERA_EXPR_BENCH_EIGEN)
template <int Axis>
void BM_sum_eigen(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  Eigen::ThreadPool tp(n);
  Eigen::ThreadPoolDevice dev(&tp, n);
  rm2 a(a2().data(), static_cast<Eigen::Index>(kRows), static_cast<Eigen::Index>(kCols));
  Eigen::Tensor<float, 1, Eigen::RowMajor> r(static_cast<Eigen::Index>(Axis == 0 ? kCols : kRows));
  r.setZero();
  for (auto _ : state) {
    r.device(dev) = a.sum(Eigen::array<Eigen::Index, 1>{Axis});
    benchmark::ClobberMemory();
  }
  if (!check_sum<Axis>(state, r.data())) return;
  set_counters(state, kRows * kCols, kB2);
}
EXPR_BENCH(BM_sum_eigen<1>)->Name("BM_sum1_eigen")->Arg(1)->Arg(2)->Arg(4);
EXPR_BENCH(BM_sum_eigen<0>)->Name("BM_sum0_eigen")->Arg(1)->Arg(2)->Arg(4);
#endif

#endif  // !TESSERA_EXPR_BENCH_XTENSOR_ONLY

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
#if defined(XTENSOR_USE_XSIMD)
  benchmark::AddCustomContext("xtensor_xsimd", "1");
#else
  benchmark::AddCustomContext("xtensor_xsimd", "0");
#endif
#if defined(_OPENMP)
  benchmark::AddCustomContext("openmp", std::to_string(_OPENMP));
#endif
#if defined(TESSERA_EXPR_BENCH_EIGEN)
  benchmark::AddCustomContext("eigen", std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                                           "." + std::to_string(EIGEN_MINOR_VERSION));
#endif
  benchmark::AddCustomContext("xsimd_batch_float", std::to_string(W) + " lanes (" + xsimd::default_arch::name() + ")");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
