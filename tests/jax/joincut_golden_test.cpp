// Joining and cutting against JAX 0.12 on Explicit meshes (tests/golden/jax_joincut.json, written
// by tools/jax_reference/gen_joincut.py): for each case, jax.typeof of the result, its values and
// the gradients of sum(op(x, y) * w), or JAX's refusal: a run-time one must be ours too, with
// JAX's words in our message; a compile-time one (differently sharded operands of concatenate,
// roll of a sharded dimension) is checked through the rule our static_assert uses.
#include <catch2/catch.hpp>

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "tessera/autodiff/grad.hpp"
#include "tessera/autodiff/join_cut_rules.hpp"
#include "tessera/expr.hpp"

#include "golden.hpp"

namespace {

using tessera::none;
using tessera::P;
using tessera_jax::json;

/// The generator's smooth(shape, i): multiples of 1/8 in [-1.25, 1.25].
xt::xtensor<float, 2> smooth(std::array<std::size_t, 2> shape, int i) {
  xt::xtensor<float, 2> x(shape);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.flat(k) = static_cast<float>((static_cast<long>((k * (2 * i + 3) + 7 * i) % 21) - 10) / 8.0);
  return x;
}
template <std::size_t N>
xt::xtensor<float, N> smooth_n(std::array<std::size_t, N> shape, int i) {
  xt::xtensor<float, N> x(shape);
  for (std::size_t k = 0; k < x.size(); ++k)
    x.flat(k) = static_cast<float>((static_cast<long>((k * (2 * i + 3) + 7 * i) % 21) - 10) / 8.0);
  return x;
}

template <class E>
auto host(E const& e) {
  return tessera::to_host(tessera::eval(e));
}

/// JAX's refusal text up to "is not implemented." (its operand types are printed differently).
std::string jax_words(std::string const& error) {
  std::string s = error.substr(error.find(": ") + 2);
  auto const end = s.find(" is not implemented.");
  return end == std::string::npos ? s : s.substr(0, end + 20);
}

template <class Mesh, class Spec>
struct runner {
  Mesh mesh;
  std::array<std::size_t, 2> shape;

  auto operand(int i) const { return tessera::device_put(smooth(shape, i), tessera::named_sharding(mesh, Spec{})); }
  template <std::size_t N>
  auto weights(std::array<std::size_t, N> s) const {
    return tessera::device_put(smooth_n<N>(s, 5), tessera::named_sharding(mesh, P<>{}));
  }

  /// typeof, values and grads of a one-result op f(x, y) (y unused when nops == 1).
  template <class F>
  void check_one(json const& c, F f) const {
    auto const x = operand(0), y = operand(1);
    auto const r = f(x, y);
    CHECK(tessera::type_of(r) == c.at("typeof").get<std::string>());
    tessera_jax::check_values(host(r), c.at("values"));
    auto const w = weights(r.shape());
    auto loss = [&](auto const& a, auto const& b) { return tessera::sum(f(a, b) * w); };
    auto const [gx, gy] = tessera::grad<0, 1>(loss)(x, y);
    auto const& g = c.at("grads");
    tessera_jax::check_values(tessera::to_host(gx), g.at(0));
    if (g.size() > 1) tessera_jax::check_values(tessera::to_host(gy), g.at(1));
  }
  /// The same for split's list of results.
  template <class F>
  void check_list(json const& c, F f) const {
    auto const x = operand(0);
    auto const parts = f(x);
    REQUIRE(parts.size() == c.at("typeof").size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      CHECK(tessera::type_of(parts[i]) == c.at("typeof").at(i).get<std::string>());
      tessera_jax::check_values(host(parts[i]), c.at("values").at(i));
    }
    auto loss = [&](auto const& a) {
      auto const ps = f(a);
      auto total = tessera::sum(ps[0] * weights(ps[0].shape()));
      for (std::size_t i = 1; i < ps.size(); ++i) total = total + tessera::sum(ps[i] * weights(ps[i].shape()));
      return total;
    };
    tessera_jax::check_values(tessera::to_host(tessera::grad(loss)(x)), c.at("grads").at(0));
  }

