// The indexing operations against JAX 0.12 (tests/golden/jax_indexing.json, written by
// tools/jax_reference/gen_indexing.py): broadcasted_iota and arange with out_sharding, tril and
// triu (values, typeof, gradient), one_hot with and without out_sharding, take and
// take_along_axis (typeof, values with fill-mode indices, gradients) on Explicit meshes.
//
// Where JAX refuses a program tessera runs (a take from a table sharded along the taken axis or
// with sharded indices, take_along_axis with indices sharded along the axis), the case holds
// JAX's error and the JAX program that computes what tessera computes (`.at[...].get(out_sharding=)`
// with tessera's layout): tessera's typeof, values and gradient are compared with that program's.
// Where both refuse (one_hot's out_sharding that moves x, take_along_axis along a sharded axis),
// tessera's rule is checked to refuse it too (the compile-fail tests tests/compile_fail/indexing_*
// show the messages).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

namespace {

using tessera::none;
using tessera::P;
using tessera_jax::json;
constexpr tessera::dim_spec xy = tessera::axes<"X", "Y">;

/// Flat values against the golden's, NaN written "nan" there.
template <class A>
void same_values(A const& got, json const& want, double tol = 0.0) {
  REQUIRE(got.size() == want.size());
  std::size_t i = 0;
  for (auto v : got) {
    json const& w = want[i];
    INFO("element " << i << ": tessera " << v << ", JAX " << w.dump());
    if (w.is_string()) CHECK(std::isnan(static_cast<double>(v)));
    else CHECK(std::abs(static_cast<double>(v) - w.get<double>()) <= tol * std::max(1.0, std::abs(w.get<double>())));
    ++i;
  }
}

template <class T, std::size_t N>
xt::xtensor<T, N> host_of(json const& values, std::array<std::size_t, N> const& shape) {
  xt::xtensor<T, N> h(shape);
  std::size_t i = 0;
  for (auto& v : h) v = static_cast<T>(values[i++].get<double>());
  return h;
}

/// The 2-D specs of the cases, one instantiation each.
template <class F>
void spec2(std::string const& s, F&& f) {
  if (s == "r") f(P<>{});
  else if (s == "X_") f(P<"X">{});
  else if (s == "_Y") f(P<none, "Y">{});
  else if (s == "XY") f(P<"X", "Y">{});
  else if (s == "YX") f(P<"Y", "X">{});
  else if (s == "Y_") f(P<"Y">{});
  else if (s == "(XY)_") f(P<tessera::axes<"X", "Y">>{});
  else FAIL("no C++ spec for " << s);
}

auto m24() { return tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes); }
auto m222() { return tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes); }

template <bool Lower, class X>
void check_triangle(X const& x, json const& c) {
  long long const k = c.at("k").get<long long>();
  auto y = Lower ? tessera::eval(tessera::tril(x, k)) : tessera::eval(tessera::triu(x, k));
  CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
  same_values(tessera::to_host(y), c.at("values"));
  auto g = tessera::grad([&](auto const& v) {
    if constexpr (Lower) { auto t = tessera::tril(v, k); return tessera::sum(t * t); }
    else { auto t = tessera::triu(v, k); return tessera::sum(t * t); }
  })(x);
  CHECK(tessera::type_of(g) == c.at("grad_typeof").get<std::string>());
  same_values(tessera::to_host(g), c.at("grad"), 1e-6);
}

template <class TS, class IS, class WS>
void take_check(json const& c, std::size_t all_reduces) {
  auto m = m24();
  auto t = tessera::device_put(host_of<float, 2>(c.at("table"), {16, 8}), tessera::named_sharding(m, TS{}));
  auto i = tessera::device_put(host_of<int32_t, 2>(c.at("ids"), {4, 6}), tessera::named_sharding(m, IS{}));
  auto y = tessera::take(t, i);
  CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
  auto const plan = tessera::explain(y);
  INFO(plan);
  CHECK(plan.count("all-gather") == 0);
  CHECK(plan.count() == all_reduces);
  CHECK(plan.count("all-reduce") == all_reduces);
  same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
  auto ig = tessera::device_put(host_of<int32_t, 2>(c.at("grad_ids"), {4, 6}), tessera::named_sharding(m, IS{}));
  auto w = tessera::device_put(host_of<float, 3>(c.at("w"), {4, 6, 8}), tessera::named_sharding(m, WS{}));
  auto g = tessera::grad([&](auto const& tt) {
    auto e = tessera::take(tt, ig);
    return tessera::sum(e * w + e * e);
  })(t);
  CHECK(tessera::type_of(g) == c.at("grad_typeof").get<std::string>());
  same_values(tessera::to_host(g), c.at("grad"), 1e-5);
}

