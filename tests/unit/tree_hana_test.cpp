// Boost.Hana parameter trees (issue 17, "Parameters as pytrees"): Hana structs and hana::maps as
// tree nodes for tree_map, tree_leaves, tree_leaf_count, device_put of a tree and grad, the C++
// forms of the seeds' `params = {"w": ..., "b": ...}`. Values are checked against plain xtensor
// and loops on the host; gradients against the hand-derived backward pass in double.
// tests/CMakeLists.txt builds this file only where the Hana headers are found.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana.hpp>
#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include "support.hpp"
#include "tessera/tessera.hpp"

#include "grad_support.hpp"

namespace hana = boost::hana;

namespace {

using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

using tessera::none;
using tessera::P;

/// Numbers and a step count, declared with Hana (an aggregate too: the Hana path must win).
struct counters {
  BOOST_HANA_DEFINE_STRUCT(counters, (int, steps), (double, lr));
};
/// A layer's parameters as a class template over its member types, so that the same struct holds
/// host arrays, shardings, device arrays and grad's tracers.
template <class W, class B>
struct layer {
  BOOST_HANA_DEFINE_STRUCT(layer, (W, w), (B, b));
};
/// The same members as counters, without Hana: a plain struct, another node kind.
struct plain_counters {
  int steps;
  double lr;
};
/// Adapted with its members in the other order than declared (default-constructible: rebuilt by
/// assignment through the accessors, so the order does not matter).
struct xy {
  int x;
  int y;
};
/// A non-aggregate adapted from outside (a constructor and a default constructor).
class scaled {
 public:
  scaled() = default;
  scaled(double v, int n) : value(v), count(n) {}
  double value = 0;
  int count = 0;
};

auto make_x_mesh() { return tessera::make_mesh<"x">({4}); }
using mesh_x = decltype(make_x_mesh());
using w_type = tessera::array<float, 2, tessera::named_sharding<mesh_x, P<"x", none>>>;
using b_type = tessera::array<float, 1, tessera::named_sharding<mesh_x, P<>>>;

/// Two arrays of one type adapted in reverse order: no default constructor, so braces fill the
/// fields in declaration order and the accessors' order is checked.
struct swapped {
  w_type first;
  w_type second;
};

xt::xtensor<float, 2> w_host(float base) {
  xt::xtensor<float, 2> w = xt::reshape_view(xt::arange<float>(32.0f), {8, 4});
  return w + base;
}
xt::xtensor<float, 1> b_host(float base) { return xt::arange<float>(4.0f) * 0.5f + base; }

/// a (n x k) times b (k x m), on the host.
xt::xtensor<double, 2> host_matmul(xt::xtensor<double, 2> const& a, xt::xtensor<double, 2> const& b) {
  xt::xtensor<double, 2> c = xt::zeros<double>({a.shape()[0], b.shape()[1]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t j = 0; j < b.shape()[1]; ++j)
      for (std::size_t k = 0; k < a.shape()[1]; ++k) c(i, j) += a(i, k) * b(k, j);
  return c;
}

}  // namespace

BOOST_HANA_ADAPT_STRUCT(xy, y, x);
BOOST_HANA_ADAPT_STRUCT(scaled, value, count);
BOOST_HANA_ADAPT_STRUCT(swapped, second, first);

namespace {

template <class A, class B>
constexpr bool same_structure = tessera::detail::same_structure<A, B>();

template <class... P>
using map_of = decltype(hana::make_map(std::declval<P>()...));
using key_w = hana::string<'w'>;  // the type of BOOST_HANA_STRING("w")
using key_b = hana::string<'b'>;
using wb_map = map_of<hana::pair<key_w, double>, hana::pair<key_b, int>>;

// Mismatched trees are refused when the program compiles (tree_map's static_assert reads this).
static_assert(TESSERA_HAS_HANA == 1);
static_assert(same_structure<wb_map, wb_map>);
static_assert(same_structure<wb_map, map_of<hana::pair<key_w, float>, hana::pair<key_b, long>>>);  // leaves may differ
static_assert(!same_structure<wb_map, map_of<hana::pair<key_b, int>, hana::pair<key_w, double>>>,
              "the same keys in another order: the leaves would pair up wrongly");
static_assert(!same_structure<wb_map, map_of<hana::pair<key_w, double>>>, "a key fewer");
static_assert(!same_structure<wb_map, map_of<hana::pair<key_w, double>, hana::pair<hana::string<'c'>, int>>>,
              "another key");
static_assert(!same_structure<wb_map, map_of<hana::pair<key_w, double>, hana::pair<key_b, std::tuple<int, int>>>>,
              "a node where the other has a leaf");
static_assert(!same_structure<wb_map, std::tuple<double, int>>);
static_assert(!same_structure<wb_map, layer<double, int>>, "a map and a struct with the same names");
static_assert(!same_structure<counters, plain_counters>, "a Hana struct and a plain struct");
static_assert(!same_structure<plain_counters, counters>);
static_assert(!same_structure<counters, layer<int, double>>, "two Hana struct types");
static_assert(same_structure<layer<int, double>, layer<std::string, float>>, "one class template");
static_assert(!same_structure<layer<int, double>, layer<int, std::tuple<double, double>>>);

}  // namespace

TEST_CASE("Hana structs and hana::maps are tree nodes; their leaves in accessors and keys order", "[tree][hana]") {
  STATIC_REQUIRE(tessera::tree_node<counters>);
  STATIC_REQUIRE(tessera::tree_node<layer<w_type, b_type>>);
  STATIC_REQUIRE(tessera::tree_node<xy>);
  STATIC_REQUIRE(tessera::tree_node<scaled>);
  STATIC_REQUIRE(tessera::tree_node<wb_map>);
  STATIC_REQUIRE_FALSE(tessera::tree_node<key_w>);
  STATIC_REQUIRE(tessera::tree_leaf_count<counters> == 2);
  STATIC_REQUIRE(tessera::tree_leaf_count<layer<w_type, b_type>> == 2);
  STATIC_REQUIRE(tessera::tree_leaf_count<map_of<hana::pair<key_w, wb_map>, hana::pair<key_b, counters>>> == 4);

  counters const c{7, 0.25};
  CHECK(tessera::tree_leaves(c) == std::make_tuple(7, 0.25));
  // BOOST_HANA_ADAPT_STRUCT(xy, y, x): Hana's order (y, x), not the declaration order.
  CHECK(tessera::tree_leaves(xy{1, 2}) == std::make_tuple(2, 1));
  // {"w": 1.5, "b": 2}: the values in the order the keys were written (hana::keys).
  auto const m = hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), 1.5), hana::make_pair(BOOST_HANA_STRING("b"), 2));
  STATIC_REQUIRE(std::is_same_v<decltype(hana::keys(m)), decltype(hana::make_basic_tuple(key_w{}, key_b{}))>);
  auto const leaves = tessera::tree_leaves(m);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(leaves)>, std::tuple<double, int>>);
  CHECK(leaves == std::make_tuple(1.5, 2));
  // Nested: a map of a map, a Hana struct, a tuple; depth first.
  auto const nested = hana::make_map(hana::make_pair(BOOST_HANA_STRING("inner"), m),
                                     hana::make_pair(hana::int_c<3>, c),
                                     hana::make_pair(hana::type_c<float>, std::make_tuple(4, 5.0f)));
  CHECK(tessera::tree_leaves(nested) == std::make_tuple(1.5, 2, 7, 0.25, 4, 5.0f));
  STATIC_REQUIRE(tessera::tree_leaf_count<decltype(nested)> == 6);
}

