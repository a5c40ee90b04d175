// jax.typeof on Explicit meshes, checked against JAX 0.12 (tests/golden/jax_typeof.json, written
// by tools/jax_reference/gen_typeof.py): element-wise operations (broadcasting lower ranks and
// size-1 dimensions), reductions, transpose, matmul and dot in every form, reshard and JAX's own
// tests/pjit_test.py dot_general cases, matmul and dot with out_sharding, on meshes (8), (2, 4), (2, 2, 2), (2, 2) and (4, 2).
//
// Each case is built here with the specs of the generator's program; its arguments' typeof is
// compared with JAX's first (the same program), then tessera::type_of of the result, and for
// some the values. A program JAX refuses must have a compile-fail test of the same name
// (tests/compile_fail/<name>.cpp), unless the case names a deliberate difference: then tessera's
// answer is compared with the JAX program that computes it (the case's "jax_equivalent").
// The rule_ cases check matmul's sharding rule (core/sharding_rules.hpp) on every spec pair of
// its 1-D and 2-D forms over the (2, 2) mesh, without building a program for each.
#include <catch2/catch.hpp>

#include <cstddef>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

namespace {

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera_jax::json;
using check_fn = std::function<void(json const&)>;

constexpr auto ex = tessera::axis_type::explicit_;

// The generator's meshes (jax.make_mesh(..., axis_types=(Explicit,) * n)), by the name it records.
struct m8 {
  static constexpr char const* name = "m8";
  static auto make() { return tessera::make_mesh<"X">({8}, tessera::axis_types<ex>{}); }
};
struct m24 {
  static constexpr char const* name = "m24";
  static auto make() { return tessera::make_mesh<"X", "Y">({2, 4}, tessera::axis_types<ex, ex>{}); }
};
struct m222 {
  static constexpr char const* name = "m222";
  static auto make() { return tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes); }
};
struct m22 {  // pjit_test's with_explicit_mesh((2, 2), ('x', 'y'))
  static constexpr char const* name = "m22";
  static auto make() { return tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes); }
};
struct m42 {
  static constexpr char const* name = "m42";
  static auto make() { return tessera::make_mesh<"rows", "cols">({4, 2}, tessera::explicit_axes); }
};

/// An operation of the generator's OPS table, by its name there.
template <class F>
struct op {
  char const* name;
  F f;
};
template <class F>
op(char const*, F) -> op<F>;  // clang++ 14 has no deduction for aggregates

op const op_put{"put", [](auto const& a) { return a; }};
op const op_add{"add", [](auto const& a, auto const& b) { return a + b; }};
op const op_sub{"sub", [](auto const& a, auto const& b) { return a - b; }};
op const op_mul{"mul", [](auto const& a, auto const& b) { return a * b; }};
op const op_maximum{"maximum", [](auto const& a, auto const& b) { return tessera::maximum(a, b); }};
op const op_mul_add{"mul_add", [](auto const& a, auto const& b) { return a * b + a; }};
op const op_scale{"scale", [](auto const& a) { return 2.0 * a; }};  // a weakly typed scalar: float32
op const op_sin{"sin", [](auto const& a) { return tessera::sin(a); }};
op const op_exp{"exp", [](auto const& a) { return tessera::exp(a); }};
op const op_neg{"neg", [](auto const& a) { return -a; }};
op const op_matmul{"matmul", [](auto const& a, auto const& b) { return tessera::matmul(a, b); }};
op const op_dot{"dot", [](auto const& a, auto const& b) { return tessera::dot(a, b); }};
op const op_T{"T", [](auto const& a) { return tessera::transpose(a); }};

#define TESSERA_OP(NAME, CALL) op const op_##NAME{#NAME, [](auto const& a) { return CALL(a); }};
TESSERA_OP(sum, tessera::sum<>)
TESSERA_OP(sum0, tessera::sum<0>)
TESSERA_OP(sum1, tessera::sum<1>)
TESSERA_OP(sum2, tessera::sum<2>)
TESSERA_OP(sum02, (tessera::sum<0, 2>))
TESSERA_OP(sum12, (tessera::sum<1, 2>))
TESSERA_OP(max, tessera::max<>)
TESSERA_OP(max0, tessera::max<0>)
TESSERA_OP(max1, tessera::max<1>)
TESSERA_OP(max2, tessera::max<2>)
TESSERA_OP(max01, (tessera::max<0, 1>))
TESSERA_OP(min, tessera::min<>)
TESSERA_OP(min0, tessera::min<0>)
TESSERA_OP(min1, tessera::min<1>)
TESSERA_OP(min01, (tessera::min<0, 1>))
TESSERA_OP(min012, (tessera::min<0, 1, 2>))
TESSERA_OP(mean, tessera::mean<>)
TESSERA_OP(mean0, tessera::mean<0>)
TESSERA_OP(mean1, tessera::mean<1>)
TESSERA_OP(mean01, (tessera::mean<0, 1>))
TESSERA_OP(mean12, (tessera::mean<1, 2>))
TESSERA_OP(transpose102, (tessera::transpose<1, 0, 2>))
TESSERA_OP(transpose201, (tessera::transpose<2, 0, 1>))
TESSERA_OP(transpose120, (tessera::transpose<1, 2, 0>))
TESSERA_OP(transpose021, (tessera::transpose<0, 2, 1>))
#undef TESSERA_OP

