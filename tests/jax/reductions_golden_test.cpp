// The reductions with negative axes and keepdims, var, std, logsumexp, argmax, argmin, softmax,
// log_softmax, expand_dims and squeeze against JAX 0.12 (tests/golden/jax_reductions.json, written
// by tools/jax_reference/gen_reductions.py): jax.typeof and the values of every result, on
// Explicit meshes of 1, 2 and 3 axes with the reduced axis sharded or not, and jax.grad of
// sum(op(x) * w) for each differentiable operation. The cases are registered by looping over
// the operations at compile time for each layout, named as the generator names them.

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>

#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "golden.hpp"

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera_jax::json;

namespace {

char const* const file = "jax_reductions.json";

/// x[i] = ((37 i) % 19 - 9) / 4, as the generator writes it.
xt::xtensor<float, 2> input() {
  xt::xtensor<float, 2> x = xt::xtensor<float, 2>::from_shape({8, 8});
  for (std::size_t i = 0; i < 64; ++i) x.flat(i) = static_cast<float>(static_cast<int>((i * 37) % 19) - 9) / 4.0f;
  return x;
}

/// w[i] = ((11 i) % 7 - 3) / 2 over a result's flat index, on the result's sharding.
template <class A>
auto weights_like(A const& y) {
  xt::xtensor<float, A::rank> w = xt::xtensor<float, A::rank>::from_shape(y.shape());
  for (std::size_t i = 0; i < w.size(); ++i) w.flat(i) = static_cast<float>(static_cast<int>((i * 11) % 7) - 3) / 2.0f;
  return tessera::device_put(w, y.sharding());
}

/// Calls f with each operation of the file as a function of x, by name.
template <int Axis, bool Keep, class F>
void for_each_op(F const& f) {
  auto red = [&](char const* name, auto op) { f(name, op); };
  if constexpr (Keep) {
    red("sum", [](auto const& v) { return tessera::sum<Axis>(v, tessera::keepdims); });
    red("mean", [](auto const& v) { return tessera::mean<Axis>(v, tessera::keepdims); });
    red("max", [](auto const& v) { return tessera::max<Axis>(v, tessera::keepdims); });
    red("min", [](auto const& v) { return tessera::min<Axis>(v, tessera::keepdims); });
    red("prod", [](auto const& v) { return tessera::prod<Axis>(v, tessera::keepdims); });
    red("var", [](auto const& v) { return tessera::var<Axis>(v, tessera::keepdims); });
    red("std", [](auto const& v) { return tessera::std<Axis>(v, tessera::keepdims); });
    red("logsumexp", [](auto const& v) { return tessera::logsumexp<Axis>(v, tessera::keepdims); });
    red("argmax", [](auto const& v) { return tessera::argmax<Axis>(v, tessera::keepdims); });
    red("argmin", [](auto const& v) { return tessera::argmin<Axis>(v, tessera::keepdims); });
  } else {
    red("sum", [](auto const& v) { return tessera::sum<Axis>(v); });
    red("mean", [](auto const& v) { return tessera::mean<Axis>(v); });
    red("max", [](auto const& v) { return tessera::max<Axis>(v); });
    red("min", [](auto const& v) { return tessera::min<Axis>(v); });
    red("prod", [](auto const& v) { return tessera::prod<Axis>(v); });
    red("var", [](auto const& v) { return tessera::var<Axis>(v); });
    red("std", [](auto const& v) { return tessera::std<Axis>(v); });
    red("logsumexp", [](auto const& v) { return tessera::logsumexp<Axis>(v); });
    red("argmax", [](auto const& v) { return tessera::argmax<Axis>(v); });
    red("argmin", [](auto const& v) { return tessera::argmin<Axis>(v); });
  }
  red("softmax", [](auto const& v) { return tessera::softmax<Axis>(v); });
  red("log_softmax", [](auto const& v) { return tessera::log_softmax<Axis>(v); });
}

std::string variant(int axis, bool keep) { return ":ax" + std::to_string(axis) + (keep ? ":k" : ""); }

/// The value cases of one layout: every operation, both variants, and the views.
template <class X>
void value_cases(tessera_jax::checks& cs, std::string const& layout, X const& x) {
  auto add = [&]<int Axis, bool Keep>() {
    for_each_op<Axis, Keep>([&](char const* name, auto op) {
      cs[name + ("@" + layout) + variant(Axis, Keep)] = [x, op](json const& c) {
        tessera::array const y = op(x);
        CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
        tessera_jax::check_values(tessera::to_host(y), c.at("values"), c.at("rtol").get<double>());
      };
    });
  };
  add.template operator()<-1, false>();
  add.template operator()<0, true>();
  auto view = [&](std::string const& name, auto op) {
    cs[name + "@" + layout] = [x, op](json const& c) {
      tessera::array const y = op(x);
      CHECK(tessera::type_of(y) == c.at("typeof").get<std::string>());
      tessera_jax::check_values(tessera::to_host(y), c.at("values"));
    };
  };
  view("expand_dims_last", [](auto const& v) { return tessera::expand_dims<-1>(v); });
  view("expand_dims_0_2", [](auto const& v) { return tessera::expand_dims<0, 2>(v * 2.0f); });
  view("squeeze_of_expand", [](auto const& v) { return tessera::squeeze<-2>(tessera::expand_dims<1>(v) + 1.0f); });
}

/// The gradient cases of one layout: jax.grad of sum(op(x) * w) for each differentiable operation.
template <class X>
void grad_cases(tessera_jax::checks& cs, std::string const& layout, X const& x) {
  auto add = [&]<int Axis, bool Keep>() {
    for_each_op<Axis, Keep>([&](char const* name, auto op) {
      if (std::string(name).rfind("arg", 0) == 0) return;  // integer results: no gradient
      cs["grad_" + (name + ("@" + layout)) + variant(Axis, Keep)] = [x, op](json const& c) {
        auto const w = weights_like(tessera::eval(op(x)));
        auto const g = tessera::grad([&](auto const& v) { return tessera::sum(op(v) * w); })(x);
        tessera_jax::check_values(tessera::to_host(g), c.at("values"), c.at("rtol").get<double>());
      };
    });
  };
  add.template operator()<-1, false>();
  add.template operator()<0, true>();
}

}  // namespace

TEST_CASE("reductions, softmax and the unit views against JAX", "[jax][reductions]") {
  tessera::runtime rt{8};
  auto const h = input();
  tessera_jax::checks cs;
  auto const e8 = tessera::make_mesh<"X">({8}, tessera::explicit_axes);
  auto const e2x4 = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const e2x2x2 = tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes);
  value_cases(cs, "e8:X_", tessera::device_put(h, tessera::named_sharding(e8, P<"X", none>{})));
  value_cases(cs, "e2x4:XY", tessera::device_put(h, tessera::named_sharding(e2x4, P<"X", "Y">{})));
  value_cases(cs, "e2x2x2:X(YZ)", tessera::device_put(h, tessera::named_sharding(e2x2x2, P<"X", axes<"Y", "Z">>{})));
  auto const a2x4 = tessera::make_mesh<"X", "Y">({2, 4});
  grad_cases(cs, "a2x4:XY", tessera::device_put(h, tessera::named_sharding(a2x4, P<"X", "Y">{})));
  CHECK(tessera_jax::check_all(file, cs) == 101);
}
