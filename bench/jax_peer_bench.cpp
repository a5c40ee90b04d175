// tessera's side of the comparison with JAX itself (issue 19): the workloads of bench/jax_peer.py,
// on the same sizes and inputs, in a runtime of TESSERA_NUM_DEVICES devices (bench/run_jax.sh runs
// this once with 2 and once with 8, as it runs JAX once with jax_num_cpu_devices = 2 and 8):
//
//   sin           2*sin(x)+1, x float32[16 Mi] P('x')                       (seed 002)
//   add           x + y, both float32[16 Mi] P('x')
//   sum0          sum<0>(a), a float32[4096,4096] P('x', None): the sharded axis, an all-reduce
//   mm            matmul(a, b), [2048,2048], a P('x', None), b replicated
//   seed_single   x @ x, x float32[4000,4000] on a mesh of one device (device 0)     (seed 004)
//   seed_sharded  x @ x, x P('x', None)                                              (seed 004)
//   psum_4k       shard_map(psum<"x">), 4 KiB per device, out_specs P('x')
//   psum_4m       the same, 4 MiB per device
//   train         seed 002's train step (examples/training.cpp): B = 128 per device, D = 32, jit
//                 with in/out shardings; the gradients written by hand, where JAX uses jax.grad
//
// Each timed call is what the JAX call is: the whole operation, its result a new array. The first
// call of each benchmark is checked (a fast wrong result must not make the table) and also fills
// the devices' caches of freed blocks, as JAX's warm-up calls fill its allocator.
// TESSERA_JAX_PEER_QUICK=1 shrinks the sizes, to check the scripts, not to measure.
#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <tuple>
#include <utility>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

// Milliseconds of wall time: the work runs on the devices' threads, not the caller's.
#define PEER_BENCH(...) BENCHMARK(__VA_ARGS__)->Unit(benchmark::kMillisecond)->UseRealTime()

namespace {

using tessera::none;
using tessera::P;

bool quick() {
  char const* q = std::getenv("TESSERA_JAX_PEER_QUICK");
  return q != nullptr && *q != '\0' && std::string(q) != "0";
}

// The sizes of bench/jax_peer.py, full or quick.
std::size_t const kLen = quick() ? std::size_t{1} << 20 : std::size_t{1} << 24;  // sin, add
std::size_t const kSum = quick() ? 1024 : 4096;                                  // sum0: [kSum, kSum]
std::size_t const kMM = quick() ? 256 : 2048;                                    // mm
std::size_t const kSeed = quick() ? 400 : 4000;                                  // seed 004
constexpr std::size_t kTrainPerDevice = 128, kTrainD = 32;                       // seed 002
constexpr float kLearningRate = 0.01f;

int devices() { return tessera::device_count(); }

// ---------------------------------------------------------------------------
// Inputs: a hash of the index, |v| < 8; bench/jax_peer.py computes the same values.
// ---------------------------------------------------------------------------

float value_at(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h % 16001u) / 1000.0f - 8.0f;
}

template <std::size_t N>
xt::xtensor<float, N> host(std::array<std::size_t, N> shape, std::uint32_t seed, float scale = 1.0f) {
  xt::xtensor<float, N> h(shape);
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = value_at(i, seed) / scale;
  return h;
}

// Made once and kept: every repetition of a benchmark starts from the same host data.
xt::xtensor<float, 1> const& vec(std::uint32_t seed) {
  static xt::xtensor<float, 1> const h[2] = {host<1>({kLen}, 1), host<1>({kLen}, 2)};
  return h[seed - 1];
}
xt::xtensor<float, 2> const& sum_a() {
  static xt::xtensor<float, 2> const h = host<2>({kSum, kSum}, 4);
  return h;
}
xt::xtensor<float, 2> const& mm_in(int which) {
  static xt::xtensor<float, 2> const h[2] = {host<2>({kMM, kMM}, 4), host<2>({kMM, kMM}, 5)};
  return h[which];
}
xt::xtensor<float, 2> const& seed_x() {  // scaled by 1/n, as jax_peer.py does, so x @ x stays O(1)
  static xt::xtensor<float, 2> const h = host<2>({kSeed, kSeed}, 6, static_cast<float>(kSeed));
  return h;
}

/// The JAX side's size text, e.g. "float32[4096,4096]", as the label: run_jax.sh checks that both
/// sides ran the same sizes.
template <class... S>
std::string f32(S... s) {
  std::string out = "float32[";
  ((out += std::to_string(s) + ","), ...);
  out.back() = ']';
  return out;
}

// ---------------------------------------------------------------------------
// The timed loop and the check of the first call.
// ---------------------------------------------------------------------------

bool fail(benchmark::State& state, std::string const& what) {
  state.SkipWithError(what.c_str());
  return false;
}

bool close(double got, double want, double tol) { return std::fabs(got - want) <= tol * (1.0 + std::fabs(want)); }