/// jnp.matmul and jnp.dot with out_sharding=S.
template <class S>
op const matmul_out{"matmul_out", [](auto const& a, auto const& b) { return tessera::matmul(a, b, S{}); }};
template <class S>
op const dot_out{"dot_out", [](auto const& a, auto const& b) { return tessera::dot(a, b, S{}); }};

template <class S>
op const reshard_to{"reshard", [](auto const& a) { return tessera::reshard(a, S{}); }};

/// jnp.arange(n, dtype=float32).reshape(shape) device_put with spec S, as the generator makes
/// each argument; its typeof must be JAX's (the same program on both sides).
template <std::size_t N, class S, class M>
auto put(M const& mesh, json const& arg) {
  auto const shape = arg.at("shape").get<std::vector<std::size_t>>();
  REQUIRE(shape.size() == N);
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  xt::xarray<float> host = xt::arange<float>(static_cast<float>(n));
  host.reshape(shape);
  auto a = tessera::device_put<N>(host, tessera::named_sharding(mesh, S{}));
  INFO("argument " << arg.dump());
  CHECK(tessera::type_of(a) == arg.at("typeof").get<std::string>());
  return a;
}

/// The case is the program this check builds: its mesh, operation and argument count.
inline void check_program(json const& c, char const* mesh, char const* op_name, std::size_t args) {
  CHECK(c.at("mesh").get<std::string>() == mesh);
  CHECK(c.at("op").get<std::string>() == op_name);
  REQUIRE(c.at("args").size() == args);
}

/// The result's typeof (read off the expression, and again off the evaluated array) and, with
/// Values, its elements.
template <bool Values, class R>
void check_result(R const& r, json const& want) {
  REQUIRE_FALSE(want.value("rejected", false));
  std::string const jax = want.at("typeof").get<std::string>();
  CHECK(tessera::type_of(r) == jax);
  REQUIRE(want.contains("values") == Values);
  if constexpr (Values) {
    tessera::array const x = r;
    CHECK(tessera::type_of(x) == jax);
    tessera_jax::check_values(tessera::to_host(x), want.at("values"));
  }
}

constexpr bool values = true;

template <class M, std::size_t N, class S, bool Values = false, class Op>
check_fn unary(Op o) {
  return [o](json const& c) {
    check_program(c, M::name, o.name, 1);
    auto const mesh = M::make();
    auto const a = put<N, S>(mesh, c.at("args")[0]);
    check_result<Values>(o.f(a), c);
  };
}

template <class M, std::size_t NA, class SA, std::size_t NB, class SB, bool Values = false, class Op>
check_fn binary(Op o) {
  return [o](json const& c) {
    check_program(c, M::name, o.name, 2);
    auto const mesh = M::make();
    auto const a = put<NA, SA>(mesh, c.at("args")[0]);
    auto const b = put<NB, SB>(mesh, c.at("args")[1]);
    check_result<Values>(o.f(a, b), c);
  };
}

/// A program JAX refuses on Explicit axes, and tessera too: tests/compile_fail/<name>.cpp shows
/// tessera's compile error, and quotes JAX's (`// JAX: <first line>`).
std::pair<std::string const, check_fn> rejected_case(char const* name) {
  return {name, [name = std::string(name)](json const& c) {
            CHECK(c.at("rejected").get<bool>());
            CHECK_FALSE(c.contains("difference"));
            std::string const path = std::string(TESSERA_GOLDEN_DIR) + "/../compile_fail/" + name + ".cpp";
            std::ifstream in(path);
            INFO("the compile-fail test " << path << " for JAX's refusal: " << c.at("jax_error").get<std::string>());
            CHECK(in.good());
            if (!in.good()) return;
            std::ostringstream text;
            text << in.rdbuf();
            CHECK(text.str().find("// JAX: " + c.at("jax_error").get<std::string>()) != std::string::npos);
          }};
}

/// A matmul JAX 0.12 refuses and tessera accepts on purpose (docs/differences-from-jax.md):
/// tessera's typeof and values are those of the JAX program that computes the same thing.
template <class M, std::size_t NA, class SA, std::size_t NB, class SB>
check_fn differs(char const* difference) {
  return [difference](json const& c) {
    check_program(c, M::name, "matmul", 2);
    CHECK(c.at("rejected").get<bool>());
    CHECK(c.at("difference").get<std::string>() == difference);
    auto const mesh = M::make();
    auto const a = put<NA, SA>(mesh, c.at("args")[0]);
    auto const b = put<NB, SB>(mesh, c.at("args")[1]);
    tessera::array const r = tessera::matmul(a, b);
    json const& same = c.at("jax_equivalent");
    CHECK(tessera::type_of(r) == same.at("typeof").get<std::string>());
    tessera_jax::check_values(tessera::to_host(r), same.at("values"));
  };
}

