#pragma once
// Issue 31's transformer written with tessera::nn's layers (examples/transformer_layers.cpp,
// bench/transformer_layers_bench.cpp): the Flax program of tools/jax_reference/transformer_flax.py
// module for module. Every parameter carries logical axis names; three rule types place them
// for data, tensor (Megatron) or FSDP parallelism, and the model's code does not change.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/autodiff.hpp>
#include <tessera/nn.hpp>
#include <tessera/optim.hpp>
#include <tessera/random.hpp>

namespace transformer_layers {

namespace nn = tessera::nn;
namespace init = tessera::nn::initializers;
namespace jr = tessera::random;
using tessera::axes;
using tessera::none;

constexpr std::size_t L = 2, D = 64, H = 4, S = 32, V = 256, B = 16, F = 4 * D;
constexpr float eps = 1e-5f;
constexpr double lr = 3e-3;  // optax.adam(3e-3)
constexpr int steps = 20;

// ---- logical axis rules: the only thing that changes between the three layouts ----------------

/// Data parallelism: the batch over all 8 devices, every parameter replicated.
using data_parallel =
    nn::logical_axis_rules<nn::rule<"batch", axes<"data", "model">>, nn::rule<"vocab", none>, nn::rule<"embed", none>,
                           nn::rule<"length", none>, nn::rule<"heads", none>, nn::rule<"kv", none>,
                           nn::rule<"mlp", none>, nn::rule<"norm", none>>;
/// Tensor parallelism (Megatron) over "model", data parallelism over "data": heads, the MLP's
/// hidden units and the vocabulary split over "model".
using tensor_parallel =
    nn::logical_axis_rules<nn::rule<"batch", "data">, nn::rule<"vocab", "model">, nn::rule<"heads", "model">,
                           nn::rule<"mlp", "model">, nn::rule<"embed", none>, nn::rule<"length", none>,
                           nn::rule<"kv", none>, nn::rule<"norm", none>>;
/// FSDP (ZeRO-3): the batch over all 8 devices, and every weight split over all 8 along its
/// "embed" dimension (gathered where it is used, its gradient reduce-scattered).
using fsdp =
    nn::logical_axis_rules<nn::rule<"batch", axes<"data", "model">>, nn::rule<"embed", axes<"data", "model">>,
                           nn::rule<"vocab", none>, nn::rule<"length", none>, nn::rule<"heads", none>,
                           nn::rule<"kv", none>, nn::rule<"mlp", none>, nn::rule<"norm", none>>;

// ---- the modules ---------------------------------------------------------------------------------

/// An initializer whose parameter's dimensions are named N... (nn.with_logical_partitioning).
template <class Init, tessera::dim_spec... N>
using named = nn::partitioned<Init, nn::names<N...>>;
/// A bias initializer, or nn::no_bias (use_bias=False) where the model has no biases.
template <bool Bias, class Init>
using bias_init = std::conditional_t<Bias, Init, nn::no_bias_t>;
using lecun = init::lecun_normal;

template <class LN1, class Attn, class LN2, class MlpIn, class MlpOut>
struct block_params {
  LN1 ln1;
  Attn attn;
  LN2 ln2;
  MlpIn mlp_in;
  MlpOut mlp_out;
};

/// Flax's Block: h + attn(ln1(h)), then + mlp_out(gelu(mlp_in(ln2(h)))).
template <bool Bias = true>
struct Block {
  using norm = nn::LayerNorm<named<init::ones, "norm">, named<init::zeros, "norm">>;
  norm ln1{eps}, ln2{eps};
  nn::MultiHeadDotProductAttention<named<lecun, "embed", "heads", "kv">, named<lecun, "heads", "kv", "embed">,
                                   bias_init<Bias, named<init::zeros, "heads", "kv">>,
                                   bias_init<Bias, named<init::zeros, "embed">>>
      attn{H, /*causal=*/true};
  nn::Dense<named<lecun, "embed", "mlp">, bias_init<Bias, named<init::zeros, "mlp">>> mlp_in{F};
  nn::Dense<named<lecun, "mlp", "embed">, bias_init<Bias, named<init::zeros, "embed">>> mlp_out{D};

