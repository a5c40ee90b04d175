// Joining and cutting (expr/join_cut.hpp) against plain xtensor computations on 1-, 2- and
// 3-axis meshes, Auto and Explicit, sharded and unsharded touched dimensions; the portable path
// (each device reading its own blocks, as across processes); JAX's run-time refusals; what
// explain() lists; grads against finite differences.

#include <array>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "tessera/autodiff/grad.hpp"
#include "tessera/autodiff/join_cut_rules.hpp"
#include "tessera/expr.hpp"

#include "grad_support.hpp"
#include "support.hpp"

namespace {

using tessera::none;
using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::same_array;
using tessera_test::values;

using H3 = xt::xtensor<double, 3>;

template <class E>
auto host(E const& e) {
  return tessera::to_host(tessera::eval(e));
}

/// jnp.pad's constant mode by hand (xt::pad of a rank-3 tensor misbehaves in the xtensor we build with).
template <std::size_t N>
xt::xtensor<double, N> host_pad(xt::xtensor<double, N> const& x, std::array<std::array<std::size_t, 2>, N> w, double v) {
  std::array<std::size_t, N> shape{};
  for (std::size_t d = 0; d < N; ++d) shape[d] = x.shape()[d] + w[d][0] + w[d][1];
  xt::xtensor<double, N> out(shape, v);
  if constexpr (N == 2)
    xt::view(out, xt::range(w[0][0], w[0][0] + x.shape()[0]), xt::range(w[1][0], w[1][0] + x.shape()[1])) = x;
  else
    xt::view(out, xt::range(w[0][0], w[0][0] + x.shape()[0]), xt::range(w[1][0], w[1][0] + x.shape()[1]),
             xt::range(w[2][0], w[2][0] + x.shape()[2])) = x;
  return out;
}

/// Every operation of the family on x (8, 4, 6) laid out by Spec, against xtensor.
template <class Spec, class Mesh>
void check_ops(Mesh const& mesh) {
  auto const s = tessera::named_sharding(mesh, Spec{});
  auto const r = tessera::named_sharding(mesh, P<>{});
  H3 const ah = values<3>({8, 4, 6}, 0.3), bh = values<3>({8, 4, 6}, 1.1), ch = values<3>({3, 4, 6}, 2.2);
  auto const a = tessera::device_put(ah, s);
  auto const b = tessera::device_put(bh, s);
  auto const c = tessera::device_put(ch, s);
  constexpr auto spec = tessera::detail::operand_traits<std::remove_cvref_t<decltype(a)>>::spec;
  constexpr bool explicit_mesh = Mesh::type_of(0) == tessera::axis_type::explicit_;
  auto same_type = [&](auto const& e) {  // every result keeps the operand's spec
    using tessera::detail::operand_traits;
    STATIC_REQUIRE(tessera::same_layout(operand_traits<std::remove_cvref_t<decltype(e)>>::spec, spec));
  };

  auto const c0 = tessera::concatenate<0>(a, c, b);
  CHECK(same_array(host(c0), H3(xt::concatenate(xt::xtuple(ah, ch, bh), 0))));
  auto const c2 = tessera::concatenate<-1>(a, b);
  CHECK(same_array(host(c2), H3(xt::concatenate(xt::xtuple(ah, bh), 2))));
  if constexpr (!explicit_mesh) {  // Auto: the others are read where they are
    auto const br = tessera::device_put(bh, r);
    CHECK(same_array(host(tessera::concatenate<1>(a, br)), H3(xt::concatenate(xt::xtuple(ah, bh), 1))));
    CHECK(same_array(host(tessera::concatenate<1>(br, a)), H3(xt::concatenate(xt::xtuple(bh, ah), 1))));
  }
  auto const st = tessera::stack<1>(a, b);
  CHECK(same_array(host(st), xt::xtensor<double, 4>(xt::stack(xt::xtuple(ah, bh), 1))));

  auto const halves = tessera::split<0>(a, 2);
  REQUIRE(halves.size() == 2);
  CHECK(same_array(host(halves[1]), H3(xt::view(ah, xt::range(4, 8)))));
  same_type(halves[0]);
  auto const parts = tessera::split<2>(a, {2, 4});
  REQUIRE(parts.size() == 3);
  CHECK(same_array(host(parts[0]), H3(xt::view(ah, xt::all(), xt::all(), xt::range(0, 2)))));
  CHECK(same_array(host(parts[2]), H3(xt::view(ah, xt::all(), xt::all(), xt::range(4, 6)))));

  auto const sl = tessera::lax::slice(a, {2, 0, 0}, {6, 4, 6});
  CHECK(same_array(host(sl), H3(xt::view(ah, xt::range(2, 6)))));
  same_type(sl);
  auto const sd = tessera::lax::slice(a, {0, 1, 0}, {8, 3, 6}, {2, 1, 3});
  CHECK(same_array(host(sd), H3(xt::view(ah, xt::range(0, 8, 2), xt::range(1, 3), xt::range(0, 6, 3)))));
  CHECK(same_array(host(tessera::slice_in_dim<1>(a, 1, -1)), H3(xt::view(ah, xt::all(), xt::range(1, 3)))));

  // dynamic starts: a negative one counts from the end, then clamped into [0, size - window], as in JAX
  auto const ds = tessera::dynamic_slice(a, {6, -3, 5}, {4, 2, 6});
  CHECK(same_array(host(ds), H3(xt::view(ah, xt::range(4, 8), xt::range(1, 3), xt::all()))));
  auto const u = tessera::device_put(values<3>({2, 4, 6}, 3.3), s);
  H3 dh = ah;
  xt::view(dh, xt::range(6, 8)) = values<3>({2, 4, 6}, 3.3);
  CHECK(same_array(host(tessera::dynamic_update_slice(a, u, {7, 0, 0})), dh));

  if constexpr (!explicit_mesh) {
    auto const p = tessera::pad(a, {{1, 3}, {0, 2}, {2, 1}}, 0.5);
    CHECK(same_array(host(p), host_pad<3>(ah, {{{1, 3}, {0, 2}, {2, 1}}}, 0.5)));
  }
  auto const p = tessera::pad(a, {{2, 2}, {0, 0}, {3, 3}}, -1.0);
  CHECK(same_array(host(p), host_pad<3>(ah, {{{2, 2}, {0, 0}, {3, 3}}}, -1.0)));

  CHECK(same_array(host(tessera::flip<0, -1>(a)), H3(xt::flip(xt::flip(ah, 0), 2))));
  CHECK(same_array(host(tessera::flip(a)), H3(xt::flip(xt::flip(xt::flip(ah, 0), 1), 2))));
  if constexpr (!explicit_mesh || spec[1].is_none()) {
    CHECK(same_array(host(tessera::roll<1>(a, 3)), H3(xt::roll(ah, 3, 1))));
    CHECK(same_array(host(tessera::roll<1>(a, -5)), H3(xt::roll(ah, -5, 1))));
  }
  // a shift past the size wraps, as in JAX (11 = 3 mod 8)
  if constexpr (!explicit_mesh) CHECK(same_array(host(tessera::roll<0>(a + b, 11)), H3(xt::roll(H3(ah + bh), 3, 0))));
}

}  // namespace

