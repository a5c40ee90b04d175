// Shape operations (expr/shape_ops.hpp): reshape, swapaxes, moveaxis and broadcast_to against
// plain xtensor, on 1-, 2- and 3-axis meshes, Auto and Explicit; what each moves (explain());
// their gradients against central finite differences; bad sizes as exceptions naming them.
#include <array>
#include <cmath>
#include <string>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/autodiff.hpp>
#include <tessera/expr/shape_ops.hpp>
#include <tessera/autodiff/shape_rules.hpp>
#include <tessera/autodiff/local_shape_ops.hpp>
#include <xtensor/xview.hpp>

#include "grad_support.hpp"
#include "support.hpp"

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::same_array;
using tessera_test::values;

namespace {
template <std::size_t N>
xt::xtensor<float, N> iota_host(std::array<std::size_t, N> shape) {
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  return xt::reshape_view(xt::arange<float>(static_cast<float>(n)), shape);
}
bool no_collectives(tessera::communication_plan const& plan) { return plan.count() == 0; }
}  // namespace

TEST_CASE("reshape: values equal numpy's for every layout, and a reshape that keeps blocks in place moves nothing",
          "[shape]") {
  tessera::runtime rt{8};
  auto const m24 = tessera::make_mesh<"x", "y">({2, 4});
  auto const m222 = tessera::make_mesh<"x", "y", "z">({2, 2, 2}, tessera::explicit_axes);
  auto const m8 = tessera::make_mesh<"x">({8});
  auto const h = iota_host<2>({8, 12});

  // Replicated operand: replicated result, any new shape, one -1 allowed.
  auto const r = tessera::device_put(h, tessera::named_sharding(m24, P<>{}));
  tessera::array r1 = tessera::reshape(r, {3, -1, 4});
  CHECK(tessera::type_of(r1) == "float32[3,8,4]");
  CHECK(same_array(tessera::to_host(r1), xt::xtensor<float, 3>(xt::reshape_view(h, {3, 8, 4}))));
  CHECK(no_collectives(tessera::explain(tessera::reshape(r, {96}))));

  // A split of a sharded dim into (sharded major, minor) and a merge back: blocks stay.
  auto const x = tessera::device_put(h, tessera::named_sharding(m24, P<"x", "y">{}));
  auto split = tessera::reshape(x, {2, 4, 12}, P<"x", none, "y">{});
  CHECK(no_collectives(tessera::explain(split)));
  tessera::array s1 = split;
  CHECK(tessera::type_of(s1) == "float32[2@x,4,12@y]");
  CHECK(same_array(tessera::to_host(s1), xt::xtensor<float, 3>(xt::reshape_view(h, {2, 4, 12}))));
  tessera::array back = tessera::reshape(s1, {8, 12}, P<"x", "y">{});
  CHECK(same_array(tessera::to_host(back), h));

  // Heads: [B@x, D@y] -> [B@x, H@y, Dh] (the attention split) moves nothing.
  auto heads = tessera::reshape(x, {8, 4, 3}, P<"x", "y">{});
  CHECK(no_collectives(tessera::explain(heads)));
  CHECK(same_array(tessera::to_host(tessera::array(heads)), xt::xtensor<float, 3>(xt::reshape_view(h, {8, 4, 3}))));

  // A reshape whose result needs other devices' elements gathers them first, and says so.
  auto moved = tessera::reshape(x, {12, 8}, P<"x", "y">{});
  CHECK(tessera::explain(moved).count("all-gather") == 1);
  CHECK(same_array(tessera::to_host(tessera::array(moved)), xt::xtensor<float, 2>(xt::reshape_view(h, {12, 8}))));

  // Uneven blocks (12 over 8 devices is not even) and an element-wise operand.
  auto const u = tessera::device_put(iota_host<1>({12}), tessera::named_sharding(m8, P<"x">{}));
  tessera::array u1 = tessera::reshape(2 * u + 1, {3, 4}, P<none, "x">{});
  CHECK(same_array(tessera::to_host(u1), xt::xtensor<float, 2>(2 * xt::reshape_view(iota_host<1>({12}), {3, 4}) + 1)));

  // Three axes, Explicit: a multi-axis entry dealt over the split pieces.
  auto const h3 = iota_host<1>({16});
  auto const z = tessera::device_put(h3, tessera::named_sharding(m222, P<axes<"x", "y", "z">>{}));
  auto zs = tessera::reshape(z, {2, 2, 4}, P<"x", "y", "z">{});
  CHECK(no_collectives(tessera::explain(zs)));
  CHECK(tessera::type_of(tessera::array(zs)) == "float32[2@x,2@y,4@z]");
  CHECK(same_array(tessera::to_host(tessera::array(zs)), xt::xtensor<float, 3>(xt::reshape_view(h3, {2, 2, 4}))));
}