// ---- The contraction rule on every spec pair of matmul's 1-D and 2-D forms ----

/// A spec entry spelled as the generator's rule_ names spell it: n, x, y, xy, yx.
tessera::dim_spec rule_entry(std::string const& e) {
  tessera::dim_spec d;
  for (char ch : e) {
    if (ch == 'x') d.push("x");
    if (ch == 'y') d.push("y");
  }
  return d;
}

/// Every spec of rank R over axes x and y that uses no axis twice, with its name.
template <std::size_t R>
std::vector<std::pair<std::string, std::array<tessera::dim_spec, R>>> rule_specs() {
  std::vector<std::string> const entries{"n", "x", "y", "xy", "yx"};
  std::vector<std::pair<std::string, std::array<tessera::dim_spec, R>>> out;
  std::array<std::size_t, R> idx{};
  for (;;) {
    std::array<tessera::dim_spec, R> s{};
    std::string name;
    for (std::size_t d = 0; d < R; ++d) {
      s[d] = rule_entry(entries[idx[d]]);
      name += (d ? "." : "") + entries[idx[d]];
    }
    bool const twice = R == 2 && ((s[0].uses("x") && s[1].uses("x")) || (s[0].uses("y") && s[1].uses("y")));
    if (!twice) out.emplace_back(name, s);
    std::size_t d = R;
    while (d > 0 && ++idx[d - 1] == entries.size()) idx[--d] = 0;
    if (d == 0) return out;
  }
}

template <std::size_t R>
std::string rule_typeof(std::array<tessera::dim_spec, R> const& s) {
  std::string t = "float32[";
  for (std::size_t d = 0; d < R; ++d) (t += d ? "," : "") += tessera::detail::dim_with_axes(4, s[d]);
  return t + "]";
}

/// tessera's contraction rule (what tessera::matmul decides when the program compiles) against
/// JAX's answer for a @ b, both operands of size 4 per dimension on the Explicit (2, 2) mesh.
template <std::size_t RA, std::size_t RB>
void add_rule_checks(tessera_jax::checks& cs) {
  using tessera::detail::contract_rule;
  static constexpr std::array<tessera::mesh_axis, 2> mesh_axes{tessera::mesh_axis("x", ex), tessera::mesh_axis("y", ex)};
  for (auto const& [na, sa] : rule_specs<RA>())
    for (auto const& [nb, sb] : rule_specs<RB>())
      cs["rule_" + na + "_" + nb] = [sa = sa, sb = sb](json const& c) {
        CHECK(c.at("args")[0].at("typeof").get<std::string>() == rule_typeof(sa));
        CHECK(c.at("args")[1].at("typeof").get<std::string>() == rule_typeof(sb));
        auto const rule = contract_rule(sa, sb, mesh_axes);
        constexpr std::size_t R = tessera::detail::matmul_rank(RA, RB);
        std::array<tessera::dim_spec, R> dims{};
        for (std::size_t d = 0; d < R; ++d) dims[d] = tessera::detail::canonical(rule.dims[d]);
        std::string const got = rule.explicit_error ? "refused" : rule_typeof(dims);
        if (!c.value("rejected", false)) {
          CHECK(got == c.at("typeof").get<std::string>());
        } else if (c.contains("difference")) {
          // JAX 0.12 asks for an out_sharding where the contracting dimension is sharded alike on
          // both sides; tessera gives the free dimensions' layout, JAX's answer with that out_sharding.
          CHECK(c.at("difference").get<std::string>() == "contracting_sharded_alike");
          CHECK((sa[RA - 1] == sb[0] && !sb[0].is_none()));
          CHECK(got == c.at("jax_equivalent").at("typeof").get<std::string>());
        } else {
          INFO("JAX: " << c.at("jax_error").get<std::string>() << "; tessera: " << got);
          CHECK(rule.explicit_error);
        }
      };
}

}  // namespace

