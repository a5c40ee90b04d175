// tessera::optim (optax's optimizers over trees of sharded arrays, Flax's TrainState): values
// against the same updates written element by element on the host in double precision, the
// state's types and shardings against the parameters', the one all-reduce of
// clip_by_global_norm, and the gradients of tessera::grad taken as they come.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include "tessera/autodiff.hpp"
#include "tessera/optim.hpp"

namespace {

using tessera::none;
using tessera::P;
namespace optim = tessera::optim;

auto make_mesh_xy() { return tessera::make_mesh<"x", "y">({2, 4}); }
using mesh_xy = decltype(make_mesh_xy());
/// An FSDP-style weight (rows over x, columns over y), a bias replicated, a vector over y.
using w_type = tessera::array<float, 2, tessera::named_sharding<mesh_xy, P<"x", "y">>>;
using b_type = tessera::array<float, 1, tessera::named_sharding<mesh_xy, P<>>>;
using v_type = tessera::array<float, 1, tessera::named_sharding<mesh_xy, P<"y">>>;

struct dense {
  w_type w;
  b_type b;
};
/// A params tree: a struct, a tuple node inside, a std::array.
struct model {
  dense layer;
  std::tuple<v_type, b_type> extra;
};

/// Deterministic values in [-scale, scale) with a few exact zeros (sign and clipping edges).
std::vector<float> values(std::size_t n, unsigned seed, float scale) {
  std::vector<float> out(n);
  std::uint32_t s = seed * 2654435761u + 12345u;
  for (auto& v : out) {
    s = s * 1664525u + 1013904223u;
    v = (static_cast<float>(s >> 8) / 16777216.0f * 2.0f - 1.0f) * scale;
  }
  if (n > 3) out[3] = 0.0f;
  return out;
}

template <std::size_t N>
xt::xtensor<float, N> host(std::vector<float> const& v, std::array<std::size_t, N> shape) {
  xt::xtensor<float, N> out = xt::zeros<float>(shape);
  std::copy(v.begin(), v.end(), out.begin());
  return out;
}

model make_model(mesh_xy const& m, unsigned seed, float scale) {
  return model{dense{tessera::device_put(host<2>(values(6 * 12, seed, scale), {6, 12}), tessera::named_sharding(m, P<"x", "y">{})),
                     tessera::device_put(host<1>(values(5, seed + 1, scale), {5}), tessera::named_sharding(m, P<>{}))},
               {tessera::device_put(host<1>(values(13, seed + 2, scale), {13}), tessera::named_sharding(m, P<"y">{})),
                tessera::device_put(host<1>(values(1, seed + 3, scale), {1}), tessera::named_sharding(m, P<>{}))}};
}

/// Every leaf's values, in tree order, flattened.
template <class Tree>
std::vector<std::vector<float>> flat(Tree const& t) {
  std::vector<std::vector<float>> out;
  auto add = [&](auto const& leaf) {
    auto const h = tessera::to_host(leaf);
    out.emplace_back(h.begin(), h.end());
  };
  std::apply([&](auto const&... leaf) { (add(leaf), ...); }, tessera::tree_leaves(t));
  return out;
}

}  // namespace

