// Indexing operations (expr/indexing.hpp): iota/arange, tril/triu, one_hot, take and
// take_along_axis on 1-, 2- and 3-axis meshes (Auto and Explicit), checked against plain
// xtensor loops; the vocab-sharded take with batch-sharded indices (one all-reduce, the table
// never gathered), fill-mode indices, gradients against central finite differences, and the
// block versions inside shard_map.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "grad_support.hpp"
#include "support.hpp"

using tessera::none;
using tessera::P;

namespace {

xt::xtensor<float, 2> matrix(std::size_t r, std::size_t c, float scale = 1.0f) {
  xt::xtensor<float, 2> h({r, c});
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) h(i, j) = scale * static_cast<float>(i * c + j) - 3.0f;
  return h;
}

template <class E>
auto host(E const& e) {
  return tessera::to_host(tessera::eval(e));
}

/// The lookup an embedding does, as a plain loop (fill mode: NaN outside [-n, n)).
xt::xtensor<float, 3> lookup(xt::xtensor<float, 2> const& t, xt::xtensor<int, 2> const& ids) {
  xt::xtensor<float, 3> out({ids.shape()[0], ids.shape()[1], t.shape()[1]});
  long const n = static_cast<long>(t.shape()[0]);
  for (std::size_t i = 0; i < ids.shape()[0]; ++i)
    for (std::size_t j = 0; j < ids.shape()[1]; ++j) {
      long r = ids(i, j);
      if (r < 0) r += n;
      for (std::size_t c = 0; c < t.shape()[1]; ++c)
        out(i, j, c) = (r < 0 || r >= n) ? std::numeric_limits<float>::quiet_NaN() : t(static_cast<std::size_t>(r), c);
    }
  return out;
}

bool same_with_nan(xt::xtensor<float, 3> const& a, xt::xtensor<float, 3> const& b) {
  if (a.shape() != b.shape()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    float const x = a.flat(i), y = b.flat(i);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("iota and arange: values from the global index, laid out by the sharding", "[indexing]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto i1 = tessera::iota<int32_t, 1>({8, 6}, tessera::named_sharding(m, P<"X", "Y">{}));
  CHECK(tessera::type_of(i1) == "int32[8@X,6@Y]");
  auto h = host(i1);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 6; ++j) CHECK(h(i, j) == static_cast<int>(j));
  auto i0 = tessera::iota<float, -2>({5, 3}, tessera::named_sharding(m, P<"Y">{}));
  auto h0 = host(i0);
  for (std::size_t i = 0; i < 5; ++i) CHECK(h0(i, 2) == static_cast<float>(i));
  auto a = tessera::arange<int32_t>(10, tessera::named_sharding(m, P<"X">{}));
  CHECK(tessera::type_of(a) == "int32[10@X]");
  CHECK(tessera_test::same_array(host(a), xt::xtensor<int, 1>(xt::arange<int>(10))));
  auto b = tessera::arange<float>(1.0f, 2.0f, 0.25f, tessera::named_sharding(m, P<"Y">{}));
  CHECK(tessera_test::same_array(host(b), xt::xtensor<float, 1>{1.0f, 1.25f, 1.5f, 1.75f}));
  CHECK(tessera::explain(i1).collectives.empty());
  // Fused: where(iota < 3, x, 0) on a sharded x, no communication.
  auto x = tessera::device_put(matrix(8, 6), tessera::named_sharding(m, P<"X", "Y">{}));
  auto w = tessera::where(i1 < 3, x, 0.0f);
  CHECK(tessera::explain(w).collectives.empty());
  auto hw = host(w);
  auto hx = matrix(8, 6);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 6; ++j) CHECK(hw(i, j) == (j < 3 ? hx(i, j) : 0.0f));
  // Replicated on a mesh, broadcast against a higher rank.
  auto r = tessera::iota<int32_t, 0>({6}, m);
  CHECK(tessera::type_of(r) == "int32[6]");
  auto hb = host(x + tessera::astype<float>(r));
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 6; ++j) CHECK(hb(i, j) == hx(i, j) + static_cast<float>(j));
  CHECK_THROWS_WITH(tessera::arange<int32_t>(0, 4, 0, tessera::named_sharding(m, P<>{})), Catch::Contains("step is 0"));
}

