// Gradients through shard_map, and grad inside a shard_map body, checked against JAX 0.12 itself
// (tests/golden/jax_shard_map_grad.json, written by tools/jax_reference/gen_shard_map_grad.py):
// a data-parallel logistic regression with pmean and replicated parameters on meshes of 2, 4 and
// 8 devices (check_vma=True and False) and on a 2x4 mesh with the batch over both axes, an MSE
// loss under value_and_grad, psum of an invariant value, an FSDP parameter all-gathered (tiled),
// psum_scatter (tiled), all_to_all (tiled), ppermute (a cycle), all_gather (stacked, at axis 0
// and 1), vjp of a layer whose result varies (out_specs P('X')), a global-view loss of that
// layer's result and of a result that is invariant under out_specs P('X'), and seed 004's grad
// (and value_and_grad) inside the body then pmean, under check_vma=True (an invariant argument's
// gradient is psummed) and check_vma=False (it is not).
//
// Each case puts the inputs JAX used on a mesh of the same shape (Explicit axes, as JAX's) with
// the same specs, runs the same body (written with tessera's functions, as gen_shard_map_grad.py
// writes it in jax.numpy and jax.lax) under the same shard_map and the same transform, and compares
//   - the value (or the shard_map's outputs) and every gradient's values: float32 on both sides,
//     within the case's rtol relative to max(1, |value|) (1e-6 for polynomial programs, 1e-5
//     where sigmoid, tanh or sin are involved; the differences measured were below 3e-7, and
//     zero for the polynomial programs);
//   - every gradient's type: its C++ type is its argument's (a static check), and
//     tessera::type_of(gradient) prints JAX's str(jax.typeof(gradient)) (e.g. `float32[8@X,3]`),
//     its spec JAX's .sharding.spec; an output's type_of and spec JAX's.
// The in_specs, out_specs, check_vma, transform and argnums written in C++ are checked against
// the golden case's, so a case cannot run another program than JAX's.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

using tessera::none;
using tessera::P;
using tessera_jax::json;
using tessera_jax::spec_json;