TEST_CASE("optim: adam over a tree of sharded arrays matches the update written out on the host", "[optim]") {
  tessera::runtime rt{8};
  auto const m = make_mesh_xy();
  model params = make_model(m, 1, 1.0f);
  auto const tx = optim::adam(1e-2f);
  auto state = tx.init(params);
  auto const& adam_state = std::get<0>(state);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(adam_state.mu)>, model>);
  CHECK(adam_state.count == 0);

  auto p_host = flat(params);
  std::vector<std::vector<double>> mu(p_host.size()), nu(p_host.size());
  for (std::size_t l = 0; l < p_host.size(); ++l) mu[l].assign(p_host[l].size(), 0.0), nu[l].assign(p_host[l].size(), 0.0);
  std::vector<std::vector<double>> p_ref(p_host.size());
  for (std::size_t l = 0; l < p_host.size(); ++l) p_ref[l].assign(p_host[l].begin(), p_host[l].end());

  for (int t = 1; t <= 3; ++t) {
    model const grads = make_model(m, 10u + static_cast<unsigned>(t), 3.0f);
    auto const [updates, new_state] = tx.update(grads, state, params);
    params = optim::apply_updates(params, updates);
    state = new_state;
    auto const g = flat(grads);
    for (std::size_t l = 0; l < g.size(); ++l)
      for (std::size_t i = 0; i < g[l].size(); ++i) {
        mu[l][i] = 0.9 * mu[l][i] + 0.1 * g[l][i];
        nu[l][i] = 0.999 * nu[l][i] + 0.001 * double(g[l][i]) * g[l][i];
        double const mh = mu[l][i] / (1 - std::pow(0.9, t)), nh = nu[l][i] / (1 - std::pow(0.999, t));
        p_ref[l][i] += -1e-2 * mh / (std::sqrt(nh) + 1e-8);
      }
  }
  CHECK(std::get<0>(state).count == 3);
  auto const got = flat(params);
  auto const got_mu = flat(std::get<0>(state).mu);
  for (std::size_t l = 0; l < got.size(); ++l)
    for (std::size_t i = 0; i < got[l].size(); ++i) {
      INFO("leaf " << l << " element " << i);
      CHECK(got[l][i] == Approx(p_ref[l][i]).epsilon(1e-5).margin(1e-6));
      CHECK(got_mu[l][i] == Approx(mu[l][i]).epsilon(1e-5).margin(1e-6));
    }
}

TEST_CASE("optim: the state of a sharded parameter has the parameter's type and shards", "[optim]") {
  tessera::runtime rt{8};
  auto const m = make_mesh_xy();
  model const params = make_model(m, 1, 1.0f);
  auto const check = [&](auto const& state_tree) {
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(state_tree)>, model>);
    static_assert(std::is_same_v<decltype(state_tree.layer.w), w_type>);  // P("x", "y"): FSDP-style
    auto const ps = params.layer.w.addressable_shards();
    auto const ss = state_tree.layer.w.addressable_shards();
    REQUIRE(ps.size() == ss.size());
    for (std::size_t i = 0; i < ps.size(); ++i) {
      CHECK(ss[i].device == ps[i].device);
      CHECK(ss[i].index == ps[i].index);
      CHECK(ss[i].data.shape() == ps[i].data.shape());  // a 3 x 3 block of the 6 x 12 weight
    }
    CHECK(ss[0].data.size() == 9);
  };
  auto const adam = optim::adamw(1e-3);
  auto state = adam.init(params);
  check(std::get<0>(state).mu);
  check(std::get<0>(state).nu);
  model const grads = make_model(m, 7, 1.0f);
  auto [updates, next] = adam.update(grads, state, params);
  check(updates);
  check(std::get<0>(next).mu);
  check(std::get<0>(next).nu);
  auto const lion = optim::lion(1e-3);
  check(std::get<0>(lion.init(params)).mu);
  auto const sgd = optim::sgd(0.1, 0.9);
  check(std::get<0>(sgd.init(params)).trace);

  // No communication in an update, one all-reduce of one number in clip_by_global_norm.
  tessera::collective_counter counter;
  (void)adam.update(grads, state, params);
  (void)adam.update_and_apply(grads, state, params);
  CHECK(counter.count() == 0);
  auto const clipped = optim::chain(optim::clip_by_global_norm(1.0), optim::adam(1e-3));
  (void)clipped.update(grads, clipped.init(params), params);
  CHECK(counter.count() == 1);
  CHECK(counter.count("all-reduce") == 1);
}