TEST_CASE("tree_map over Hana structs and maps keeps the structure, keys and types", "[tree][hana]") {
  counters const c{7, 0.25};
  counters const doubled = tessera::tree_map([](auto v) { return v * 2; }, c);
  CHECK(doubled.steps == 14);
  CHECK(doubled.lr == 0.5);
  auto const sums = tessera::tree_map([](auto a, auto b) { return a + b; }, c, doubled);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(sums)>, counters>);
  CHECK(sums.steps == 21);

  // Reordered adaption: each result lands in its own member.
  xy const p = tessera::tree_map([](int v) { return 10 * v; }, xy{1, 2});
  CHECK(p.x == 10);
  CHECK(p.y == 20);
  scaled const s = tessera::tree_map([](auto v) { return v + 1; }, scaled{0.5, 3});
  CHECK(s.value == 1.5);
  CHECK(s.count == 4);

  // Results of other types: the same class template over them.
  layer<int, double> const l{1, 2.5};
  auto const named = tessera::tree_map([](auto v) { return std::to_string(v).substr(0, 3); }, l);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(named)>, layer<std::string, std::string>>);
  CHECK(named.w == "1");
  CHECK(named.b == "2.5");

  auto const m = hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), 1.5), hana::make_pair(BOOST_HANA_STRING("b"), 2));
  auto const m2 = tessera::tree_map([](auto a, auto b) { return a * b; }, m, m);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(m2)>, std::remove_cvref_t<decltype(m)>>);
  CHECK(m2[BOOST_HANA_STRING("w")] == 2.25);
  CHECK(m2[BOOST_HANA_STRING("b")] == 4);
  auto const halves = tessera::tree_map([](auto v) { return static_cast<float>(v) / 2; }, m);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(halves[key_b{}])>, float>);
  CHECK(halves[BOOST_HANA_STRING("b")] == 1.0f);

  auto const nested = hana::make_map(hana::make_pair(BOOST_HANA_STRING("inner"), m), hana::make_pair(hana::int_c<3>, c));
  auto const n2 = tessera::tree_map([](auto v) { return v + 1; }, nested);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(n2)>, std::remove_cvref_t<decltype(nested)>>);
  CHECK(n2[BOOST_HANA_STRING("inner")][BOOST_HANA_STRING("w")] == 2.5);
  CHECK(n2[hana::int_c<3>].steps == 8);
}