TEST_CASE("reshape refuses sizes that do not match, naming them", "[shape]") {
  tessera::runtime rt{8};
  auto const m = tessera::make_mesh<"x">({8});
  auto const x = tessera::device_put(iota_host<1>({12}), tessera::named_sharding(m, P<>{}));
  CHECK_THROWS_WITH(tessera::reshape(x, {5, 3}), "tessera::reshape: cannot reshape an array of size 12 into shape (5, 3)");
  CHECK_THROWS_WITH(tessera::reshape(x, {-1, 5}), "tessera::reshape: cannot reshape an array of size 12 into shape (-1, 5)");
  CHECK_THROWS_WITH(tessera::reshape(x, {-1, -1}),
                    "tessera::reshape: the new shape (-1, -1) may have one -1 and no other negative size");
  CHECK_THROWS_WITH(tessera::broadcast_to(x, {3, 5}),
                    Catch::Contains("cannot broadcast an array of shape (12,) to shape (3, 5) (dimension 0 is 12, neither 1 nor 5)"));
}

TEST_CASE("swapaxes, moveaxis and broadcast_to: values and JAX's shardings", "[shape]") {
  tessera::runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  auto const h = iota_host<3>({2, 4, 6});
  auto const x = tessera::device_put(h, tessera::named_sharding(m, P<"x", none, "y">{}));
  tessera::array s = tessera::swapaxes<0, -1>(x);
  CHECK(tessera::type_of(s) == "float32[6@y,4,2@x]");
  CHECK(same_array(tessera::to_host(s), xt::xtensor<float, 3>(xt::transpose(h, {2, 1, 0}))));
  tessera::array mv = tessera::moveaxis<-1, 0>(x);
  CHECK(tessera::type_of(mv) == "float32[6@y,2@x,4]");
  CHECK(same_array(tessera::to_host(mv), xt::xtensor<float, 3>(xt::transpose(h, {2, 0, 1}))));
  auto const row = tessera::device_put(iota_host<2>({1, 6}), tessera::named_sharding(m, P<none, "y">{}));
  auto b = tessera::broadcast_to(row, {3, 5, 6});
  CHECK(no_collectives(tessera::explain(b)));
  tessera::array ba = b;
  CHECK(tessera::type_of(ba) == "float32[3,5,6@y]");
  CHECK(same_array(tessera::to_host(ba), xt::xtensor<float, 3>(xt::broadcast(iota_host<2>({1, 6}), {3, 5, 6}))));
}