TEST_CASE("optim: clip_by_global_norm counts a replicated leaf once and clips at the norm", "[optim]") {
  tessera::runtime rt{8};
  auto const m = make_mesh_xy();
  model const grads = make_model(m, 3, 2.0f);
  double sq = 0;
  for (auto const& leaf : flat(grads))
    for (float x : leaf) sq += double(x) * x;
  CHECK(optim::global_norm(grads) == Approx(std::sqrt(sq)).epsilon(1e-6));  // squares summed in float32 batches
  for (double max_norm : {0.5 * std::sqrt(sq), 2.0 * std::sqrt(sq)}) {
    auto const clip = optim::clip_by_global_norm(max_norm);
    auto const [u, s] = clip.update(grads, clip.init(grads), grads);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(s)>, optim::empty_state>);
    auto const got = flat(u);
    auto const g = flat(grads);
    float const norm = static_cast<float>(std::sqrt(sq));
    for (std::size_t l = 0; l < g.size(); ++l)
      for (std::size_t i = 0; i < g[l].size(); ++i) {
        float const want = norm < static_cast<float>(max_norm) ? g[l][i] : g[l][i] / norm * static_cast<float>(max_norm);
        CHECK(got[l][i] == Approx(want).epsilon(1e-6));
      }
  }
}

namespace {
/// A params tree grad can trace: a class template over its field types (docs/autodiff.md).
template <class W, class B>
struct linear {
  W w;
  B b;
};
}  // namespace

TEST_CASE("optim: the gradients of tessera::grad go straight into the optimizer and TrainState", "[optim]") {
  tessera::runtime rt{8};
  auto const m = tessera::make_mesh<"x">({8});
  auto const xs = tessera::device_put(host<2>(values(16 * 4, 5, 1.0f), {16, 4}), tessera::named_sharding(m, P<"x", none>{}));
  auto const ys = tessera::device_put(host<2>(values(16, 6, 1.0f), {16, 1}), tessera::named_sharding(m, P<"x", none>{}));
  auto const w0 = tessera::device_put(host<2>(values(4, 7, 0.5f), {4, 1}), tessera::named_sharding(m, P<none, none>{}));
  auto const b0 = tessera::device_put(host<1>(values(1, 8, 0.5f), {1}), tessera::named_sharding(m, P<none>{}));
  using params_t = linear<std::remove_cvref_t<decltype(w0)>, std::remove_cvref_t<decltype(b0)>>;
  // apply_fn(params, x) = x @ w + b; loss = mean((apply_fn(params, x) - y)^2)
  auto const apply_fn = [](auto const& p, auto const& x) { return tessera::matmul(x, p.w) + p.b; };
  auto const loss = [&](auto const& p) {
    auto const d = apply_fn(p, xs) - ys;
    return tessera::mean(d * d);
  };
  auto state = optim::create_train_state(apply_fn, params_t{w0, b0}, optim::adam(0.05f));
  CHECK(state.step == 0);
  // The same run with the params and state donated (std::move(state).apply_gradients): its own
  // blocks, so that writing them in place changes nothing the other run reads.
  auto donated = optim::create_train_state(
      apply_fn, params_t{tessera::device_put(tessera::to_host(w0), w0.sharding()), tessera::device_put(tessera::to_host(b0), b0.sharding())},
      optim::adam(0.05f));
  float const loss0 = tessera::to_host(tessera::eval(loss(state.params)))();
  params_t p = state.params;
  auto opt_state = optim::adam(0.05f).init(p);
  for (int i = 0; i < 20; ++i) {
    auto const grads = tessera::grad(loss)(state.params);
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(grads)>, params_t>);
    state = state.apply_gradients(grads);
    auto const donated_grads = tessera::grad(loss)(donated.params);
    float const* const before = donated.params.w.block_data(0);
    donated = std::move(donated).apply_gradients(donated_grads);
    CHECK(donated.params.w.block_data(0) == before);  // written in its own block
    // The same step through tx.update and optax.apply_updates.
    auto const [u, s] = optim::adam(0.05f).update(tessera::grad(loss)(p), opt_state, p);
    p = optim::apply_updates(p, u);
    opt_state = s;
  }
  CHECK(state.step == 20);
  CHECK(std::get<0>(state.opt_state).count == 20);
  float const loss1 = tessera::to_host(tessera::eval(loss(state.params)))();
  CHECK(loss1 < 0.5f * loss0);
  CHECK(donated.step == 20);
  auto const a = flat(state.params), b = flat(p), c = flat(donated.params);
  CHECK(a == c);
  for (std::size_t l = 0; l < a.size(); ++l)
    for (std::size_t i = 0; i < a[l].size(); ++i) CHECK(a[l][i] == Approx(b[l][i]).epsilon(1e-5));
  // state.apply_fn is the function it was made with.
  auto const out = tessera::to_host(tessera::eval(state.apply_fn(state.params, xs)));
  CHECK(out.shape()[0] == 16);
}

