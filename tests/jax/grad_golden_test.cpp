// jax.value_and_grad of small programs of sharded arrays, checked against JAX 0.12 itself
// (tests/golden/jax_grad.json, written by tools/jax_reference/gen_grad.py): seed 002's logistic
// regression, a tanh layer, a two-layer model-parallel MLP, every element-wise function,
// sum/mean/max/min/prod over each axis and all axes (ties and zeros), maximum/minimum/clip at ties,
// abs and relu at 0, where, pow, every matmul form (contracting dimension sharded, out_sharding,
// vectors), biases of shape [N], [1, N] and [M, 1], transpose and an FSDP parameter, on meshes of
// 1, 2, 4 and 8 devices with Explicit axes, and a few with Auto axes.
//
// Each case puts the inputs JAX used on a mesh of the same shape and axis types with the same
// specs, runs the same program under tessera::value_and_grad and tessera::grad with JAX's
// argnums, and compares
//   - the value and every gradient's values: float32 on both sides, within the case's rtol
//     (relative to max(1, |value|): 0 where every value is exact, 1e-6 where a division or a sum
//     of rounded terms may round differently, 1e-5 where exp, tanh, sin or log are involved);
//   - every gradient's sharding: its C++ type is its primal's (a static check); on Explicit axes
//     tessera::type_of(gradient) must print JAX's jax.typeof(gradient), e.g. `float32[8@X,4]`,
//     and on every mesh its spec must be JAX's .sharding.spec (trailing Nones dropped, mesh axes
//     of size 1 ignored), except in the rows marked as differences, where the check asserts
//     tessera's documented answer instead (the gradient keeps its primal's spec on Auto axes too,
//     where JAX's eager gradient is laid out as XLA's propagation chose; d/da pow(a, b) is 0, not
//     nan, at a = 0, b = 0). That last case found a bug of tessera's forward pow (0 ** 0 was 0
//     on SIMD batches, xsimd's answer), fixed in expr/ops.hpp: its value is checked like the others.
// The input specs written in C++ are checked against the golden case's, so a case cannot run
// with other specs than JAX's.

#include <algorithm>
#include <array>
#include <cmath>
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

using tessera::none;
using tessera::P;
using tessera_jax::json;
using tessera_jax::spec_json;
using tessera_jax::without_trivial_axes;