TEST_CASE("tril and triu keep the sharding and mask by global indices", "[indexing]") {
  tessera::runtime rt{8};
  auto m1 = tessera::make_mesh<"X">({4});
  auto m2 = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto m3 = tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes);
  auto check = [](auto const& x, auto const& hx) {
    for (long k : {-2L, -1L, 0L, 1L, 3L}) {
      auto lo = tessera::tril(x, k);
      auto up = tessera::triu(x, k);
      CHECK(tessera::type_of(lo) == tessera::type_of(x));
      CHECK(tessera::explain(lo).collectives.empty());
      auto hl = host(lo);
      auto hu = host(up);
      auto const s = hx.shape();
      std::size_t const R = s[s.size() - 2], C = s[s.size() - 1];
      for (std::size_t f = 0; f < hx.size(); ++f) {
        long const j = static_cast<long>(f % C), i = static_cast<long>(f / C % R);
        CHECK(hl.flat(f) == (j <= i + k ? hx.flat(f) : 0.0f));
        CHECK(hu.flat(f) == (j >= i + k ? hx.flat(f) : 0.0f));
      }
    }
  };
  auto h2 = matrix(7, 9);
  check(tessera::device_put(h2, tessera::named_sharding(m1, P<"X">{})), h2);
  check(tessera::device_put(h2, tessera::named_sharding(m2, P<"X", "Y">{})), h2);
  check(tessera::device_put(h2, tessera::named_sharding(m2, P<none, "Y">{})), h2);
  xt::xtensor<float, 3> h3 = xt::reshape_view(xt::arange<float>(4.0f * 6 * 5), {4, 6, 5});
  check(tessera::device_put(h3, tessera::named_sharding(m3, P<"Z", "X", "Y">{})), h3);
}

TEST_CASE("one_hot: float32, x's sharding, the class dimension None unless out_sharding shards it", "[indexing]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 2> ids = {{1, 2, 0, 3}, {4, -1, 2, 2}, {0, 0, 1, 9}, {3, 3, 3, 1}};
  auto x = tessera::device_put(ids, tessera::named_sharding(m, P<"X">{}));
  auto check = [&](auto const& oh) {
    auto h = host(oh);
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 4; ++j)
        for (std::size_t c = 0; c < 5; ++c) CHECK(h(i, j, c) == (ids(i, j) == static_cast<int>(c) ? 1.0f : 0.0f));
    CHECK(tessera::explain(oh).collectives.empty());
  };
  auto oh = tessera::one_hot(x, 5);
  CHECK(tessera::type_of(oh) == "float32[4@X,4,5]");
  check(oh);
  auto oh2 = tessera::one_hot(x, 5, P<"X", none, "Y">{});
  CHECK(tessera::type_of(oh2) == "float32[4@X,4,5@Y]");
  check(oh2);
  // Auto axes: an out_sharding that moves x's part reshards x first.
  auto ma = tessera::make_mesh<"X", "Y">({2, 4});
  auto xa = tessera::device_put(ids, tessera::named_sharding(ma, P<"X">{}));
  auto oh3 = tessera::one_hot(xa, 5, P<none, "Y", "X">{});
  CHECK(tessera::type_of(oh3) == "float32[4,4@Y,5@X]");
  check(oh3);
  // Fused with the operations around it.
  auto s = host(tessera::sum<2>(tessera::one_hot<double>(x, 5) * 2.0));
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(s(i, j) == (ids(i, j) >= 0 && ids(i, j) < 5 ? 2.0 : 0.0));
}