  template <int A>
  void by_axis(json const& c) const {
    std::string const op = c.at("op");
    json const& a = c.at("args");
    if (op == "stack") {
      check_one(c, [](auto const& x, auto const& y) { return tessera::stack<A>(x, y); });
      return;
    }
    if constexpr (A == 2) {
      FAIL("no check for " << op << " on axis 2");
    } else {
      if (op == "concatenate") {
        check_one(c, [](auto const& x, auto const& y) { return tessera::concatenate<A>(x, y); });
      } else if (op == "split") {
        if (a.contains("sections")) {
          std::size_t const n = a.at("sections");
          check_list(c, [n](auto const& x) { return tessera::split<A>(x, n); });
        } else {
          auto const idx = a.at("indices").get<std::vector<long long>>();
          check_list(c, [idx](auto const& x) { return tessera::split<A>(x, idx); });
        }
      } else if (op == "slice_in_dim") {
        long long const s = a.at("start"), e = a.at("stop"), st = a.at("step");
        check_one(c, [=](auto const& x, auto const&) { return tessera::slice_in_dim<A>(x, s, e, st); });
      } else if (op == "roll") {
        using X = decltype(operand(0));
        constexpr auto spec = tessera::detail::operand_traits<X>::spec;
        // roll of a dimension sharded on Explicit axes does not compile (checked in run())
        if constexpr (A < 2 && !tessera::detail::has_explicit_axis(spec[A < 2 ? A : 0], Mesh::axes)) {
          long long const s = a.at("shift");
          check_one(c, [=](auto const& x, auto const&) { return tessera::roll<A>(x, s); });
        } else {
          FAIL("JAX rolled a dimension tessera refuses to roll: " << c.dump());
        }
      } else {
        FAIL("no check for the operation " << op);
      }
    }
  }

  /// A run-time refusal: ours must quote JAX's words.
  template <class F>
  void refused(json const& c, F f) const {
    std::string const want = jax_words(c.at("error"));
    try {
      f();
      FAIL("tessera did not refuse: " << want);
    } catch (std::invalid_argument const& e) {
      CHECK_THAT(std::string(e.what()), Catch::Contains(want));
    }
  }

