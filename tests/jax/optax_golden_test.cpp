// tessera::optim against optax itself (tests/golden/jax_optax.json, written by
// tools/jax_reference/gen_optax.py): sgd (plain, momentum, Nesterov), adam (with eps_root, with
// a cosine schedule), adamw (with a mask), lion, clip_by_global_norm alone and chained before
// adamw with a warmup-cosine schedule, five steps each on a tree (w, b, v) sharded over a 2 x 4
// mesh (w over both axes, b over one, v replicated), and the schedules' values.
//
// Tolerance: 8 float32 ulps of the value, or 8 ulps of the largest magnitude in its leaf for
// values near zero (the ulp is 2^-23 relative). What differs from XLA's float32 program: XLA's
// pow (in Adam's 1 − b^t) and cos (in the schedules) round differently from the C library's in
// about 1% of the arguments, by an ulp; the global norm is summed in another order (and in
// double); without FMA hardware (no -mfma) xsimd's fma is a multiply and an add; and
// update_and_apply adds the rounded update where XLA fuses p + u into an fma. Each of these is
// an ulp or so, then carried through five steps.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/optim.hpp>

#include "golden.hpp"

using tessera::none;
using tessera::P;
using tessera_jax::json;
namespace optim = tessera::optim;

namespace {

constexpr char const* golden_file = "jax_optax.json";

auto make_mesh_xy() { return tessera::make_mesh<"x", "y">({2, 4}); }
using mesh_xy = decltype(make_mesh_xy());

/// The generator's params tuple (w: [4, 8], b: [8], v: [5]) as a struct node.
struct params_t {
  tessera::array<float, 2, tessera::named_sharding<mesh_xy, P<"x", "y">>> w;
  tessera::array<float, 1, tessera::named_sharding<mesh_xy, P<"y">>> b;
  tessera::array<float, 1, tessera::named_sharding<mesh_xy, P<>>> v;
};

template <std::size_t N>
xt::xtensor<float, N> input(json const& j, std::array<std::size_t, N> const& shape) {
  std::vector<float> v;
  for (auto const& e : j) v.push_back(static_cast<float>(e.get<double>()));
  return xt::adapt(v, shape);
}

params_t tree(mesh_xy const& m, json const& leaves) {
  return params_t{tessera::device_put(input<2>(leaves.at(0), {4, 8}), tessera::named_sharding(m, P<"x", "y">{})),
                  tessera::device_put(input<1>(leaves.at(1), {8}), tessera::named_sharding(m, P<"y">{})),
                  tessera::device_put(input<1>(leaves.at(2), {5}), tessera::named_sharding(m, P<>{}))};
}

constexpr double ulps = 8;

/// Every element within `ulps` float32 ulps of optax's (of the leaf's largest magnitude near zero).
void check_leaves(params_t const& got, json const& want, std::string const& what) {
  std::size_t l = 0;
  auto one = [&](auto const& leaf) {
    auto const h = tessera::to_host(leaf);
    json const& w = want.at(l);
    REQUIRE(w.size() == h.size());
    double scale = 0;
    for (auto const& e : w) scale = std::max(scale, std::abs(e.get<double>()));
    std::size_t i = 0;
    for (float g : h) {
      double const x = w.at(i).get<double>();
      double const tol = ulps * std::ldexp(1.0, -23) * std::max(std::abs(x), scale / 16);
      INFO(what << " leaf " << l << " element " << i << ": tessera " << g << ", optax " << x);
      CHECK(std::abs(static_cast<double>(g) - x) <= tol);
      ++i;
    }
    ++l;
  };
  std::apply([&](auto const&... leaf) { (one(leaf), ...); }, tessera::tree_leaves(got));
}

/// Runs tx for the golden's steps, checking updates, params (both through update +
/// apply_updates and through update_and_apply) and the state's fields (`fields(state, step)`).
template <class Tx, class Fields>
void run(mesh_xy const& m, json const& c, Tx const& tx, Fields fields) {
  json const& g = tessera_jax::golden(golden_file).at("cases");
  params_t params = tree(m, g.at("params").at("leaves"));
  params_t fused = params;
  auto state = tx.init(params);
  auto fused_state = state;
  json const& steps = c.at("steps");
  for (std::size_t t = 0; t < steps.size(); ++t) {
    params_t const grads = tree(m, g.at("grads").at("steps").at(t));
    auto [updates, new_state] = tx.update(grads, state, params);
    check_leaves(updates, steps[t].at("updates"), "updates of step " + std::to_string(t + 1));
    params = optim::apply_updates(params, updates);
    state = new_state;
    check_leaves(params, steps[t].at("params"), "params of step " + std::to_string(t + 1));
    fields(state, steps[t]);
    auto [p2, s2] = tx.update_and_apply(grads, fused_state, fused);
    fused = p2;
    fused_state = s2;
    check_leaves(fused, steps[t].at("params"), "update_and_apply's params of step " + std::to_string(t + 1));
  }
}

auto no_fields = [](auto const&, json const&) {};

template <class S>
void adam_fields(S const& s, json const& step) {
  CHECK(s.count == step.at("count").get<int>());
  check_leaves(s.mu, step.at("mu"), "mu");
  check_leaves(s.nu, step.at("nu"), "nu");
}

}  // namespace