TEST_CASE("jax.typeof on Explicit meshes, against JAX 0.12", "[jax][typeof]") {
  tessera::runtime rt{8};
  tessera_jax::checks checks{
    {"put_m8_X", unary<m8, 1, P<"X">>(op_put)},
    {"put_m8_2d_none_X", unary<m8, 2, P<none, "X">>(op_put)},
    {"put_m24_XY", unary<m24, 2, P<"X", "Y">>(op_put)},
    {"put_m24_YX", unary<m24, 2, P<"Y", "X">>(op_put)},
    {"put_m24_tuple_XY", unary<m24, 2, P<axes<"X", "Y">, none>>(op_put)},
    {"put_m24_tuple_YX", unary<m24, 2, P<none, axes<"Y", "X">>>(op_put)},
    {"put_m24_replicated", unary<m24, 2, P<>>(op_put)},
    {"put_m24_rank3", unary<m24, 3, P<"X", none, "Y">>(op_put)},
    {"put_m222_XYZ", unary<m222, 3, P<"X", "Y", "Z">>(op_put)},
    {"put_m222_tuple", unary<m222, 2, P<axes<"X", "Y", "Z">, none>>(op_put)},
    {"put_m222_tuple_ZX", unary<m222, 2, P<axes<"Z", "X">, "Y">>(op_put)},
    {"put_m42_rows_cols", unary<m42, 2, P<"rows", "cols">>(op_put)},
    {"ew_same_XY_add", binary<m24, 2, P<"X", "Y">, 2, P<"X", "Y">, values>(op_add)},
    {"ew_X_vs_replicated_add", binary<m24, 2, P<"X", none>, 2, P<>>(op_add)},
    {"ew_replicated_vs_X_mul", binary<m24, 2, P<>, 2, P<"X", none>, values>(op_mul)},
    {"ew_X_vs_Y_add", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(op_add)},
    {"ew_Y_vs_X_sub", binary<m24, 2, P<"Y", none>, 2, P<none, "X">>(op_sub)},
    {"ew_XY_vs_none_Y_mul", binary<m24, 2, P<"X", "Y">, 2, P<none, "Y">>(op_mul)},
    {"ew_rank1_right", binary<m24, 2, P<"X", none>, 1, P<"Y">, values>(op_add)},
    {"ew_rank1_right_replicated", binary<m24, 2, P<"X", "Y">, 1, P<>>(op_add)},
    {"ew_rank1_left", binary<m24, 1, P<"Y">, 2, P<"X", none>>(op_mul)},
    {"ew_rank1_left_replicated", binary<m24, 1, P<>, 2, P<none, "Y">>(op_sub)},
    {"ew_size1_row", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(op_add)},
    {"ew_size1_col", binary<m24, 2, P<none, "Y">, 2, P<"X", none>, values>(op_add)},
    {"ew_size1_both", binary<m24, 2, P<none, "Y">, 2, P<"X", none>>(op_mul)},
    {"ew_tuple_same", binary<m24, 2, P<axes<"X", "Y">, none>, 2, P<axes<"X", "Y">, none>>(op_add)},
    {"ew_tuple_vs_replicated", binary<m24, 2, P<axes<"X", "Y">, none>, 2, P<>>(op_add)},
    {"ew_tuple_YX_vs_none", binary<m24, 2, P<none, none>, 2, P<axes<"Y", "X">, none>>(op_mul)},
    {"ew_tuple_col_rank1", binary<m24, 2, P<none, axes<"X", "Y">>, 1, P<axes<"X", "Y">>>(op_add)},
    {"ew_rank3_vs_rank2", binary<m24, 3, P<"X", none, "Y">, 2, P<>>(op_add)},
    {"ew_rank3_vs_rank2_sharded", binary<m24, 3, P<"X", none, none>, 2, P<none, "Y">, values>(op_add)},
    {"ew_rank3_size1", binary<m24, 3, P<"X", none, "Y">, 3, P<>>(op_mul)},
    {"ew_maximum", binary<m24, 2, P<"X", none>, 2, P<none, "Y">>(op_maximum)},
    {"ew_mul_add", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(op_mul_add)},
    {"ew_scale", unary<m24, 2, P<"X", "Y">>(op_scale)},
    {"ew_sin", unary<m24, 2, P<"Y", "X">>(op_sin)},
    {"ew_exp_tuple", unary<m24, 2, P<none, axes<"X", "Y">>>(op_exp)},
    {"ew_neg", unary<m24, 3, P<none, "X", "Y">>(op_neg)},
    {"ew_m8_vector", binary<m8, 1, P<"X">, 1, P<>, values>(op_add)},
    {"ew_m8_rows", binary<m8, 2, P<"X", none>, 2, P<>>(op_add)},
    {"ew_m8_cols_rank1", binary<m8, 2, P<none, "X">, 1, P<"X">>(op_add)},
    {"ew_m8_size1", binary<m8, 2, P<"X", none>, 2, P<>>(op_mul)},
    {"ew_m8_replicated_both", binary<m8, 2, P<>, 2, P<>>(op_sub)},
    {"ew_m222_same", binary<m222, 3, P<"X", "Y", "Z">, 3, P<"X", "Y", "Z">>(op_add)},
    {"ew_m222_merge", binary<m222, 3, P<"X", none, none>, 3, P<none, "Y", "Z">, values>(op_add)},
    {"ew_m222_tuple3", binary<m222, 2, P<axes<"X", "Y", "Z">, none>, 2, P<>>(op_mul)},
    {"ew_m222_tuple_rank1", binary<m222, 2, P<"Z", axes<"X", "Y">>, 1, P<axes<"X", "Y">>>(op_add)},
    {"ew_m222_rank3_rank1", binary<m222, 3, P<"X", "Y", none>, 1, P<"Z">>(op_add)},
    {"ew_m222_size1", binary<m222, 3, P<"X", none, "Z">, 3, P<none, "Y", none>>(op_add)},
    {"ew_m42_names", binary<m42, 2, P<"rows", none>, 2, P<none, "cols">>(op_add)},
    {"reduce_XY_sum0", unary<m24, 2, P<"X", "Y">, values>(op_sum0)},
    {"reduce_XY_sum1", unary<m24, 2, P<"X", "Y">>(op_sum1)},
    {"reduce_XY_sum", unary<m24, 2, P<"X", "Y">>(op_sum)},
    {"reduce_XY_max0", unary<m24, 2, P<"X", "Y">>(op_max0)},
    {"reduce_XY_max1", unary<m24, 2, P<"X", "Y">, values>(op_max1)},
    {"reduce_XY_min0", unary<m24, 2, P<"X", "Y">>(op_min0)},
    {"reduce_XY_min1", unary<m24, 2, P<"X", "Y">>(op_min1)},
    {"reduce_XY_mean0", unary<m24, 2, P<"X", "Y">>(op_mean0)},
    {"reduce_XY_mean1", unary<m24, 2, P<"X", "Y">>(op_mean1)},
    {"reduce_XY_mean", unary<m24, 2, P<"X", "Y">, values>(op_mean)},
    {"reduce_X_none_sum0", unary<m24, 2, P<"X", none>>(op_sum0)},
    {"reduce_X_none_sum1", unary<m24, 2, P<"X", none>>(op_sum1)},
    {"reduce_X_none_max0", unary<m24, 2, P<"X", none>>(op_max0)},
    {"reduce_tuple_sum0", unary<m24, 2, P<axes<"X", "Y">, none>>(op_sum0)},
    {"reduce_tuple_sum1", unary<m24, 2, P<axes<"X", "Y">, none>, values>(op_sum1)},
    {"reduce_tuple_max1", unary<m24, 2, P<axes<"X", "Y">, none>>(op_max1)},
    {"reduce_tuple_mean01", unary<m24, 2, P<axes<"X", "Y">, none>>(op_mean01)},
    {"reduce_rank3_sum0", unary<m24, 3, P<"X", none, "Y">>(op_sum0)},
    {"reduce_rank3_sum1", unary<m24, 3, P<"X", none, "Y">>(op_sum1)},
    {"reduce_rank3_sum2", unary<m24, 3, P<"X", none, "Y">>(op_sum2)},
    {"reduce_rank3_sum02", unary<m24, 3, P<"X", none, "Y">, values>(op_sum02)},
    {"reduce_rank3_sum12", unary<m24, 3, P<"X", none, "Y">>(op_sum12)},
    {"reduce_rank3_mean01", unary<m24, 3, P<"X", none, "Y">>(op_mean01)},
    {"reduce_rank3_max2", unary<m24, 3, P<"X", none, "Y">, values>(op_max2)},
    {"reduce_rank3_min012", unary<m24, 3, P<"X", none, "Y">>(op_min012)},
    {"reduce_rank3_sum", unary<m24, 3, P<"X", none, "Y">>(op_sum)},
    {"reduce_m8_vector_sum", unary<m8, 1, P<"X">, values>(op_sum)},
    {"reduce_m8_vector_max0", unary<m8, 1, P<"X">>(op_max0)},
    {"reduce_m8_vector_min", unary<m8, 1, P<"X">>(op_min)},
    {"reduce_m8_cols_sum0", unary<m8, 2, P<none, "X">>(op_sum0)},
    {"reduce_m8_cols_sum1", unary<m8, 2, P<none, "X">>(op_sum1)},
    {"reduce_m8_cols_mean1", unary<m8, 2, P<none, "X">>(op_mean1)},
    {"reduce_m222_sum0", unary<m222, 3, P<"X", "Y", "Z">>(op_sum0)},
    {"reduce_m222_sum1", unary<m222, 3, P<"X", "Y", "Z">>(op_sum1)},
    {"reduce_m222_sum2", unary<m222, 3, P<"X", "Y", "Z">>(op_sum2)},
    {"reduce_m222_sum02", unary<m222, 3, P<"X", "Y", "Z">, values>(op_sum02)},
    {"reduce_m222_mean12", unary<m222, 3, P<"X", "Y", "Z">>(op_mean12)},
    {"reduce_m222_max", unary<m222, 3, P<"X", "Y", "Z">>(op_max)},
    {"reduce_m222_min01", unary<m222, 3, P<"X", "Y", "Z">>(op_min01)},
    {"reduce_m222_tuple_sum0", unary<m222, 2, P<axes<"X", "Y">, "Z">>(op_sum0)},
    {"reduce_m222_tuple_sum1", unary<m222, 2, P<axes<"X", "Y">, "Z">>(op_sum1)},
    {"reduce_m222_tuple_max01", unary<m222, 2, P<axes<"X", "Y">, "Z">>(op_max01)},
    {"transpose_XY", unary<m24, 2, P<"X", "Y">, values>(op_T)},
    {"transpose_X_none", unary<m24, 2, P<"X", none>>(op_T)},
    {"transpose_tuple", unary<m24, 2, P<axes<"X", "Y">, none>>(op_T)},
    {"transpose_rank3_default", unary<m24, 3, P<"X", none, "Y">>(op_T)},
    {"transpose_rank3_102", unary<m24, 3, P<"X", none, "Y">, values>(op_transpose102)},
    {"transpose_rank3_201", unary<m24, 3, P<"X", none, "Y">>(op_transpose201)},
    {"transpose_m8", unary<m8, 2, P<"X", none>>(op_T)},
    {"transpose_m222_default", unary<m222, 3, P<"X", "Y", "Z">>(op_T)},
    {"transpose_m222_120", unary<m222, 3, P<"X", "Y", "Z">>(op_transpose120)},
    {"transpose_m222_021", unary<m222, 3, P<axes<"X", "Z">, "Y", none>>(op_transpose021)},
    {"mm_rows", binary<m24, 2, P<"X", none>, 2, P<>, values>(op_matmul)},
    {"mm_cols", binary<m24, 2, P<>, 2, P<none, "Y">>(op_matmul)},
    {"mm_rows_cols", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(op_matmul)},
    {"mm_rows_cols_YX", binary<m24, 2, P<"Y", none>, 2, P<none, "X">>(op_matmul)},
    {"mm_k_left", binary<m24, 2, P<none, "X">, 2, P<>, values>(op_matmul)},
    {"mm_k_right", binary<m24, 2, P<>, 2, P<"Y", none>, values>(op_matmul)},
    {"mm_rows_k_left", binary<m24, 2, P<"X", "Y">, 2, P<>, values>(op_matmul)},
    {"mm_rows_k_right", binary<m24, 2, P<"X", none>, 2, P<"Y", none>>(op_matmul)},
    {"mm_fsdp", binary<m24, 2, P<"X", none>, 2, P<"X", none>, values>(op_matmul)},
    {"mm_half_tp", binary<m24, 2, P<none, "Y">, 2, P<none, "Y">, values>(op_matmul)},
    {"mm_k_left_cols_same", binary<m24, 2, P<"X", "Y">, 2, P<none, "Y">, values>(op_matmul)},
    {"mm_tuple_rows", binary<m24, 2, P<axes<"X", "Y">, none>, 2, P<>>(op_matmul)},
    {"mm_tuple_cols", binary<m24, 2, P<>, 2, P<none, axes<"X", "Y">>>(op_matmul)},
    {"mm_tuple_k_left", binary<m24, 2, P<none, axes<"X", "Y">>, 2, P<>, values>(op_matmul)},
    {"mm_tuple_fsdp", binary<m24, 2, P<axes<"X", "Y">, none>, 2, P<axes<"X", "Y">, none>, values>(op_matmul)},
    {"mm_replicated", binary<m24, 2, P<>, 2, P<>>(op_matmul)},
    {"mm_rect", binary<m24, 2, P<none, "X">, 2, P<none, "Y">>(op_matmul)},
    {"vm_cols", binary<m24, 1, P<>, 2, P<none, "Y">, values>(op_matmul)},
    {"vm_k_left", binary<m24, 1, P<"X">, 2, P<>, values>(op_matmul)},
    {"vm_k_right_cols", binary<m24, 1, P<>, 2, P<"X", "Y">>(op_matmul)},
    {"vm_k_left_cols_same", binary<m24, 1, P<"X">, 2, P<none, "X">, values>(op_matmul)},
    {"mv_rows", binary<m24, 2, P<"X", none>, 1, P<>, values>(op_matmul)},
    {"mv_k_left", binary<m24, 2, P<none, "Y">, 1, P<>>(op_matmul)},
    {"mv_k_right", binary<m24, 2, P<"X", none>, 1, P<"Y">, values>(op_matmul)},
    {"mv_k_right_rows_same", binary<m24, 2, P<"X", none>, 1, P<"X">>(op_matmul)},
    {"vv_k_left", binary<m24, 1, P<"X">, 1, P<>, values>(op_matmul)},
    {"vv_replicated", binary<m24, 1, P<>, 1, P<"Y">>(op_matmul)},
    {"vv_tuple", binary<m24, 1, P<axes<"X", "Y">>, 1, P<>>(op_matmul)},
    {"bmm_batch", binary<m24, 3, P<"X", none, none>, 3, P<"X", none, none>, values>(op_matmul)},
    {"bmm_batch_rows", binary<m24, 3, P<"X", "Y", none>, 3, P<"X", none, none>>(op_matmul)},
    {"bmm_batch_cols", binary<m24, 3, P<"X", none, none>, 3, P<"X", none, "Y">, values>(op_matmul)},
    {"bmm_batch_k_left", binary<m24, 3, P<"X", none, "Y">, 3, P<"X", none, none>, values>(op_matmul)},
    {"bmm_batch_k_right", binary<m24, 3, P<none, "X", none>, 3, P<none, "Y", none>>(op_matmul)},
    {"bmm_3d_2d", binary<m24, 3, P<"X", none, none>, 2, P<none, "Y">, values>(op_matmul)},
    {"bmm_2d_3d", binary<m24, 2, P<"Y", none>, 3, P<"X", none, none>, values>(op_matmul)},
    {"bmm_3d_1d", binary<m24, 3, P<"X", "Y", none>, 1, P<>>(op_matmul)},
    {"bmm_1d_3d", binary<m24, 1, P<>, 3, P<"X", none, "Y">>(op_matmul)},
    {"bmm_3d_1d_k", binary<m24, 3, P<"X", none, none>, 1, P<"Y">>(op_matmul)},
    {"bmm_size1_left", binary<m24, 3, P<>, 3, P<"X", none, none>, values>(op_matmul)},
    {"bmm_size1_right", binary<m24, 3, P<"X", none, "Y">, 3, P<>>(op_matmul)},
    {"bmm_replicated_batch", binary<m24, 3, P<none, "X", none>, 3, P<none, none, "Y">>(op_matmul)},
    {"bmm_m222_batch_rows_cols", binary<m222, 3, P<"X", "Y", none>, 3, P<"X", none, "Z">, values>(op_matmul)},
    {"bmm_m222_4d_broadcast", binary<m222, 4, P<"X", none, none, none>, 4, P<none, "Y", none, none>>(op_matmul)},
    {"bmm_m222_4d_k", binary<m222, 4, P<"X", "Y", none, "Z">, 4, P<"X", "Y", none, none>>(op_matmul)},
    {"mm_m8_rows", binary<m8, 2, P<"X", none>, 2, P<>>(op_matmul)},
    {"mm_m8_seed_x_at_W", binary<m8, 1, P<"X">, 2, P<>, values>(op_matmul)},
    {"mm_m8_fsdp", binary<m8, 2, P<"X", none>, 2, P<"X", none>>(op_matmul)},
    {"mm_m222_rows_k_cols", binary<m222, 2, P<"X", "Y">, 2, P<none, "Z">, values>(op_matmul)},
    {"mm_m222_tuple_rows", binary<m222, 2, P<axes<"X", "Y">, none>, 2, P<none, "Z">>(op_matmul)},
    {"mm_m222_k_right_tuple", binary<m222, 2, P<"Z", none>, 2, P<axes<"X", "Y">, none>>(op_matmul)},
    {"mm_m42_names", binary<m42, 2, P<"rows", none>, 2, P<none, "cols">>(op_matmul)},
    {"dot_2d_2d", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(op_dot)},
    {"dot_2d_2d_k", binary<m24, 2, P<none, "Y">, 2, P<>>(op_dot)},
    {"dot_1d_2d", binary<m24, 1, P<>, 2, P<none, axes<"X", "Y">>>(op_dot)},
    {"dot_2d_1d", binary<m24, 2, P<axes<"Y", "X">, none>, 1, P<>>(op_dot)},
    {"dot_1d_1d", binary<m24, 1, P<"Y">, 1, P<>, values>(op_dot)},
    {"dot_fsdp", binary<m24, 2, P<"X", none>, 2, P<"X", none>>(op_dot)},
    {"reshard_rows_to_cols", unary<m24, 2, P<"X", none>>(reshard_to<P<none, "Y">>)},
    {"reshard_to_replicated", unary<m24, 2, P<"X", "Y">>(reshard_to<P<>>)},
    {"reshard_to_tuple", unary<m24, 2, P<>>(reshard_to<P<axes<"X", "Y">, none>>)},
    {"reshard_swap", unary<m24, 2, P<"X", "Y">, values>(reshard_to<P<"Y", "X">>)},
    {"reshard_tuple_cols", unary<m24, 2, P<"X", none>>(reshard_to<P<none, axes<"X", "Y">>>)},
    {"reshard_short_spec", unary<m24, 3, P<none, none, "Y">>(reshard_to<P<"X">>)},
    {"reshard_m8", unary<m8, 1, P<>>(reshard_to<P<"X">>)},
    {"reshard_m222", unary<m222, 3, P<"X", "Y", "Z">>(reshard_to<P<axes<"X", "Y">, "Z", none>>)},
    {"reshard_m222_tuple3", unary<m222, 2, P<"X", "Y">>(reshard_to<P<axes<"Z", "Y", "X">, none>>)},
    {"pjit_dot_general_x_y", binary<m22, 2, P<"x", none>, 2, P<none, "y">, values>(op_matmul)},
    {"pjit_dot_general_x_None", binary<m22, 2, P<"x", none>, 2, P<none, none>, values>(op_matmul)},
    {"pjit_dot_general_contracting2", binary<m22, 2, P<"x", "y">, 2, P<none, none>, values>(op_matmul)},
    {"pjit_dot_general_fsdp", binary<m22, 2, P<"x", none>, 2, P<"x", none>, values>(op_matmul)},
    {"pjit_dot_general_half_tp", binary<m22, 2, P<none, "y">, 2, P<none, "y">, values>(op_matmul)},
    rejected_case("jax_reject_elementwise_different_axes"),
    rejected_case("jax_reject_elementwise_swapped_axes"),
    rejected_case("jax_reject_elementwise_tuple_vs_axis"),
    rejected_case("jax_reject_elementwise_broadcast_different_axes"),
    rejected_case("jax_reject_elementwise_result_uses_axis_twice"),
    rejected_case("jax_reject_elementwise_tuple_axis_twice"),
    rejected_case("jax_reject_matmul_result_uses_axis_twice"),
    rejected_case("jax_reject_matmul_contracting_on_different_axes"),
    rejected_case("jax_reject_vector_contracting_on_different_axes"),
    rejected_case("jax_reject_matmul_batch_on_different_axes"),
    rejected_case("jax_reject_matmul_batch_result_uses_axis_twice"),
    rejected_case("jax_reject_transpose_not_a_permutation"),
    rejected_case("jax_reject_reduction_axis_out_of_range"),
    rejected_case("jax_reject_reduction_axis_repeated"),
    rejected_case("jax_reject_matmul_operand_of_rank_0"),
    rejected_case("jax_reject_elementwise_different_meshes"),
    rejected_case("jax_reject_spec_uses_axis_twice"),
    rejected_case("jax_reject_spec_axis_not_in_mesh"),
    rejected_case("jax_reject_spec_longer_than_rank"),
    {"out_mm_contracting_different_axes", binary<m22, 2, P<"x", "y">, 2, P<"x", "y">, values>(matmul_out<P<"x", none>>)},
    {"out_mm_contracting_different_axes_to_y", binary<m22, 2, P<"x", "y">, 2, P<"x", "y">, values>(matmul_out<P<none, "y">>)},
    {"out_mm_result_uses_axis_twice", binary<m22, 2, P<"x", none>, 2, P<none, "x">, values>(matmul_out<P<"x", none>>)},
    {"out_mm_k_alike_replicated", binary<m24, 2, P<none, "X">, 2, P<"X", none>, values>(matmul_out<P<none, none>>)},
    {"out_mm_k_alike_reduce_scatter_rows", binary<m24, 2, P<none, "X">, 2, P<"X", none>, values>(matmul_out<P<"X", none>>)},
    {"out_mm_k_alike_reduce_scatter_cols", binary<m24, 2, P<none, "X">, 2, P<"X", none>, values>(matmul_out<P<none, "X">>)},
    {"out_mm_k_alike_tuple_to_XY", binary<m24, 2, P<none, axes<"X", "Y">>, 2, P<axes<"X", "Y">, none>, values>(matmul_out<P<axes<"X", "Y">, none>>)},
    {"out_mm_k_alike_rows_kept", binary<m24, 2, P<"X", "Y">, 2, P<"Y", none>, values>(matmul_out<P<"X", none>>)},
    {"out_mm_k_alike_rows_and_cols", binary<m24, 2, P<"X", "Y">, 2, P<"Y", none>, values>(matmul_out<P<"X", "Y">>)},
    {"out_mm_plain_resharded", binary<m24, 2, P<"X", none>, 2, P<none, "Y">, values>(matmul_out<P<"Y", "X">>)},
    {"out_vv_k_alike", binary<m8, 1, P<"X">, 1, P<"X">, values>(matmul_out<P<>>)},
    {"out_vv_contracting_different_axes", binary<m24, 1, P<"X">, 1, P<"Y">, values>(matmul_out<P<>>)},
    {"out_mv_k_alike_to_X", binary<m8, 2, P<none, "X">, 1, P<"X">, values>(matmul_out<P<"X">>)},
    {"out_dot_k_alike", binary<m24, 2, P<none, "Y">, 2, P<"Y", none>, values>(dot_out<P<"Y", none>>)},
    {"out_dot_vm", binary<m24, 1, P<"X">, 2, P<"Y", "X">, values>(dot_out<P<"X">>)},
    {"pjit_dot_general_contracting1", differs<m22, 2, P<"x", "y">, 2, P<"y", none>>("contracting_sharded_alike")},
    {"pjit_dot_general_other_half_tp", differs<m22, 2, P<none, "y">, 2, P<"y", none>>("contracting_sharded_alike")},
    {"mm_k_both_alike", differs<m24, 2, P<none, "X">, 2, P<"X", none>>("contracting_sharded_alike")},
    {"mm_k_both_alike_tuple", differs<m24, 2, P<none, axes<"X", "Y">>, 2, P<axes<"X", "Y">, none>>("contracting_sharded_alike")},
    {"mm_k_both_alike_rows", differs<m24, 2, P<"X", "Y">, 2, P<"Y", none>>("contracting_sharded_alike")},
    {"vv_k_both_alike", differs<m8, 1, P<"X">, 1, P<"X">>("contracting_sharded_alike")},
    {"mv_k_both_alike", differs<m8, 2, P<none, "X">, 1, P<"X">>("contracting_sharded_alike")},
    {"bmm_k_both_alike", differs<m24, 3, P<"X", none, "Y">, 3, P<"X", "Y", none>>("contracting_sharded_alike")},
    {"bmm_batch_one_side_left", differs<m24, 3, P<"X", none, none>, 3, P<>>("matmul_batch_sharded_one_side")},
    {"bmm_batch_one_side_right", differs<m222, 3, P<none, "Y", none>, 3, P<"Z", none, none>>("matmul_batch_sharded_one_side")},
  };
  // matmul's sharding rule on every spec pair of its 1-D and 2-D forms (the rule_ cases).
  add_rule_checks<2, 2>(checks);
  add_rule_checks<1, 2>(checks);
  add_rule_checks<2, 1>(checks);
  add_rule_checks<1, 1>(checks);
  CHECK(tessera_jax::check_all("jax_typeof.json", checks) == checks.size());
}