  template <class Scope, class X>
  auto init(Scope const& s, X const& h) const {
    auto p1 = ln1.init(s.push("ln1"), h);
    auto pa = attn.init(s.push("attn"), h);
    auto p2 = ln2.init(s.push("ln2"), h);
    auto pi = mlp_in.init(s.push("mlp_in"), h);
    auto po = mlp_out.init(s.push("mlp_out"), mlp_in.apply(pi, h));  // its input has F features
    return block_params<decltype(p1), decltype(pa), decltype(p2), decltype(pi), decltype(po)>{
        std::move(p1), std::move(pa), std::move(p2), std::move(pi), std::move(po)};
  }
  template <class P, class X>
  auto apply(P const& p, X const& h) const {
    auto const h1 = h + attn.apply(p.attn, ln1.apply(p.ln1, h));
    return h1 + mlp_out.apply(p.mlp_out, tessera::gelu(mlp_in.apply(p.mlp_in, ln2.apply(p.ln2, h1))));
  }
};

template <class TokEmbed, class PosEmbed, class Blocks, class LNF, class Head>
struct transformer_params {
  TokEmbed tok_embed;
  PosEmbed pos_embed;
  Blocks blocks;  // std::tuple of L block_params: Flax's block_0, block_1
  LNF ln_f;
  Head head;
};

/// Flax's Transformer: tok_embed(ids) + pos_embed, L blocks, ln_f, head.
template <bool Bias = true>
struct Transformer {
  nn::Embed<named<nn::default_embed_init, "vocab", "embed">> tok_embed{V, D};
  named<init::normal, "length", "embed"> pos_init{init::normal(0.02)};
  Block<Bias> block;  // the blocks share their code; each has its own parameters
  typename Block<Bias>::norm ln_f{eps};
  nn::Dense<named<lecun, "embed", "vocab">, bias_init<Bias, named<init::zeros, "vocab">>> head{V};