namespace {

constexpr char const* golden_file = "jax_shard_map_grad.json";

/// One argument of a program: its rank and its in_spec, as types.
template <std::size_t N, class Spec>
struct in {
  static constexpr std::size_t rank = N;
  using spec = Spec;
};
template <class... Ins>
struct ins {};
template <class... Specs>
struct outs {};

/// The transform a program runs under, as the generator names it.
enum class transform { grad, value_and_grad, vjp, call };
constexpr char const* transform_name(transform t) {
  switch (t) {
    case transform::grad: return "grad";
    case transform::value_and_grad: return "value_and_grad";
    case transform::vjp: return "vjp";
    case transform::call: return "call";
  }
  return "?";
}

/// jax.grad's argnums (every argument for vjp, none for call).
template <std::size_t... K>
struct argnums {};

/// The generator's meshes, every axis Explicit: e2, e4, e8 (axis X) and e2x4 (axes X, Y).
template <std::size_t R>
struct mesh_kind {
  static constexpr std::size_t rank = R;
  static auto make(std::vector<int> const& s) {
    if constexpr (R == 1) return tessera::make_mesh<"X">({s[0]}, tessera::explicit_axes);
    else return tessera::make_mesh<"X", "Y">({s[0], s[1]}, tessera::explicit_axes);
  }
};
using m1d = mesh_kind<1>;
using m2d = mesh_kind<2>;

/// A program: a body with its in_specs, out_specs and check_vma, an optional global-view function
/// of its result (`outer`), run under a transform with argnums.
template <class Mesh, class Ins, class Outs, bool CheckVma, transform T, class Argnums>
struct program;
template <class Mesh, class... Ins, class... Outs, bool CheckVma, transform T, std::size_t... K>
struct program<Mesh, ins<Ins...>, outs<Outs...>, CheckVma, T, argnums<K...>> {
  template <class Body, class M>
  static auto shard_map(Body const& body, M const& m) {
    if constexpr (CheckVma)
      return tessera::shard_map(body, m, tessera::in_specs(typename Ins::spec{}...), tessera::out_specs(Outs{}...));
    else
      return tessera::shard_map(body, m, tessera::in_specs(typename Ins::spec{}...), tessera::out_specs(Outs{}...),
                                tessera::no_check_vma);
  }
};

/// Whether the golden case is the C++ program: mesh rank and axis names, in_specs, out_specs,
/// check_vma, transform, argnums, and each input's rank and number of values. CHECKs, not
/// REQUIREs, so that one broken case does not hide the others.
template <class Mesh, class... Ins, class... Outs, bool CheckVma, transform T, std::size_t... K>
bool case_fits(json const& c, program<Mesh, ins<Ins...>, outs<Outs...>, CheckVma, T, argnums<K...>>) {
  std::vector<std::string> const names{"X", "Y"};
  json out_specs = json::array();
  (out_specs.push_back(spec_json(Outs::dims, Outs::dims.size())), ...);
  bool ok = c.at("mesh").size() == Mesh::rank &&
            tessera_jax::vec<std::string>(c.at("axis_names")) ==
                std::vector<std::string>(names.begin(), names.begin() + Mesh::rank) &&
            c.at("axis_type") == "Explicit" && c.at("check_vma") == CheckVma &&
            c.at("transform") == transform_name(T) && c.at("out_specs") == out_specs &&
            tessera_jax::vec<std::size_t>(c.at("argnums")) == std::vector<std::size_t>{K...} &&
            c.at("grads").size() == sizeof...(K);
  INFO("the C++ program's mesh, out_specs, check_vma, transform and argnums against the golden case's");
  CHECK(ok);
  json const& inputs = c.at("inputs");
  CHECK(inputs.size() == sizeof...(Ins));
  CHECK(c.at("in_specs").size() == sizeof...(Ins));
  if (!ok || inputs.size() != sizeof...(Ins) || c.at("in_specs").size() != sizeof...(Ins)) return false;
  std::size_t i = 0;
  auto fits = [&]<class In>(In) {
    constexpr std::size_t N = In::rank;
    json const& input = inputs[i];
    json const spec = spec_json(In::spec::dims, N);
    INFO("input " << i << ": the C++ in_spec and rank against the golden case's");
    bool const spec_ok = spec == input.at("spec") && spec == c.at("in_specs")[i];
    ++i;
    CHECK(spec_ok);
    CHECK(input.at("shape").size() == N);
    std::size_t n = 1;
    for (auto const& d : input.at("shape")) n *= d.get<std::size_t>();
    CHECK(input.at("values").size() == n);
    return spec_ok && input.at("shape").size() == N && input.at("values").size() == n;
  };
  bool all = true;
  ((all = fits(Ins{}) && all), ...);  // every input checked, even after a bad one
  return all;
}

/// A host array of rank N with the shape and values of a JSON {"shape", "values"}.
template <std::size_t N>
xt::xtensor<float, N> host_array(json const& a) {
  typename xt::xtensor<float, N>::shape_type sh{};
  for (std::size_t d = 0; d < N; ++d) sh[d] = a.at("shape")[d].get<std::size_t>();
  auto host = xt::xtensor<float, N>::from_shape(sh);
  std::vector<float> const v = tessera_jax::vec<float>(a.at("values"));
  REQUIRE(v.size() == host.size());
  std::copy(v.begin(), v.end(), host.begin());
  return host;
}

/// An input of the case, put on `m` with its in_spec; its type must print as JAX's jax.typeof.
template <class In, class M>
auto put_input(M const& m, json const& input) {
  auto a = tessera::device_put(host_array<In::rank>(input), tessera::named_sharding(m, typename In::spec{}));
  INFO("input " << input.dump().substr(0, 120));
  CHECK(tessera::type_of(a) == input.at("typeof").get<std::string>());
  return a;
}

/// A scalar against JAX's, within rtol relative to max(1, |value|).
void check_scalar(double got, json const& want, double rtol) {
  double const w = want.get<double>();
  INFO("tessera " << got << ", JAX " << w);
  CHECK(std::abs(got - w) <= rtol * std::max({1.0, std::abs(got), std::abs(w)}));
}

/// An array (a gradient or an output) against JAX's: values, type_of and spec.
template <class A>
void check_array(A const& a, json const& want, double rtol) {
  using X = std::remove_cvref_t<A>;
  STATIC_REQUIRE(std::is_same_v<typename X::value_type, float>);
  auto const host = tessera::to_host(a);
  REQUIRE(std::vector<std::size_t>(host.shape().begin(), host.shape().end()) ==
          tessera_jax::vec<std::size_t>(want.at("shape")));
  tessera_jax::check_values(host, want.at("values"), rtol);
  json const got = spec_json(X::sharding_type::spec_dims, X::rank);
  INFO("tessera " << tessera::type_of(a) << " (spec " << got.dump() << "), JAX " << want.at("typeof").get<std::string>()
                  << " (spec " << want.at("spec").dump() << ")");
  CHECK(tessera::type_of(a) == want.at("typeof").get<std::string>());
  CHECK(got == want.at("spec"));
}

/// Gradient j of the case (for argument K) against JAX's: its type is its argument's.
template <std::size_t K, class Primal, class G>
void check_gradient(json const& want, G const& g, double rtol) {
  INFO("gradient of argument " << K);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<G>, std::remove_cvref_t<Primal>>);
  CHECK(want.at("argnum").get<std::size_t>() == K);
  check_array(g, want, rtol);
}

