// The local matrix product (issue 5), float32, one thread: what one device does with its
// blocks. C[n,n] = A[n,n] * B[n,n] for n = 256, 1024, 2048, in GFLOP/s (2 n^3 / second):
//
//   kernel   tessera::detail::gemm_kernel: tessera's own kernel (packed panels, xsimd
//            micro-kernel), the backend of a build without BLAS
//   gemm     tessera::detail::gemm: what tessera's devices call; in a build with
//            TESSERA_HAS_CBLAS that is cblas_sgemm with one OpenBLAS thread (the label names
//            the backend). Not registered in a build without BLAS (it would be `kernel`).
//
// Inputs are uniform in [-1, 1]; C is allocated and touched once, outside the timed loop.
// Each benchmark checks 64 sampled entries of its product against a double-precision dot
// product once. Benchmarks are built with -O3 -march=native (bench/CMakeLists.txt), so the
// kernel uses the widest xsimd architecture of the machine.
//
//   build/<dir>/bench/bench_matmul_local_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <tessera/runtime/gemm.hpp>

namespace {

struct operands {
  std::size_t n;
  std::vector<float> a, b, c;
};

operands make_operands(std::size_t n) {
  operands o{n, std::vector<float>(n * n), std::vector<float>(n * n), std::vector<float>(n * n)};
  std::minstd_rand gen(static_cast<unsigned>(n));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (float& x : o.a) x = d(gen);
  for (float& x : o.b) x = d(gen);
  return o;
}

// 64 sampled entries against a dot product in double; an error on a wrong product.
bool check(operands const& o, benchmark::State& state) {
  std::minstd_rand gen(7);
  std::uniform_int_distribution<std::size_t> d(0, o.n - 1);
  for (int s = 0; s < 64; ++s) {
    std::size_t const i = d(gen), j = d(gen);
    double dot = 0;
    for (std::size_t p = 0; p < o.n; ++p) dot += double(o.a[i * o.n + p]) * double(o.b[p * o.n + j]);
    if (std::abs(double(o.c[i * o.n + j]) - dot) > 1e-5 * double(o.n)) {
      state.SkipWithError(("wrong product at [" + std::to_string(i) + "," + std::to_string(j) +
                           "]: " + std::to_string(o.c[i * o.n + j]) + " instead of " + std::to_string(dot))
                              .c_str());
      return false;
    }
  }
  return true;
}

template <bool Kernel>
void bm_matmul(benchmark::State& state) {
  std::size_t const n = static_cast<std::size_t>(state.range(0));
  operands o = make_operands(n);
  auto const product = [&] {
    if constexpr (Kernel)
      tessera::detail::gemm_kernel<float>(n, n, n, o.a.data(), n, o.b.data(), n, o.c.data(), n, false);
    else
      tessera::detail::gemm<float>(n, n, n, o.a.data(), n, o.b.data(), n, o.c.data(), n, false);
  };
  product();
  if (!check(o, state)) return;
  for (auto _ : state) {
    product();
    benchmark::DoNotOptimize(o.c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2e-9 * double(n) * double(n) * double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(Kernel ? "tessera xsimd kernel" : tessera::matmul_backend());
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int n : {256, 1024, 2048}) b->Arg(n);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(bm_matmul, true)->Name("matmul_local/kernel")->Apply(sizes);
#ifdef TESSERA_HAS_CBLAS
BENCHMARK_TEMPLATE(bm_matmul, false)->Name("matmul_local/gemm")->Apply(sizes);
#endif

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // A first product sets OpenBLAS to one thread; its idle workers spin for a while before
  // they sleep (on a 2-core machine that slows the first benchmark down): let them settle.
  float one = 1, out = 0;
  tessera::detail::gemm<float>(1, 1, 1, &one, 1, &one, 1, &out, 1, false);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  benchmark::AddCustomContext("matmul_backend", tessera::matmul_backend());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