TEST_CASE("joining and cutting against xtensor on 1-, 2- and 3-axis meshes, Auto and Explicit", "[join_cut]") {
  tessera::runtime rt{8};
  SECTION("1 axis") {
    auto const m = tessera::make_mesh<"x">({8});
    check_ops<P<"x">>(m);
    check_ops<P<none, none, "x">>(m);
    auto const e = tessera::make_mesh<"x">({4}, tessera::explicit_axes);
    check_ops<P<"x">>(e);
  }
  SECTION("2 axes") {
    auto const m = tessera::make_mesh<"x", "y">({2, 4});
    check_ops<P<"y", none, "x">>(m);
    auto const e = tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes);
    check_ops<P<"x", none, "y">>(e);
  }
  SECTION("3 axes") {
    auto const m = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
    check_ops<P<"x", "y", "z">>(m);
    auto const e = tessera::make_mesh<"x", "y", "z">({2, 2, 2}, tessera::explicit_axes);
    check_ops<P<"x", "z", "y">>(e);
  }
  SECTION("the portable path: operands moved to layouts where each device reads only its own blocks") {
    tessera::detail::jc::force_portable = true;
    auto const m = tessera::make_mesh<"x", "y">({2, 4});
    check_ops<P<"y", none, "x">>(m);
    auto const e = tessera::make_mesh<"x", "y", "z">({2, 2, 2}, tessera::explicit_axes);
    check_ops<P<"x", "z", "y">>(e);
    tessera::detail::jc::force_portable = false;
  }
}