namespace {

constexpr char const* golden_file = "jax_grad.json";

/// One input of a case: its rank and its PartitionSpec, as types (the spec is part of tessera's array type).
template <std::size_t N, class Spec>
struct in {
  static constexpr std::size_t rank = N;
  using spec = Spec;
};

/// jax.value_and_grad's argnums.
template <std::size_t... K>
struct argnums {};

/// The generator's meshes: R axes named X (and Y), Explicit or Auto, over the first devices.
template <std::size_t R, bool Explicit>
struct mesh_kind {
  static constexpr std::size_t rank = R;
  static constexpr char const* axis_type = Explicit ? "Explicit" : "Auto";
  static auto make(std::vector<int> const& s) {
    if constexpr (R == 1 && Explicit) return tessera::make_mesh<"X">({s[0]}, tessera::explicit_axes);
    else if constexpr (R == 1) return tessera::make_mesh<"X">({s[0]});
    else if constexpr (Explicit) return tessera::make_mesh<"X", "Y">({s[0], s[1]}, tessera::explicit_axes);
    else return tessera::make_mesh<"X", "Y">({s[0], s[1]});
  }
};
using e1d = mesh_kind<1, true>;   // e1, e2, e4, e8
using e2d = mesh_kind<2, true>;   // e2x2, e2x4
using a1d = mesh_kind<1, false>;  // a4, a8
using a2d = mesh_kind<2, false>;  // a2x4



/// Whether the golden case is the C++ case: its mesh has Mesh's rank, axis names and axis type,
/// its argnums are K, and each input has In's rank, spec and as many values as its shape holds.
/// CHECKs, not REQUIREs, so that one broken case does not hide the others.
template <class Mesh, class... Ins, std::size_t... K>
bool case_fits(json const& c, argnums<K...>) {
  std::vector<std::string> const names{"X", "Y"};
  bool ok = c.at("mesh").size() == Mesh::rank &&
            tessera_jax::vec<std::string>(c.at("axis_names")) ==
                std::vector<std::string>(names.begin(), names.begin() + Mesh::rank) &&
            c.at("axis_type") == Mesh::axis_type &&
            tessera_jax::vec<std::size_t>(c.at("argnums")) == std::vector<std::size_t>{K...} &&
            c.at("grads").size() == sizeof...(K);
  CHECK(ok);
  json const& inputs = c.at("inputs");
  CHECK(inputs.size() == sizeof...(Ins));
  if (!ok || inputs.size() != sizeof...(Ins)) return false;
  std::size_t i = 0;
  auto fits = [&]<class In>(In) {
    constexpr std::size_t N = In::rank;
    json const& input = inputs[i++];
    INFO("input " << i - 1 << ": the C++ case's spec and rank against the golden case's");
    bool const spec_ok = spec_json(In::spec::dims, N) == input.at("spec");
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

/// An input of the case (checked by case_fits), put on `m` with In's spec; on Explicit axes its
/// typeof must be JAX's (the same program on both sides).
template <class In, class M>
auto put_input(M const& m, json const& input, bool explicit_axes) {
  constexpr std::size_t N = In::rank;
  typename xt::xtensor<float, N>::shape_type sh{};
  for (std::size_t d = 0; d < N; ++d) sh[d] = input.at("shape")[d].get<std::size_t>();
  auto host = xt::xtensor<float, N>::from_shape(sh);
  std::vector<float> const v = tessera_jax::vec<float>(input.at("values"));
  std::copy(v.begin(), v.end(), host.begin());
  auto a = tessera::device_put(host, tessera::named_sharding(m, typename In::spec{}));
  if (explicit_axes) {
    INFO("input " << input.dump().substr(0, 120));
    CHECK(tessera::type_of(a) == input.at("typeof").get<std::string>());
  }
  return a;
}

/// How a gradient's values compare with JAX's where JAX's is nan (written "nan").
enum class at_nan { same, tessera_zero };

/// Flat values against JAX's, within rtol relative to max(1, |value|); JAX's non-finite values
/// are the strings "nan", "inf", "-inf".
template <class H>
void check_grad_values(H const& got, json const& want, double rtol, at_nan nan_rule) {
  REQUIRE(static_cast<std::size_t>(got.size()) == want.size());
  std::size_t i = 0;
  for (auto v : got) {
    double const g = static_cast<double>(v);
    json const& w = want[i];
    INFO("element " << i << ": tessera " << g << ", JAX " << w.dump());
    if (w.is_string()) {
      std::string const s = w.get<std::string>();
      if (s == "nan" && nan_rule == at_nan::tessera_zero) CHECK(g == 0.0);
      else if (s == "nan") CHECK(std::isnan(g));
      else CHECK(g == (s == "inf" ? INFINITY : -INFINITY));
    } else {
      double const x = w.get<double>();
      CHECK(std::abs(g - x) <= rtol * std::max({1.0, std::abs(g), std::abs(x)}));
    }
    ++i;
  }
}

/// The differences of docs/autodiff.md a case may be marked with (gen_grad.py's DIFFERENCES).
constexpr char const* keeps_primal_sharding = "auto_grad_keeps_primal_sharding";
constexpr char const* pow_zero_zero = "pow_zero_to_the_zero";

/// Gradient j of the case (for argnum K) against JAX's: type, values, layout.
template <std::size_t K, class Primal, class G>
void check_gradient(json const& c, json const& want, G const& g, char const* difference) {
  INFO("gradient of argument " << K);
  // A cotangent has its primal's type: element type, rank and sharding.
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<G>, std::remove_cvref_t<Primal>>);
  CHECK(want.at("argnum").get<std::size_t>() == K);
  using A = std::remove_cvref_t<G>;
  STATIC_REQUIRE(std::is_same_v<typename A::value_type, float>);
  auto const host = tessera::to_host(g);
  double const rtol = c.at("rtol").get<double>();
  bool const pow_difference = difference != nullptr && std::string(difference) == pow_zero_zero;
  check_grad_values(host, want.at("values"), rtol, pow_difference ? at_nan::tessera_zero : at_nan::same);

  bool const explicit_axes = c.at("axis_type") == "Explicit";
  json const got = spec_json(A::sharding_type::spec_dims, A::rank);
  json const primal = c.at("inputs")[K].at("spec");
  INFO("gradient spec: tessera " << got.dump() << " (" << tessera::type_of(g) << "), JAX " << want.at("spec").dump()
                                 << " (" << want.at("typeof").get<std::string>() << "), primal " << primal.dump());
  auto const& mesh = c.at("mesh");
  auto const& names = c.at("axis_names");
  if (difference != nullptr && std::string(difference) == keeps_primal_sharding) {
    CHECK_FALSE(explicit_axes);
    CHECK(got == primal);
    // Still a difference for some gradient of the case: checked by the caller.
  } else {
    if (explicit_axes) CHECK(tessera::type_of(g) == want.at("typeof").get<std::string>());
    CHECK(without_trivial_axes(got, mesh, names) == without_trivial_axes(want.at("spec"), mesh, names));
  }
}

/// Runs case `c`: value_and_grad<K...>(f) and grad<K...>(f) on the inputs Ins on a mesh of kind
/// Mesh, compared with JAX's answer. `difference`, when not null, names the documented difference
/// the golden case must be marked with.
template <class Mesh, class... Ins, std::size_t... K, class F>
void run_case(json const& c, argnums<K...> an, F const& f, char const* difference) {
  if (difference == nullptr) {
    CHECK_FALSE(c.contains("difference"));
  } else {
    CHECK(c.value("difference", std::string()) == difference);  // the golden case names the difference
  }
  if (!case_fits<Mesh, Ins...>(c, an)) return;
  bool const explicit_axes = c.at("axis_type") == "Explicit";
  auto const m = Mesh::make(tessera_jax::vec<int>(c.at("mesh")));
  json const& inputs = c.at("inputs");
  auto const args = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(put_input<Ins>(m, inputs[I], explicit_axes)...);
  }(std::index_sequence_for<Ins...>{});
  using args_t = std::remove_cvref_t<decltype(args)>;

  auto const [value, grads] = std::apply(tessera::value_and_grad<K...>(f), args);
  auto const only = std::apply(tessera::grad<K...>(f), args);
  auto as_tuple = [](auto const& g) {
    if constexpr (sizeof...(K) == 1) return std::make_tuple(g);
    else return g;
  };
  auto const gs = as_tuple(grads);
  auto const gs_only = as_tuple(only);

  double const rtol = c.at("rtol").get<double>();
  {
    INFO("the value");
    using V = std::remove_cvref_t<decltype(value)>;
    STATIC_REQUIRE(V::rank == 0);
    STATIC_REQUIRE(std::is_same_v<typename V::value_type, float>);
    double const v = tessera::to_host(value)();
    double const w = c.at("value").get<double>();
    INFO("tessera " << v << ", JAX " << w);
    CHECK(std::abs(v - w) <= rtol * std::max({1.0, std::abs(v), std::abs(w)}));
  }
  json const& want = c.at("grads");
  constexpr std::array<std::size_t, sizeof...(K)> ks{K...};
  auto flat = [](auto const& g) {
    auto const h = tessera::to_host(g);
    return std::vector<float>(h.begin(), h.end());
  };
  auto same_bits = [](float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  auto check_one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
    check_gradient<ks[J], std::tuple_element_t<ks[J], args_t>>(c, want[J], std::get<J>(gs), difference);
    // tessera::grad computes the gradients value_and_grad does, without the value.
    std::vector<float> const a = flat(std::get<J>(gs_only)), b = flat(std::get<J>(gs));
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end(), same_bits));
  };
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    (check_one(std::integral_constant<std::size_t, J>{}), ...);
  }(std::make_index_sequence<sizeof...(K)>{});
  if (difference != nullptr && std::string(difference) == keeps_primal_sharding) {
    // Still a difference: JAX's layout of some gradient is not its primal's.
    bool differs = false;
    for (std::size_t j = 0; j < sizeof...(K); ++j)
      differs = differs || without_trivial_axes(want[j].at("spec"), c.at("mesh"), c.at("axis_names")) !=
                               without_trivial_axes(inputs[ks[j]].at("spec"), c.at("mesh"), c.at("axis_names"));
    CHECK(differs);
  }
  if (difference != nullptr && std::string(difference) == pow_zero_zero) {
    bool nan = false;  // still a difference: JAX's gradient has a nan where tessera's is 0
    for (auto const& g : want)
      for (auto const& v : g.at("values")) nan = nan || (v.is_string() && v == "nan");
    CHECK(nan);
  }
}