template <class XS, class IS, class WS>
void along_check(json const& c) {
  auto m = m24();
  auto x = tessera::device_put(host_of<float, 2>(c.at("x"), {8, 8}), tessera::named_sharding(m, XS{}));
  auto i = tessera::device_put(host_of<int32_t, 2>(c.at("ids"), {8, 4}), tessera::named_sharding(m, IS{}));
  auto y = tessera::take_along_axis<1>(x, i);
  CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
  CHECK(tessera::explain(y).collectives.empty());
  same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
  auto ig = tessera::device_put(host_of<int32_t, 2>(c.at("grad_ids"), {8, 4}), tessera::named_sharding(m, IS{}));
  auto w = tessera::device_put(host_of<float, 2>(c.at("w"), {8, 4}), tessera::named_sharding(m, WS{}));
  auto g = tessera::grad([&](auto const& xx) {
    auto e = tessera::take_along_axis<1>(xx, ig);
    return tessera::sum(e * e * w);
  })(x);
  static_assert(std::is_same_v<decltype(g), decltype(x)>);
  if (c.contains("grad_typeof")) CHECK(tessera::type_of(g) == c.at("grad_typeof").get<std::string>());
  same_values(tessera::to_host(g), c.at("grad"), 1e-5);
}

}  // namespace