  void run(json const& c) const {
    std::string const op = c.at("op");
    json const& a = c.at("args");
    int const axis = a.contains("axis") ? a.at("axis").get<int>() : 0;
    auto const x = operand(0);
    using X = std::remove_cvref_t<decltype(x)>;
    constexpr auto spec = tessera::detail::operand_traits<X>::spec;
    if (op == "concatenate_differ") {
      // JAX: "All operands should have the same sharding"; tessera's static_assert fires on this rule.
      using R = tessera::array<float, 2, tessera::named_sharding<Mesh, P<>>>;
      constexpr auto bad = tessera::detail::jc::first_explicit_mismatch<Mesh, 2, X, R>(spec);
      CHECK(bad.first == 1);
      CHECK_THAT(c.at("error").get<std::string>(), Catch::Contains("All operands should have the same sharding"));
      return;
    }
    if (c.contains("error")) {
      std::string const e = c.at("error");
      if (op == "roll") {  // a compile error in tessera: the rule of its static_assert
        CHECK(tessera::detail::has_explicit_axis(spec[static_cast<std::size_t>(axis)], Mesh::axes));
        CHECK_THAT(e, Catch::Contains("cannot be sharded on the axis being rolled over"));
        return;
      }
      if (op == "split") {
        if (a.contains("sections")) {
          std::size_t const n = a.at("sections");
          refused(c, [&] { return axis == 0 ? tessera::split<0>(x, n).size() : tessera::split<1>(x, n).size(); });
        } else {
          auto const idx = a.at("indices").get<std::vector<long long>>();
          refused(c, [&] { return axis == 0 ? tessera::split<0>(x, idx).size() : tessera::split<1>(x, idx).size(); });
        }
      } else if (op == "slice_in_dim") {
        long long const s = a.at("start"), en = a.at("stop"), st = a.at("step");
        refused(c, [&] {
          if (axis == 0) (void)tessera::slice_in_dim<0>(x, s, en, st);
          else (void)tessera::slice_in_dim<1>(x, s, en, st);
        });
      } else if (op == "dynamic_slice") {
        auto const st = a.at("starts").get<std::array<long long, 2>>(), sz = a.at("sizes").get<std::array<long long, 2>>();
        refused(c, [&] { (void)tessera::dynamic_slice(x, st, sz); });
      } else if (op == "pad") {
        auto const w = a.at("widths").get<std::array<std::array<long long, 2>, 2>>();
        refused(c, [&] { (void)tessera::pad(x, w); });
      } else {
        FAIL("no check for JAX's refusal of " << op << ": " << e);
      }
      return;
    }
    if (op == "dynamic_slice") {
      auto const st = a.at("starts").get<std::array<long long, 2>>(), sz = a.at("sizes").get<std::array<long long, 2>>();
      check_one(c, [=](auto const& v, auto const&) { return tessera::dynamic_slice(v, st, sz); });
    } else if (op == "dynamic_update_slice") {
      auto const st = a.at("starts").get<std::array<long long, 2>>();
      auto const us = a.at("update_shape").get<std::array<long long, 2>>();
      check_one(c, [=](auto const& v, auto const& y) {
        return tessera::dynamic_update_slice(v, tessera::lax::slice(y, {0ll, 0ll}, {us[0], us[1]}), st);
      });
    } else if (op == "pad") {
      auto const w = a.at("widths").get<std::array<std::array<long long, 2>, 2>>();
      check_one(c, [=](auto const& v, auto const&) { return tessera::pad(v, w); });
    } else if (op == "flip") {
      auto const axes = a.at("axes").get<std::vector<int>>();
      if (axes.size() == 2) check_one(c, [](auto const& v, auto const&) { return tessera::flip<0, 1>(v); });
      else if (axes[0] == 0) check_one(c, [](auto const& v, auto const&) { return tessera::flip<0>(v); });
      else check_one(c, [](auto const& v, auto const&) { return tessera::flip<1>(v); });
    } else if (axis == 0) {
      by_axis<0>(c);
    } else if (axis == 1) {
      by_axis<1>(c);
    } else if (op == "stack") {
      by_axis<2>(c);
    } else {
      FAIL("no check for " << op << " on axis " << axis);
    }
  }
};

}  // namespace

TEST_CASE("joining and cutting against JAX 0.12: typeof, values, grads and refusals", "[jax][join_cut]") {
  tessera::runtime rt{8};
  auto const x2 = tessera::make_mesh<"x">({2}, tessera::explicit_axes);
  auto const x2y2 = tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes);
  auto const x2y2z2 = tessera::make_mesh<"x", "y", "z">({2, 2, 2}, tessera::explicit_axes);
  auto const x2y4 = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  runner<std::remove_cvref_t<decltype(x2)>, P<"x", none>> const r1{x2, {8, 4}};
  runner<std::remove_cvref_t<decltype(x2y2)>, P<"x", "y">> const r2{x2y2, {8, 4}};
  runner<std::remove_cvref_t<decltype(x2y2z2)>, P<"z", "x">> const r3{x2y2z2, {4, 8}};
  runner<std::remove_cvref_t<decltype(x2y4)>, P<>> const r4{x2y4, {8, 4}};
  tessera_jax::checks cs;
  for (auto const& [name, c] : tessera_jax::golden("jax_joincut.json").at("cases").items()) {
    std::string const cfg = c.at("config");
    cs[name] = [cfg, &r1, &r2, &r3, &r4](json const& cc) {
      if (cfg == "x2") r1.run(cc);
      else if (cfg == "x2y2") r2.run(cc);
      else if (cfg == "x2y2z2") r3.run(cc);
      else if (cfg == "x2y4r") r4.run(cc);
      else FAIL("unknown configuration " << cfg);
    };
  }
  CHECK(tessera_jax::check_all("jax_joincut.json", cs) >= 190);
}