TEST_CASE("optim: sgd, lion, schedules and masks against the host; errors name the leaf", "[optim]") {
  tessera::runtime rt{8};
  auto const m = make_mesh_xy();
  model const params = make_model(m, 1, 1.0f);
  model const grads = make_model(m, 2, 1.0f);
  auto const p = flat(params), g = flat(grads);
  // sgd with Nesterov momentum and a schedule, 2 steps (the trace starts at zero).
  auto const sched = optim::warmup_cosine_decay_schedule(0.0, 0.1, 1, 5);
  CHECK(sched(0) == 0.0f);
  CHECK(sched(1) == Approx(0.1f));
  auto const tx = optim::sgd(sched, 0.9, true);
  auto s = tx.init(params);
  model q = params;
  for (int t = 0; t < 2; ++t) {
    auto [u, s2] = tx.update(grads, s, q);
    q = optim::apply_updates(q, u);
    s = s2;
  }
  CHECK(std::get<1>(s).count == 2);
  // trace1 = g, u1 = g + 0.9 g (lr 0); trace2 = 1.9 g, u2 = g + 0.9·1.9 g at lr sched(1).
  auto const got = flat(q);
  for (std::size_t l = 0; l < p.size(); ++l)
    for (std::size_t i = 0; i < p[l].size(); ++i)
      CHECK(got[l][i] == Approx(p[l][i] - sched(1) * (1 + 0.9 * 1.9) * g[l][i]).epsilon(1e-5).margin(1e-6));

  // lion with a mask given as a callable of the params: the bias b (leaf 1) is not decayed.
  auto const mask = [](model const&) { return std::make_tuple(true, false, true, false); };
  auto const lion = optim::lion(0.01, 0.9, 0.99, 0.5, mask);
  auto const [lu, ls] = lion.update(grads, lion.init(params), params);
  auto const lg = flat(lu);
  for (std::size_t l = 0; l < p.size(); ++l)
    for (std::size_t i = 0; i < p[l].size(); ++i) {
      double const sign = g[l][i] > 0 ? 1 : g[l][i] < 0 ? -1 : 0;
      double const decay = (l == 0 || l == 2) ? 0.5 * p[l][i] : 0.0;
      CHECK(lg[l][i] == Approx(-0.01 * (sign + decay)).epsilon(1e-6).margin(1e-9));
    }
  CHECK(std::get<0>(ls).count == 1);

  // A gradient of another shape than its parameter: the leaf and both shapes are named.
  model bad = grads;
  bad.layer.w = tessera::device_put(host<2>(values(8 * 12, 1, 1.0f), {8, 12}), tessera::named_sharding(m, P<"x", "y">{}));
  auto const adam = optim::adam(1e-3);
  CHECK_THROWS_WITH(adam.update(bad, adam.init(params), params),
                    Catch::Contains("leaf 0 of the gradients") && Catch::Contains("(8, 12)") && Catch::Contains("(6, 12)"));
  CHECK_THROWS_WITH(optim::cosine_decay_schedule(1.0, 0), Catch::Contains("decay_steps must be positive, got 0"));
}
