// tessera::nn's layers against flax.linen (tests/golden/jax_flax.json, tools/jax_reference/gen_flax.py):
// init(key(0), x) gives Flax's parameters (the same keys, from the module path), apply(params, x)
// Flax's output, and grad of sum(out * c) Flax's gradients, for the parameters and the input.
#include <string>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/nn.hpp>
#include <tessera/tessera.hpp>

#include "golden.hpp"

namespace nn = tessera::nn;
using tessera::none;
using tessera::P;
using tessera_jax::json;

namespace {

constexpr double init_rtol = 2e-6;  // truncated_normal within 3 ulps of JAX's (docs/random.md)
constexpr double rtol = 2e-5;

auto const& mesh() {
  static auto const m = tessera::make_mesh<"data", "model">({2, 4});
  return m;
}

template <class T, std::size_t N>
xt::xtensor<T, N> host(json const& leaf) {
  auto const shape = leaf.at("shape").get<std::vector<std::size_t>>();
  REQUIRE(shape.size() == N);
  std::array<std::size_t, N> sh{};
  std::copy(shape.begin(), shape.end(), sh.begin());
  auto const v = leaf.at("values").get<std::vector<double>>();
  xt::xtensor<T, N> out = xt::xtensor<T, N>::from_shape(sh);
  std::transform(v.begin(), v.end(), out.begin(), [](double d) { return static_cast<T>(d); });
  return out;
}
/// A leaf put replicated on the mesh.
template <std::size_t N, class T = float>
auto put(json const& leaf) {
  return tessera::device_put(host<T, N>(leaf), tessera::named_sharding(mesh(), P<>{}));
}
template <class A>
void check(A const& got, json const& leaf, double tol) {
  tessera_jax::check_values(tessera::to_host(tessera::array(got)), leaf.at("values"), tol);
}

/// The checks every layer case shares: init against Flax's init, apply and grads against Flax's.
/// `load` builds the parameter tree from a JSON tree, `each` visits (tessera leaf, JSON leaf) pairs.
template <class Layer, class X, class Load, class Each>
void check_layer(Layer const& layer, X const& x, json const& c, Load load, Each each) {
  auto const init = layer.init(tessera::random::key(0), x);
  each(init, c.at("init"), init_rtol);
  auto const p = load(c.at("params"));
  check(layer.apply(p, x), c.at("out"), rtol);
  auto const cw = put<1>(json{{"shape", {c.at("c").size()}}, {"values", c.at("c")}});
  auto const out_shape = c.at("out").at("shape").get<std::vector<std::size_t>>();
  auto loss = [&](auto const& q, auto const& xx) {
    auto const y = layer.apply(q, xx);
    return tessera::sum(y * tessera::reshape(cw, y.shape()));
  };
  if constexpr (std::is_floating_point_v<typename X::value_type>) {
    auto const [gp, gx] = tessera::grad<0, 1>(loss)(p, x);
    each(gp, c.at("grads"), rtol);
    tessera_jax::check_values(tessera::to_host(gx), c.at("grad_x"), rtol);
  } else {
    auto const gp = tessera::grad([&](auto const& q) { return loss(q, x); })(p);
    each(gp, c.at("grads"), rtol);
  }
  (void)out_shape;
}

template <std::size_t KR, std::size_t BR>
auto load_dense(json const& j) {
  return nn::dense_params<decltype(put<KR>(j)), decltype(put<BR>(j))>{put<KR>(j.at("kernel")), put<BR>(j.at("bias"))};
}
auto each_dense = [](auto const& p, json const& j, double tol) {
  check(p.kernel, j.at("kernel"), tol);
  check(p.bias, j.at("bias"), tol);
};

struct attend_layer {  // Embed's attend as a layer, init from ids as Flax's was
  nn::Embed<> e{10, 4};
  template <class K, class X>
  auto init(K const& k, X const&) const {
    return e.init(k, put<2, std::int32_t>(json{{"shape", {2, 3}}, {"values", {1, 2, 3, 9, 0, 4}}}));
  }
  template <class Q, class X>
  auto apply(Q const& q, X const& x) const {
    return e.attend(q, x);
  }
};
struct causal_model {  // Flax's module names the attention 'attn'
  nn::MultiHeadDotProductAttention<> attn{2, true};
  template <class K, class X>
  auto init(K const& k, X const& x) const {
    return attn.init(nn::scope(k, mesh()).push("attn"), x);
  }
  template <class Q, class X>
  auto apply(Q const& q, X const& x) const {
    return attn.apply(q, x);
  }
};

}  // namespace

