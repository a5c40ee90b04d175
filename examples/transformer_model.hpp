#pragma once
// The transformer of examples/transformer.cpp and examples/mpi/transformer.cpp (one program,
// run in one process or across several): its configuration, JAX 0.12's losses, its parameters
// and data from tessera::random, and its loss, written once for arrays and grad's tracers.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <type_traits>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/autodiff.hpp>
#include <tessera/random.hpp>
#include <xtensor/xbuilder.hpp>

namespace transformer {

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

constexpr std::size_t L = 2, D = 64, H = 4, HD = 16, S = 32, V = 256, B = 16, F = 4 * D;
constexpr float eps = 1e-5f, lr = 0.1f;
constexpr int steps = 20;

// JAX 0.12's losses for the same program (tools/jax_reference/transformer_losses.json, "losses").
constexpr double jax_losses[steps] = {
    5.562618732452393, 5.516695022583008, 5.472695350646973, 5.430591583251953, 5.390042304992676,
    5.3508195877075195, 5.312710285186768, 5.275567531585693, 5.239294052124023, 5.20380163192749,
    5.168999671936035, 5.134783744812012, 5.101043701171875, 5.067675590515137, 5.0345892906188965,
    5.001764297485352, 4.969938278198242, 4.950339317321777, 4.989171028137207, 4.898969650268555};

// LN(x) = (x - mean) * rsqrt(var + eps) * scale + bias over the last axis.
template <class X, class Scale, class Bias>
auto layer_norm(X const& x, Scale const& scale, Bias const& bias) {
  auto const mu = tessera::mean<-1>(x, tessera::keepdims);
  auto const d = x - mu;
  auto const var = tessera::mean<-1>(d * d, tessera::keepdims);
  return d * tessera::rsqrt(var + eps) * scale + bias;
}

// The loss of parameters p (a tuple of arrays, or of grad's tracers) on a batch.
template <class Params, class Tokens, class Mask>
auto loss_fn(Params const& p, Tokens const& inputs, Tokens const& targets, Mask const& causal) {
  auto const& [tok_emb, pos_emb, w_out, lnf_scale, lnf_bias, layers] = p;
  auto const h = tessera::take(tok_emb, inputs) + pos_emb;  // [B@data,S,D]: one all-reduce over "model"
  auto block = [&](auto const& h_in, auto const& lp) {
    auto const& [wq, wk, wv, wo, w1, w2, ln1_scale, ln1_bias, ln2_scale, ln2_bias] = lp;
    auto const a = layer_norm(h_in, ln1_scale, ln1_bias);
    // Column-parallel projections: each device holds its heads; splitting D into heads moves nothing.
    using heads = P<"data", none, "model", none>;
    auto const q = tessera::reshape(tessera::matmul(a, wq), {B, S, H, HD}, heads{});
    auto const k = tessera::reshape(tessera::matmul(a, wk), {B, S, H, HD}, heads{});
    auto const v = tessera::reshape(tessera::matmul(a, wv), {B, S, H, HD}, heads{});
    auto const scores = tessera::where(causal, tessera::einsum<"bqhd,bkhd->bhqk">(q, k) / 4.0f, -1e9f);
    auto const o = tessera::einsum<"bhqk,bkhd->bqhd">(tessera::softmax<-1>(scores), v);
    // Row-parallel output: partial sums over "model", summed once where they are added to h.
    auto const h1 = h_in + tessera::matmul(tessera::reshape(o, {B, S, D}, P<"data", none, "model">{}), wo);
    auto const m = layer_norm(h1, ln2_scale, ln2_bias);
    return h1 + tessera::matmul(tessera::gelu(tessera::matmul(m, w1)), w2);
  };
  static_assert(std::tuple_size_v<std::remove_cvref_t<decltype(layers)>> == L);
  auto const h1 = block(h, std::get<0>(layers));
  auto const h2 = block(h1, std::get<1>(layers));
  auto const logits = tessera::matmul(layer_norm(h2, lnf_scale, lnf_bias), w_out);  // [B@data,S,V@model]
  auto const ll = tessera::one_hot(targets, V) * tessera::log_softmax<-1>(logits);
  return -tessera::mean(tessera::sum<-1>(ll));
}

// The parameters (a tree: grad takes and returns it) on `mesh`, in Megatron's layout:
// ks = jax.random.split(jax.random.key(0), 16); each weight 0.02 * normal(k, shape).
template <class Mesh>
auto init_params(Mesh const& mesh) {
  auto const replicated = tessera::named_sharding(mesh, P<>{});
  auto const column = tessera::named_sharding(mesh, P<none, "model">{});
  auto const row = tessera::named_sharding(mesh, P<"model", none>{});
  auto const ks = jr::split(jr::key(0), 16);
  auto normal = [&](std::size_t i, std::size_t r, std::size_t c, auto const& s) {
    return tessera::eval(0.02f * jr::normal<float>(ks[i], tessera::shape_t<2>{r, c}, s));
  };
  auto ones = [&] { return tessera::device_put(xt::xtensor<float, 1>(xt::ones<float>({D})), replicated); };
  auto zeros = [&] { return tessera::device_put(xt::xtensor<float, 1>(xt::zeros<float>({D})), replicated); };
  auto layer = [&](std::size_t l) {
    std::size_t const k = 3 + 6 * l;
    return std::tuple{normal(k, D, D, column), normal(k + 1, D, D, column), normal(k + 2, D, D, column),
                      normal(k + 3, D, D, row),    normal(k + 4, D, F, column), normal(k + 5, F, D, row),
                      ones(), zeros(), ones(), zeros()};
  };
  return std::tuple{normal(0, V, D, row), normal(1, S, D, replicated), normal(2, D, V, column), ones(), zeros(),
                    std::tuple{layer(0), layer(1)}};
}

// tokens = jax.random.randint(jax.random.key(1), (B, S+1), 0, V): the inputs, and the targets
// shifted by one, both with the batch over "data".
template <class Mesh>
auto make_data(Mesh const& mesh) {
  xt::xtensor<std::int32_t, 2> const tokens = jr::randint<std::int32_t>(jr::key(1), {B, S + 1}, 0, static_cast<int>(V));
  auto const batch = tessera::named_sharding(mesh, P<"data", none>{});
  auto const inputs = tessera::device_put(xt::xtensor<std::int32_t, 2>(xt::view(tokens, xt::all(), xt::range(0, S))), batch);
  auto const targets =
      tessera::device_put(xt::xtensor<std::int32_t, 2>(xt::view(tokens, xt::all(), xt::range(1, S + 1))), batch);
  return std::pair{inputs, targets};
}

// A training step's collectives, counted by kind and mesh axes.
inline std::map<std::string, int> count_collectives(tessera::communication_plan const& plan) {
  std::map<std::string, int> counts;
  for (auto const& e : plan.collectives) {
    std::string axes;
    for (auto const& a : e.axes) axes += (axes.empty() ? "" : ", ") + a;
    ++counts[e.kind + " over (" + axes + ")"];
  }
  return counts;
}

}  // namespace transformer