/// Checks run()'s first result with ok(result), then times run() per iteration. Google Benchmark
/// calls the benchmark once per repetition; the check (and warm-up) call is made in the first
/// only (one instantiation per benchmark): the seed's products take seconds, and the later
/// repetitions find the devices' caches already filled by the earlier ones.
template <class Run, class Ok>
void timed(benchmark::State& state, std::string const& size, Run run, Ok ok) {
  state.SetLabel(size);
  static bool checked = false;
  if (!checked && !ok(run())) return;
  checked = true;
  for (auto _ : state) {
    auto r = run();
    tessera::block_until_ready(r);  // queued (async dispatch): timed to its end
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
}

/// ok() for a product: 64 entries against a double-precision dot product.
auto is_product(benchmark::State& state, xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  return [&state, &a, &b](auto const& c) {
    auto const h = tessera::to_host(c);
    std::size_t const n = a.shape()[0];
    for (std::size_t s = 0; s < 64; ++s) {
      std::size_t const i = (s * 733 + 5) % n, j = (s * 1171 + 11) % n;
      double want = 0, mag = 0;
      for (std::size_t k = 0; k < n; ++k) {
        want += double(a(i, k)) * double(b(k, j));
        mag += std::fabs(double(a(i, k)) * double(b(k, j)));
      }
      if (!(std::fabs(double(h(i, j)) - want) <= 1e-5 * mag + 1e-6))
        return fail(state, "wrong product at (" + std::to_string(i) + ", " + std::to_string(j) + ")");
    }
    return true;
  };
}

// ===========================================================================
// Expressions (seed 002's 2*sin(x)+1, an add, the sum over the sharded axis)
// ===========================================================================

void BM_sin(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const x = tessera::device_put(vec(1), tessera::named_sharding(mesh, P<"x">{}));
  timed(state, f32(kLen), [&] { return tessera::array(2 * tessera::sin(x) + 1); },
        [&](auto const& y) {
          auto const h = tessera::to_host(y);
          for (std::size_t i = 0; i < kLen; i += 997)
            if (!close(h(i), 2.0 * std::sin(double(vec(1)(i))) + 1.0, 1e-5))
              return fail(state, "wrong 2*sin(x)+1 at " + std::to_string(i));
          return true;
        });
}
PEER_BENCH(BM_sin);

void BM_add(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const s = tessera::named_sharding(mesh, P<"x">{});
  auto const x = tessera::device_put(vec(1), s);
  auto const y = tessera::device_put(vec(2), s);
  timed(state, f32(kLen), [&] { return tessera::array(x + y); }, [&](auto const& r) {
    auto const h = tessera::to_host(r);
    for (std::size_t i = 0; i < kLen; i += 997)
      if (h(i) != vec(1)(i) + vec(2)(i)) return fail(state, "wrong x + y at " + std::to_string(i));
    return true;
  });
}
PEER_BENCH(BM_add);

void BM_sum0(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const a = tessera::device_put(sum_a(), tessera::named_sharding(mesh, P<"x", none>{}));
  timed(state, f32(kSum, kSum), [&] { return tessera::eval(tessera::sum<0>(a)); }, [&](auto const& r) {
    auto const h = tessera::to_host(r);
    for (std::size_t j = 0; j < kSum; j += 97) {
      double want = 0;
      for (std::size_t i = 0; i < kSum; ++i) want += sum_a()(i, j);
      if (!close(h(j), want, 1e-4)) return fail(state, "wrong column sum " + std::to_string(j));
    }
    return true;
  });
}
PEER_BENCH(BM_sum0);

// ===========================================================================
// Matrix products: 2048² rows-sharded, and seed 004's 4000² x @ x
// ===========================================================================

void BM_mm(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const a = tessera::device_put(mm_in(0), tessera::named_sharding(mesh, P<"x", none>{}));
  auto const b = tessera::device_put(mm_in(1), tessera::named_sharding(mesh, P<>{}));
  timed(state, f32(kMM, kMM), [&] { return tessera::eval(tessera::matmul(a, b)); },
        is_product(state, mm_in(0), mm_in(1)));
}
PEER_BENCH(BM_mm);

// Seed 004's unsharded x: one device of the runtime, as JAX's x lives on devices[0].
void BM_seed_single(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({1});
  auto const x = tessera::device_put(seed_x(), tessera::named_sharding(mesh, P<>{}));
  timed(state, f32(kSeed, kSeed), [&] { return tessera::eval(tessera::matmul(x, x)); },
        is_product(state, seed_x(), seed_x()));
}
PEER_BENCH(BM_seed_single);

void BM_seed_sharded(benchmark::State& state) {
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const x = tessera::device_put(seed_x(), tessera::named_sharding(mesh, P<"x", none>{}));
  timed(state, f32(kSeed, kSeed), [&] { return tessera::eval(tessera::matmul(x, x)); },
        is_product(state, seed_x(), seed_x()));
}
PEER_BENCH(BM_seed_sharded);

// ===========================================================================
// psum inside shard_map: one shard_map per call, as one jitted shard_map is one JAX call
// ===========================================================================

template <std::size_t Bytes>
void BM_psum(benchmark::State& state) {
  int const n = devices();
  std::size_t const count = Bytes / sizeof(float);
  auto const mesh = tessera::make_mesh<"x">({n});
  xt::xtensor<float, 1> const h = xt::arange<float>(static_cast<float>(static_cast<std::size_t>(n) * count));
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"x">{}));
  auto const f = tessera::shard_map([](auto blk) { return tessera::psum<"x">(blk); }, mesh,
                                    tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
  timed(state, f32(static_cast<std::size_t>(n) * count), [&] { return f(x); }, [&](auto const& r) {
    auto const got = tessera::to_host(r);
    for (std::size_t i = 0; i < got.size(); i += 61) {
      double want = 0;
      for (int d = 0; d < n; ++d) want += double(h(static_cast<std::size_t>(d) * count + i % count));
      if (!close(got(i), want, 1e-6)) return fail(state, "wrong psum at " + std::to_string(i));
    }
    return true;
  });
}
PEER_BENCH(BM_psum<std::size_t{4} << 10>)->Name("BM_psum_4k");
PEER_BENCH(BM_psum<std::size_t{4} << 20>)->Name("BM_psum_4m");

