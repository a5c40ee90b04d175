// Initialising the layered transformer's parameters in their shardings (issue 32): the whole
// parameter tree of examples/transformer_layers_model.hpp's model.init(key, ids), every leaf
// generated in place on its devices, on a 2 x 4 mesh ("data", "model") of 8 devices, under the
// tensor-parallel and the FSDP logical axis rules. bench/run_init.sh runs it next to Flax's
// jax.jit(model.init, out_shardings=...) (bench/jax/init_flax.py) with the same model and shardings.
//
// Two sizes: the example's (L=2, D=64, H=4, F=256, V=256; 0.2 M parameters, where dispatch
// dominates) and a larger one of the same modules (L=8, D=512, H=8, F=2048, V=1024; 25.7 M
// parameters, where generating the numbers dominates). Each iteration waits until every leaf is
// ready (block_until_ready on each), so asynchronous dispatch cannot hide work.

#include <benchmark/benchmark.h>

#include <cstddef>
#include <tuple>
#include <utility>

#include "../examples/transformer_layers_model.hpp"

namespace {

namespace tl = transformer_layers;
namespace nn = tessera::nn;
namespace init = tessera::nn::initializers;

/// The example's Block with its sizes as parameters (the example fixes D = 64).
template <std::size_t D, std::size_t H, std::size_t F>
struct big_block {
  using norm = nn::LayerNorm<tl::named<init::ones, "norm">, tl::named<init::zeros, "norm">>;
  norm ln1{tl::eps}, ln2{tl::eps};
  nn::MultiHeadDotProductAttention<tl::named<tl::lecun, "embed", "heads", "kv">, tl::named<tl::lecun, "heads", "kv", "embed">,
                                   tl::named<init::zeros, "heads", "kv">, tl::named<init::zeros, "embed">>
      attn{H, /*causal=*/true};
  nn::Dense<tl::named<tl::lecun, "embed", "mlp">, tl::named<init::zeros, "mlp">> mlp_in{F};
  nn::Dense<tl::named<tl::lecun, "mlp", "embed">, tl::named<init::zeros, "embed">> mlp_out{D};

  template <class Scope, class X>
  auto init(Scope const& s, X const& h) const {
    auto p1 = ln1.init(s.push("ln1"), h);
    auto pa = attn.init(s.push("attn"), h);
    auto p2 = ln2.init(s.push("ln2"), h);
    auto pi = mlp_in.init(s.push("mlp_in"), h);
    auto po = mlp_out.init(s.push("mlp_out"), mlp_in.apply(pi, h));
    return tl::block_params<decltype(p1), decltype(pa), decltype(p2), decltype(pi), decltype(po)>{
        std::move(p1), std::move(pa), std::move(p2), std::move(pi), std::move(po)};
  }
};

/// The example's Transformer with its sizes as parameters (block_0 ... block_{NL-1}).
template <std::size_t D, std::size_t H, std::size_t F, std::size_t NL, std::size_t V>
struct big_transformer {
  nn::Embed<tl::named<nn::default_embed_init, "vocab", "embed">> tok_embed{V, D};
  tl::named<init::normal, "length", "embed"> pos_init{init::normal(0.02)};
  big_block<D, H, F> block;
  typename big_block<D, H, F>::norm ln_f{tl::eps};
  nn::Dense<tl::named<tl::lecun, "embed", "vocab">, tl::named<init::zeros, "vocab">> head{V};

  template <class Scope, class Ids>
  auto init(Scope s, Ids const& ids) const {
    auto te = tok_embed.init(s.push("tok_embed"), ids);
    auto pe = nn::param(s, pos_init, tessera::shape_t<2>{tl::S, D});
    auto const h = tok_embed.apply(te, ids) + pe;  // only its shape is read
    auto blocks = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple{block.init(s.push("block_" + std::to_string(I)), h)...};
    }(std::make_index_sequence<NL>{});
    auto lf = ln_f.init(s.push("ln_f"), h);
    auto hd = head.init(s.push("head"), h);
    return tl::transformer_params<decltype(te), decltype(pe), decltype(blocks), decltype(lf), decltype(hd)>{
        std::move(te), std::move(pe), std::move(blocks), std::move(lf), std::move(hd)};
  }
};

/// Waits for every leaf of the tree and counts its elements.
template <class Tree>
std::size_t wait_all(Tree const& params) {
  std::size_t n = 0;
  std::apply([&](auto const&... a) { ((a.block_until_ready(), n += a.size()), ...); }, tessera::tree_leaves(params));
  return n;
}

template <class Rules, class Model>
void run_init(benchmark::State& state, Model const& model) {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  auto const inputs = tl::make_data<Rules>(mesh).first;  // [B, S] tokens placed by ("batch", "length")
  std::size_t n = 0;
  for (auto _ : state) {
    auto const params = model.init(nn::scope(tessera::random::key(0), mesh, Rules{}), inputs);
    n = wait_all(params);
    benchmark::DoNotOptimize(params);
  }
  state.counters["params"] = static_cast<double>(n);
}

using small_model = tl::Transformer<>;                  // the example itself
using large_model = big_transformer<512, 8, 2048, 8, 1024>;

void BM_init_small_tp(benchmark::State& s) { run_init<tl::tensor_parallel>(s, small_model{}); }
void BM_init_small_fsdp(benchmark::State& s) { run_init<tl::fsdp>(s, small_model{}); }
void BM_init_large_tp(benchmark::State& s) { run_init<tl::tensor_parallel>(s, large_model{}); }
void BM_init_large_fsdp(benchmark::State& s) { run_init<tl::fsdp>(s, large_model{}); }

}  // namespace

BENCHMARK(BM_init_small_tp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_init_small_fsdp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_init_large_tp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_init_large_fsdp)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
