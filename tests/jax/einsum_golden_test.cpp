// jnp.einsum on Explicit meshes of 1, 2 and 3 axes, checked against JAX 0.12
// (tests/golden/jax_einsum.json, written by tools/jax_reference/gen_einsum.py): for each case
// the arguments' typeof, then tessera::type_of of einsum's result, and on the (2, 4) mesh its
// values; a program JAX refuses must be refused by tessera's rule with the same kind of error
// (checked on the rule at compile time, without building the program; the messages themselves
// are tests/compile_fail/einsum_jax_reject_*.cpp). Then einsum with out_sharding and jax.grad of
// sum(einsum(s, a, b) * c).
//
// A case is written once below (tag, subscripts, specs with "0", "1", "2" for the mesh's axes)
// and runs on every mesh that has its axes, as the generator's loops do.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

namespace {

using tessera::einsum_subscripts;
using tessera::none;
using tessera::P;
using tessera_jax::json;
namespace td = tessera::detail;

struct m8 {
  static constexpr char const* name = "m8";
  static constexpr std::size_t axes = 1;
  static auto make() { return tessera::make_mesh<"X">({8}, tessera::explicit_axes); }
};
struct m24 {
  static constexpr char const* name = "m24";
  static constexpr std::size_t axes = 2;
  static auto make() { return tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes); }
};
struct m222 {
  static constexpr char const* name = "m222";
  static constexpr std::size_t axes = 3;
  static auto make() { return tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes); }
};

/// The generator's compact spec ("0_" is P('X', None)) as spec entries.
template <einsum_subscripts Text>
constexpr auto spec_of() {
  constexpr std::size_t R = Text.view().size();
  std::array<tessera::dim_spec, R> out{};
  constexpr tessera::axis_name names[] = {"X", "Y", "Z"};
  for (std::size_t i = 0; i < R; ++i)
    if (Text.view()[i] != '_') out[i] = tessera::dim_spec(names[Text.view()[i] - '0']);
  return td::canonical_spec(out);
}
template <einsum_subscripts Text>
using spec_t = td::spec_type_t<spec_of<Text>()>;

template <einsum_subscripts Text>
constexpr std::size_t highest_axis() {
  std::size_t h = 0;
  for (char c : Text.view())
    if (c != '_') h = std::max<std::size_t>(h, static_cast<std::size_t>(c - '0') + 1);
  return h;
}

template <std::size_t R>
xt::xtensor<float, R> smooth(json const& shape, int i) {
  std::array<std::size_t, R> s{};
  for (std::size_t d = 0; d < R; ++d) s[d] = shape[d].get<std::size_t>();
  xt::xtensor<float, R> x(s);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.flat(k) = static_cast<float>(static_cast<double>((static_cast<long>(k) * (2 * i + 3) + 7 * i) % 21 - 10) / 8.0);
  return x;
}

template <class Mesh, einsum_subscripts Spec, std::size_t R>
auto put(typename std::invoke_result_t<decltype(&Mesh::make)> const& mesh, json const& shape, int i) {
  return tessera::device_put(smooth<R>(shape, i), tessera::named_sharding(mesh, spec_t<Spec>{}));
}

/// JAX's error, as the kind of error tessera's rule reports.
td::einsum_sharding_error kind_of(std::string const& e) {
  if (e.find("batch dimensions") != std::string::npos) return td::einsum_sharding_error::batch;
  if (e.find("Contracting dimensions are sharded") != std::string::npos) return td::einsum_sharding_error::contracting;
  if (e.find("illegally sharded") != std::string::npos) return td::einsum_sharding_error::repeated;
  return td::einsum_sharding_error::none;
}

template <class E>
void check_result(E const& e, json const& c) {
  CHECK(tessera::type_of(e) == c["typeof"].get<std::string>());
  if (c.contains("values")) tessera_jax::check_values(tessera::to_host(tessera::eval(e)), c["values"], 1e-6);
}

std::string case_name(char const* tag, std::string_view a, std::string_view b, char const* mesh) {
  std::string n = std::string(tag) + "__" + std::string(a);
  if (!b.empty()) n += "__" + std::string(b);
  return n + "__" + mesh;
}