// ===========================================================================
// Seed 002's train step (examples/training.cpp): logistic regression, data P('x', None),
// parameters replicated; the gradients of mean((sigmoid(x @ w + b) - y) ** 2) by hand.
// ===========================================================================

void BM_train(benchmark::State& state) {
  std::size_t const B = kTrainPerDevice * static_cast<std::size_t>(devices());
  auto const key = tessera::random::key(1701);
  xt::xtensor<float, 2> const X = tessera::random::normal(key, tessera::shape_t<2>{B, kTrainD});
  xt::xtensor<float, 2> const w_true = tessera::random::normal(key, tessera::shape_t<2>{kTrainD, 1});
  xt::xtensor<float, 2> y = xt::zeros<float>({B, std::size_t{1}});
  for (std::size_t i = 0; i < B; ++i) {
    float z = 0;
    for (std::size_t k = 0; k < kTrainD; ++k) z += X(i, k) * w_true(k, 0);
    y(i, 0) = z > 0 ? 1.0f : 0.0f;
  }
  auto const mesh = tessera::make_mesh<"x">({devices()});
  auto const data_sharding = tessera::named_sharding(mesh, P<"x", none>{});
  auto const w_sharding = tessera::named_sharding(mesh, P<none, none>{});
  auto const b_sharding = tessera::named_sharding(mesh, P<none>{});
  auto const X_sharded = tessera::device_put(X, data_sharding);
  auto const y_sharded = tessera::device_put(y, data_sharding);
  auto const w = tessera::device_put(xt::xtensor<float, 2>(xt::zeros<float>({kTrainD, std::size_t{1}})), w_sharding);
  auto const b = tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{1}})), b_sharding);
  float const scale = 2.0f / static_cast<float>(B);
  auto const train_step = tessera::jit(
      [scale](auto const& w, auto const& b, auto const& x, auto const& y) {
        auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
        auto const g = scale * (p - y) * p * (1.0f - p);
        return std::make_tuple(w - kLearningRate * tessera::matmul(tessera::transpose(x), g),
                               b - kLearningRate * tessera::sum<0>(g));
      },
      tessera::in_shardings(w_sharding, b_sharding, data_sharding, data_sharding),
      tessera::out_shardings(w_sharding, b_sharding));
  timed(state, f32(B, kTrainD), [&] { return train_step(w, b, X_sharded, y_sharded); }, [&](auto const& r) {
    // From w = 0, b = 0 every prediction is 1/2: g = (2/B) (1/2 - y) (1/4), b = -lr sum(g).
    double want = 0;
    for (std::size_t i = 0; i < B; ++i) want -= double(kLearningRate) * 2.0 / double(B) * (0.5 - double(y(i, 0))) * 0.25;
    float const got = tessera::to_host(std::get<1>(r))(0);
    if (!close(got, want, 1e-5)) return fail(state, "wrong bias after one step: " + std::to_string(got));
    return true;
  });
}
PEER_BENCH(BM_train);

}  // namespace

int main(int argc, char** argv) {
  // One runtime for the whole process, as JAX has one set of CPU devices per process.
  tessera::runtime rt;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("tessera_devices", std::to_string(rt.device_count()));
  benchmark::AddCustomContext("matmul_backend", tessera::matmul_backend());
  benchmark::AddCustomContext("quick", quick() ? "1" : "0");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