template <class X>
auto as_tuple(X&& x) {
  if constexpr (requires { std::tuple_size<std::remove_cvref_t<X>>::value; }) return std::forward<X>(x);
  else return std::make_tuple(std::forward<X>(x));
}

/// The identity: the loss of a program is its shard_map's result.
struct no_outer {
  template <class X>
  auto operator()(X const& x) const {
    return x;
  }
};

/// Runs case `c`: the body under the program's shard_map and transform, compared with JAX's.
template <class Mesh, class... Ins, class Outs, bool CheckVma, transform T, std::size_t... K, class Body,
          class Outer>
void run_case(json const& c, program<Mesh, ins<Ins...>, Outs, CheckVma, T, argnums<K...>> prog, Body const& body,
              Outer const& outer) {
  CHECK_FALSE(c.contains("difference"));
  if (!case_fits(c, prog)) return;
  auto const m = Mesh::make(tessera_jax::vec<int>(c.at("mesh")));
  json const& inputs = c.at("inputs");
  auto const args = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(put_input<Ins>(m, inputs[I])...);
  }(std::index_sequence_for<Ins...>{});
  using args_t = std::remove_cvref_t<decltype(args)>;
  auto const sm = decltype(prog)::shard_map(body, m);
  auto const f = [&sm, &outer](auto const&... a) { return outer(sm(a...)); };
  double const rtol = c.at("rtol").get<double>();

  auto check_value = [&](auto const& value) {
    INFO("the value");
    using V = std::remove_cvref_t<decltype(value)>;
    STATIC_REQUIRE(V::rank == 0);
    STATIC_REQUIRE(std::is_same_v<typename V::value_type, float>);
    check_scalar(tessera::to_host(value)(), c.at("value"), rtol);
  };
  auto check_grads = [&](auto const& gs) {
    json const& want = c.at("grads");
    constexpr std::array<std::size_t, sizeof...(K)> ks{K...};
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (check_gradient<ks[J], std::tuple_element_t<ks[J], args_t>>(want[J], std::get<J>(gs), rtol), ...);
    }(std::make_index_sequence<sizeof...(K)>{});
  };
  auto check_outputs = [&](auto const& os) {
    json const& want = c.at("outputs");
    REQUIRE(want.size() == std::tuple_size_v<std::remove_cvref_t<decltype(os)>>);
    auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
      INFO("output " << J);
      check_array(std::get<J>(os), want[J], rtol);
    };
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      (one(std::integral_constant<std::size_t, J>{}), ...);
    }(std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<decltype(os)>>>{});
  };

  if constexpr (T == transform::grad || T == transform::value_and_grad) {
    // The value comes from value_and_grad under both transforms: a body written with tessera's
    // functions of local tracers runs only under a transform (called directly, its blocks are
    // xtensor expressions). grad must give value_and_grad's gradients, bit for bit.
    auto const [value, vg] = std::apply(tessera::value_and_grad<K...>(f), args);
    auto const grads = as_tuple(vg);
    check_value(value);
    check_grads(grads);
    if constexpr (T == transform::grad) {
      auto const only = as_tuple(std::apply(tessera::grad<K...>(f), args));
      auto same_values = [](auto const& a, auto const& b) {
        auto const ha = tessera::to_host(a);
        auto const hb = tessera::to_host(b);
        return std::equal(ha.begin(), ha.end(), hb.begin(), hb.end());
      };
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        INFO("tessera::grad against tessera::value_and_grad");
        CHECK((same_values(std::get<J>(only), std::get<J>(grads)) && ...));
      }(std::make_index_sequence<sizeof...(K)>{});
    }
  } else if constexpr (T == transform::vjp) {
    static_assert(sizeof...(K) == sizeof...(Ins), "vjp differentiates every argument");
    auto [y, fn] = std::apply([&](auto const&... a) { return tessera::vjp(f, a...); }, args);
    check_outputs(std::make_tuple(y));
    using Y = std::remove_cvref_t<decltype(y)>;
    auto const ct = tessera::device_put(host_array<Y::rank>(c.at("cotangent")), y.sharding());
    check_grads(fn(ct));
  } else {
    static_assert(sizeof...(K) == 0, "a called program has no argnums");
    check_outputs(as_tuple(std::apply(f, args)));
  }
}