/// einsum<S>(a, b) with specs A and B on every mesh that has their axes.
template <einsum_subscripts S, einsum_subscripts A, einsum_subscripts B, class... Meshes>
void two(tessera_jax::checks& cs, char const* tag) {
  auto one_mesh = [&]<class Mesh>(Mesh) {
    if constexpr (std::max(highest_axis<A>(), highest_axis<B>()) <= Mesh::axes) {
      using M = decltype(Mesh::make());
      using XA = tessera::array<float, A.view().size(), tessera::named_sharding<M, spec_t<A>>>;
      using XB = tessera::array<float, B.view().size(), tessera::named_sharding<M, spec_t<B>>>;
      cs[case_name(tag, A.view(), B.view(), Mesh::name)] = [](json const& c) {
        auto const mesh = Mesh::make();
        auto const a = put<Mesh, A, A.view().size()>(mesh, c["shapes"][0], 0);
        auto const b = put<Mesh, B, B.view().size()>(mesh, c["shapes"][1], 1);
        CHECK(tessera::type_of(a) == c["args"][0].get<std::string>());
        CHECK(tessera::type_of(b) == c["args"][1].get<std::string>());
        constexpr auto rule = td::einsum_rule_for<S, XA, XB>();
        constexpr bool refused = rule.explicit_error && rule.error != td::einsum_sharding_error::none;
        CHECK(refused == c.value("rejected", false));
        if constexpr (refused) {
          CHECK(rule.error == kind_of(c.value("jax_error", std::string())));
        } else if (!c.value("rejected", false)) {
          check_result(tessera::einsum<S>(a, b), c);
        }
      };
    }
  };
  (one_mesh(Meshes{}), ...);
}

/// einsum<S>(a) with spec A on every mesh that has its axes.
template <einsum_subscripts S, einsum_subscripts A, class... Meshes>
void one(tessera_jax::checks& cs, char const* tag) {
  auto one_mesh = [&]<class Mesh>(Mesh) {
    if constexpr (highest_axis<A>() <= Mesh::axes) {
      cs[case_name(tag, A.view(), "", Mesh::name)] = [](json const& c) {
        auto const mesh = Mesh::make();
        auto const a = put<Mesh, A, A.view().size()>(mesh, c["shapes"][0], 0);
        CHECK(tessera::type_of(a) == c["args"][0].get<std::string>());
        check_result(tessera::einsum<S>(a), c);
      };
    }
  };
  (one_mesh(Meshes{}), ...);
}

#define TWO(TAG, S, A, B) two<S, A, B, m8, m24, m222>(cs, TAG)
#define ONE(TAG, S, A) one<S, A, m8, m24, m222>(cs, TAG)

}  // namespace