TEST_CASE("optax against JAX: optimizers and schedules", "[jax][optim]") {
  tessera::runtime rt{8};
  auto const m = make_mesh_xy();
  tessera_jax::checks cs;
  cs["params"] = [](json const& c) { CHECK(c.at("leaves").size() == 3); };
  cs["grads"] = [](json const& c) { CHECK(c.at("steps").size() == 5); };
  cs["opt/sgd"] = [&](json const& c) { run(m, c, optim::sgd(0.1), no_fields); };
  auto trace = [](auto const& s, json const& step) { check_leaves(std::get<0>(s).trace, step.at("trace"), "trace"); };
  cs["opt/sgd_momentum"] = [&](json const& c) { run(m, c, optim::sgd(0.1, 0.9), trace); };
  cs["opt/sgd_nesterov"] = [&](json const& c) { run(m, c, optim::sgd(0.1, 0.9, true), trace); };
  auto adam0 = [](auto const& s, json const& step) { adam_fields(std::get<0>(s), step); };
  cs["opt/adam"] = [&](json const& c) { run(m, c, optim::adam(1e-2), adam0); };
  cs["opt/adam_eps_root"] = [&](json const& c) { run(m, c, optim::adam(1e-2, 0.8, 0.99, 1e-6, 1e-8), adam0); };
  cs["opt/adam_cosine"] = [&](json const& c) {
    run(m, c, optim::adam(optim::cosine_decay_schedule(1e-2, 4, 0.1)), [](auto const& s, json const& step) {
      adam_fields(std::get<0>(s), step);
      CHECK(std::get<1>(s).count == step.at("schedule_count").get<int>());
    });
  };
  cs["opt/adamw"] = [&](json const& c) { run(m, c, optim::adamw(1e-2, {.weight_decay = 0.1}), adam0); };
  cs["opt/adamw_mask"] = [&](json const& c) {
    run(m, c, optim::adamw(1e-2, {.weight_decay = 0.1}, std::tuple{true, false, true}), adam0);
  };
  cs["opt/lion"] = [&](json const& c) {
    run(m, c, optim::lion(1e-3, 0.9, 0.99, 0.01), [](auto const& s, json const& step) {
      CHECK(std::get<0>(s).count == step.at("count").get<int>());
      check_leaves(std::get<0>(s).mu, step.at("mu"), "mu");
    });
  };
  cs["opt/clip"] = [&](json const& c) { run(m, c, optim::clip_by_global_norm(1.0), no_fields); };
  cs["opt/clip_adamw_warmup_cosine"] = [&](json const& c) {
    auto const tx = optim::chain(
        optim::clip_by_global_norm(1.0),
        optim::adamw(optim::warmup_cosine_decay_schedule(0.0, 1e-2, 2, 5, 1e-3), {.weight_decay = 1e-2}));
    run(m, c, tx, [](auto const& s, json const& step) {
      auto const& inner = std::get<1>(s);
      adam_fields(std::get<0>(inner), step);
      CHECK(std::get<2>(inner).count == step.at("schedule_count").get<int>());
    });
  };
  // A schedule's values within 8 ulps of optax's, or of a sixteenth of its largest value (1 + cos
  // cancels near the end of a cosine decay, where an ulp of XLA's cos is ten of the result).
  auto schedule = [&](std::string const& name, auto s) {
    cs["schedule/" + name] = [s](json const& c) {
      json const& v = c.at("values");
      double scale = 0;
      for (auto const& e : v) scale = std::max(scale, std::abs(e.get<double>()));
      for (std::size_t t = 0; t < v.size(); ++t) {
        double const want = v[t].get<double>();
        float const got = s(static_cast<optim::count_type>(t));
        INFO("count " << t << ": tessera " << got << ", optax " << want);
        CHECK(std::abs(got - want) <= ulps * std::ldexp(1.0, -23) * std::max(std::abs(want), scale / 16));
      }
    };
  };
  schedule("constant", optim::constant_schedule{0.25});
  schedule("cosine", optim::cosine_decay_schedule(0.1, 7));
  schedule("cosine_alpha_exp", optim::cosine_decay_schedule(0.1, 9, 0.2, 2.0));
  schedule("warmup_cosine", optim::warmup_cosine_decay_schedule(0.0, 1e-2, 3, 10, 1e-3));
  schedule("warmup_cosine_from", optim::warmup_cosine_decay_schedule(1e-3, 0.5, 2, 8));
  schedule("linear", optim::linear_schedule{0.5, 0.1, 6, 2});
  CHECK(tessera_jax::check_all(golden_file, cs) == 19);
}
