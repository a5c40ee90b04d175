// An Adam step of 100 M float32 parameters sharded over 8 devices (issue 32): optax.adam's
// update and apply_updates in one pass per device per leaf (tx.update_and_apply, what
// TrainState::apply_gradients runs), against the memory-bandwidth floor: a plain stream of the
// same bytes (4 arrays read, 3 written, into new blocks as the step's are) on the same devices.
// With the params and state donated (tx.update_and_apply_donated: written in their own blocks,
// as JAX's donate_argnums, and what the JAX peer does). Also the update alone (tx.update: mu, nu and the updates written) and clip_by_global_norm
// chained before it. bench/run_optim.sh runs it next to optax.adam jitted in JAX.
//
// The parameters are a tuple of 4 leaves of 25 M elements, each sharded P("x") over 8 devices.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <tuple>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <tessera/optim.hpp>

namespace {

using tessera::P;
namespace optim = tessera::optim;

constexpr std::size_t leaf_size = 25'000'000;
constexpr std::size_t leaves = 4;
constexpr double step_bytes = 7.0 * leaves * leaf_size * sizeof(float);  // g, p, mu, nu read; p, mu, nu written

auto make_leaf(auto const& s, float v) {
  return tessera::detail::build_array<float, 1, std::remove_cvref_t<decltype(s)>>(
      s, {leaf_size}, "bench input", [v](std::size_t, std::array<tessera::slice, 1> const& b, float* out) {
        for (std::size_t i = 0; i < b[0].size(); ++i) out[i] = v * static_cast<float>((b[0].start + i) % 977) / 977.0f;
      });
}

auto make_tree(auto const& s, float scale) {
  return std::make_tuple(make_leaf(s, scale), make_leaf(s, 2.0f * scale), make_leaf(s, 3.0f * scale),
                         make_leaf(s, 4.0f * scale));
}

template <class Body>
void with_tree(benchmark::State& state, Body body) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  auto const s = tessera::named_sharding(mesh, P<"x">{});
  auto params = make_tree(s, 1.0f);
  auto const grads = make_tree(s, 0.1f);
  if constexpr (std::is_invocable_v<Body, benchmark::State&, decltype(params), decltype(grads), decltype(params),
                                    decltype(params)>) {
    // The floors' two other streams: blocks of their own (a copy of an array shares its blocks,
    // as a jax.Array's does, and would stream the same memory twice).
    body(state, params, grads, make_tree(s, 0.5f), make_tree(s, 0.25f));
  } else {
    body(state, params, grads);
  }
  state.counters["GB/s"] =
      benchmark::Counter(step_bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_adam_update_and_apply(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads) {
    auto const tx = optim::adam(1e-3f);
    auto opt_state = tx.init(params);
    for (auto _ : st) {
      auto [p, s] = tx.update_and_apply(grads, opt_state, params);
      params = std::move(p);  // the old blocks go back to their devices' caches for the next step
      opt_state = std::move(s);
      tessera::block_until_ready(params);  // queued (async dispatch): timed to its end, as optax's loop waits
    }
    benchmark::DoNotOptimize(params);
  });
}

void BM_adam_update_and_apply_donated(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads) {
    auto const tx = optim::adam(1e-3f);
    auto opt_state = tx.init(params);
    for (auto _ : st) {
      auto [p, s] = tx.update_and_apply_donated(grads, std::move(opt_state), std::move(params));
      params = std::move(p);
      opt_state = std::move(s);
      tessera::block_until_ready(params);  // queued (async dispatch): timed to its end
    }
    benchmark::DoNotOptimize(params);
  });
}

void BM_adam_update(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads) {
    auto const tx = optim::adam(1e-3f);
    auto opt_state = tx.init(params);
    for (auto _ : st) {
      auto [u, s] = tx.update(grads, opt_state, params);
      opt_state = std::move(s);
      tessera::block_until_ready(u);  // queued (async dispatch): timed to its end
      benchmark::DoNotOptimize(u);
    }
  });
}