TEST_CASE("einsum against JAX: typeof, values, refusals, out_sharding and grad", "[einsum][jax]") {
  tessera::runtime rt{8};
  tessera_jax::checks cs;
  TWO("mm", "ij,jk->ik", "0_", "_1");
  TWO("mm", "ij,jk->ik", "_0", "__");
  TWO("mm", "ij,jk->ik", "0_", "0_");
  TWO("mm", "ij,jk->ik", "01", "_1");
  TWO("mm", "ij,jk->ik", "__", "_0");
  TWO("mm", "ij,jk->ik", "_0", "0_");
  TWO("mm", "ij,jk->ik", "_0", "1_");
  TWO("mm", "ij,jk->ik", "0_", "_0");
  TWO("mm_t", "ij,jk->ki", "0_", "_1");
  TWO("mm_t", "ij,jk->ki", "01", "__");
  TWO("bmm", "bij,bjk->bik", "0__", "0__");
  TWO("bmm", "bij,bjk->bik", "01_", "0_2");
  TWO("bmm", "bij,bjk->bik", "0_1", "0__");
  TWO("bmm", "bij,bjk->bik", "0__", "___");
  TWO("bmm", "bij,bjk->bik", "0__", "1__");
  TWO("scores", "bqhd,bkhd->bhqk", "0_1_", "0_1_");
  TWO("scores", "bqhd,bkhd->bhqk", "0__1", "0___");
  TWO("scores", "bqhd,bkhd->bhqk", "01__", "0___");
  TWO("scores", "bqhd,bkhd->bhqk", "0_1_", "0___");
  TWO("values", "bhqk,bkhd->bqhd", "01__", "0_1_");
  TWO("values", "bhqk,bkhd->bqhd", "0_1_", "0___");
  TWO("values", "bhqk,bkhd->bqhd", "0__1", "0___");
  TWO("outer", "i,j->ij", "0", "1");
  TWO("outer", "i,j->ij", "0", "_");
  TWO("outer", "i,j->ij", "0", "0");
  TWO("matvec", "ij,j->i", "01", "_");
  TWO("matvec", "ij,j->i", "_0", "_");
  TWO("matvec", "ij,j->i", "0_", "0");
  TWO("dot", "i,i->", "0", "_");
  TWO("dot", "i,i->", "0", "0");
  TWO("multi", "ijk,jkl->il", "_01", "___");
  TWO("multi", "ijk,jkl->il", "0__", "_1_");
  TWO("multi", "ijk,jkl->il", "_0_", "_1_");
  TWO("rowdot", "ij,ij->i", "0_", "0_");
  TWO("rowdot", "ij,ij->i", "0_", "__");
  TWO("rowdot", "ij,ij->i", "01", "0_");
  TWO("unique", "ij,kl->ik", "01", "1_");
  TWO("unique", "ij,kl->ik", "_0", "__");
  TWO("implicit", "ji,jk", "0_", "_1");
  TWO("implicit", "ji,jk", "_0", "_1");
  ONE("sum_rows", "ij->i", "01");
  ONE("sum_rows", "ij->i", "_0");
  ONE("sum_all", "ijk->", "012");
  ONE("sum_all", "ijk->", "0__");
  ONE("sum_mid", "ijk->ik", "_01");
  ONE("sum_mid", "ijk->ik", "01_");
  ONE("transpose", "ij->ji", "01");
  ONE("transpose", "ij->ji", "0_");
  ONE("transpose3", "ijk->kij", "012");
  ONE("transpose3", "ijk->kij", "_10");

  // out_sharding: what JAX refuses without one, it accepts with one.
  cs["out_contracting_both"] = [](json const& c) {
    auto const mesh = m24::make();
    auto const a = put<m24, "_0", 2>(mesh, c["shapes"][0], 0);
    auto const b = put<m24, "0_", 2>(mesh, c["shapes"][1], 1);
    check_result(tessera::einsum<"ij,jk->ik">(a, b, spec_t<"_1">{}), c);
  };
  cs["out_batch"] = [](json const& c) {
    auto const mesh = m24::make();
    auto const a = put<m24, "0_", 2>(mesh, c["shapes"][0], 0);
    auto const b = put<m24, "__", 2>(mesh, c["shapes"][1], 1);
    check_result(tessera::einsum<"ij,ij->i">(a, b, spec_t<"1">{}), c);
  };
  cs["out_scores"] = [](json const& c) {
    auto const mesh = m24::make();
    auto const a = put<m24, "0__1", 4>(mesh, c["shapes"][0], 0);
    auto const b = put<m24, "0__1", 4>(mesh, c["shapes"][1], 1);
    check_result(tessera::einsum<"bqhd,bkhd->bhqk">(a, b, spec_t<"01__">{}), c);
  };

  // jax.grad of sum(einsum(s, a, b) * c): the cotangents' types and values.
  auto grad_case = []<einsum_subscripts S, einsum_subscripts A, einsum_subscripts B, std::size_t RA, std::size_t RB,
                       std::size_t RO>(json const& c) {
    auto const mesh = m24::make();
    auto const a = put<m24, A, RA>(mesh, c["shapes"][0], 0);
    auto const b = put<m24, B, RB>(mesh, c["shapes"][1], 1);
    auto const shape = tessera::eval(tessera::einsum<S>(a, b)).shape();
    json out_shape = json::array();
    for (auto s : shape) out_shape.push_back(s);
    auto const w = tessera::device_put(smooth<RO>(out_shape, 7), tessera::named_sharding(mesh, P<>{}));
    auto const [ga, gb] =
        tessera::grad<0, 1>([&](auto const& x, auto const& y) { return tessera::sum(tessera::einsum<S>(x, y) * w); })(a, b);
    CHECK(tessera::type_of(ga) == c["grad_types"][0].get<std::string>());
    CHECK(tessera::type_of(gb) == c["grad_types"][1].get<std::string>());
    tessera_jax::check_values(tessera::to_host(ga), c["grads"][0], 1e-5);
    tessera_jax::check_values(tessera::to_host(gb), c["grads"][1], 1e-5);
  };
  cs["grad_scores"] = [&](json const& c) {
    grad_case.template operator()<"bqhd,bkhd->bhqk", "0__1", "0___", 4, 4, 4>(c);
  };
  cs["grad_mm"] = [&](json const& c) { grad_case.template operator()<"ij,jk->ik", "01", "_1", 2, 2, 2>(c); };
  cs["grad_unique"] = [&](json const& c) { grad_case.template operator()<"ijk,kl->li", "0_1", "__", 3, 2, 2>(c); };

  CHECK(tessera_jax::check_all("jax_einsum.json", cs) >= 80);
}
