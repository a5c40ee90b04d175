// jax.jit of element-wise, reduction, matmul and composed programs on meshes of Auto axes,
// checked against JAX 0.12 itself (tests/golden/jax_jit.json, written by
// tools/jax_reference/gen_jit.py). Each case puts the inputs JAX used on a mesh of the same
// shape with the same specs, runs the same program under tessera::jit, and compares
//   - the output shape and values (exact, or within the case's rtol where exp, sin or a
//     division may round differently), and
//   - the output sharding spec tessera propagated with the one XLA chose (trailing Nones
//     dropped), except in the rows marked as deliberate differences, where the check asserts
//     tessera's documented spec instead (docs/global-view.md, "Sharding rules").
// The input specs written in C++ are checked against the golden case's, so a case cannot run
// with other specs than JAX's.

#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera_jax::json;
using tessera_jax::spec_json;
using tessera_jax::without_trivial_axes;

namespace {

constexpr char const* golden_file = "jax_jit.json";

/// One input of a case: its rank and its PartitionSpec, as types (the spec is part of tessera's array type).
template <std::size_t N, class Spec>
struct in {
  static constexpr std::size_t rank = N;
  using spec = Spec;
};



/// The case's mesh: Auto axes "x", "y", "z" (as many as the mesh has), over the first devices.
template <std::size_t R>
auto mesh_of(json const& c) {
  std::vector<int> const sizes = tessera_jax::vec<int>(c.at("mesh"));
  if constexpr (R == 1) return tessera::make_mesh<"x">({sizes[0]});
  else if constexpr (R == 2) return tessera::make_mesh<"x", "y">({sizes[0], sizes[1]});
  else return tessera::make_mesh<"x", "y", "z">({sizes[0], sizes[1], sizes[2]});
}

/// Whether the golden case fits the C++ case: its mesh has R axes named x, y, z, and each input
/// has In's rank, spec and as many values as its shape holds. CHECKs, not REQUIREs, so that one
/// broken case does not hide the others (they all run in one test case).
template <std::size_t R, class... Ins>
bool case_fits(json const& c) {
  std::vector<std::string> const names{"x", "y", "z"};
  bool ok = c.at("mesh").size() == R &&
            tessera_jax::vec<std::string>(c.at("axis_names")) == std::vector<std::string>(names.begin(), names.begin() + R);
  CHECK(ok);
  json const& inputs = c.at("inputs");
  CHECK(inputs.size() == sizeof...(Ins));
  if (!ok || inputs.size() != sizeof...(Ins)) return false;
  std::size_t i = 0;
  auto fits = [&]<class In>(In) {
    constexpr std::size_t N = In::rank;
    json const& input = inputs[i++];
    INFO("input " << i - 1 << ": the C++ case's spec and rank against the golden case's");
    CHECK(spec_json(In::spec::dims, N) == input.at("spec"));
    CHECK(input.at("shape").size() == N);
    std::size_t n = 1;
    for (auto const& d : input.at("shape")) n *= d.get<std::size_t>();
    CHECK(input.at("values").size() == n);
    return spec_json(In::spec::dims, N) == input.at("spec") && input.at("shape").size() == N &&
           input.at("values").size() == n;
  };
  bool all = true;
  ((all = fits(Ins{}) && all), ...);  // every input checked, even after a bad one
  return all;
}

/// An input of the case (checked by case_fits), put on `m` with In's spec.
template <class In, class M>
auto put_input(M const& m, json const& input) {
  constexpr std::size_t N = In::rank;
  typename xt::xtensor<float, N>::shape_type sh{};
  for (std::size_t d = 0; d < N; ++d) sh[d] = input.at("shape")[d].get<std::size_t>();
  auto host = xt::xtensor<float, N>::from_shape(sh);
  std::vector<float> const v = tessera_jax::vec<float>(input.at("values"));
  std::copy(v.begin(), v.end(), host.begin());
  return tessera::device_put(host, tessera::named_sharding(m, typename In::spec{}));
}

/// Runs case `c` under tessera::jit(f) and compares with JAX's answer. `tessera_spec`, when not
/// null, is tessera's documented output spec for a case marked as a deliberate difference.
template <std::size_t R, class... Ins, class F>
void run_case(json const& c, F const& f, char const* tessera_spec) {
  if (!case_fits<R, Ins...>(c)) return;
  auto const m = mesh_of<R>(c);
  json const& inputs = c.at("inputs");
  auto const args = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(put_input<Ins>(m, inputs[I])...);
  }(std::index_sequence_for<Ins...>{});
  auto const y = std::apply(tessera::jit(f), args);
  using Y = std::remove_cvref_t<decltype(y)>;
  STATIC_REQUIRE(std::is_same_v<typename Y::value_type, float>);