void BM_clip_adam_update_and_apply(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads) {
    auto const tx = optim::chain(optim::clip_by_global_norm(1.0), optim::adam(1e-3f));
    auto opt_state = tx.init(params);
    for (auto _ : st) {
      auto [p, s] = tx.update_and_apply(grads, opt_state, params);
      params = std::move(p);
      opt_state = std::move(s);
      tessera::block_until_ready(params);  // queued (async dispatch): timed to its end
    }
    benchmark::DoNotOptimize(params);
  });
}

/// The floor of update_and_apply: per leaf and device, read 4 blocks and write 3 new ones (o0 = a + b, o1 = c,
/// o2 = d), vectorised, nothing else.
void BM_stream_floor(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads, auto m1, auto m2) {
    for (auto _ : st) {
      auto step = [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::make_tuple([&] {
          auto const& a = std::get<I>(params);
          auto const& b = std::get<I>(grads);
          auto const& c = std::get<I>(m1);
          auto const& d = std::get<I>(m2);
          return optim::detail::build_arrays<3>(a, "stream", [&](std::size_t pos, std::size_t n, std::array<float*, 3> o) {
            using B = xsimd::batch<float>;
            float const *pa = a.block_data(pos), *pb = b.block_data(pos), *pc = c.block_data(pos), *pd = d.block_data(pos);
            std::size_t i = 0;
            for (; i + B::size <= n; i += B::size) {
              (B::load_unaligned(pa + i) + B::load_unaligned(pb + i)).store_unaligned(o[0] + i);
              B::load_unaligned(pc + i).store_unaligned(o[1] + i);
              B::load_unaligned(pd + i).store_unaligned(o[2] + i);
            }
            for (; i < n; ++i) o[0][i] = pa[i] + pb[i], o[1][i] = pc[i], o[2][i] = pd[i];
          });
        }()...);
      }(std::make_index_sequence<leaves>{});
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(params) = std::get<I>(step)[0], std::get<I>(m1) = std::get<I>(step)[1],
          std::get<I>(m2) = std::get<I>(step)[2]),
         ...);
      }(std::make_index_sequence<leaves>{});
      tessera::block_until_ready(params);  // queued (async dispatch): timed to its end
    }
    benchmark::DoNotOptimize(params);
  });
}

/// The floor of the donated step: the same stream written into three of the blocks it reads
/// (a = a + b, c = c·0.5, d = d·2), as an in-place update touches memory.
void BM_stream_floor_in_place(benchmark::State& state) {
  with_tree(state, [](benchmark::State& st, auto params, auto const& grads, auto m1, auto m2) {
    for (auto _ : st) {
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        (optim::detail::fill_in_place<3>(
             std::array{std::get<I>(params), std::get<I>(m1), std::get<I>(m2)}, "stream",
             [&](std::size_t pos, std::size_t n, std::array<float*, 3> o) {
               using B = xsimd::batch<float>;
               float const* pb = std::get<I>(grads).block_data(pos);
               std::size_t i = 0;
               for (; i + B::size <= n; i += B::size) {
                 (B::load_unaligned(o[0] + i) + B::load_unaligned(pb + i)).store_unaligned(o[0] + i);
                 (B::load_unaligned(o[1] + i) * B(0.5f)).store_unaligned(o[1] + i);  // stores the compiler keeps
                 (B::load_unaligned(o[2] + i) * B(2.0f)).store_unaligned(o[2] + i);
               }
               for (; i < n; ++i) o[0][i] += pb[i], o[1][i] *= 0.5f, o[2][i] *= 2.0f;
             }),
         ...);
      }(std::make_index_sequence<leaves>{});
      tessera::block_until_ready(params);  // queued (async dispatch): timed to its end
    }
    benchmark::DoNotOptimize(params);
  });
}

}  // namespace

BENCHMARK(BM_stream_floor_in_place)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK(BM_stream_floor)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK(BM_adam_update_and_apply)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK(BM_adam_update_and_apply_donated)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK(BM_adam_update)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK(BM_clip_adam_update_and_apply)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(6);
BENCHMARK_MAIN();
