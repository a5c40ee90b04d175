// jax.lax.reshape's sharding rule against JAX 0.12 (tests/golden/jax_reshape.json, written by
// tools/jax_reference/gen_reshape.py): for every split of one dimension, merge of neighbouring
// dimensions, size-1 insertion and refused regrouping of the sweep, detail::reshape_rule gives
// JAX's result spec, or refuses where JAX does. Then reshapes run end to end with JAX's result
// spec as their out_sharding, and give jax.typeof's text and numpy's values.
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>
#include <tessera/expr/shape_ops.hpp>

#include "golden.hpp"

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera_jax::json;

namespace {

tessera::axis_name name_of(std::string const& s) {
  tessera::axis_name n;
  for (std::size_t i = 0; i < s.size() && i + 1 < tessera::axis_name::capacity; ++i) n.chars[i] = s[i];
  return n;
}

std::vector<tessera::dim_spec> spec_of(json const& j, std::size_t rank) {
  std::vector<tessera::dim_spec> out(rank);
  for (std::size_t d = 0; d < j.size(); ++d) {
    if (j[d].is_string()) {
      out[d].push(name_of(j[d].get<std::string>()));
    } else if (j[d].is_array()) {
      for (auto const& a : j[d]) out[d].push(name_of(a.get<std::string>()));
    }
  }
  return out;
}

json to_json(std::vector<tessera::dim_spec> const& s) {
  json out = json::array();
  for (auto const& e : s) {
    if (e.is_none()) out.push_back(nullptr);
    else if (e.count() == 1) out.push_back(std::string(e.axis(0).view()));
    else {
      json names = json::array();
      for (std::size_t a = 0; a < e.count(); ++a) names.push_back(std::string(e.axis(a).view()));
      out.push_back(names);
    }
  }
  while (!out.empty() && out.back().is_null()) out.erase(out.size() - 1);
  return out;
}

}  // namespace

TEST_CASE("reshape's sharding rule is JAX's for every split, merge and refusal of the sweep", "[jax][reshape]") {
  json const& cases = tessera_jax::golden("jax_reshape.json").at("cases");
  std::size_t checked = 0, refused = 0;
  std::string const refusal_text = tessera::detail::reshape_refusal("", {}).substr(0, 80);
  for (auto const& [name, c] : cases.items()) {
    INFO("case " << name);
    auto const shape = c.at("shape").get<std::vector<std::size_t>>();
    auto const new_sizes = c.at("new_sizes").get<std::vector<std::size_t>>();
    auto const names = c.at("names").get<std::vector<std::string>>();
    auto const sizes = c.at("mesh").get<std::vector<std::size_t>>();
    auto axis_size = [&](tessera::axis_name const& a) -> std::size_t {
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == a.view()) return sizes[i];
      FAIL("an axis the mesh does not have");
      return 0;
    };
    auto const r = tessera::detail::reshape_rule(shape, new_sizes, spec_of(c.at("spec"), shape.size()), axis_size);
    if (c.contains("error")) {
      CHECK(r.refused());
      // JAX's words are ours: the refusal starts as JAX's does.
      CHECK(c.at("error").get<std::string>().find(refusal_text) != std::string::npos);
      ++refused;
    } else {
      REQUIRE_FALSE(r.refused());
      CHECK(to_json(*r.spec) == c.at("result"));
    }
    ++checked;
  }
  CHECK(checked == cases.size());
  CHECK(refused > 100);  // the sweep reaches JAX's refusals, not only its accepted reshapes
}

namespace {
// One reshape end to end: the operand of `shape` (arange values) laid out by In on mesh `m`,
// reshaped to `new_shape` with JAX's result spec Out as out_sharding.
template <class In, class Out, class Mesh, std::size_t N, std::size_t M>
void run_case(std::string const& name, Mesh const& m, std::array<std::size_t, N> shape, std::array<std::size_t, M> new_shape) {
  json const& c = tessera_jax::golden("jax_reshape.json").at("cases").at(name);
  INFO("case " << name);
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  xt::xtensor<float, N> h = xt::reshape_view(xt::arange<float>(static_cast<float>(n)), shape);
  auto x = tessera::device_put(h, tessera::named_sharding(m, In{}));
  tessera::array r = tessera::reshape(x, new_shape, Out{});
  CHECK(tessera::type_of(r) == c.at("typeof").get<std::string>());
  xt::xtensor<float, M> const want = xt::reshape_view(h, new_shape);
  auto const got = tessera::to_host(r);
  CHECK(std::equal(want.begin(), want.end(), got.begin()));
}
}  // namespace

TEST_CASE("reshapes run with JAX's result sharding and give its typeof and values", "[jax][reshape]") {
  tessera::runtime rt{8};
  auto const x2y2 = tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes);
  auto const x2y4 = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  auto const x2y2z2 = tessera::make_mesh<"x", "y", "z">({2, 2, 2}, tessera::explicit_axes);
  // Merges: a sharded major dim keeps its axis; two sharded dims become one tuple entry.
  run_case<P<"x", none>, P<"x">>("x2y2:(8, 4):['x']->(32,)", x2y2, std::array<std::size_t, 2>{8, 4}, std::array<std::size_t, 1>{32});
  run_case<P<"x", "y">, P<axes<"x", "y">>>("x2y2:(8, 4):['x', 'y']->(32,)", x2y2, std::array<std::size_t, 2>{8, 4},
                                           std::array<std::size_t, 1>{32});
  run_case<P<none, "x", "y">, P<none, axes<"x", "y">>>("x2y2:(2, 4, 2):[None, 'x', 'y']->(2, 8)", x2y2,
                                                      std::array<std::size_t, 3>{2, 4, 2}, std::array<std::size_t, 2>{2, 8});
  // Splits: the axes are dealt major-first over the pieces.
  run_case<P<axes<"x", "y">>, P<"x", "y">>("x2y2:(8,):[['x', 'y']]->(2, 4)", x2y2, std::array<std::size_t, 1>{8},
                                           std::array<std::size_t, 2>{2, 4});
  run_case<P<axes<"x", "y">>, P<axes<"x", "y">, none>>("x2y2:(8,):[['x', 'y']]->(4, 2)", x2y2,
                                                       std::array<std::size_t, 1>{8}, std::array<std::size_t, 2>{4, 2});
  run_case<P<"x", "y">, P<"x", none, "y">>("x2y4:(8, 4):['x', 'y']->(2, 4, 4)", x2y4, std::array<std::size_t, 2>{8, 4},
                                           std::array<std::size_t, 3>{2, 4, 4});
  run_case<P<"x", "y", "z">, P<"x", "y", "z", none>>("x2y2z2:(2, 2, 8):['x', 'y', 'z']->(2, 2, 2, 4)", x2y2z2,
                                                     std::array<std::size_t, 3>{2, 2, 8}, std::array<std::size_t, 4>{2, 2, 2, 4});
  // Size-1 dims added or removed keep the other dims' specs.
  run_case<P<"x", none>, P<none, "x", none>>("x2y2:(8, 4):['x']->(1, 8, 4)", x2y2, std::array<std::size_t, 2>{8, 4},
                                             std::array<std::size_t, 3>{1, 8, 4});
}