/// Registers the check of each named case: program f with argnums Args on a mesh of kind Mesh,
/// inputs Ins.
template <class Mesh, class Args, class... Ins, class F>
void same(tessera_jax::checks& cs, F f, std::initializer_list<char const*> names) {
  for (char const* n : names) cs[n] = [f](json const& c) { run_case<Mesh, Ins...>(c, Args{}, f, nullptr); };
}

/// Registers a case where tessera's answer differs from JAX's as documented (docs/autodiff.md).
template <class Mesh, class Args, class... Ins, class F>
void differs(tessera_jax::checks& cs, F f, char const* name, char const* difference) {
  cs[name] = [f, difference](json const& c) { run_case<Mesh, Ins...>(c, Args{}, f, difference); };
}

// The programs, as gen_grad.py's PROGRAMS writes them in jnp.
auto const logreg = [](auto const& x, auto const& y, auto const& w, auto const& b) {
  auto const p = tessera::sigmoid(tessera::matmul(x, w) + b);
  return tessera::mean((p - y) * (p - y));
};
auto const tanh_layer = [](auto const& x, auto const& w, auto const& b) {
  return tessera::sum(tessera::tanh(tessera::matmul(x, w) + b));
};
auto const mlp = [](auto const& x, auto const& y, auto const& w1, auto const& b1, auto const& w2, auto const& b2) {
  auto const h = tessera::tanh(tessera::matmul(x, w1) + b1);
  auto const d = tessera::matmul(h, w2, P<"X", none>{}) + b2 - y;
  return tessera::mean(d * d);
};
auto const mix = [](auto const& x) {
  auto const s = x * x;
  return tessera::sum(tessera::exp(tessera::sin(x)) * tessera::log1p(s) / tessera::sqrt(s + 1) +
                      tessera::tanh(x) * tessera::sigmoid(x) - tessera::cos(x) / (2 + tessera::tan(x * 0.5)) +
                      tessera::rsqrt(s + 2) - tessera::log(s + 0.5));
};
auto const sum0 = [](auto const& x, auto const& c) { return tessera::sum(tessera::sum<0>(x) * c); };
auto const sum1 = [](auto const& x, auto const& c) { return tessera::sum(tessera::sum<1>(x) * c); };
auto const sum_all = [](auto const& x) { return tessera::sum(x); };
auto const mean0 = [](auto const& x, auto const& c) { return tessera::sum(tessera::mean<0>(x) * c); };
auto const mean1 = [](auto const& x, auto const& c) { return tessera::sum(tessera::mean<1>(x) * c); };
auto const mean_all = [](auto const& x) { return tessera::mean(x); };
auto const max0 = [](auto const& x, auto const& c) { return tessera::sum(tessera::max<0>(x) * c); };
auto const max1 = [](auto const& x, auto const& c) { return tessera::sum(tessera::max<1>(x) * c); };
auto const max_all = [](auto const& x) { return tessera::max(x); };
auto const min0 = [](auto const& x, auto const& c) { return tessera::sum(tessera::min<0>(x) * c); };
auto const min_all = [](auto const& x) { return tessera::min(x); };
auto const prod0 = [](auto const& x, auto const& c) { return tessera::sum(tessera::prod<0>(x) * c); };
auto const prod1 = [](auto const& x, auto const& c) { return tessera::sum(tessera::prod<1>(x) * c); };
auto const prod_all = [](auto const& x) { return tessera::prod(x); };
auto const maximum = [](auto const& a, auto const& b, auto const& c) { return tessera::sum(tessera::maximum(a, b) * c); };
auto const minimum = [](auto const& a, auto const& b, auto const& c) { return tessera::sum(tessera::minimum(a, b) * c); };
auto const abs_ = [](auto const& x, auto const& c) { return tessera::sum(tessera::abs(x) * c); };
auto const relu = [](auto const& x, auto const& c) { return tessera::sum(tessera::relu(x) * c); };
auto const clip = [](auto const& x, auto const& c) { return tessera::sum(tessera::clip(x, -0.5, 0.5) * c); };
auto const where = [](auto const& a, auto const& b) { return tessera::sum(tessera::where(a > 0, a * b, b)); };
auto const pow_ = [](auto const& a, auto const& b) { return tessera::sum(tessera::pow(a, b)); };
auto const pow3 = [](auto const& x) { return tessera::sum(tessera::pow(x, 3.0)); };
auto const matmul = [](auto const& a, auto const& b) { return tessera::sum(tessera::sin(tessera::matmul(a, b))); };
auto const matmul_out_r = [](auto const& a, auto const& b) {
  return tessera::sum(tessera::sin(tessera::matmul(a, b, P<>{})));
};
auto const matmul_out_x = [](auto const& a, auto const& b) {
  return tessera::sum(tessera::sin(tessera::matmul(a, b, P<"X", none>{})));
};
auto const vecvec = [](auto const& u, auto const& v) { return tessera::sin(tessera::matmul(u, v, P<>{})); };
auto const fsdp = [](auto const& x, auto const& w) {
  return tessera::sum(tessera::tanh(tessera::matmul(x, tessera::reshard(w, P<>{}))));
};
auto const fsdp_auto = [](auto const& x, auto const& w) { return tessera::sum(tessera::tanh(tessera::matmul(x, w))); };
auto const bias = [](auto const& x, auto const& b) { return tessera::sum(tessera::sin(x + b)); };
auto const transpose = [](auto const& x, auto const& c) { return tessera::sum(tessera::sin(tessera::transpose(x)) * c); };

