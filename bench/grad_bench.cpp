// tessera::grad against hand-written gradients (issue 17): one SGD step of
//
//   logistic  seed 002's model (examples/training.cpp): p = sigmoid(x @ w + b), loss mean((p - y)^2),
//             B = 128 examples per device, D = 32, x and y P('X', None), w and b replicated;
//   linear    seed 004's model: preds = x @ W, loss mean((preds - y)^2), W 1000 x 100, batch 32
//             per device, x and y P('X', None); W laid out as the seed shards it, P('X', None)
//             ("fsdp": gathered for the product, its gradient reduce-scattered), and replicated
//             ("dp": its gradient all-reduced);
//
// on meshes of 2 and 8 devices (each benchmark makes its own tessera::runtime of that size; the
// machine has 2 cores, so 8 devices are oversubscribed). Each step is a tessera::jit with in and
// out shardings that returns the updated parameters, as examples/training.cpp's train_step:
//
//   hand  the gradients written out (examples/training.cpp's expressions; for the linear model
//         g = 2 (x @ W - y) / (B * 100), grad_W = x.T @ g with out_sharding W's layout, so the
//         hand-written step runs the same collectives as grad's);
//   grad  the same loss differentiated by tessera::grad<0, 1>(loss)(w, b, x, y) (x, y not
//         differentiated; tessera::grad(loss)(W, x, y) for the linear model), then w - lr * grad_w.
//
// Before timing, each benchmark checks that both ways give the same parameters (to 1e-5) and
// runs one step under an allocation count (this file replaces the global operator new and
// delete; the devices' caches of freed blocks are turned off for that one step, so every block
// a step needs is a fresh allocation). Counters (per step):
//   dev_peak_B   high-water mark of device bytes live above those live before the step (blocks
//                of 64-byte aligned operator new: device_buffer's; tessera keeps no per-device
//                peak counter of its own, runtime/device_memory.hpp has only the cache size)
//   host_peak_B  the same for every other operator new (the tape, std::function, shared_ptr,
//                vectors, the plan of each evaluation)
//   dev_allocs, host_allocs   how many allocations of each kind the step made
//   collectives  collectives the step ran (collective_counter)
//   dispatches   round trips to the devices the step made (a tessera::trace of one more step)
//   checksum     the sum of the updated parameters (bench/run_grad.sh compares it with libtorch's)
// The timed loop runs with the caches on (as a training loop does) and the count off (one
// relaxed atomic load per allocation).
//
// bench/run_grad.sh runs this and bench_grad_torch (libtorch's autograd, where CMake finds Torch)
// and prints the ratios.
#include <benchmark/benchmark.h>

#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <tuple>
#include <utility>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

// ---------------------------------------------------------------------------
// Allocation accounting: this program's global operator new and delete.
// ---------------------------------------------------------------------------

namespace alloc_count {

std::atomic<bool> on{false};
struct kind {
  std::atomic<long long> live{0}, peak{0}, count{0};
  void reset() {
    live.store(0);
    peak.store(0);
    count.store(0);
  }
  void add(long long bytes) {
    long long const now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (bytes > 0) {
      count.fetch_add(1, std::memory_order_relaxed);
      long long p = peak.load(std::memory_order_relaxed);
      while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
      }
    }
  }
};
kind device, host;

// Device buffers are 64-byte aligned (device_buffer, device_memory); everything else is host.
inline kind& of(std::size_t align) { return align == 64 ? device : host; }
inline bool counting() { return on.load(std::memory_order_relaxed); }

void* allocate(std::size_t n, std::size_t align) {
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  if (counting()) of(align).add(static_cast<long long>(malloc_usable_size(p)));
  return p;
}
void release(void* p, std::size_t align) noexcept {
  if (!p) return;
  if (counting()) of(align).add(-static_cast<long long>(malloc_usable_size(p)));
  std::free(p);
}

}  // namespace alloc_count