/// Registers the check of each named case: `body` as program Prog (and `outer` of its result).
template <class Prog, class Body, class Outer = no_outer>
void same(tessera_jax::checks& cs, Body body, std::initializer_list<char const*> names, Outer outer = {}) {
  for (char const* n : names) cs[n] = [body, outer](json const& c) { run_case(c, Prog{}, body, outer); };
}

// ---- the bodies, as gen_shard_map_grad.py writes them in jax.numpy and jax.lax ------------------

auto const dp_logreg = [](auto const& w, auto const& b, auto const& x, auto const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::pmean<"X">(tessera::mean(d * d));
};
auto const dp_logreg_2d = [](auto const& w, auto const& b, auto const& x, auto const& y) {
  auto const d = tessera::sigmoid(tessera::matmul(x, w) + b) - y;
  return tessera::pmean<"X", "Y">(tessera::mean(d * d));
};
auto const dp_mse = [](auto const& w, auto const& b, auto const& x, auto const& y) {
  auto const d = tessera::matmul(x, w) + b - y;
  return tessera::pmean<"X">(tessera::mean(d * d));
};
auto const psum_invariant = [](auto const& w) { return tessera::psum<"X">(tessera::sum(tessera::tanh(w) * w)); };
auto const fsdp = [](auto const& w, auto const& x) {
  auto const full = tessera::all_gather<"X">(w, 0, tessera::tiled);
  auto const z = tessera::tanh(tessera::matmul(x, full));
  return tessera::pmean<"X">(tessera::mean(z * z));
};
auto const psum_scatter_tiled = [](auto const& x, auto const& c) {
  auto const s = tessera::psum_scatter<"X">(tessera::tanh(x), 0, tessera::tiled);
  return tessera::psum<"X">(tessera::sum(s * c));
};
auto const all_to_all_tiled = [](auto const& x, auto const& c) {
  auto const t = tessera::all_to_all<"X">(x, 1, 0, tessera::tiled);
  return tessera::psum<"X">(tessera::sum(tessera::sin(t) * c));
};
auto const ppermute_cycle = [](auto const& x) {
  std::vector<std::pair<int, int>> perm;
  for (int i = 0; i < 8; ++i) perm.emplace_back(i, (i + 1) % 8);
  auto const p = tessera::ppermute<"X">(x, perm);
  return tessera::psum<"X">(tessera::sum(tessera::sin(p) * x));
};
template <std::size_t Axis>
auto const all_gather_stacked = [](auto const& w, auto const& x) {
  auto const g = tessera::all_gather<"X">(w, Axis);  // not tiled: a new dimension of size k at Axis
  auto const z = tessera::tanh(tessera::matmul(x, g));
  return tessera::pmean<"X">(tessera::mean(z * z));
};
auto const layer = [](auto const& w, auto const& x) { return tessera::tanh(tessera::matmul(x, w)); };
auto const invariant_layer = [](auto const& w) { return tessera::tanh(w) * 2.0; };
auto const mean_of_square = [](auto const& o) { return tessera::mean(o * o); };
auto const mse = [](auto const& w, auto const& x, auto const& y) {
  auto const d = tessera::matmul(x, w) - y;
  return tessera::mean(d * d);
};
auto const grad_in_body = [](auto const& w, auto const& x, auto const& y) {
  auto const g = tessera::grad(mse)(w, x, y);
  // The gradient has the parameter's block type (static_assert: Catch's macros are not for device threads).
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(w)>>);
  return tessera::pmean<"X">(g);
};
auto const value_and_grad_in_body = [](auto const& w, auto const& x, auto const& y) {
  auto const [loss, g] = tessera::value_and_grad(mse)(w, x, y);
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(w)>>);
  return std::make_tuple(tessera::pmean<"X">(loss), tessera::pmean<"X">(g));
};

using r1 = in<1, P<>>;
using r2 = in<2, P<>>;
using x1 = in<1, P<"X">>;
using x_ = in<2, P<"X", none>>;
using _x = in<2, P<none, "X">>;
using xy_ = in<2, P<tessera::axes<"X", "Y">, none>>;
using rep = outs<P<>>;