TEST_CASE("take: local lookups, fill mode, and a vocab-sharded table summed once", "[indexing]") {
  tessera::runtime rt{8};
  auto table_h = matrix(10, 6, 0.5f);
  xt::xtensor<int, 2> ids = {{1, 9, 0}, {3, -1, 5}, {2, 2, 7}, {8, 10, -11}};
  auto want = lookup(table_h, ids);

  SECTION("1-axis mesh, replicated indices") {
    auto m = tessera::make_mesh<"X">({4}, tessera::explicit_axes);
    auto t = tessera::device_put(table_h, tessera::named_sharding(m, P<none, "X">{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<>{}));
    auto r = tessera::take(t, i);
    CHECK(tessera::type_of(r) == "float32[4,3,6@X]");
    CHECK(tessera::explain(r).collectives.empty());
    CHECK(same_with_nan(host(r), want));
  }
  SECTION("vocab-sharded table, batch-sharded indices: one all-reduce, no all-gather") {
    auto m = tessera::make_mesh<"data", "model">({2, 4}, tessera::explicit_axes);
    auto t = tessera::device_put(table_h, tessera::named_sharding(m, P<"model", none>{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<"data">{}));
    auto r = tessera::take(t, i);
    CHECK(tessera::type_of(r) == "float32[4@data,3,6]");
    auto const plan = tessera::explain(r);
    INFO(plan);
    CHECK(plan.count() == 1);
    CHECK(plan.count("all-reduce") == 1);
    CHECK(plan.collectives[0].axes == std::vector<std::string>{"model"});
    tessera::collective_counter counter;
    auto got = host(r);
    CHECK(counter.count("all-gather") == 0);
    CHECK(counter.count("all-reduce") == 1);
    CHECK(same_with_nan(got, want));
    // Linear use stays partial: the sum happens once, after the scale.
    auto scaled = r * 2.0f;
    CHECK(tessera::explain(scaled).count("all-reduce") == 1);
    auto hs = host(scaled);
    for (std::size_t f = 0; f < want.size(); ++f)
      CHECK((hs.flat(f) == 2.0f * want.flat(f) || (std::isnan(hs.flat(f)) && std::isnan(want.flat(f)))));
    // Straight into a sharded layout: a reduce-scatter, not an all-reduce.
    auto rs = tessera::reshard(tessera::take(t, i), P<"data", none, "model">{});
    CHECK(tessera::explain(rs).count("reduce-scatter") == 1);
    CHECK(same_with_nan(host(rs), want));
  }
  SECTION("3-axis mesh, table sharded on both dims, indices on the third axis") {
    auto m = tessera::make_mesh<"X", "Y", "Z">({2, 2, 2}, tessera::explicit_axes);
    auto t = tessera::device_put(table_h, tessera::named_sharding(m, P<"X", "Y">{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<none, "Z">{}));
    auto r = tessera::take(t, i);
    CHECK(tessera::type_of(r) == "float32[4,3@Z,6@Y]");
    CHECK(tessera::explain(r).count() == 1);
    CHECK(same_with_nan(host(r), want));
  }
  SECTION("Auto axes: indices sharded over the table's axis are moved off it") {
    auto m = tessera::make_mesh<"X", "Y">({2, 4});
    auto t = tessera::device_put(table_h, tessera::named_sharding(m, P<"X">{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<"X", none>{}));
    auto r = tessera::take(t, i);
    CHECK(same_with_nan(host(r), want));
  }
  SECTION("axis 1 and integer tables") {
    auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
    xt::xtensor<int, 2> ti = xt::reshape_view(xt::arange<int>(24), {4, 6});
    auto t = tessera::device_put(ti, tessera::named_sharding(m, P<"X", "Y">{}));
    xt::xtensor<long, 1> cols = {5, 0, -1, 6};
    auto i = tessera::device_put(cols, tessera::named_sharding(m, P<>{}));
    auto r = tessera::take<1>(t, i);
    CHECK(tessera::type_of(r) == "int32[4@X,4]");
    auto h = host(r);
    for (std::size_t a = 0; a < 4; ++a) {
      CHECK(h(a, 0) == ti(a, 5));
      CHECK(h(a, 1) == ti(a, 0));
      CHECK(h(a, 2) == ti(a, 5));
      CHECK(h(a, 3) == std::numeric_limits<int>::min());
    }
  }
}

TEST_CASE("take_along_axis: batch dimensions propagate; the axis is gathered on Auto axes", "[indexing]") {
  tessera::runtime rt{8};
  auto xh = matrix(8, 6);
  xt::xtensor<int, 2> ih({8, 3});
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 3; ++j) ih(i, j) = static_cast<int>((i * 5 + j * 7) % 8) - 1;  // -1..6 (6 fills)
  auto ref = [&] {
    xt::xtensor<float, 2> o({8, 3});
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        int r = ih(i, j) < 0 ? ih(i, j) + 6 : ih(i, j);
        o(i, j) = r >= 6 ? std::numeric_limits<float>::quiet_NaN() : xh(i, static_cast<std::size_t>(r));
      }
    return o;
  }();
  auto same = [&](auto const& h) {
    for (std::size_t f = 0; f < ref.size(); ++f)
      CHECK((h.flat(f) == ref.flat(f) || (std::isnan(h.flat(f)) && std::isnan(ref.flat(f)))));
  };
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto x = tessera::device_put(xh, tessera::named_sharding(m, P<"X">{}));
  auto i = tessera::device_put(ih, tessera::named_sharding(m, P<"X">{}));
  auto r = tessera::take_along_axis<1>(x, i);
  CHECK(tessera::type_of(r) == "float32[8@X,3]");
  CHECK(tessera::explain(r).collectives.empty());
  same(host(r));
  auto i2 = tessera::device_put(ih, tessera::named_sharding(m, P<none, "Y">{}));
  auto r2 = tessera::take_along_axis<-1>(x, i2);
  CHECK(tessera::type_of(r2) == "float32[8@X,3@Y]");
  same(host(r2));
  auto ma = tessera::make_mesh<"X", "Y">({2, 4});
  auto xa = tessera::device_put(xh, tessera::named_sharding(ma, P<"X", "Y">{}));
  auto ia = tessera::device_put(ih, tessera::named_sharding(ma, P<>{}));
  auto ra = tessera::take_along_axis<1>(xa, ia);
  CHECK(tessera::explain(ra).count("all-gather") == 1);
  same(host(ra));
  CHECK_THROWS_WITH(tessera::take_along_axis<0>(xa, ia), Catch::Contains("differ in dimension 1"));
}

TEST_CASE("grad of take, take_along_axis, tril and triu against finite differences", "[indexing][grad]") {
  tessera::runtime rt{8};
  using tessera_test::max_abs_diff;
  using tessera_test::numeric_gradient;
  using tessera_test::values;
  xt::xtensor<int, 2> ids = {{1, 9, 0}, {3, -1, 5}, {2, 2, 7}, {9, 1, -10}};  // repeats: the adds accumulate
  auto th = values<2>({10, 6}, 0.3);
  auto wh = values<3>({4, 3, 6}, 1.1);
  auto host_loss = [&](xt::xtensor<double, 2> const& t) {
    double s = 0;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        long r = ids(i, j) < 0 ? ids(i, j) + 10 : ids(i, j);
        for (std::size_t c = 0; c < 6; ++c) {
          double const v = t(static_cast<std::size_t>(r), c);
          s += v * wh(i, j, c) + v * v;
        }
      }
    return s;
  };
  auto const want = numeric_gradient(host_loss, th);

  SECTION("vocab-sharded table, batch-sharded indices: the gradient keeps the table's layout") {
    auto m = tessera::make_mesh<"data", "model">({2, 4}, tessera::explicit_axes);
    auto t = tessera::device_put(th, tessera::named_sharding(m, P<"model", none>{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<"data">{}));
    auto w = tessera::device_put(wh, tessera::named_sharding(m, P<"data">{}));
    auto loss = [&](auto const& tt) {
      auto e = tessera::take(tt, i);
      return tessera::sum(e * w + e * e);
    };
    auto g = tessera::grad(loss)(t);
    static_assert(std::is_same_v<decltype(g), decltype(t)>);
    CHECK(max_abs_diff(tessera::to_host(g), want) < 1e-6);
    auto const plan = tessera::explain(tessera::grad(loss), t);
    INFO(plan);
    CHECK(plan.count("all-gather") == 0);
  }
  SECTION("Auto mesh, replicated indices, table sharded on its columns") {
    auto m = tessera::make_mesh<"X", "Y">({2, 4});
    auto t = tessera::device_put(th, tessera::named_sharding(m, P<none, "Y">{}));
    auto i = tessera::device_put(ids, tessera::named_sharding(m, P<>{}));
    auto w = tessera::device_put(wh, tessera::named_sharding(m, P<>{}));
    auto g = tessera::grad([&](auto const& tt) {
      auto e = tessera::take<0>(tt, i);
      return tessera::sum(e * w + e * e);
    })(t);
    CHECK(max_abs_diff(tessera::to_host(g), want) < 1e-6);
  }
  SECTION("take_along_axis") {
    auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
    auto xh = values<2>({8, 5}, 0.7);
    xt::xtensor<int, 2> ih({8, 3});
    for (std::size_t a = 0; a < 8; ++a)
      for (std::size_t b = 0; b < 3; ++b) ih(a, b) = static_cast<int>((a * 3 + b * 2) % 5) - (b == 1 ? 5 : 0);
    auto w2 = values<2>({8, 3}, 2.3);
    auto f = [&](xt::xtensor<double, 2> const& x) {
      double s = 0;
      for (std::size_t a = 0; a < 8; ++a)
        for (std::size_t b = 0; b < 3; ++b) {
          int r = ih(a, b) < 0 ? ih(a, b) + 5 : ih(a, b);
          double const v = x(a, static_cast<std::size_t>(r));
          s += v * v * w2(a, b);
        }
      return s;
    };
    auto x = tessera::device_put(xh, tessera::named_sharding(m, P<"X">{}));
    auto i = tessera::device_put(ih, tessera::named_sharding(m, P<none, "Y">{}));
    auto w = tessera::device_put(w2, tessera::named_sharding(m, P<"X", "Y">{}));
    auto g = tessera::grad([&](auto const& xx) {
      auto e = tessera::take_along_axis<1>(xx, i);
      return tessera::sum(e * e * w);
    })(x);
    static_assert(std::is_same_v<decltype(g), decltype(x)>);
    CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(f, xh)) < 1e-6);
  }
  SECTION("tril and triu") {
    auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
    auto xh = values<2>({6, 8}, 0.9);
    auto x = tessera::device_put(xh, tessera::named_sharding(m, P<"X", "Y">{}));
    for (long k : {-1L, 0L, 2L}) {
      auto f = [&](xt::xtensor<double, 2> const& v) {
        double s = 0;
        for (std::size_t a = 0; a < 6; ++a)
          for (std::size_t b = 0; b < 8; ++b) {
            long const d = static_cast<long>(b) - static_cast<long>(a);
            if (d <= k) s += v(a, b) * v(a, b);
            if (d >= k) s += 3.0 * v(a, b);
          }
        return s;
      };
      auto g = tessera::grad([&](auto const& xx) {
        auto l = tessera::tril(xx, k);
        return tessera::sum(l * l + 3.0 * tessera::triu(xx, k));
      })(x);
      CHECK(max_abs_diff(tessera::to_host(g), numeric_gradient(f, xh)) < 1e-6);
    }
  }
}