  auto const host = tessera::to_host(y);
  std::vector<std::size_t> const shape(host.shape().begin(), host.shape().end());
  CHECK(shape == tessera_jax::vec<std::size_t>(c.at("out_shape")));
  if (shape != tessera_jax::vec<std::size_t>(c.at("out_shape"))) return;
  tessera_jax::check_values(host, c.at("out_values"), c.at("rtol").get<double>());

  json const got = spec_json(Y::sharding_type::spec_dims, Y::rank);
  INFO("output spec: tessera " << got.dump() << ", JAX " << c.at("out_spec").dump());
  if (tessera_spec == nullptr) {
    CHECK_FALSE(c.contains("difference"));
    CHECK(without_trivial_axes(got, c.at("mesh"), c.at("axis_names")) ==
          without_trivial_axes(c.at("out_spec"), c.at("mesh"), c.at("axis_names")));
  } else {
    CHECK(c.contains("difference"));  // the golden case names the difference
    CHECK(got == json::parse(tessera_spec));
    CHECK(got != c.at("out_spec"));  // still a difference: else drop the mark
  }
}

/// Registers the check of each named case: program f on a mesh of R axes with inputs Ins.
template <std::size_t R, class... Ins, class F>
void same(tessera_jax::checks& cs, F f, std::initializer_list<char const*> names) {
  for (char const* n : names) cs[n] = [f](json const& c) { run_case<R, Ins...>(c, f, nullptr); };
}

/// Registers a case where tessera's Auto-axis rule deliberately picks another output spec than
/// XLA's propagation; `tessera_spec` is tessera's (JSON, as the golden writes specs).
template <std::size_t R, class... Ins, class F>
void differs(tessera_jax::checks& cs, F f, char const* name, char const* tessera_spec) {
  cs[name] = [f, tessera_spec](json const& c) { run_case<R, Ins...>(c, f, tessera_spec); };
}

// The programs, as gen_jit.py's PROGRAMS writes them in jnp.
auto const add = [](auto a, auto b) { return a + b; };
auto const sin2p1 = [](auto x) { return 2 * tessera::sin(x) + 1; };
auto const mulsub = [](auto a, auto b, auto c) { return a * b - c; };
auto const scalars = [](auto x) { return x * 3 + 0.5; };
auto const relu_sub = [](auto a, auto b) { return tessera::relu(a - b); };
auto const sum0 = [](auto x) { return tessera::sum<0>(x); };
auto const sum1 = [](auto x) { return tessera::sum<1>(x); };
auto const sum_all = [](auto x) { return tessera::sum(x); };
auto const max0 = [](auto x) { return tessera::max<0>(x); };
auto const max1 = [](auto x) { return tessera::max<1>(x); };
auto const max_all = [](auto x) { return tessera::max(x); };
auto const min0 = [](auto x) { return tessera::min<0>(x); };
auto const min1 = [](auto x) { return tessera::min<1>(x); };
auto const min_all = [](auto x) { return tessera::min(x); };
auto const mean0 = [](auto x) { return tessera::mean<0>(x); };
auto const mean1 = [](auto x) { return tessera::mean<1>(x); };
auto const mean_all = [](auto x) { return tessera::mean(x); };
auto const sum02 = [](auto x) { return tessera::sum<0, 2>(x); };
auto const mean2 = [](auto x) { return tessera::mean<2>(x); };
auto const max01 = [](auto x) { return tessera::max<0, 1>(x); };
auto const matmul = [](auto a, auto b) { return tessera::matmul(a, b); };
auto const scaled_matmul = [](auto a, auto b) { return 2.0 * tessera::matmul(a, b) - tessera::matmul(a, b); };
auto const layer = [](auto x, auto w, auto b) { return tessera::relu(tessera::matmul(x, w) + b); };
auto const sigmoid_layer = [](auto x, auto w, auto b) { return tessera::sigmoid(tessera::matmul(x, w) + b); };
auto const softmax0 = [](auto x) {
  auto e = tessera::exp(x);
  return e / tessera::sum<0>(e);
};
// jnp.sum(e, axis=1, keepdims=True) has no tessera spelling: the softmax over rows is the one
// over columns of the transpose, transposed back.
auto const softmax1 = [](auto x) {
  auto e = tessera::exp(tessera::transpose(x));
  return tessera::transpose(e / tessera::sum<0>(e));
};
auto const center0 = [](auto x) { return x - tessera::mean<0>(x); };

using in_r2 = in<2, P<>>;