using r1 = in<1, P<>>;
using r2 = in<2, P<>>;
using x1 = in<1, P<"X">>;
using y1 = in<1, P<"Y">>;
using x_ = in<2, P<"X", none>>;
using _x = in<2, P<none, "X">>;
using _y = in<2, P<none, "Y">>;
using y_ = in<2, P<"Y", none>>;
using xy = in<2, P<"X", "Y">>;
using yx = in<2, P<"Y", "X">>;

tessera_jax::checks all_checks() {
  tessera_jax::checks cs;
  // Seed 002's logistic regression: x and y batch-sharded, w and b replicated.
  same<e1d, argnums<2, 3>, x_, x_, r2, r1>(
      cs, logreg, {"logreg@e1:X_,X_,r,r", "logreg@e2:X_,X_,r,r", "logreg@e4:X_,X_,r,r", "logreg@e8:X_,X_,r,r"});
  same<a1d, argnums<2, 3>, x_, x_, r2, r1>(cs, logreg, {"logreg@a8:X_,X_,r,r"});
  same<e1d, argnums<0, 1, 2>, x_, r2, r1>(cs, tanh_layer, {"tanh_layer@e8:X_,r,r"});
  same<e2d, argnums<0, 1, 2>, x_, _y, y1>(cs, tanh_layer, {"tanh_layer@e2x4:X_,_Y,Y"});
  same<e2d, argnums<2, 3, 4, 5>, x_, x_, _y, y1, y_, r1>(cs, mlp, {"mlp@e2x4:X_,X_,_Y,Y,Y_,r"});
  same<e2d, argnums<0>, xy>(cs, mix, {"mix@e2x4:XY"});

  // Reductions.
  same<e2d, argnums<0>, xy, y1>(cs, sum0, {"sum0@e2x4:XY,Y"});
  same<e2d, argnums<0>, xy, in<1, P<"X">>>(cs, sum1, {"sum1@e2x4:XY,X"});
  same<e2d, argnums<0>, xy>(cs, sum_all, {"sum@e2x4:XY"});
  same<e2d, argnums<0>, xy, y1>(cs, mean0, {"mean0@e2x4:XY,Y"});
  same<e1d, argnums<0>, x_, x1>(cs, mean1, {"mean1@e8:X_,X"});
  same<e2d, argnums<0>, xy>(cs, mean_all, {"mean@e2x4:XY"});
  same<e2d, argnums<0>, xy, y1>(cs, max0, {"max0@e2x4:XY,Y"});
  same<e2d, argnums<0>, xy, in<1, P<"X">>>(cs, max1, {"max1@e2x4:XY,X"});
  same<e2d, argnums<0>, xy>(cs, max_all, {"max@e2x4:XY"});
  same<e1d, argnums<0>, x_, r1>(cs, min0, {"min0@e8:X_,r"});
  same<e1d, argnums<0>, _x>(cs, min_all, {"min@e8:_X"});
  // JAX's prod rule slices its operand, which it refuses on sharded Explicit axes: Auto meshes.
  same<a1d, argnums<0>, x_, x1>(cs, prod1, {"prod1@a4:X_,X"});
  same<a1d, argnums<0>, x_>(cs, prod_all, {"prod_one_zero@a4:X_"});
  differs<a1d, argnums<0>, x_, r1>(cs, prod0, "prod0@a4:X_,r", keeps_primal_sharding);
  differs<a1d, argnums<0>, _x>(cs, prod_all, "prod_two_zeros@a4:_X", keeps_primal_sharding);

  // Element-wise choices at ties and zeros; where; pow.
  same<e1d, argnums<0, 1>, x_, r2, x_>(cs, maximum, {"maximum@e4:X_,r,X_"});
  same<e2d, argnums<0, 1>, xy, xy, xy>(cs, minimum, {"minimum@e2x2:XY,XY,XY"});
  same<e1d, argnums<0>, x_, x_>(cs, abs_, {"abs@e4:X_,X_"});
  same<e1d, argnums<0>, x_, x_>(cs, relu, {"relu@e4:X_,X_"});
  same<e2d, argnums<0>, xy, xy>(cs, clip, {"clip@e2x2:XY,XY"});
  same<e1d, argnums<0, 1>, x_, x_>(cs, where, {"where@e2:X_,X_"});
  same<e1d, argnums<0, 1>, x_, x_>(cs, pow_, {"pow@e4:X_,X_"});
  differs<e1d, argnums<0, 1>, x1, x1>(cs, pow_, "pow_zero_zero@e2:X,X", pow_zero_zero);
  same<e2d, argnums<0>, xy>(cs, pow3, {"pow3@e2x2:XY"});

  // Products.
  same<e1d, argnums<0, 1>, x_, r2>(cs, matmul, {"matmul@e8:X_,r"});
  same<e2d, argnums<0, 1>, x_, _y>(cs, matmul, {"matmul@e2x4:X_,_Y"});
  same<e2d, argnums<0, 1>, r2, _y>(cs, matmul, {"matmul@e2x4:r,_Y"});
  same<e1d, argnums<0, 1>, _x, x_>(cs, matmul_out_r, {"matmul_out_r@e8:_X,X_"});
  same<e2d, argnums<0, 1>, xy, y_>(cs, matmul_out_x, {"matmul_out_X_@e2x4:XY,Y_"});
  same<a1d, argnums<0, 1>, _x, x_>(cs, matmul, {"matmul@a8:_X,X_"});
  same<e1d, argnums<0, 1>, r1, _x>(cs, matmul, {"vecmat@e8:r,_X"});
  same<e1d, argnums<0, 1>, x_, r1>(cs, matmul, {"matvec@e8:X_,r"});
  same<e1d, argnums<0, 1>, x1, x1>(cs, vecvec, {"vecvec@e8:X,X"});
  // FSDP: w sharded P('X', None), all-gathered for the product; its gradient stays sharded.
  same<e1d, argnums<1>, x_, x_>(cs, fsdp, {"fsdp@e4:X_,X_"});
  differs<a1d, argnums<1>, x_, x_>(cs, fsdp_auto, "fsdp_auto@a4:X_,X_", keeps_primal_sharding);

  // Broadcasting a bias; transpose.
  same<e2d, argnums<0, 1>, xy, y1>(cs, bias, {"bias_n@e2x4:XY,Y"});
  same<e2d, argnums<0, 1>, xy, _y>(cs, bias, {"bias_1n@e2x4:XY,_Y"});
  same<e2d, argnums<0, 1>, xy, x_>(cs, bias, {"bias_m1@e2x4:XY,X_"});
  differs<a2d, argnums<0, 1>, xy, r1>(cs, bias, "bias_n@a2x4:XY,r", keeps_primal_sharding);
  same<e2d, argnums<0>, xy, yx>(cs, transpose, {"transpose@e2x4:XY,YX"});
  return cs;
}

}  // namespace

TEST_CASE("jax.value_and_grad: values and gradient shardings against JAX", "[jax][grad]") {
  tessera::runtime rt{8};
  std::size_t const n = tessera_jax::check_all(golden_file, all_checks());
  CHECK(n == tessera_jax::golden(golden_file).at("cases").size());
}