TEST_CASE("gradients of reshape, swapaxes, moveaxis and broadcast_to against finite differences", "[shape][grad]") {
  tessera::runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const s = tessera::named_sharding(m, P<"x", "y">{});
  xt::xtensor<double, 2> const xh = values<2>({4, 8}, 0.3);
  auto const x = tessera::device_put(xh, s);

  // sum(reshape(x) * c) for a weight c of the new shape: the gradient is c reshaped back.
  xt::xtensor<double, 3> const c3 = values<3>({4, 2, 4}, 1.1);
  auto const c = tessera::device_put(c3, tessera::named_sharding(m, P<"x", none, "y">{}));
  auto const g = tessera::grad([&](auto const& v) { return tessera::sum(tessera::reshape(v, {4, 2, 4}, P<"x", none, "y">{}) * c); })(x);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(g)>, std::remove_cvref_t<decltype(x)>>);
  auto const n = numeric_gradient(
      [&](xt::xtensor<double, 2> const& v) {
        xt::xtensor<double, 3> r = xt::reshape_view(v, {4, 2, 4});
        return double(xt::sum(r * c3)());
      },
      xh);
  CHECK(max_abs_diff(tessera::to_host(g), n) < 1e-7);

  // sin of a swapaxes and of a moveaxis, weighted.
  xt::xtensor<double, 2> const ct = values<2>({8, 4}, 2.1);
  auto const cd = tessera::device_put(ct, tessera::named_sharding(m, P<"y", "x">{}));
  auto const gs = tessera::grad([&](auto const& v) { return tessera::sum(tessera::sin(tessera::swapaxes<0, 1>(v)) * cd); })(x);
  auto const ns = numeric_gradient(
      [&](xt::xtensor<double, 2> const& v) { return double(xt::sum(xt::sin(xt::transpose(v)) * ct)()); }, xh);
  CHECK(max_abs_diff(tessera::to_host(gs), ns) < 1e-7);
  auto const gm = tessera::grad([&](auto const& v) { return tessera::sum(tessera::sin(tessera::moveaxis<1, 0>(v)) * cd); })(x);
  CHECK(max_abs_diff(tessera::to_host(gm), ns) < 1e-7);

  // broadcast_to: the gradient sums over the broadcast dims.
  xt::xtensor<double, 3> const cb = values<3>({3, 4, 8}, 0.7);
  auto const cbd = tessera::device_put(cb, tessera::named_sharding(m, P<none, "x", "y">{}));
  auto const gb = tessera::grad([&](auto const& v) { return tessera::sum(tessera::broadcast_to(v, {3, 4, 8}) * cbd); })(x);
  xt::xtensor<double, 2> const nb = xt::sum(cb, {0});
  CHECK(max_abs_diff(tessera::to_host(gb), nb) < 1e-12);
}

TEST_CASE("shape operations inside shard_map bodies, on blocks and under grad", "[shape][shard_map]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({4});
  xt::xtensor<double, 2> const xh = values<2>({8, 6}, 0.5);
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"X">{}));
  // Each device's 2x6 block reshaped to 3x4, its axes swapped, moved, broadcast, and summed.
  auto const body = [](auto const& b) {
    auto const r = tessera::reshape(b, {3, -1});
    auto const s = tessera::swapaxes<0, 1>(r);                    // 4 x 3
    auto const m = tessera::moveaxis<-1, 0>(tessera::sin(s));      // 3 x 4
    auto const w = tessera::broadcast_to(m, {2, 3, 4});
    return tessera::psum<"X">(tessera::sum(w * w));
  };
  auto const host = [](xt::xtensor<double, 2> const& v) {
    double t = 0;
    for (std::size_t d = 0; d < 4; ++d) {
      xt::xtensor<double, 2> blk = xt::view(v, xt::range(2 * d, 2 * d + 2), xt::all());
      xt::xtensor<double, 2> r = xt::reshape_view(blk, {3, 4});
      t += 2 * xt::sum(xt::sin(r) * xt::sin(r))();
    }
    return t;
  };
  auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(P<"X">{}), tessera::out_specs(P<>{}));
  CHECK(std::abs(tessera::to_host(sm(x))() - host(xh)) < 1e-9);
  auto const g = tessera::grad([&](auto const& v) { return sm(v); })(x);
  auto const n = numeric_gradient(host, xh);
  CHECK(max_abs_diff(tessera::to_host(g), n) < 1e-6);
}
