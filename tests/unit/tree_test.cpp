// tessera::tree_map, tree_leaves and device_put of a tree (jax.tree_util), on the parameter
// structures the seeds use: a struct of arrays, tuples, pairs, std::arrays and nestings of them.
// Values are checked against the same update computed with plain xtensor.

#include <array>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include "support.hpp"
#include "tessera/tessera.hpp"

namespace {

using tessera::none;
using tessera::P;

auto make_x_mesh() { return tessera::make_mesh<"x">({4}); }
using mesh_x = decltype(make_x_mesh());
using w_type = tessera::array<float, 2, tessera::named_sharding<mesh_x, P<"x", none>>>;
using b_type = tessera::array<float, 1, tessera::named_sharding<mesh_x, P<>>>;

/// A layer's parameters, as seed 002 writes them ({"w": ..., "b": ...}).
struct layer {
  w_type w;
  b_type b;
};
/// A model of two layers and a step count (a nested struct node and a number leaf).
struct model {
  layer l1;
  layer l2;
  int steps;
};

xt::xtensor<float, 2> w_host(float base) {
  xt::xtensor<float, 2> w = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  return w + base;
}
xt::xtensor<float, 1> b_host(float base) { return xt::arange<float>(4.0f) * 0.5f + base; }

}  // namespace

TEST_CASE("tree nodes: structs, tuples, pairs and std::arrays; leaves: arrays, numbers, containers", "[tree]") {
  STATIC_REQUIRE(tessera::tree_node<layer>);
  STATIC_REQUIRE(tessera::tree_node<model>);
  STATIC_REQUIRE(tessera::tree_node<std::tuple<int, float>>);
  STATIC_REQUIRE(tessera::tree_node<std::pair<int, layer>>);
  STATIC_REQUIRE(tessera::tree_node<std::array<double, 3>>);
  STATIC_REQUIRE_FALSE(tessera::tree_node<w_type>);
  STATIC_REQUIRE_FALSE(tessera::tree_node<float>);
  STATIC_REQUIRE_FALSE(tessera::tree_node<xt::xtensor<float, 2>>);
  STATIC_REQUIRE_FALSE(tessera::tree_node<std::string>);
  STATIC_REQUIRE(tessera::tree_leaf_count<layer> == 2);
  STATIC_REQUIRE(tessera::tree_leaf_count<model> == 5);
  STATIC_REQUIRE(tessera::tree_leaf_count<std::tuple<int, std::pair<float, std::array<int, 3>>>> == 5);
}

TEST_CASE("tree_leaves lists the leaves depth first, fields in order", "[tree]") {
  auto const t = std::make_tuple(1, std::make_pair(2.5, std::array<int, 2>{3, 4}), 5.0f);
  auto const leaves = tessera::tree_leaves(t);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(leaves)>, std::tuple<int, double, int, int, float>>);
  CHECK(leaves == std::make_tuple(1, 2.5, 3, 4, 5.0f));
}

TEST_CASE("tree_map over numbers keeps the structure", "[tree]") {
  std::tuple<int, std::pair<int, int>, std::array<int, 3>> const t{1, {2, 3}, {4, 5, 6}};
  auto const doubled = tessera::tree_map([](int v) { return 2 * v; }, t);
  CHECK(doubled == std::tuple<int, std::pair<int, int>, std::array<int, 3>>{2, {4, 6}, {8, 10, 12}});
  auto const sums = tessera::tree_map([](int a, int b) { return a + b; }, t, doubled);
  CHECK(sums == std::tuple<int, std::pair<int, int>, std::array<int, 3>>{3, {6, 9}, {12, 15, 18}});
}

TEST_CASE("device_put of a tree, and the SGD step of the seeds with tree_map", "[tree]") {
  tessera::runtime rt{4};
  auto const mesh = make_x_mesh();
  auto const ws = tessera::named_sharding(mesh, P<"x", none>{});
  auto const bs = tessera::named_sharding(mesh, P<>{});
  // jax.device_put(params, shardings): a tree of host arrays and a tree of shardings alike.
  auto const hosts = std::make_tuple(w_host(0.0f), b_host(1.0f));
  auto const put = tessera::device_put(hosts, std::make_tuple(ws, bs));
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(std::get<0>(put))>, w_type>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(std::get<1>(put))>, b_type>);
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(put)), w_host(0.0f)));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<1>(put)), b_host(1.0f)));

  model const params{{std::get<0>(put), std::get<1>(put)},
                     {tessera::device_put(w_host(10.0f), ws), tessera::device_put(b_host(20.0f), bs)},
                     7};
  model const grads{{tessera::device_put(w_host(1.0f), ws), tessera::device_put(b_host(2.0f), bs)},
                    {tessera::device_put(w_host(3.0f), ws), tessera::device_put(b_host(4.0f), bs)},
                    0};
  float const lr = 0.125f;
  // jax.tree.map(lambda p, g: p - lr * g, params, grads): arrays stay arrays of their types.
  model const next = tessera::tree_map(
      [lr](auto const& p, auto const& g) {
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(p)>, int>) return p + 1;
        else return p - lr * g;
      },
      params, grads);
  CHECK(next.steps == 8);
  xt::xtensor<float, 2> const w1 = w_host(0.0f) - lr * w_host(1.0f);
  xt::xtensor<float, 1> const b1 = b_host(1.0f) - lr * b_host(2.0f);
  xt::xtensor<float, 2> const w2 = w_host(10.0f) - lr * w_host(3.0f);
  xt::xtensor<float, 1> const b2 = b_host(20.0f) - lr * b_host(4.0f);
  CHECK(tessera_test::same_array(tessera::to_host(next.l1.w), w1));
  CHECK(tessera_test::same_array(tessera::to_host(next.l1.b), b1));
  CHECK(tessera_test::same_array(tessera::to_host(next.l2.w), w2));
  CHECK(tessera_test::same_array(tessera::to_host(next.l2.b), b2));
  // The leaves of the result keep their primals' shardings (the typed fields guarantee it).
  auto const leaves = tessera::tree_leaves(next);
  CHECK(std::get<0>(leaves).sharding() == ws);
  CHECK(std::get<1>(leaves).sharding() == bs);
  CHECK(std::get<4>(leaves) == 8);
}