tessera_jax::checks all_checks() {
  tessera_jax::checks cs;

  // Element-wise.
  same<2, in<2, P<"x", "y">>, in<2, P<"x", "y">>>(cs, add, {"add@2x4:xy,xy", "add@4x2:xy,xy"});
  same<1, in<2, P<"x", none>>, in<2, P<"x", none>>>(cs, add, {"add@8:x_,x_", "add@2:x_,x_", "add@4:x_,x_", "add@1:x_,x_"});
  same<2, in<2, P<"x", "y">>, in<2, P<none, "y">>>(cs, add, {"add@2x4:xy,_y"});
  same<2, in<2, P<"x", none>>, in<2, P<none, "y">>>(cs, add, {"add@2x4:x_,_y"});
  same<2, in_r2, in<2, P<"x", "y">>>(cs, add, {"add@2x4:r,xy"});
  same<2, in_r2, in_r2>(cs, add, {"add@2x4:r,r"});
  same<2, in<2, P<"x", "y">>, in_r2>(cs, add, {"add@2x2:xy,r"});
  same<1, in<2, P<"x", none>>, in<2, P<none, "x">>>(cs, add, {"add@8:x_,_x"});
  same<2, in<2, P<"x", none>>, in<2, P<none, "x">>>(cs, add, {"add@2x4:x_,_x"});
  same<2, in<2, P<none, "y">>, in<2, P<"y", none>>>(cs, add, {"add@2x4:_y,y_"});
  // XLA replicates the result of a conflict; tessera keeps the left operand's sharding (equal ranks).
  differs<2, in<2, P<"x", "y">>, in<2, P<"y", "x">>>(cs, add, "add@2x4:xy,yx", R"(["x", "y"])");
  differs<2, in<2, P<"x", none>>, in<2, P<"y", none>>>(cs, add, "add@2x4:x_,y_", R"(["x"])");
  differs<2, in<2, P<"y", "x">>, in<2, P<"x", "y">>>(cs, add, "add@4x2:yx,xy", R"(["y", "x"])");
  same<3, in<2, P<axes<"x", "y">, "z">>, in<2, P<axes<"x", "y">, "z">>>(cs, add, {"add@2x2x2:(xy)z,(xy)z"});
  same<3, in<2, P<axes<"x", "y", "z">, none>>, in<2, P<axes<"x", "y", "z">, none>>>(cs, add, {"add@2x2x2:(xyz)_,(xyz)_"});

  same<2, in<2, P<"x", "y">>>(cs, sin2p1, {"sin2p1@2x4:xy", "sin2p1@4x2:xy"});
  same<2, in<2, P<"y", "x">>>(cs, sin2p1, {"sin2p1@2x4:yx"});
  same<2, in<2, P<axes<"x", "y">, none>>>(cs, sin2p1, {"sin2p1@2x4:(xy)_"});
  same<3, in<2, P<"x", "z">>>(cs, sin2p1, {"sin2p1@2x2x2:xz"});
  same<1, in<1, P<"x">>>(cs, sin2p1, {"sin2p1_1d@8:x", "sin2p1_1d@1:x", "sin2p1_1d@2:x", "sin2p1_1d@4:x"});

  same<2, in<2, P<"x", "y">>, in<2, P<"x", "y">>, in<2, P<"x", "y">>>(cs, mulsub, {"mulsub@2x4:xy,xy,xy"});
  same<2, in<2, P<"x", none>>, in<2, P<none, "y">>, in_r2>(cs, mulsub, {"mulsub@2x4:x_,_y,r"});
  // a * b is P(x, y); XLA then lets c's z win dimension 0 and replicates it; tessera keeps the left side.
  differs<3, in<2, P<"x", none>>, in<2, P<none, "y">>, in<2, P<"z", none>>>(cs, mulsub, "mulsub@2x2x2:x_,_y,z_",
                                                                          R"(["x", "y"])");
  same<1, in<2, P<"x", none>>, in<2, P<>>, in<2, P<"x", none>>>(cs, mulsub, {"mulsub@8:x_,r,x_"});

  same<2, in<2, P<"x", "y">>, in<1, P<"y">>>(cs, add, {"add_row@2x4:xy,y"});
  same<2, in<2, P<"x", "y">>, in<1, P<>>>(cs, add, {"add_row@2x4:xy,r"});
  same<2, in<2, P<"x", none>>, in<1, P<"y">>>(cs, add, {"add_row@2x4:x_,y"});
  same<1, in<2, P<none, "x">>, in<1, P<"x">>>(cs, add, {"add_row@8:_x,x"});
  same<2, in<2, P<"x", "y">>, in<1, P<"x">>>(cs, add, {"add_row@2x4:xy,x"});
  same<1, in<2, P<"x", none>>, in<1, P<"x">>>(cs, add, {"add_row@8:x_,x"});
  same<2, in<2, P<"x", "y">>, in<2, P<"y", none>>>(cs, add, {"add_col@2x4:xy,y_"});
  same<2, in<2, P<"x", "y">>, in<2, P<"x", none>>>(cs, add, {"add_col@2x4:xy,x_"});
  same<2, in<2, P<none, "y">>, in<2, P<"x", none>>>(cs, add, {"add_col@2x4:_y,x_"});
  same<2, in<2, P<"x", "y">>, in_r2>(cs, add, {"add_col@2x4:xy,r"});
  same<1, in<2, P<"x", none>>>(cs, scalars, {"scalars@8:x_"});
  same<2, in<2, P<"x", "y">>>(cs, scalars, {"scalars@2x4:xy"});
  same<2, in<2, P<"y", "x">>>(cs, scalars, {"scalars@4x2:yx"});
  same<2, in<2, P<"x", "y">>, in<0, P<>>>(cs, add, {"add_rank0@2x4:xy,r"});
  same<2, in<2, P<"x", "y">>, in<2, P<"x", "y">>>(cs, relu_sub, {"relu_sub@2x4:xy,xy"});

  // Reductions.
  using xy = in<2, P<"x", "y">>;
  same<2, xy>(cs, sum0, {"sum0@2x4:xy"});
  same<2, xy>(cs, sum1, {"sum1@2x4:xy", "sum1@2x2:xy"});
  same<2, xy>(cs, sum_all, {"sum@2x4:xy"});
  same<2, xy>(cs, max0, {"max0@2x4:xy"});
  same<2, xy>(cs, max1, {"max1@2x4:xy"});
  same<2, xy>(cs, max_all, {"max@2x4:xy"});
  same<2, xy>(cs, min0, {"min0@2x4:xy"});
  same<2, xy>(cs, min1, {"min1@2x4:xy"});
  same<2, xy>(cs, min_all, {"min@2x4:xy"});
  same<2, xy>(cs, mean0, {"mean0@2x4:xy"});
  same<2, xy>(cs, mean1, {"mean1@2x4:xy"});
  same<2, xy>(cs, mean_all, {"mean@2x4:xy"});
  using yx = in<2, P<"y", "x">>;
  same<2, yx>(cs, sum0, {"sum0@4x2:yx"});
  same<2, yx>(cs, sum1, {"sum1@4x2:yx"});
  same<2, yx>(cs, sum_all, {"sum@4x2:yx"});
  using xy_z = in<2, P<axes<"x", "y">, "z">>;
  same<3, xy_z>(cs, sum0, {"sum0@2x2x2:(xy)z"});
  same<3, xy_z>(cs, sum1, {"sum1@2x2x2:(xy)z"});
  same<3, xy_z>(cs, sum_all, {"sum@2x2x2:(xy)z"});
  using x_ = in<2, P<"x", none>>;
  same<1, x_>(cs, sum0, {"sum0@8:x_", "sum0@1:x_", "sum0@2:x_"});
  same<1, x_>(cs, sum1, {"sum1@8:x_"});
  same<1, x_>(cs, sum_all, {"sum@2:x_"});
  same<1, in<2, P<none, "x">>>(cs, max0, {"max0@8:_x"});
  same<1, x_>(cs, mean0, {"mean0@8:x_"});
  using xyz3 = in<3, P<"x", "y", "z">>;
  same<3, xyz3>(cs, sum02, {"sum02_3d@2x2x2:xyz"});
  same<3, xyz3>(cs, sum1, {"sum1_3d@2x2x2:xyz"});
  same<3, xyz3>(cs, mean2, {"mean2_3d@2x2x2:xyz"});
  same<3, xyz3>(cs, max01, {"max01_3d@2x2x2:xyz"});

  // Matrix products.
  same<1, x_, in_r2>(cs, matmul, {"matmul@8:x_,r", "matmul@2:x_,r", "matmul@4:x_,r"});
  same<2, x_, in_r2>(cs, matmul, {"matmul@2x4:x_,r"});
  same<2, in_r2, in<2, P<none, "y">>>(cs, matmul, {"matmul@2x4:r,_y"});
  same<2, x_, in<2, P<none, "y">>>(cs, matmul, {"matmul@2x4:x_,_y", "matmul@4x2:x_,_y"});
  using _x = in<2, P<none, "x">>;
  // On one device XLA writes P(None, 'x') for matmul@1's result and tessera P(): the same layout,
  // since an axis of size 1 shards nothing (without_trivial_axes).
  same<1, _x, x_>(cs, matmul, {"matmul@8:_x,x_", "matmul@2:_x,x_", "matmul@1:_x,x_"});
  same<2, _x, x_>(cs, matmul, {"matmul@2x4:_x,x_"});
  same<1, _x, in_r2>(cs, matmul, {"matmul@8:_x,r"});
  same<1, in_r2, x_>(cs, matmul, {"matmul@8:r,x_"});
  same<2, xy, in<2, P<"y", none>>>(cs, matmul, {"matmul@2x4:xy,y_", "matmul@4x2:xy,y_"});
  same<3, in<2, P<"x", "y">>, in<2, P<"y", "z">>>(cs, matmul, {"matmul@2x2x2:xy,yz"});
  same<1, x_, _x>(cs, matmul, {"matmul@8:x_,_x"});
  same<1, x_, x_>(cs, matmul, {"matmul@8:x_,x_"});
  same<1, _x, _x>(cs, matmul, {"matmul@8:_x,_x"});
  same<2, _x, in<2, P<"y", none>>>(cs, matmul, {"matmul@2x4:_x,y_"});
  same<2, xy, in<2, P<"x", none>>>(cs, matmul, {"matmul@2x4:xy,x_"});
  same<2, x_, in<2, P<"y", none>>>(cs, matmul, {"matmul@2x4:x_,y_"});
  same<2, in<3, P<"x", none, none>>, in<3, P<"x", none, none>>>(cs, matmul, {"bmm@2x4:x__,x__"});
  // A batch dimension sharded on x in a and y in b: XLA replicates it; tessera reshards b's (documented).
  differs<2, in<3, P<"x", none, none>>, in<3, P<"y", none, none>>>(cs, matmul, "bmm@2x4:x__,y__", R"(["x"])");
  same<2, in<3, P<"x", none, "y">>, in<3, P<"x", "y", none>>>(cs, matmul, {"bmm@2x4:x_y,xy_"});
  same<2, in<3, P<"x", "y", none>>, in<3, P<"x", none, none>>>(cs, matmul, {"bmm@2x4:xy_,x__"});
  same<3, xyz3, in<3, P<"x", "z", none>>>(cs, matmul, {"bmm@2x2x2:xyz,xz_"});
  same<1, _x, in<1, P<"x">>>(cs, matmul, {"matvec@8:_x,x"});
  same<2, xy, in<1, P<"y">>>(cs, matmul, {"matvec@2x4:xy,y"});
  same<1, in<1, P<"x">>, x_>(cs, matmul, {"vecmat@8:x,x_"});
  same<1, in<1, P<"x">>, in<1, P<"x">>>(cs, matmul, {"vecvec@8:x,x"});
  same<2, xy, in<2, P<"y", none>>>(cs, scaled_matmul, {"scaled_matmul@2x4:xy,y_"});

  // Composed programs.
  using r1 = in<1, P<>>;
  same<1, x_, in_r2, r1>(cs, layer, {"layer@8:x_,r,r", "layer@2:x_,r,r", "layer@1:x_,r,r"});
  same<2, x_, in<2, P<none, "y">>, in<1, P<"y">>>(cs, layer, {"layer@2x4:x_,_y,y"});
  same<1, _x, x_, r1>(cs, layer, {"layer@8:_x,x_,r"});
  same<2, x_, in<2, P<none, "y">>, in<1, P<"x">>>(cs, layer, {"layer@2x4:x_,_y,x"});
  same<2, xy, in<2, P<"y", none>>, r1>(cs, layer, {"layer@2x4:xy,y_,r"});
  same<1, x_, in_r2, r1>(cs, sigmoid_layer, {"sigmoid_layer@8:x_,r,r"});
  same<2, xy>(cs, softmax0, {"softmax0@2x4:xy"});
  same<1, x_>(cs, softmax0, {"softmax0@8:x_"});
  same<1, _x>(cs, softmax0, {"softmax0@8:_x"});
  same<2, xy>(cs, softmax1, {"softmax1@2x4:xy"});
  same<1, x_>(cs, softmax1, {"softmax1@8:x_"});
  same<2, xy>(cs, center0, {"center0@2x4:xy"});
  return cs;
}

}  // namespace

TEST_CASE("jax.jit on Auto meshes: values and output shardings against JAX", "[jax]") {
  tessera::runtime rt{8};
  std::size_t const n = tessera_jax::check_all(golden_file, all_checks());
  CHECK(n == tessera_jax::golden(golden_file).at("cases").size());
}