TEST_CASE("device_put of Hana trees with trees of shardings alike, and the seeds' SGD step", "[tree][hana]") {
  tessera::runtime rt{4};
  auto const mesh = make_x_mesh();
  auto const ws = tessera::named_sharding(mesh, P<"x", none>{});
  auto const bs = tessera::named_sharding(mesh, P<>{});
  using host_layer = layer<xt::xtensor<float, 2>, xt::xtensor<float, 1>>;

  // A Hana struct: host arrays in, device arrays out, the same class template.
  host_layer const hosts{w_host(0.0f), b_host(1.0f)};
  auto const put = tessera::device_put(hosts, layer<decltype(ws), decltype(bs)>{ws, bs});
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(put)>, layer<w_type, b_type>>);
  CHECK(put.w.sharding() == ws);
  CHECK(put.b.sharding() == bs);
  CHECK(tessera_test::same_array(tessera::to_host(put.w), w_host(0.0f)));
  CHECK(tessera_test::same_array(tessera::to_host(put.b), b_host(1.0f)));

  // A hana::map, as seed 002 writes params = {"w": ..., "b": ...}.
  auto const host_map = hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), w_host(2.0f)),
                                       hana::make_pair(BOOST_HANA_STRING("b"), b_host(3.0f)));
  auto const map_shardings =
      hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), ws), hana::make_pair(BOOST_HANA_STRING("b"), bs));
  auto const params = tessera::device_put(host_map, map_shardings);
  using params_type = std::remove_cvref_t<decltype(params)>;
  STATIC_REQUIRE(std::is_same_v<params_type, map_of<hana::pair<key_w, w_type>, hana::pair<key_b, b_type>>>);
  CHECK(tessera_test::same_array(tessera::to_host(params[BOOST_HANA_STRING("w")]), w_host(2.0f)));
  CHECK(tessera_test::same_array(tessera::to_host(params[BOOST_HANA_STRING("b")]), b_host(3.0f)));

  // Nested: {"l1": layer, "l2": {"w": ..., "b": ...}}.
  auto const host_model = hana::make_map(hana::make_pair(BOOST_HANA_STRING("l1"), hosts),
                                         hana::make_pair(BOOST_HANA_STRING("l2"), host_map));
  auto const model_shardings = hana::make_map(hana::make_pair(BOOST_HANA_STRING("l1"), layer<decltype(ws), decltype(bs)>{ws, bs}),
                                              hana::make_pair(BOOST_HANA_STRING("l2"), map_shardings));
  auto const model = tessera::device_put(host_model, model_shardings);
  STATIC_REQUIRE(tessera::tree_leaf_count<decltype(model)> == 4);
  auto const leaves = tessera::tree_leaves(model);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(leaves)>, std::tuple<w_type, b_type, w_type, b_type>>);
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(leaves)), w_host(0.0f)));
  CHECK(tessera_test::same_array(tessera::to_host(std::get<3>(leaves)), b_host(3.0f)));

  // jax.tree.map(lambda p, g: p - lr * g, params, grads): types and keys kept.
  auto const grads = tessera::device_put(
      hana::make_map(hana::make_pair(BOOST_HANA_STRING("l1"), host_layer{w_host(1.0f), b_host(2.0f)}),
                     hana::make_pair(BOOST_HANA_STRING("l2"),
                                     hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), w_host(3.0f)),
                                                    hana::make_pair(BOOST_HANA_STRING("b"), b_host(4.0f))))),
      model_shardings);
  float const lr = 0.125f;
  auto const next = tessera::tree_map([lr](auto const& a, auto const& g) { return a - lr * g; }, model, grads);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(next)>, std::remove_cvref_t<decltype(model)>>);
  auto const& l1 = next[BOOST_HANA_STRING("l1")];
  auto const& l2 = next[BOOST_HANA_STRING("l2")];
  CHECK(tessera_test::same_array(tessera::to_host(l1.w), xt::xtensor<float, 2>(w_host(0.0f) - lr * w_host(1.0f))));
  CHECK(tessera_test::same_array(tessera::to_host(l1.b), xt::xtensor<float, 1>(b_host(1.0f) - lr * b_host(2.0f))));
  CHECK(tessera_test::same_array(tessera::to_host(l2[BOOST_HANA_STRING("w")]),
                                 xt::xtensor<float, 2>(w_host(2.0f) - lr * w_host(3.0f))));
  CHECK(tessera_test::same_array(tessera::to_host(l2[BOOST_HANA_STRING("b")]),
                                 xt::xtensor<float, 1>(b_host(3.0f) - lr * b_host(4.0f))));
  CHECK(l1.w.sharding() == ws);

  // Adapted in another order than declared, and not default-constructible: refused with the fix.
  swapped const sw{put.w, tessera::device_put(w_host(5.0f), ws)};
  CHECK(tessera_test::same_array(tessera::to_host(std::get<0>(tessera::tree_leaves(sw))), w_host(5.0f)));
  CHECK_THROWS_WITH(tessera::tree_map([](auto const& a) { return a; }, sw),
                    Catch::Contains("lists its members in another order than it declares them") &&
                        Catch::Contains("name the members in declaration order"));
}