tessera_jax::checks all_checks() {
  tessera_jax::checks cs;
  // Data parallel: the batch sharded, the parameters replicated, pmean of the loss; each
  // parameter's gradient is the all-reduce of the devices' contributions (pvary's transpose).
  same<program<m1d, ins<r2, r1, x_, x_>, rep, true, transform::grad, argnums<0, 1>>>(
      cs, dp_logreg, {"dp_logreg@e2", "dp_logreg@e4", "dp_logreg@e8"});
  same<program<m1d, ins<r2, r1, x_, x_>, rep, false, transform::grad, argnums<0, 1>>>(
      cs, dp_logreg, {"dp_logreg_no_check_vma@e4"});
  same<program<m2d, ins<r2, r1, xy_, xy_>, rep, true, transform::grad, argnums<0, 1>>>(cs, dp_logreg_2d,
                                                                                      {"dp_logreg_2d@e2x4"});
  same<program<m1d, ins<r2, r1, x_, x_>, rep, true, transform::value_and_grad, argnums<0, 1>>>(
      cs, dp_mse, {"dp_mse_value_and_grad@e8"});
  // psum of an invariant value counts every device's copy: k times the value, k times the gradient.
  same<program<m1d, ins<r2>, rep, true, transform::grad, argnums<0>>>(cs, psum_invariant, {"psum_invariant@e4"});
  // The collectives and their transposes.
  same<program<m1d, ins<x_, x_>, rep, true, transform::grad, argnums<0, 1>>>(cs, fsdp, {"fsdp_all_gather_tiled@e4"});
  same<program<m1d, ins<x_, x_>, rep, true, transform::grad, argnums<0, 1>>>(cs, psum_scatter_tiled,
                                                                            {"psum_scatter_tiled@e4"});
  same<program<m1d, ins<x_, _x>, rep, true, transform::grad, argnums<0, 1>>>(cs, all_to_all_tiled,
                                                                            {"all_to_all_tiled@e4"});
  same<program<m1d, ins<x_>, rep, true, transform::grad, argnums<0>>>(cs, ppermute_cycle, {"ppermute_cycle@e8"});
  same<program<m1d, ins<x1, x_>, rep, true, transform::grad, argnums<0, 1>>>(cs, all_gather_stacked<0>,
                                                                            {"all_gather_stacked0@e2"});
  same<program<m1d, ins<x1, x_>, rep, true, transform::grad, argnums<0, 1>>>(cs, all_gather_stacked<1>,
                                                                            {"all_gather_stacked1@e4"});
  // A result that varies (out_specs P('X')): vjp with a cotangent, and a global-view loss of it.
  same<program<m1d, ins<r2, x_>, outs<P<"X", none>>, true, transform::vjp, argnums<0, 1>>>(cs, layer,
                                                                                          {"vjp_layer@e4"});
  same<program<m1d, ins<r2, x_>, outs<P<"X", none>>, true, transform::grad, argnums<0, 1>>>(
      cs, layer, {"outer_mean_of_layer@e8"}, mean_of_square);
  // A result the same on every device under out_specs P('X'): its copies' cotangents are summed.
  same<program<m1d, ins<r2>, outs<P<"X", none>>, true, transform::grad, argnums<0>>>(
      cs, invariant_layer, {"outer_mean_of_invariant_result@e4"}, mean_of_square);
  // Seed 004: grad inside the body, then pmean. check_vma=True: the invariant parameter's
  // gradient is already psummed (k times the average); check_vma=False: the average.
  same<program<m1d, ins<r2, x_, x_>, rep, true, transform::call, argnums<>>>(cs, grad_in_body, {"grad_in_body@e4"});
  same<program<m1d, ins<r2, x_, x_>, rep, false, transform::call, argnums<>>>(cs, grad_in_body,
                                                                             {"grad_in_body_no_check_vma@e4"});
  same<program<m1d, ins<r2, x_, x_>, outs<P<>, P<>>, true, transform::call, argnums<>>>(
      cs, value_and_grad_in_body, {"value_and_grad_in_body@e4"});
  same<program<m1d, ins<r2, x_, x_>, outs<P<>, P<>>, false, transform::call, argnums<>>>(
      cs, value_and_grad_in_body, {"value_and_grad_in_body_no_check_vma@e4"});
  return cs;
}

}  // namespace

TEST_CASE("jax.grad through jax.shard_map, and grad inside a body: values, gradients and types against JAX",
          "[jax][grad][shard_map]") {
  tessera::runtime rt{8};
  std::size_t const n = tessera_jax::check_all(golden_file, all_checks());
  CHECK(n == tessera_jax::golden(golden_file).at("cases").size());
}
