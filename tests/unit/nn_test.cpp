// tessera::nn's partitioning: logical axis rules resolved at compile time (Flax's priority order)
// and at run time (errors naming the values), the rule-set table, and Flax's parameter keys.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <type_traits>

#include <tessera/nn/partitioning.hpp>
#include <tessera/nn/scope.hpp>
#include <tessera/runtime/make_mesh.hpp>

namespace nn = tessera::nn;
using tessera::axes;
using tessera::none;
using tessera::P;

namespace {
using mesh2 = tessera::mesh<"data", "model">;
using tp = nn::logical_axis_rules<nn::rule<"batch", "data">, nn::rule<"embed", none>, nn::rule<"mlp", "model">,
                                  nn::rule<"heads", "model">>;
using fsdp = nn::logical_axis_rules<nn::rule<"batch", axes<"data", "model">>, nn::rule<"embed", axes<"data", "model">>,
                                    nn::rule<"mlp", none>>;
// Flax's fallback: 'mlp' wants 'model', taken by 'heads', so its second rule (None) applies.
using fallback = nn::logical_axis_rules<nn::rule<"heads", "model">, nn::rule<"mlp", "model">, nn::rule<"mlp", none>>;
template <class R, class N>
using spec = nn::logical_to_mesh_axes_t<mesh2, R, N>;
}  // namespace

TEST_CASE("logical names resolve through rule types at compile time", "[nn]") {
  static_assert(std::is_same_v<spec<nn::no_rules, nn::names<"data", "model">>, P<"data", "model">>);
  static_assert(std::is_same_v<spec<tp, nn::names<"embed", "mlp">>, P<none, "model">>);
  static_assert(std::is_same_v<spec<tp, nn::names<"batch", none, "embed">>, P<"data", none, none>>);
  static_assert(std::is_same_v<spec<fsdp, nn::names<"embed", "mlp">>, P<axes<"data", "model">, none>>);
  static_assert(std::is_same_v<spec<fallback, nn::names<"heads", "mlp">>, P<"model", none>>);
  static_assert(std::is_same_v<spec<tp, nn::names<"data", "mlp">>, P<"data", "model">>);  // a mesh axis directly
  SUCCEED();
}

TEST_CASE("logical_to_mesh_axes at run time: Flax's order, errors naming the values", "[nn]") {
  std::vector<std::pair<std::string, std::vector<std::string>>> const rules{
      {"heads", {"model"}}, {"mlp", {"model"}}, {"mlp", {}}, {"batch", {"data", "model"}}};
  std::vector<std::string> const mesh{"data", "model"};
  auto r = nn::logical_to_mesh_axes({"heads", "mlp"}, rules, mesh);
  CHECK(r == std::vector<std::vector<std::string>>{{"model"}, {}});
  CHECK(nn::logical_to_mesh_axes({"model", "", "data"}, {}, mesh) ==
        std::vector<std::vector<std::string>>{{"model"}, {}, {"data"}});
  CHECK_THROWS_WITH(nn::logical_to_mesh_axes({"embed"}, rules, mesh),
                    Catch::Contains("'embed' is neither a logical name of the rules nor an axis of the mesh ('data', 'model')"));
  CHECK_THROWS_WITH(nn::logical_to_mesh_axes({"heads", "q"}, {{"heads", {"model"}}, {"q", {"model"}}}, mesh),
                    Catch::Contains("'heads' and 'q' both map to mesh axis 'model'"));
  CHECK_THROWS_WITH(nn::logical_to_mesh_axes({"batch", "data"}, rules, mesh),
                    Catch::Contains("both map to mesh axis 'data'"));
}

TEST_CASE("rules_table selects a compiled rule set by name", "[nn]") {
  nn::rules_table<tp, fsdp> const table{{"tp", "fsdp"}};
  auto const s = table.visit("fsdp", [](auto r) {
    return std::is_same_v<decltype(r), fsdp> ? std::string("fsdp") : std::string("tp");
  });
  CHECK(s == "fsdp");
  CHECK_THROWS_WITH(table.visit("dp", [](auto) { return 0; }),
                    Catch::Contains("no rule set named 'dp'; the program was compiled with 'tp', 'fsdp'"));
}

TEST_CASE("Flax's parameter keys: SHA-1 of the module path and counter", "[nn]") {
  nn::detail::sha1 h;
  h.update("abc");
  CHECK(h.digest_prefix() == 0xa9993e36u);  // FIPS 180-1's example digest a9993e36...
  nn::detail::sha1 l;
  for (int i = 0; i < 1000; ++i) l.update("a");
  CHECK(l.digest_prefix() == 0x291e9a6cu);  // sha1('a' * 1000), several blocks
  // Flax: Dense(4).init(key(0), ...) draws its kernel with fold_in(key(0), sha1(b'\x01')[:4]).
  tessera::runtime rt{2};
  auto s = nn::scope(tessera::random::key(0), tessera::make_mesh<"x">({2}));
  nn::detail::sha1 one;
  one.update(std::string_view("\x01", 1));
  CHECK(s.make_rng() == tessera::random::fold_in(tessera::random::key(0), one.digest_prefix()));
  auto child = s.push("Dense_0");
  nn::detail::sha1 path;
  path.update(std::string_view("Dense_0\x01", 8));
  CHECK(child.make_rng() == tessera::random::fold_in(tessera::random::key(0), path.digest_prefix()));
}