TEST_CASE("indexing against JAX 0.12: iota, arange, tril, triu, one_hot, take, take_along_axis", "[jax][indexing]") {
  tessera::runtime rt{8};
  tessera_jax::checks cs;
  json const& cases = tessera_jax::golden("jax_indexing.json").at("cases");
  for (auto const& [name, c] : cases.items()) {
    std::string const kind = name.substr(0, name.find('/'));
    if (kind == "iota") {
      cs[name] = [](json const& c) {
        spec2(c.at("spec").get<std::string>(), [&](auto p) {
          auto s = tessera::named_sharding(m24(), p);
          auto check = [&](auto const& y) {
            CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
            same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
          };
          if (c.at("dim") == 0) check(tessera::iota<int32_t, 0>({8, 8}, s));
          else check(tessera::iota<int32_t, -1>({8, 8}, s));
        });
      };
    } else if (kind == "arange") {
      cs[name] = [](json const& c) {
        auto const spec = c.at("spec").get<std::string>();
        auto check = [&](auto p) {
          auto y = tessera::arange<int32_t>(16, tessera::named_sharding(m24(), p));
          CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
          same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
        };
        if (spec == "X") check(P<"X">{});
        else if (spec == "Y") check(P<"Y">{});
        else check(P<tessera::axes<"X", "Y">>{});
      };
    } else if (kind == "tril" || kind == "triu") {
      cs[name] = [lower = kind == "tril"](json const& c) {
        auto const spec = c.at("spec").get<std::string>();
        if (c.at("mesh") == "m24") {
          auto const h = host_of<float, 2>(c.at("x"), {8, 8});
          spec2(spec, [&](auto p) {
            auto x = tessera::device_put(h, tessera::named_sharding(m24(), p));
            if (lower) check_triangle<true>(x, c);
            else check_triangle<false>(x, c);
          });
        } else {
          auto const h = host_of<float, 3>(c.at("x"), {4, 8, 8});
          auto run = [&](auto p) {
            auto x = tessera::device_put(h, tessera::named_sharding(m222(), p));
            if (lower) check_triangle<true>(x, c);
            else check_triangle<false>(x, c);
          };
          if (spec == "ZXY") run(P<"Z", "X", "Y">{});
          else run(P<none, "X", "Y">{});
        }
      };
    } else if (kind == "one_hot") {
      cs[name] = [](json const& c) {
        auto const h = host_of<int32_t, 2>(c.at("ids"), {8, 4});
        spec2(c.at("spec").get<std::string>(), [&](auto p) {
          auto y = tessera::one_hot(tessera::device_put(h, tessera::named_sharding(m24(), p)), 6);
          CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
          CHECK(tessera::explain(y).collectives.empty());
          same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
        });
      };
    } else if (kind == "one_hot_out") {
      cs[name] = [](json const& c) {
        auto const spec = c.at("spec").get<std::string>(), out = c.at("out").get<std::string>();
        using Mesh = decltype(m24());
        if (c.contains("error")) {
          // JAX refuses; so does tessera's rule (tests/compile_fail/indexing_one_hot_out_sharding_moves_x.cpp).
          CHECK(c.at("error").get<std::string>().find("The input part of spec in out_sharding should match") == 0);
          constexpr std::array<tessera::dim_spec, 2> x1{tessera::dim_spec("X"), {}};
          constexpr std::array<tessera::dim_spec, 3> o1{{{}, {}, tessera::dim_spec("Y")}};
          constexpr std::array<tessera::dim_spec, 2> x2{tessera::dim_spec("X"), tessera::dim_spec("Y")};
          constexpr std::array<tessera::dim_spec, 3> o2{tessera::dim_spec("X"), {}, {}};
          if (spec == "X_") CHECK(tessera::detail::one_hot_mismatch(x1, o1, Mesh::axes) == 0);
          else CHECK(tessera::detail::one_hot_mismatch(x2, o2, Mesh::axes) == 1);
          return;
        }
        auto const h = host_of<int32_t, 2>(c.at("ids"), {8, 4});
        auto check = [&](auto const& y) {
          CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
          same_values(tessera::to_host(tessera::eval(y)), c.at("values"));
        };
        auto mesh = m24();
        if (out == "X_Y") check(tessera::one_hot(tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{})), 8, P<"X", none, "Y">{}));
        else if (out == "__Y") check(tessera::one_hot(tessera::device_put(h, tessera::named_sharding(mesh, P<>{})), 8, P<none, none, "Y">{}));
        else check(tessera::one_hot(tessera::device_put(h, tessera::named_sharding(mesh, P<none, "Y">{})), 8, P<none, "Y", "X">{}));
      };
    } else if (kind == "take") {
      cs[name] = [](json const& c) {
        std::string const key = c.at("table_spec").get<std::string>() + "/" + c.at("ids_spec").get<std::string>();
        // A table sharded along the taken axis: partial sums, one all-reduce (JAX refuses it without out_sharding).
        if (key == "r/r") take_check<P<>, P<>, P<>>(c, 0);
        else if (key == "_Y/r") take_check<P<none, "Y">, P<>, P<none, none, "Y">>(c, 0);
        else if (key == "_(XY)/r") take_check<P<none, xy>, P<>, P<none, none, xy>>(c, 0);
        else if (key == "X_/r") take_check<P<"X">, P<>, P<>>(c, 1);
        else if (key == "Y_/X_") take_check<P<"Y">, P<"X">, P<"X">>(c, 1);
        else if (key == "XY/r") take_check<P<"X", "Y">, P<>, P<none, none, "Y">>(c, 1);
        else if (key == "_Y/X_") take_check<P<none, "Y">, P<"X">, P<"X", none, "Y">>(c, 0);
        else if (key == "r/X_") take_check<P<>, P<"X">, P<"X">>(c, 0);
        else if (key == "(XY)_/r") take_check<P<xy>, P<>, P<>>(c, 1);
        else FAIL("no C++ program for " << key);
      };
    } else if (kind == "take_along_axis") {
      cs[name] = [](json const& c) {
        std::string const key = c.at("x_spec").get<std::string>() + "/" + c.at("ids_spec").get<std::string>();
        using Mesh = decltype(m24());
        if (key == "_Y/r" || key == "XY/X_") {
          // Both refuse x sharded along the axis (tests/compile_fail/indexing_take_along_axis_sharded_axis.cpp).
          CHECK(c.contains("error"));
          constexpr std::array<tessera::dim_spec, 2> x1{tessera::dim_spec{}, tessera::dim_spec("Y")}, i1{};
          constexpr std::array<tessera::dim_spec, 2> x2{tessera::dim_spec("X"), tessera::dim_spec("Y")};
          constexpr std::array<tessera::dim_spec, 2> i2{tessera::dim_spec("X"), tessera::dim_spec{}};
          if (key == "_Y/r") CHECK(tessera::detail::along_rule<1>(x1, i1, Mesh::axes).error == 1);
          else CHECK(tessera::detail::along_rule<1>(x2, i2, Mesh::axes).error == 1);
          return;
        }
        if (key == "X_/X_") along_check<P<"X">, P<"X">, P<"X">>(c);
        else if (key == "r/r") along_check<P<>, P<>, P<>>(c);
        else if (key == "r/X_") along_check<P<>, P<"X">, P<"X">>(c);
        else if (key == "X_/r") along_check<P<"X">, P<>, P<"X">>(c);
        else if (key == "r/_Y") along_check<P<>, P<none, "Y">, P<none, "Y">>(c);
        else if (key == "X_/_Y") along_check<P<"X">, P<none, "Y">, P<"X", "Y">>(c);
        else FAIL("no C++ program for " << key);
      };
    }
  }
  CHECK(tessera_jax::check_all("jax_indexing.json", cs) > 0);
}