  /// model.init(key, ids)['params'], in the shardings the scope's rules give every name.
  template <class Scope, class Ids>
  auto init(Scope s, Ids const& ids) const {
    auto te = tok_embed.init(s.push("tok_embed"), ids);
    auto pe = nn::param(s, pos_init, tessera::shape_t<2>{S, D});  // self.param('pos_embed', ...)
    auto const h = tok_embed.apply(te, ids) + pe;                  // only its shape is read
    auto blocks = std::tuple{block.init(s.push("block_0"), h), block.init(s.push("block_1"), h)};
    static_assert(std::tuple_size_v<decltype(blocks)> == L);
    auto lf = ln_f.init(s.push("ln_f"), h);
    auto hd = head.init(s.push("head"), h);
    return transformer_params<decltype(te), decltype(pe), decltype(blocks), decltype(lf), decltype(hd)>{
        std::move(te), std::move(pe), std::move(blocks), std::move(lf), std::move(hd)};
  }
  /// model.apply({'params': p}, ids): the logits [batch, length, vocab].
  template <class P, class Ids>
  auto apply(P const& p, Ids const& ids) const {
    auto const h0 = tok_embed.apply(p.tok_embed, ids) + p.pos_embed;
    auto const h1 = block.apply(std::get<0>(p.blocks), h0);
    auto const h2 = block.apply(std::get<1>(p.blocks), h1);
    return head.apply(p.head, ln_f.apply(p.ln_f, h2));
  }
};

/// The cross-entropy of the logits against the targets: -mean(sum(one_hot * log_softmax)).
template <class Logits, class Targets>
auto cross_entropy(Logits const& logits, Targets const& targets) {
  return -tessera::mean(tessera::sum<-1>(tessera::one_hot(targets, V) * tessera::log_softmax<-1>(logits)));
}

/// Issue 31's tokens (jax.random.randint(key(1), (B, S+1), 0, V)): the inputs and the targets
/// shifted by one, placed where the names ("batch", "length") resolve to under Rules.
template <class Rules, class Mesh>
auto make_data(Mesh const& mesh) {
  xt::xtensor<std::int32_t, 2> const tokens = jr::randint<std::int32_t>(jr::key(1), {B, S + 1}, 0, static_cast<int>(V));
  auto const batch = nn::logical_to_mesh_sharding(nn::names<"batch", "length">{}, mesh, Rules{});
  auto const inputs = tessera::device_put(xt::xtensor<std::int32_t, 2>(xt::view(tokens, xt::all(), xt::range(0, S))), batch);
  auto const targets =
      tessera::device_put(xt::xtensor<std::int32_t, 2>(xt::view(tokens, xt::all(), xt::range(1, S + 1))), batch);
  return std::pair{inputs, targets};
}

/// A plan's collectives, counted by kind and mesh axes.
inline std::map<std::string, int> count_collectives(tessera::communication_plan const& plan) {
  std::map<std::string, int> counts;
  for (auto const& e : plan.collectives) {
    std::string axes_text;
    for (auto const& a : e.axes) axes_text += (axes_text.empty() ? "" : ", ") + a;
    ++counts[e.kind + " over (" + axes_text + ")"];
  }
  return counts;
}

// Flax's losses for the same program and rules (tools/jax_reference/transformer_flax_losses.json).
constexpr std::array<double, steps> flax_dp = {
    6.013248920440674,  5.248143196105957,  4.6698174476623535, 4.20560359954834,   3.8012044429779053,
    3.413447380065918,  3.0724380016326904, 2.739419460296631,  2.44022536277771,   2.162139892578125,
    1.911950945854187,  1.6823184490203857, 1.4703402519226074, 1.2782102823257446, 1.1022093296051025,
    0.9481791257858276, 0.8131251931190491, 0.6939228773117065, 0.5898224711418152, 0.5010853409767151};
constexpr std::array<double, steps> flax_tp = {
    6.013248443603516,  5.248142242431641,  4.669816970825195,  4.20560359954834,   3.8012046813964844,
    3.413447618484497,  3.0724380016326904, 2.739419460296631,  2.4402248859405518, 2.162139892578125,
    1.9119510650634766, 1.6823182106018066, 1.4703402519226074, 1.278210163116455,  1.102209210395813,
    0.9481788873672485, 0.8131250143051147, 0.693922758102417,  0.5898224115371704, 0.5010854601860046};
constexpr std::array<double, steps> flax_fsdp = {
    6.013248920440674,  5.248143196105957,  4.6698174476623535, 4.20560359954834,   3.801204204559326,
    3.413447380065918,  3.0724380016326904, 2.739419460296631,  2.440225124359131,  2.162139654159546,
    1.911950945854187,  1.6823184490203857, 1.4703402519226074, 1.2782102823257446, 1.102209448814392,
    0.9481791853904724, 0.8131251931190491, 0.6939228177070618, 0.5898224711418152, 0.5010853409767151};

/// Trains the model for `steps` steps of optim::adam(lr) with its parameters placed by Rules,
/// writing the layout (a few parameters' types, one step's collectives) to `out`; the losses.
/// The same in one process and across processes (each reads its own copy of the replicated loss).
template <class Rules, class Mesh>
std::array<double, steps> train(char const* title, Mesh const& mesh, std::ostream& out) {
  Transformer<> const model;
  auto const data = make_data<Rules>(mesh);  // not a structured binding: the lambdas below capture it
  auto const& inputs = data.first;
  auto const& targets = data.second;
  auto const params = model.init(nn::scope(jr::key(0), mesh, Rules{}), inputs);

  auto const& b0 = std::get<0>(params.blocks);
  out << "== " << title << '\n'
      << "  inputs                       " << tessera::type_of(inputs) << '\n'
      << "  tok_embed.embedding          " << tessera::type_of(params.tok_embed.embedding) << '\n'
      << "  block_0.attn.query.kernel    " << tessera::type_of(b0.attn.query.kernel) << '\n'
      << "  block_0.attn.out.kernel      " << tessera::type_of(b0.attn.out.kernel) << '\n'
      << "  block_0.mlp_in.kernel        " << tessera::type_of(b0.mlp_in.kernel) << '\n'
      << "  head.kernel                  " << tessera::type_of(params.head.kernel) << '\n';

  auto const apply_fn = [model](auto const& p, auto const& ids) { return model.apply(p, ids); };
  auto loss = [&](auto const& p) { return cross_entropy(model.apply(p, inputs), targets); };
  // TrainState.create(apply_fn=model.apply, params=params, tx=optax.adam(3e-3)).
  auto state = tessera::optim::create_train_state(apply_fn, params, tessera::optim::adam(lr));

  auto const plan = tessera::explain(tessera::value_and_grad(loss), state.params);
  out << "  one step's value_and_grad runs " << plan.count() << " collectives:";
  for (auto const& [what, n] : count_collectives(plan)) out << "  " << n << " x " << what;
  out << "\n";

  std::array<double, steps> losses{};
  for (std::size_t step = 0; step < losses.size(); ++step) {
    auto const [l, g] = tessera::value_and_grad(loss)(state.params);
    losses[step] = l.addressable_shards().front().data();  // replicated: every process has a copy
    state = state.apply_gradients(g);
  }
  // The moments of a sharded parameter have its sharding (an FSDP weight's stay split).
  auto const& adam_state = std::get<0>(state.opt_state);
  out << "  after " << state.step << " steps, block_0.mlp_in.kernel's first moment is "
      << tessera::type_of(std::get<0>(adam_state.mu.blocks).mlp_in.kernel) << "\n\n";
  return losses;
}

/// Trains the three layouts and writes their losses next to Flax's; whether every loss is
/// within 1e-4 relative of Flax's for the same rules and of the other layouts'. The largest
/// relative difference from Flax goes to `note` (it varies with the build, `out` does not).
template <class Mesh>
bool train_three_layouts(Mesh const& mesh, std::ostream& out, std::ostream& note) {
  auto const dp = train<data_parallel>("data parallel (logical_axis_rules data_parallel)", mesh, out);
  auto const tp = train<tensor_parallel>("tensor parallel, Megatron (logical_axis_rules tensor_parallel)", mesh, out);
  auto const fs = train<fsdp>("FSDP (logical_axis_rules fsdp)", mesh, out);
  double worst = 0;
  auto close = [&](double got, double want) {
    double const rel = std::abs(got - want) / std::abs(want);
    worst = std::max(worst, rel);
    return rel <= 1e-4;
  };
  bool ok = true;
  out << "step  data    tensor  FSDP    (Flax + optax)\n";
  for (std::size_t i = 0; i < steps; ++i) {
    bool const row = close(dp[i], flax_dp[i]) && close(tp[i], flax_tp[i]) && close(fs[i], flax_fsdp[i]) &&
                     (std::abs(tp[i] - dp[i]) <= 1e-4 * dp[i]) && (std::abs(fs[i] - dp[i]) <= 1e-4 * dp[i]);
    ok = ok && row;
    // Three decimals: no Flax loss lies within 5e-5 of a rounding boundary, so every build
    // prints the same text; the 1e-4 check is the test.
    char line[96];
    std::snprintf(line, sizeof line, "%4zu  %.3f   %.3f   %.3f   (%.3f)%s\n", i, dp[i], tp[i], fs[i], flax_tp[i],
                  row ? "" : "  DIFFERS");
    out << line;
  }
  note << "largest relative difference from Flax's losses: " << worst << '\n';
  return ok;
}

}  // namespace transformer_layers