TEST_CASE("block versions: the same names on a device's blocks, and Megatron's body in shard_map", "[indexing][shard_map]") {
  tessera::runtime rt{8};
  xt::xtensor<float, 2> b = matrix(3, 4);
  auto lo = tessera::tril(b, 1);
  auto up = tessera::triu(b, -1);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      CHECK(lo(i, j) == (static_cast<long>(j) <= static_cast<long>(i) + 1 ? b(i, j) : 0.0f));
      CHECK(up(i, j) == (static_cast<long>(j) >= static_cast<long>(i) - 1 ? b(i, j) : 0.0f));
    }
  auto io = tessera::iota<int32_t, 0>(tessera::shape_t<2>{3, 2});
  CHECK(io(2, 1) == 2);
  xt::xtensor<int, 1> ids = {2, -1, 4, 0};
  auto oh = tessera::one_hot(ids, 4);
  CHECK(oh(0, 2) == 1.0f);
  CHECK(oh(1, 3) == 0.0f);
  CHECK(xt::sum(oh)() == 2.0f);
  auto tk = tessera::take(b, ids);
  CHECK(tk(0, 3) == b(2, 3));
  CHECK(tk(1, 0) == b(2, 0));
  CHECK(std::isnan(tk(2, 1)));
  CHECK(tk(3, 2) == b(0, 2));
  xt::xtensor<int, 2> along = {{3, 0}, {-4, 4}, {1, 1}};
  auto ta = tessera::take_along_axis<1>(b, along);
  CHECK(ta(0, 0) == b(0, 3));
  CHECK(ta(1, 0) == b(1, 0));
  CHECK(std::isnan(ta(1, 1)));
  CHECK(ta(2, 1) == b(2, 1));

  // Megatron's vocab-parallel embedding written by hand in shard_map equals the global take.
  auto m = tessera::make_mesh<"data", "model">({2, 4});
  auto th = matrix(12, 5, 0.25f);
  xt::xtensor<int, 2> idh = {{0, 11, 5}, {7, 3, 3}, {9, 1, 10}, {2, 8, 6}};
  auto t = tessera::device_put(th, tessera::named_sharding(m, P<"model", none>{}));
  auto i = tessera::device_put(idh, tessera::named_sharding(m, P<"data">{}));
  auto f = tessera::shard_map(
      [](auto tb, auto ib) {
        std::size_t const first = static_cast<std::size_t>(tessera::axis_index<"model">()) * tb.shape()[0];
        return tessera::psum<"model">(tessera::vocab_parallel_take(tb, ib, first));
      },
      m, tessera::in_specs(P<"model", none>{}, P<"data">{}), tessera::out_specs(P<"data">{}));
  auto by_hand = tessera::to_host(f(t, i));
  CHECK(same_with_nan(by_hand, lookup(th, idh)));
  CHECK(same_with_nan(by_hand, host(tessera::take(t, i))));
}
