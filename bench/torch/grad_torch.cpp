// libtorch's autograd as the peer of bench/grad_bench.cpp (issue 17): the same SGD steps on the
// same values, on 2 intra-op threads (torch::set_num_threads(2)), the cores tessera's devices
// share on this machine. libtorch has no devices: "n" below is the batch of n of tessera's
// devices, run as one tensor.
//
//   logistic  seed 002: p = sigmoid(x @ w + b), loss mean((p - y)^2), x [128 n, 32], w [32, 1], b [1]
//   linear    seed 004: loss mean((x @ W - y)^2), W [1000, 100], x [32 n, 1000], y [32 n, 100]
//
//   autograd  the loss, then torch::autograd::grad({loss}, {params}), then params - lr * grads
//             under NoGradGuard (what loss.backward() and optimizer.step() compute, without the
//             in-place state)
//   hand      the hand-written gradients of bench/grad_bench.cpp, as torch operations
//
// Each step starts from the same parameters and returns new tensors. The counter "checksum" is
// the sum of the updated parameters (double): bench/run_grad.sh compares it with
// bench_grad_bench's, so that the two programs are seen to compute the same step.
//
// Built only where CMake finds Torch (Debian 12: apt-get install libtorch-dev); see
// bench/CMakeLists.txt.
#include <benchmark/benchmark.h>

#include <torch/torch.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

constexpr std::int64_t kLogisticPerDevice = 128, kLogisticD = 32;              // seed 002
constexpr std::int64_t kLinearPerDevice = 32, kLinearIn = 1000, kLinearOut = 100;  // seed 004
constexpr float kLr = 0.01f;

// The values of bench/grad_bench.cpp's host<N>(shape, seed).
float value_at(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h % 16001u) / 8000.0f - 1.0f;
}
torch::Tensor host(std::vector<std::int64_t> shape, std::uint32_t seed) {
  auto t = torch::empty(shape, torch::kFloat32);
  float* p = t.data_ptr<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = value_at(static_cast<std::size_t>(i), seed);
  return t;
}

double sum_of(torch::Tensor const& t) { return t.to(torch::kFloat64).sum().item<double>(); }

bool close(torch::Tensor const& a, torch::Tensor const& b) { return torch::allclose(a, b, 1e-5, 1e-5); }

template <class Step>
void time_steps(benchmark::State& state, Step const& step) {
  { auto warm = step(); }
  for (auto _ : state) {
    auto r = step();
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
}

// ===========================================================================
// Seed 002: logistic regression
// ===========================================================================

enum class way { hand, autograd };

template <way How>
void BM_torch_logistic(benchmark::State& state) {
  std::int64_t const n = state.range(0), B = kLogisticPerDevice * n, D = kLogisticD;
  auto const x = host({B, D}, 1);
  auto const w_true = host({D, 1}, 2);
  // Labels as bench/grad_bench.cpp computes them (the same order of additions).
  auto const y = torch::zeros({B, 1}, torch::kFloat32);
  {
    float const* xp = x.data_ptr<float>();
    float const* tp = w_true.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for (std::int64_t i = 0; i < B; ++i) {
      float z = 0;
      for (std::int64_t k = 0; k < D; ++k) z += xp[i * D + k] * tp[k];
      yp[i] = z > 0 ? 1.0f : 0.0f;
    }
  }
  auto const w = host({D, 1}, 3).requires_grad_(true);
  auto const b = host({1}, 4).requires_grad_(true);
  float const scale = 2.0f / static_cast<float>(B);

  auto const autograd = [&] {
    auto const d = torch::sigmoid(torch::matmul(x, w) + b) - y;
    auto const loss = (d * d).mean();
    auto const g = torch::autograd::grad({loss}, {w, b});
    torch::NoGradGuard no_grad;
    return std::make_pair(w - kLr * g[0], b - kLr * g[1]);
  };
  auto const hand = [&] {
    torch::NoGradGuard no_grad;
    auto const p = torch::sigmoid(torch::matmul(x, w) + b);
    auto const g = scale * (p - y) * p * (1.0f - p);
    return std::make_pair(w - kLr * torch::matmul(x.t(), g), b - kLr * g.sum(0));
  };
  auto const [ha, hb] = hand();
  auto const [aa, ab] = autograd();
  if (!close(ha, aa) || !close(hb, ab)) {
    state.SkipWithError("autograd's step differs from the hand-written one");
    return;
  }
  state.counters["checksum"] = sum_of(ha) + sum_of(hb);
  state.SetLabel("B=" + std::to_string(B) + " D=" + std::to_string(D));
  if constexpr (How == way::hand) time_steps(state, hand);
  else time_steps(state, autograd);
}

// ===========================================================================
// Seed 004: the linear model
// ===========================================================================

template <way How>
void BM_torch_linear(benchmark::State& state) {
  std::int64_t const n = state.range(0), B = kLinearPerDevice * n;
  auto const x = host({B, kLinearIn}, 5);
  auto const y = host({B, kLinearOut}, 6);
  auto const W = torch::ones({kLinearIn, kLinearOut}, torch::kFloat32).requires_grad_(true);
  float const scale = 2.0f / static_cast<float>(B * kLinearOut);

  auto const autograd = [&] {
    auto const d = torch::matmul(x, W) - y;
    auto const loss = (d * d).mean();
    auto const g = torch::autograd::grad({loss}, {W});
    torch::NoGradGuard no_grad;
    return W - kLr * g[0];
  };
  auto const hand = [&] {
    torch::NoGradGuard no_grad;
    auto const g = scale * (torch::matmul(x, W) - y);
    return W - kLr * torch::matmul(x.t(), g);
  };
  auto const h = hand();
  if (!close(h, autograd())) {
    state.SkipWithError("autograd's step differs from the hand-written one");
    return;
  }
  state.counters["checksum"] = sum_of(h);
  state.SetLabel("W=1000x100 B=" + std::to_string(B));
  if constexpr (How == way::hand) time_steps(state, hand);
  else time_steps(state, autograd);
}

#define TORCH_BENCH(...) BENCHMARK(__VA_ARGS__)->Arg(2)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime()

TORCH_BENCH(BM_torch_logistic<way::hand>)->Name("BM_torch_logistic_hand");
TORCH_BENCH(BM_torch_logistic<way::autograd>)->Name("BM_torch_logistic_autograd");
TORCH_BENCH(BM_torch_linear<way::hand>)->Name("BM_torch_linear_hand");
TORCH_BENCH(BM_torch_linear<way::autograd>)->Name("BM_torch_linear_autograd");

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("torch_version", TORCH_VERSION);
  benchmark::AddCustomContext("torch_num_threads", std::to_string(torch::get_num_threads()));
  benchmark::AddCustomContext("torch_parallel_info", torch::get_parallel_info());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
