// tessera::cumsum, cumprod, cummax and cummin against JAX 0.12 itself (tests/golden/jax_scans.json,
// written by tools/jax_reference/gen_scans.py):
//   - on meshes of 1, 2 and 3 axes, Auto (the scanned dimension sharded too) and Explicit (it is
//     not: JAX refuses that, as tessera does at compile time), forward and reversed: values, the
//     result's type against jax.typeof (Explicit) and against the sharding the compiled jit gave
//     it (Auto), and jax.grad of sum(w * scan(x)) with its type;
//   - integer and boolean element types (jnp.cumsum of int8 stays int8, of bool is int32);
//   - gradients at ties (cummax, cummin: JAX's halving at each tied max of its scan tree) and at
//     zeros (cumprod), with the line sharded and replicated;
//   - JAX's error text for a scan along an Explicit sharded dimension, which tessera's quotes.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

using tessera::none;
using tessera::P;
using tessera_jax::json;

namespace {

constexpr char const* golden_file = "jax_scans.json";

template <class T, std::size_t N>
xt::xtensor<T, N> input(json const& j, std::array<std::size_t, N> const& shape) {
  std::vector<T> v;
  for (auto const& e : j) v.push_back(static_cast<T>(e.get<double>()));
  return xt::adapt(v, shape);
}

/// The scan by Op along Axis (reversed when Rev), on arrays and on tracers alike.
template <class Op, int Axis, bool Rev, class X>
auto scan(X const& x) {
  if constexpr (std::is_same_v<Op, tessera::op::sum>) return tessera::cumsum<Axis, Rev>(x);
  else if constexpr (std::is_same_v<Op, tessera::op::prod>) return tessera::cumprod<Axis, Rev>(x);
  else if constexpr (std::is_same_v<Op, tessera::op::max>) return tessera::cummax<Axis, Rev>(x);
  else return tessera::cummin<Axis, Rev>(x);
}

/// The eight cases of one configuration (four scans, forward and reversed).
template <int Axis, std::size_t N, class Mesh, class Spec>
void add_config(tessera_jax::checks& cs, std::string const& name, Mesh const& mesh, Spec spec,
                std::array<std::size_t, N> shape, bool explicit_axes) {
  auto one = [&]<class Op, bool Rev>(std::string const& op) {
    cs[name + "/" + op + (Rev ? "/rev" : "")] = [=](json const& c) {
      auto const a = tessera::device_put(input<float>(c.at("x"), shape), tessera::named_sharding(mesh, spec));
      auto const w = tessera::device_put(input<float>(c.at("w"), shape), tessera::named_sharding(mesh, spec));
      tessera::array const y = scan<Op, Axis, Rev>(a);
      tessera_jax::check_values(tessera::to_host(y), c.at("y"), 1e-6);
      // The result keeps the operand's sharding, as the compiled JAX program's does.
      CHECK(tessera::type_of(y) == c.at("layout_y").get<std::string>());
      auto const g = tessera::grad([&](auto const& v) { return tessera::sum(w * scan<Op, Axis, Rev>(v)); })(a);
      tessera_jax::check_values(tessera::to_host(g), c.at("dx"), 1e-5);
      if (explicit_axes) {
        CHECK(tessera::type_of(y) == c.at("typeof_y").get<std::string>());
        CHECK(tessera::type_of(g) == c.at("typeof_dx").get<std::string>());
      } else {
        // Auto axes are not in JAX's types; tessera's keep the layout.
        CHECK(c.at("typeof_y").get<std::string>().find('@') == std::string::npos);
        CHECK(tessera::type_of(g) == tessera::type_of(a));
      }
    };
  };
  one.template operator()<tessera::op::sum, false>("cumsum");
  one.template operator()<tessera::op::sum, true>("cumsum");
  one.template operator()<tessera::op::prod, false>("cumprod");
  one.template operator()<tessera::op::prod, true>("cumprod");
  one.template operator()<tessera::op::max, false>("cummax");
  one.template operator()<tessera::op::max, true>("cummax");
  one.template operator()<tessera::op::min, false>("cummin");
  one.template operator()<tessera::op::min, true>("cummin");
}

/// An integer or boolean case: x of type T, shape [4, 6] over a 2x4 mesh (6 columns over 4
/// devices: uneven blocks), the scan f; JAX's result type and values.
template <class T, class F>
void check_dtype(json const& c, char const* dtype, F f) {
  auto const mesh = tessera::make_mesh<"X", "Y">({2, 4});
  REQUIRE(c.at("dtype_x").get<std::string>() == dtype);
  auto const x = tessera::device_put(input<T>(c.at("x"), std::array<std::size_t, 2>{4, 6}),
                                     tessera::named_sharding(mesh, P<"X", "Y">{}));
  tessera::array const y = f(x);
  CHECK(tessera::type_of(y) == c.at("dtype_y").get<std::string>() + "[4@X,6@Y]");
  auto const h = tessera::to_host(y);
  auto const want = c.at("y").get<std::vector<long long>>();
  REQUIRE(h.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(static_cast<long long>(h.flat(i)) == want[i]);
  }
}

template <class Op, bool Rev>
void check_ties(json const& c) {
  auto const mesh = tessera::make_mesh<"x">({8});
  auto const h = input<float>(c.at("x"), std::array<std::size_t, 1>{8});
  auto loss = [](auto const& v) { return tessera::sum(scan<Op, 0, Rev>(v)); };
  auto const sharded = tessera::device_put(h, tessera::named_sharding(mesh, P<"x">{}));
  auto const whole = tessera::device_put(h, tessera::named_sharding(mesh, P<>{}));
  tessera_jax::check_values(tessera::to_host(tessera::grad(loss)(sharded)), c.at("dx"), 1e-6);
  tessera_jax::check_values(tessera::to_host(tessera::grad(loss)(whole)), c.at("dx"), 1e-6);
}

}  // namespace