void* operator new(std::size_t n) { return alloc_count::allocate(n, 0); }
void* operator new[](std::size_t n) { return alloc_count::allocate(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return alloc_count::allocate(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return alloc_count::allocate(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, std::nothrow_t const&) noexcept {
  try {
    return alloc_count::allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept {
  try {
    return alloc_count::allocate(n, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { alloc_count::release(p, 0); }
void operator delete[](void* p) noexcept { alloc_count::release(p, 0); }
void operator delete(void* p, std::size_t) noexcept { alloc_count::release(p, 0); }
void operator delete[](void* p, std::size_t) noexcept { alloc_count::release(p, 0); }
void operator delete(void* p, std::align_val_t a) noexcept { alloc_count::release(p, static_cast<std::size_t>(a)); }
void operator delete[](void* p, std::align_val_t a) noexcept { alloc_count::release(p, static_cast<std::size_t>(a)); }
void operator delete(void* p, std::size_t, std::align_val_t a) noexcept {
  alloc_count::release(p, static_cast<std::size_t>(a));
}
void operator delete[](void* p, std::size_t, std::align_val_t a) noexcept {
  alloc_count::release(p, static_cast<std::size_t>(a));
}

namespace {

using tessera::none;
using tessera::P;

constexpr std::size_t kLogisticPerDevice = 128, kLogisticD = 32;         // seed 002
constexpr std::size_t kLinearPerDevice = 32, kLinearIn = 1000, kLinearOut = 100;  // seed 004
constexpr float kLr = 0.01f;

// Inputs: a hash of the index in [-1, 1); bench/torch/grad_torch.cpp computes the same values.
float value_at(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h % 16001u) / 8000.0f - 1.0f;
}
template <std::size_t N>
xt::xtensor<float, N> host(std::array<std::size_t, N> shape, std::uint32_t seed) {
  xt::xtensor<float, N> h(shape);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = value_at(i, seed);
  return h;
}

// ---------------------------------------------------------------------------
// The losses (what grad differentiates) and the hand-written steps.
// ---------------------------------------------------------------------------

// examples/training.cpp's loss: jnp.mean((sigmoid(x @ w + b) - y) ** 2)
auto const logistic_loss = [](auto const& w, auto const& b, auto const& x, auto const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::mean(d * d);
};

// seed 004's loss_fn: jnp.mean((x @ params - y) ** 2)
auto const linear_loss = [](auto const& W, auto const& x, auto const& y) {
  auto const d = tessera::matmul(x, W) - y;
  return tessera::mean(d * d);
};

enum class way { hand, grad };

/// Max |a - b| over two arrays' host copies.
template <class A, class B>
double max_diff(A const& a, B const& b) {
  auto const ha = tessera::to_host(a);
  auto const hb = tessera::to_host(b);
  double m = 0;
  for (std::size_t i = 0; i < ha.size(); ++i) m = std::max(m, std::fabs(double(ha.data()[i]) - double(hb.data()[i])));
  return m;
}

/// The sum of an array's elements, in double (the counter "checksum": bench/run_grad.sh compares
/// it with libtorch's).
template <class A>
double sum_host(A const& a) {
  auto const h = tessera::to_host(a);
  double s = 0;
  for (std::size_t i = 0; i < h.size(); ++i) s += double(h.data()[i]);
  return s;
}

/// One step under the allocation count and a collective_counter; the counters of the benchmark.
template <class Step>
void count_one_step(benchmark::State& state, tessera::runtime& rt, Step const& step) {
  for (int d = 0; d < rt.device_count(); ++d) rt.pool().memory(d).set_cache_limit(0);
  {
    alloc_count::device.reset();
    alloc_count::host.reset();
    tessera::collective_counter collectives;
    alloc_count::on.store(true);
    auto r = step();
    alloc_count::on.store(false);
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    state.counters["collectives"] = static_cast<double>(collectives.count());
  }
  {
    // Round trips to the devices (one per dispatch; each costs microseconds, more with 8
    // devices on 2 cores), from a trace of one more step.
    tessera::trace tr;
    auto r = step();
    tr.stop();
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    auto const events = tr.events();
    state.counters["dispatches"] = static_cast<double>(std::count_if(
        events.begin(), events.end(), [](auto const& e) { return e.category == "dispatch" && e.name == "dispatch"; }));
  }
  state.counters["dev_peak_B"] = static_cast<double>(alloc_count::device.peak.load());
  state.counters["host_peak_B"] = static_cast<double>(alloc_count::host.peak.load());
  state.counters["dev_allocs"] = static_cast<double>(alloc_count::device.count.load());
  state.counters["host_allocs"] = static_cast<double>(alloc_count::host.count.load());
  for (int d = 0; d < rt.device_count(); ++d)
    rt.pool().memory(d).set_cache_limit(tessera::detail::device_memory::default_cache_limit);
}

/// The timed loop: a warm-up step (fills the devices' caches of freed blocks), then one step
/// per iteration from the same parameters.
template <class Step>
void time_steps(benchmark::State& state, Step const& step) {
  benchmark::DoNotOptimize(step());
  for (auto _ : state) {
    auto r = step();
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
}

// ===========================================================================
// Seed 002: logistic regression
// ===========================================================================

template <way How>
void BM_logistic(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  std::size_t const B = kLogisticPerDevice * static_cast<std::size_t>(n), D = kLogisticD;
  auto const X = host<2>({B, D}, 1);
  auto const w_true = host<2>({D, 1}, 2);
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) {
    float z = 0;
    for (std::size_t k = 0; k < D; ++k) z += X(i, k) * w_true(k, 0);
    y(i, 0) = z > 0 ? 1.0f : 0.0f;
  }
  auto const mesh = tessera::make_mesh<"X">({n});
  auto const ds = tessera::named_sharding(mesh, P<"X", none>{});
  auto const ws = tessera::named_sharding(mesh, P<none, none>{});
  auto const bs = tessera::named_sharding(mesh, P<none>{});
  auto const x = tessera::device_put(X, ds);
  auto const yd = tessera::device_put(y, ds);
  // Not zeros, so that the check below sees every term of the gradients.
  auto const w = tessera::device_put(host<2>({D, 1}, 3), ws);
  auto const b = tessera::device_put(host<1>({1}, 4), bs);
  float const scale = 2.0f / static_cast<float>(B);

  // examples/training.cpp's train_step, its gradients written by hand.
  auto const hand = tessera::jit(
      [scale](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
        auto const g = scale * (p - y) * p * (1.0f - p);
        return std::make_tuple(w - kLr * tessera::matmul(tessera::transpose(x), g), b - kLr * tessera::sum<0>(g));
      },
      tessera::in_shardings(ws, bs, ds, ds), tessera::out_shardings(ws, bs));
  // The same step with tessera::grad.
  auto const with_grad = tessera::jit(
      [](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const [gw, gb] = tessera::grad<0, 1>(logistic_loss)(w, b, x, y);
        return std::make_tuple(w - kLr * gw, b - kLr * gb);
      },
      tessera::in_shardings(ws, bs, ds, ds), tessera::out_shardings(ws, bs));

  auto const h = hand(w, b, x, yd);
  auto const g = with_grad(w, b, x, yd);
  double const err = std::max(max_diff(std::get<0>(h), std::get<0>(g)), max_diff(std::get<1>(h), std::get<1>(g)));
  if (!(err < 1e-5)) {
    state.SkipWithError(("grad's step differs from the hand-written one by " + std::to_string(err)).c_str());
    return;
  }
  state.counters["checksum"] = sum_host(std::get<0>(h)) + sum_host(std::get<1>(h));
  state.SetLabel("B=" + std::to_string(B) + " D=" + std::to_string(D));
  auto const step = [&] {
    if constexpr (How == way::hand) return hand(w, b, x, yd);
    else return with_grad(w, b, x, yd);
  };
  count_one_step(state, rt, step);
  time_steps(state, step);
}

// ===========================================================================
// Seed 004: the linear model, W 1000 x 100, batch 32 per device
// ===========================================================================

template <way How, bool Fsdp>
void BM_linear(benchmark::State& state) {
  int const n = static_cast<int>(state.range(0));
  tessera::runtime rt{n};
  std::size_t const B = kLinearPerDevice * static_cast<std::size_t>(n);
  auto const mesh = tessera::make_mesh<"X">({n});
  auto const ds = tessera::named_sharding(mesh, P<"X", none>{});
  using wspec = std::conditional_t<Fsdp, P<"X", none>, P<none, none>>;
  auto const ws = tessera::named_sharding(mesh, wspec{});
  auto const x = tessera::device_put(host<2>({B, kLinearIn}, 5), ds);
  auto const y = tessera::device_put(host<2>({B, kLinearOut}, 6), ds);
  // create_model: jnp.ones((1000, 100))
  auto const Wp = tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({kLinearIn, kLinearOut})), ws);
  float const scale = 2.0f / static_cast<float>(B * kLinearOut);

  auto const hand = tessera::jit(
      [scale](auto const& W, auto const& x, auto const& y) {
        auto const g = scale * (tessera::matmul(x, W) - y);
        return W - kLr * tessera::matmul(tessera::transpose(x), g, wspec{});
      },
      tessera::in_shardings(ws, ds, ds), tessera::out_shardings(ws));
  auto const with_grad = tessera::jit(
      [](auto const& W, auto const& x, auto const& y) {
        auto const gW = tessera::grad(linear_loss)(W, x, y);
        return W - kLr * gW;
      },
      tessera::in_shardings(ws, ds, ds), tessera::out_shardings(ws));

  auto const h = hand(Wp, x, y);
  double const err = max_diff(h, with_grad(Wp, x, y));
  if (!(err < 1e-5)) {
    state.SkipWithError(("grad's step differs from the hand-written one by " + std::to_string(err)).c_str());
    return;
  }
  state.counters["checksum"] = sum_host(h);
  state.SetLabel("W=" + std::to_string(kLinearIn) + "x" + std::to_string(kLinearOut) + (Fsdp ? " P(X,None)" : " P()") +
                 " B=" + std::to_string(B));
  auto const step = [&] {
    if constexpr (How == way::hand) return hand(Wp, x, y);
    else return with_grad(Wp, x, y);
  };
  count_one_step(state, rt, step);
  time_steps(state, step);
}

// Microseconds of wall time: the work runs on the devices' threads, not the caller's.
#define GRAD_BENCH(...) BENCHMARK(__VA_ARGS__)->Arg(2)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime()

GRAD_BENCH(BM_logistic<way::hand>)->Name("BM_logistic_hand");
GRAD_BENCH(BM_logistic<way::grad>)->Name("BM_logistic_grad");
GRAD_BENCH(BM_linear<way::hand, true>)->Name("BM_linear_fsdp_hand");
GRAD_BENCH(BM_linear<way::grad, true>)->Name("BM_linear_fsdp_grad");
GRAD_BENCH(BM_linear<way::hand, false>)->Name("BM_linear_dp_hand");
GRAD_BENCH(BM_linear<way::grad, false>)->Name("BM_linear_dp_grad");

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("matmul_backend", tessera::matmul_backend());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