TEST_CASE("join_cut: JAX's refusals on Explicit axes, numpy's on bad sizes; Auto keeps uneven blocks", "[join_cut]") {
  tessera::runtime rt{8};
  auto const e = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  auto const a = tessera::device_put(values<2>({8, 4}, 0.5), tessera::named_sharding(e, P<"x", none>{}));
  auto message = [](auto&& f) {
    try {
      f();
    } catch (std::invalid_argument const& ex) {
      return std::string(ex.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { (void)tessera::lax::slice(a, {0, 0}, {3, 4}); }) ==
        "tessera::lax::slice: slicing on sharded dims where out dim (3) is not divisible by mesh axes (2) with spec "
        "(x) is not implemented. Got input type=float64[8@x,4] and output shape=(3, 4) (JAX's ShardingTypeError)");
  CHECK_THAT(message([&] { (void)tessera::split<0>(a, {3}); }),
             Catch::StartsWith("tessera::split: split on sharded dims where out dim (3) is not divisible by mesh axes (2)"));
  CHECK_THAT(message([&] { (void)tessera::pad(a, {{2, 3}, {0, 0}}); }),
             Catch::StartsWith("tessera::pad: padding on sharded dims where out dim (13)"));
  CHECK_THAT(message([&] { (void)tessera::dynamic_slice(a, {0, 0}, {3, 4}); }),
             Catch::StartsWith("tessera::dynamic_slice: dynamic_slice on sharded dims where out dim (3)"));
  CHECK(message([&] { (void)tessera::lax::slice(a, {0, 1}, {8, 2}); }) == "no error");  // an unsharded dim
  CHECK_THAT(message([&] { (void)tessera::split<0>(a, 3); }), Catch::Contains("does not result in an equal division"));
  CHECK_THAT(message([&] { (void)tessera::lax::slice(a, {0, 0}, {9, 4}); }), Catch::Contains("cannot be sliced"));
  CHECK_THAT(message([&] { (void)tessera::dynamic_slice(a, {0, 0}, {4, 5}); }), Catch::Contains("slice size 5"));
  auto const b = tessera::device_put(values<2>({8, 3}, 0.5), tessera::named_sharding(e, P<"x", none>{}));
  CHECK_THAT(message([&] { (void)tessera::concatenate<0>(a, b); }),
             Catch::Contains("along dimension 1, the array at index 0 has size 4 and the array at index 1 has size 3"));
  CHECK(message([&] { (void)tessera::concatenate<1>(a, b); }) == "no error");

  // Auto: a sharded dimension cut to 3 rows keeps its sharding, in uneven blocks.
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const ah = values<2>({8, 4}, 0.5);
  auto const x = tessera::device_put(ah, tessera::named_sharding(m, P<"x", none>{}));
  auto const y = tessera::lax::slice(x, {0, 0}, {3, 4});
  CHECK(tessera::type_of(y) == "float64[3@x,4]");
  CHECK(same_array(host(y), xt::xtensor<double, 2>(xt::view(ah, xt::range(0, 3)))));
}

TEST_CASE("join_cut: explain() lists the rows a device reads from others, none where nothing moves", "[join_cut]") {
  tessera::runtime rt{8};
  auto const m = tessera::make_mesh<"x">({8});
  auto const s = tessera::named_sharding(m, P<"x">{});
  auto const a = tessera::device_put(values<1>({64}, 0.1), s);
  auto const b = tessera::device_put(values<1>({64}, 0.2), s);
  // concatenate along the sharded axis: device p's 16 rows are a's devices 2p and 2p+1: it reads
  // 8 of its own and 8 from another device (16 from others for p >= 1... at most 16 elements).
  auto const plan = tessera::explain(tessera::concatenate<0>(a, b));
  REQUIRE(plan.count() == 1);
  CHECK(plan.count("collective-permute") == 1);
  CHECK(plan.collectives[0].bytes_per_device == 16 * sizeof(double));
  tessera::collective_counter counter;
  CHECK(same_array(host(tessera::concatenate<0>(a, b)),
                   xt::xtensor<double, 1>(xt::concatenate(xt::xtuple(values<1>({64}, 0.1), values<1>({64}, 0.2))))));
  // A slice of an unsharded dimension and a flip of one move nothing.
  auto const m2 = tessera::make_mesh<"x">({4});
  auto const x = tessera::device_put(values<2>({8, 6}, 0.1), tessera::named_sharding(m2, P<"x", none>{}));
  CHECK(tessera::explain(tessera::lax::slice(x, {0, 1}, {8, 5})).count() == 0);
  CHECK(tessera::explain(tessera::flip<1>(x)).count() == 0);
  CHECK(tessera::explain(tessera::pad(x, {{0, 0}, {1, 1}})).count() == 0);
  CHECK(tessera::explain(tessera::flip<0>(x)).count("all-gather") == 1);  // the first version gathers
}

TEST_CASE("join_cut grads against finite differences, Auto and Explicit", "[join_cut][grad]") {
  tessera::runtime rt{8};
  auto run = [](auto const& mesh, auto spec) {
    auto const s = tessera::named_sharding(mesh, spec);
    auto const ah = values<2>({8, 4}, 0.7), bh = values<2>({8, 4}, 1.9);
    auto const w1h = values<2>({16, 4}, 0.2), w2h = values<2>({12, 4}, 0.4), w3h = values<2>({4, 2}, 0.6);
    auto const w4h = values<3>({8, 2, 4}, 0.8);
    auto const w5h = values<2>({8, 4}, 1.0), w6h = values<2>({2, 4}, 1.3);
    auto const a = tessera::device_put(ah, s);
    auto const b = tessera::device_put(bh, s);
    auto const w1 = tessera::device_put(w1h, s);
    auto const w2 = tessera::device_put(w2h, s);
    auto const w3 = tessera::device_put(w3h, s);
    auto const w4 = tessera::device_put(w4h, tessera::named_sharding(mesh, P<"x", none, none>{}));
    auto const w5 = tessera::device_put(w5h, s);
    auto const w6 = tessera::device_put(w6h, s);
    auto loss = [&](auto const& x, auto const& y) {
      auto const parts = tessera::split<0>(y, 4);
      return tessera::sum(tessera::concatenate<0>(x, y) * w1) + tessera::sum(tessera::pad(x, {{2, 2}, {0, 0}}) * w2) +
             tessera::sum(tessera::lax::slice(y, {0, 1}, {8, 4}, {2, 2}) * w3) +
             tessera::sum(tessera::stack<1>(x, y) * w4) + tessera::sum(tessera::flip<0, 1>(x) * w5) +
             tessera::sum(tessera::roll<1>(y, 3) * w5) +
             tessera::sum(tessera::dynamic_update_slice(x, tessera::dynamic_slice(y, {5, 0}, {2, 4}), {6, 0}) * w5) +
             tessera::sum(parts[1] * w6 * 0.5) + tessera::sum(tessera::slice_in_dim<0>(y, 2, 4) * w6);
    };
    using X2 = xt::xtensor<double, 2>;
    auto host_loss = [&](X2 const& x, X2 const& y) {
      double l = xt::sum(X2(xt::concatenate(xt::xtuple(x, y), 0)) * w1h)();
      l += xt::sum(host_pad<2>(x, {{{2, 2}, {0, 0}}}, 0.0) * w2h)();
      l += xt::sum(X2(xt::view(y, xt::range(0, 8, 2), xt::range(1, 4, 2))) * w3h)();
      l += xt::sum(xt::xtensor<double, 3>(xt::stack(xt::xtuple(x, y), 1)) * w4h)();
      l += xt::sum(X2(xt::flip(xt::flip(x, 0), 1)) * w5h)();
      l += xt::sum(X2(xt::roll(y, 3, 1)) * w5h)();
      X2 d = x;
      xt::view(d, xt::range(6, 8)) = xt::view(y, xt::range(5, 7));
      l += xt::sum(d * w5h)();
      l += xt::sum(X2(xt::view(y, xt::range(2, 4))) * w6h * 0.5)();
      l += xt::sum(X2(xt::view(y, xt::range(2, 4))) * w6h)();
      return l;
    };
    CHECK(std::abs(tessera::to_host(tessera::eval(loss(a, b)))() - host_loss(ah, bh)) < 1e-12);
    auto const [ga, gb] = tessera::grad<0, 1>(loss)(a, b);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(ga)>, std::remove_cvref_t<decltype(a)>>);
    auto const nga = numeric_gradient([&](X2 const& v) { return host_loss(v, bh); }, ah);
    auto const ngb = numeric_gradient([&](X2 const& v) { return host_loss(ah, v); }, bh);
    CHECK(max_abs_diff(tessera::to_host(ga), nga) < 1e-7);
    CHECK(max_abs_diff(tessera::to_host(gb), ngb) < 1e-7);
  };
  run(tessera::make_mesh<"x", "y">({2, 4}), P<"x", none>{});
  run(tessera::make_mesh<"x", "y">({2, 2}, tessera::explicit_axes), P<"x", none>{});
  run(tessera::make_mesh<"x">({4}), P<"x", none>{});
}
