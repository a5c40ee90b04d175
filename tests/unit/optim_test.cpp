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

#include "tessera/tessera.hpp"

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