TEST_CASE("scans against JAX: values, types and gradients", "[jax][scan]") {
  tessera::runtime rt{8};
  tessera_jax::checks cs;
  auto const x8 = tessera::make_mesh<"x">({8});
  auto const x8e = tessera::make_mesh<"x">({8}, tessera::explicit_axes);
  auto const xy = tessera::make_mesh<"X", "Y">({2, 4});
  auto const xye = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const abc = tessera::make_mesh<"a", "b", "c">({2, 2, 2});
  auto const abce = tessera::make_mesh<"a", "b", "c">({2, 2, 2}, tessera::explicit_axes);
  using s1 = std::array<std::size_t, 1>;
  using s2 = std::array<std::size_t, 2>;
  using s3 = std::array<std::size_t, 3>;
  add_config<0>(cs, "x8_auto_x_0", x8, P<"x">{}, s1{16}, false);
  add_config<0>(cs, "x8_expl_r_0", x8e, P<>{}, s1{16}, true);
  add_config<0>(cs, "XY_auto_XY_0", xy, P<"X", "Y">{}, s2{8, 12}, false);
  add_config<-1>(cs, "XY_auto_XY_-1", xy, P<"X", "Y">{}, s2{8, 12}, false);
  add_config<1>(cs, "XY_expl_X__1", xye, P<"X", none>{}, s2{8, 12}, true);
  add_config<0>(cs, "XY_expl__Y_0", xye, P<none, "Y">{}, s2{8, 12}, true);
  add_config<1>(cs, "abc_auto_abc_1", abc, P<"a", "b", "c">{}, s3{4, 6, 8}, false);
  add_config<0>(cs, "abc_auto_(ca)_b_0", abc, P<tessera::axes<"c", "a">, none, "b">{}, s3{4, 6, 8}, false);
  add_config<1>(cs, "abc_expl_a_c_1", abce, P<"a", none, "c">{}, s3{4, 6, 8}, true);

  cs["dtype/cumsum_int8"] = [](json const& c) {
    check_dtype<std::int8_t>(c, "int8", [](auto const& x) { return tessera::cumsum<1>(x); });
  };
  cs["dtype/cumsum_bool"] = [](json const& c) {
    check_dtype<bool>(c, "bool", [](auto const& x) { return tessera::cumsum<0>(x); });
  };
  cs["dtype/cumprod_bool"] = [](json const& c) {
    check_dtype<bool>(c, "bool", [](auto const& x) { return tessera::cumprod<1>(x); });
  };
  cs["dtype/cummax_int32"] = [](json const& c) {
    check_dtype<std::int32_t>(c, "int32", [](auto const& x) { return tessera::cummax<0>(x); });
  };
  cs["dtype/cummin_int8_rev"] = [](json const& c) {
    check_dtype<std::int8_t>(c, "int8", [](auto const& x) { return tessera::cummin<1, true>(x); });
  };
  for (char const* in : {"ones", "steps", "zeros", "one_zero"}) {
    std::string const p = std::string("ties/") + in + "/";
    cs[p + "cumprod"] = check_ties<tessera::op::prod, false>;
    cs[p + "cumprod/rev"] = check_ties<tessera::op::prod, true>;
    cs[p + "cummax"] = check_ties<tessera::op::max, false>;
    cs[p + "cummax/rev"] = check_ties<tessera::op::max, true>;
    cs[p + "cummin"] = check_ties<tessera::op::min, false>;
    cs[p + "cummin/rev"] = check_ties<tessera::op::min, true>;
  }
  cs["explicit_error"] = [](json const& c) {
    // tessera's compile-time error (core/scan_diagnostics.hpp, tests/compile_fail/scan_*.cpp) quotes it.
    CHECK(c.at("message").get<std::string>().rfind("Input should be unsharded over the axis being reduced", 0) == 0);
  };
  CHECK(tessera_jax::check_all(golden_file, cs) == 102);
}