TEST_CASE("grad of a loss of a Hana struct and a hana::map of sharded arrays: the same trees back, values against "
          "the hand-derived gradient",
          "[grad][hana]") {
  tessera::runtime rt{8};
  std::size_t const devices = GENERATE(as<std::size_t>{}, 2, 4, 8);
  std::size_t const B = 2 * devices;
  std::size_t const D = 8, H = 3, K = 2;
  auto const mesh = tessera::make_mesh<"X">({static_cast<int>(devices)});
  auto const rows = tessera::named_sharding(mesh, P<"X", none>{});
  auto const rep = tessera::named_sharding(mesh, P<>{});
  auto const xh = values<2>({B, D}, 0.1);
  auto const yh = values<2>({B, K}, 0.6);
  auto const w1h = values<2>({D, H}, 1.1);
  auto const b1h = values<1>({H}, 2.3);
  auto const w2h = values<2>({H, K}, 3.7);
  auto const b2h = values<1>({K}, 4.2);
  auto const x = tessera::device_put(xh, rows);
  auto const y = tessera::device_put(yh, rows);
  // Layer 1 as a Hana struct, w1 sharded over X (FSDP) and b1 replicated; layer 2 as a hana::map.
  using W1 = std::remove_cvref_t<decltype(tessera::device_put(w1h, rows))>;
  using B1 = std::remove_cvref_t<decltype(tessera::device_put(b1h, rep))>;
  layer<W1, B1> const l1{tessera::device_put(w1h, rows), tessera::device_put(b1h, rep)};
  auto const l2 = hana::make_map(hana::make_pair(BOOST_HANA_STRING("w"), tessera::device_put(w2h, rep)),
                                 hana::make_pair(BOOST_HANA_STRING("b"), tessera::device_put(b2h, rep)));
  using L2 = std::remove_cvref_t<decltype(l2)>;

  auto loss = [&](auto const& p, auto const& q) {
    auto const h = tessera::tanh(tessera::matmul(x, p.w) + p.b);
    auto const r = tessera::matmul(h, q[BOOST_HANA_STRING("w")]) + q[BOOST_HANA_STRING("b")] - y;
    return tessera::mean(r * r);
  };

  // The backward pass by hand, on the host.
  xt::xtensor<double, 2> z1 = host_matmul(xh, w1h);
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t j = 0; j < H; ++j) z1(i, j) += b1h(j);
  xt::xtensor<double, 2> const hh = xt::tanh(z1);
  xt::xtensor<double, 2> dz2 = host_matmul(hh, w2h);
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t j = 0; j < K; ++j) dz2(i, j) = 2 * (dz2(i, j) + b2h(j) - yh(i, j)) / static_cast<double>(B * K);
  xt::xtensor<double, 2> const gw2 = host_matmul(xt::transpose(hh), dz2);
  xt::xtensor<double, 1> const gb2 = xt::sum(dz2, {0});
  xt::xtensor<double, 2> dz1 = host_matmul(dz2, xt::transpose(w2h));
  dz1 *= 1.0 - hh * hh;
  xt::xtensor<double, 2> const gw1 = host_matmul(xt::transpose(xh), dz1);
  xt::xtensor<double, 1> const gb1 = xt::sum(dz1, {0});

  auto const plan = tessera::explain(tessera::grad<0, 1>(loss), l1, l2);
  CHECK(plan.result == "(float64[8@X,3], float64[3], float64[3,2], float64[2])");  // w1 sharded over X

  auto const [g1, g2] = tessera::grad<0, 1>(loss)(l1, l2);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g1)>, layer<W1, B1>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g2)>, L2>);
  CHECK(g1.w.sharding() == rows);  // the FSDP parameter's gradient in its own layout
  CHECK(max_abs_diff(tessera::to_host(g1.w), gw1) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g1.b), gb1) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g2[BOOST_HANA_STRING("w")]), gw2) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g2[BOOST_HANA_STRING("b")]), gb2) < 1e-12);

  // One nested tree, {"l1": layer, "l2": {"w", "b"}}: the same gradients, in the same structure.
  auto const model = hana::make_map(hana::make_pair(BOOST_HANA_STRING("l1"), l1), hana::make_pair(BOOST_HANA_STRING("l2"), l2));
  auto const [value, g] = tessera::value_and_grad(
      [&](auto const& m) { return loss(m[BOOST_HANA_STRING("l1")], m[BOOST_HANA_STRING("l2")]); })(model);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(model)>>);
  double host_value = 0;
  for (std::size_t i = 0; i < B; ++i)
    for (std::size_t j = 0; j < K; ++j) host_value += std::pow(dz2(i, j) * static_cast<double>(B * K) / 2, 2);
  CHECK(std::abs(tessera::to_host(value)() - host_value / static_cast<double>(B * K)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g[BOOST_HANA_STRING("l1")].w), gw1) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g[BOOST_HANA_STRING("l2")][BOOST_HANA_STRING("b")]), gb2) < 1e-12);

  // The SGD step: jax.tree.map(lambda a, g: a - 0.1 * g, params, grads).
  auto const n1 = tessera::tree_map([](auto const& a, auto const& d) { return a - 0.1 * d; }, l1, g1);
  auto const n2 = tessera::tree_map([](auto const& a, auto const& d) { return a - 0.1 * d; }, l2, g2);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(n1)>, layer<W1, B1>>);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(n2)>, L2>);
  CHECK(max_abs_diff(tessera::to_host(n1.w), xt::xtensor<double, 2>(w1h - 0.1 * gw1)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(n1.b), xt::xtensor<double, 1>(b1h - 0.1 * gb1)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(n2[BOOST_HANA_STRING("w")]), xt::xtensor<double, 2>(w2h - 0.1 * gw2)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(n2[BOOST_HANA_STRING("b")]), xt::xtensor<double, 1>(b2h - 0.1 * gb2)) < 1e-12);
  // The step lowers the loss.
  CHECK(tessera::to_host(tessera::value_and_grad<0, 1>(loss)(n1, n2).first)() < tessera::to_host(value)());
}