TEST_CASE("nn layers agree with flax.linen (tests/golden/jax_flax.json)", "[jax][nn]") {
  tessera::runtime rt{8};
  tessera_jax::checks cs;
  cs["dense"] = [](json const& c) { check_layer(nn::Dense(6), put<2>(c.at("x")), c, load_dense<2, 1>, each_dense); };
  cs["dense_3d"] = [](json const& c) { check_layer(nn::Dense(3), put<3>(c.at("x")), c, load_dense<2, 1>, each_dense); };
  cs["dense_general"] = [](json const& c) {
    check_layer(nn::DenseGeneral<1, 2>({2, 3}), put<3>(c.at("x")), c, load_dense<3, 2>, each_dense);
  };
  cs["dense_general_in2"] = [](json const& c) {
    check_layer(nn::DenseGeneral<2, 1>({5}), put<4>(c.at("x")), c, load_dense<3, 1>, each_dense);
  };
  auto load_embed = [](json const& j) { return nn::embed_params<decltype(put<2>(j))>{put<2>(j.at("embedding"))}; };
  auto each_embed = [](auto const& p, json const& j, double tol) { check(p.embedding, j.at("embedding"), tol); };
  cs["embed"] = [&](json const& c) {
    check_layer(nn::Embed(10, 4), put<2, std::int32_t>(c.at("x")), c, load_embed, each_embed);
  };
  cs["embed_attend"] = [&](json const& c) {
    check_layer(attend_layer{}, put<3>(c.at("x")), c, load_embed, each_embed);
  };
  auto load_norm = [](json const& j) {
    return nn::norm_params<decltype(put<1>(j)), decltype(put<1>(j))>{put<1>(j.at("scale")), put<1>(j.at("bias"))};
  };
  auto each_norm = [](auto const& p, json const& j, double tol) {
    check(p.scale, j.at("scale"), tol);
    check(p.bias, j.at("bias"), tol);
  };
  cs["layer_norm"] = [&](json const& c) { check_layer(nn::LayerNorm(), put<2>(c.at("x")), c, load_norm, each_norm); };
  cs["rms_norm"] = [&](json const& c) {
    check_layer(
        nn::RMSNorm(), put<2>(c.at("x")), c,
        [](json const& j) { return nn::scale_params<decltype(put<1>(j))>{put<1>(j.at("scale"))}; },
        [](auto const& p, json const& j, double tol) { check(p.scale, j.at("scale"), tol); });
  };
  auto load_mha = [](json const& j) {
    using D3 = decltype(load_dense<3, 2>(j));
    using O = decltype(load_dense<3, 1>(j));
    return nn::attention_params<D3, D3, D3, O>{load_dense<3, 2>(j.at("query")), load_dense<3, 2>(j.at("key")),
                                               load_dense<3, 2>(j.at("value")), load_dense<3, 1>(j.at("out"))};
  };
  auto each_mha = [](auto const& p, json const& j, double tol) {
    each_dense(p.query, j.at("query"), tol);
    each_dense(p.key, j.at("key"), tol);
    each_dense(p.value, j.at("value"), tol);
    each_dense(p.out, j.at("out"), tol);
  };
  cs["mha"] = [&](json const& c) {
    check_layer(nn::MultiHeadDotProductAttention(2), put<3>(c.at("x")), c, load_mha, each_mha);
  };
  cs["mha_causal"] = [&](json const& c) {
    json const params = c.at("params").at("attn");
    json c2 = c;
    c2["init"] = c.at("init").at("attn");
    c2["params"] = params;
    c2["grads"] = c.at("grads").at("attn");
    check_layer(causal_model{}, put<3>(c.at("x")), c2, load_mha, each_mha);
  };
  cs["sequential"] = [](json const& c) {
    auto relu = [](auto const& x) { return tessera::relu(x); };
    nn::Sequential seq{nn::Dense(8), relu, nn::Dense(3)};
    check_layer(
        seq, put<2>(c.at("x")), c,
        [](json const& j) { return std::tuple{load_dense<2, 1>(j.at("layers_0")), load_dense<2, 1>(j.at("layers_2"))}; },
        [](auto const& p, json const& j, double tol) {
          each_dense(std::get<0>(p), j.at("layers_0"), tol);
          each_dense(std::get<1>(p), j.at("layers_2"), tol);
        });
  };
  cs["dropout"] = [](json const& c) {
    auto const x = put<2>(c.at("x"));
    nn::Dropout const d{c.at("rate").get<float>()};
    // Bit for bit: bernoulli is JAX's bits, and x / 0.75 rounds as JAX's does.
    tessera_jax::check_values(tessera::to_host(tessera::array(d.apply(x, tessera::random::key(2)))), c.at("out"), 0.0);
    tessera_jax::check_values(tessera::to_host(tessera::array(d.apply(x, tessera::random::key(2), true))),
                              c.at("x").at("values"), 0.0);
  };
  cs["parallel_model"] = [](json const& c) {  // examples/parallel_model.cpp checks the rest
    auto const x = tessera::random::normal(tessera::random::key(1), {16, 256},
                                           tessera::named_sharding(mesh(), P<"data", none>{}));
    nn::Dense const d{1024, nn::with_partitioning(nn::initializers::lecun_normal(), nn::names<"data", "model">{})};
    auto const p = d.init(nn::scope(tessera::random::key(0), mesh()).push("Dense_0"), x);
    CHECK(tessera::type_of(p.kernel) == "float32[256@data,1024@model]");
    CHECK(c.at("kernel_sharding") == "P('data', 'model')");
    auto const k = tessera::to_host(p.kernel);
    tessera_jax::check_values(xt::xtensor<float, 1>(xt::view(k, 0, xt::range(0, 4))), c.at("kernel_head"), init_rtol);
  };
  CHECK(tessera_jax::check_all("jax_flax.json", cs) == 13);
}
