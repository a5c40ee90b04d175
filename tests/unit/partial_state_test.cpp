// Partial sums as a state of the type (issue 5): which operations keep a value partial, what
// using it runs, jit's partial out_sharding, and arrays of one layout typed by two specs.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include <xtensor/xrandom.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

namespace {

/// The host product a @ b in double.
xt::xtensor<double, 2> host_matmul(xt::xtensor<double, 2> const& a, xt::xtensor<double, 2> const& b) {
  xt::xtensor<double, 2> c = xt::zeros<double>({a.shape()[0], b.shape()[1]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t k = 0; k < a.shape()[1]; ++k)
      for (std::size_t j = 0; j < b.shape()[1]; ++j) c(i, j) += a(i, k) * b(k, j);
  return c;
}

double max_diff(xt::xtensor<double, 2> const& x, xt::xtensor<double, 2> const& y) {
  REQUIRE(x.shape() == y.shape());
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x.data()[i] - y.data()[i]));
  return m;
}

/// Evaluates e under a counter and checks the run against explain(e).
template <class E>
auto eval_checked(E const& e) {
  auto const plan = tessera::explain(e);
  tessera::collective_counter counter;
  auto r = tessera::eval(e);
  CHECK(counter.events() == plan.collectives);
  return r;
}

}  // namespace

TEST_CASE("linear operations keep partial sums partial; others sum them first", "[partial][matmul]") {
  tessera::runtime rt{8};
  xt::random::seed(11);
  std::vector<std::array<int, 2>> const meshes{{4, 2}, {2, 4}, {1, 8}, {2, 1}};
  std::vector<std::array<std::size_t, 3>> const shapes{{8, 12, 6}, {7, 13, 5}, {3, 1, 9}, {0, 4, 3}, {5, 0, 2}};
  for (auto const& sizes : meshes) {
    auto const mesh = tessera::make_mesh<"X", "Y">(sizes);
    for (auto const& [m, k, n] : shapes) {
      INFO("mesh " << sizes[0] << "x" << sizes[1] << ", " << m << "x" << k << " @ " << k << "x" << n);
      xt::xtensor<double, 2> const ha = xt::random::randn<double>({m, k});
      xt::xtensor<double, 2> const hb = xt::random::randn<double>({k, n});
      xt::xtensor<double, 2> const ref = host_matmul(ha, hb);
      auto const a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"X", "Y">{}));
      auto const b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"Y", none>{}));
      auto const p = tessera::matmul(a, b);
      STATIC_REQUIRE(decltype(p)::unreduced == tessera::dim_spec("Y"));
      auto const ones = tessera::device_put(xt::xtensor<double, 1>(xt::ones<double>({n})),
                                            tessera::named_sharding(mesh, P<>{}));
      auto const rows = tessera::device_put(xt::xtensor<double, 2>(xt::ones<double>({m, n})),
                                            tessera::named_sharding(mesh, P<none, "Y">{}));

      auto const lin = 2.0 * p - p / 4.0 + -p;
      STATIC_REQUIRE(decltype(lin)::partial_node);
      CHECK(tessera::explain(lin).count("all-reduce") == 1);
      CHECK(max_diff(tessera::to_host(eval_checked(lin)), 0.75 * ref) < 1e-9 * (k + 1));

      auto const scaled = p * ones;  // a replicated factor keeps the sum partial
      STATIC_REQUIRE(decltype(scaled)::partial_node);
      CHECK(max_diff(tessera::to_host(eval_checked(scaled)), ref) < 1e-9 * (k + 1));

      auto const cut = p * rows;  // a factor sharded over the partial axis: sum first
      STATIC_REQUIRE(!decltype(cut)::partial_node);
      CHECK(max_diff(tessera::to_host(eval_checked(cut)), ref) < 1e-9 * (k + 1));

      auto const nonlinear = tessera::sigmoid(p) + 1.0;
      STATIC_REQUIRE(!decltype(nonlinear)::partial_node);
      CHECK(max_diff(tessera::to_host(eval_checked(nonlinear)), 1.0 / (1.0 + xt::exp(-ref)) + 1.0) < 1e-9 * (k + 1));

      auto const plus_bias = p + ones;  // p + b is not a sum of partials
      STATIC_REQUIRE(!decltype(plus_bias)::partial_node);
      CHECK(max_diff(tessera::to_host(eval_checked(plus_bias)), ref + 1.0) < 1e-9 * (k + 1));

      // One sum for a sum of two partial products, straight into a sharded layout.
      auto const two = tessera::with_sharding_constraint(p + p, tessera::named_sharding(mesh, P<"X", "Y">{}));
      auto const plan = tessera::explain(two);
      CHECK(plan.count() == 1);
      CHECK(plan.count("reduce-scatter") == 1);
      auto const r = eval_checked(two);
      STATIC_REQUIRE(std::is_same_v<typename decltype(r)::sharding_type::spec_type, P<"X", "Y">>);
      CHECK(max_diff(tessera::to_host(r), 2.0 * ref) < 1e-9 * (k + 1));
    }
  }
}

TEST_CASE("sum and mean over a sharded dimension are partial; max is not", "[partial][reduction]") {
  tessera::runtime rt{8};
  xt::random::seed(3);
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  std::vector<std::array<std::size_t, 2>> const shapes{{4, 8}, {6, 9}, {2, 3}};
  for (auto const& shape : shapes) {
    xt::xtensor<double, 2> const h = xt::random::randn<double>(shape);
    auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"x", "y">{}));
    auto const s0 = tessera::sum<0>(x);
    STATIC_REQUIRE(decltype(s0)::unreduced == tessera::dim_spec("x"));
    STATIC_REQUIRE(decltype(tessera::max<0>(x))::unreduced.is_none());
    // Seed 000's f_contract_2: the sum over x lands sharded over x (a reduce-scatter).
    auto const c2 = tessera::with_sharding_constraint(s0, tessera::named_sharding(mesh, P<"x">{}));
    auto const plan = tessera::explain(c2);
    REQUIRE(plan.count("reduce-scatter") == 1);
    CHECK(plan.collectives[0].axes == std::vector<std::string>{"x"});
    CHECK(plan.count("all-reduce") == 0);
    auto const r = eval_checked(c2);
    auto const hr = tessera::to_host(r);
    xt::xtensor<double, 1> const want = xt::sum(h, {0});
    for (std::size_t j = 0; j < shape[1]; ++j) CHECK(hr(j) == Approx(want(j)).margin(1e-12));
    auto const m1 = eval_checked(tessera::with_sharding_constraint(tessera::mean<1>(x), tessera::named_sharding(mesh, P<"x">{})));
    xt::xtensor<double, 1> const want_m = xt::mean(h, {1});
    auto const hm = tessera::to_host(m1);
    for (std::size_t i = 0; i < shape[0]; ++i) CHECK(hm(i) == Approx(want_m(i)).margin(1e-12));
  }
}

TEST_CASE("jit can return the partial state, and using it sums it once", "[partial][jit]") {
  tessera::runtime rt{8};
  xt::random::seed(5);
  auto const mesh = tessera::make_mesh<"X", "Y">({4, 2});
  xt::xtensor<double, 2> const ha = xt::random::randn<double>({8, 12});
  xt::xtensor<double, 2> const hb = xt::random::randn<double>({12, 6});
  auto const ref = host_matmul(ha, hb);
  auto const sa = tessera::named_sharding(mesh, P<"X", "Y">{});
  auto const sb = tessera::named_sharding(mesh, P<"Y", none>{});
  auto const f = tessera::jit([](auto x, auto w) { return tessera::matmul(x, w); }, tessera::in_shardings(sa, sb),
                              tessera::out_shardings(tessera::partial<tessera::axes<"Y">>(tessera::named_sharding(mesh, P<"X">{}))));
  tessera::collective_counter counter;
  auto const p = f(ha, hb);
  CHECK(counter.count() == 0);  // host inputs are placed, nothing is summed
  STATIC_REQUIRE(decltype(p)::unreduced == tessera::dim_spec("Y"));
  // Each device's block is its own partial product: the blocks over Y add up to the product.
  auto const& blocks = p.partial();
  auto const sum_y = [&](std::size_t i, std::size_t j) {
    double s = 0;
    for (std::size_t pos = 0; pos < 8; ++pos) {
      auto const blk = blocks.sharding().block(pos, blocks.shape());
      if (static_cast<std::size_t>(mesh.coordinate(pos, 0)) != i / 2) continue;
      s += blocks.block_data(pos)[(i - blk[0].start) * 6 + j];
    }
    return s;
  };
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 6; ++j) CHECK(sum_y(i, j) == Approx(ref(i, j)).margin(1e-12));
  counter.reset();
  auto const twice = tessera::eval(p + p);
  CHECK(counter.count("all-reduce") == 1);
  CHECK(max_diff(tessera::to_host(twice), 2.0 * ref) < 1e-12);
  CHECK(max_diff(tessera::to_host(tessera::eval(p)), ref) < 1e-12);
}

TEST_CASE("arrays of one layout typed by two specs convert", "[partial][array]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({8});
  auto const s = tessera::named_sharding(mesh, P<>{});
  auto w = tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({4, 1})), s);
  auto const step = tessera::jit([](auto const& v) { return v * 2.0f; }, tessera::in_shardings(s), tessera::out_shardings(s));
  w = step(w);
  w = tessera::eval(w * 2.0f);  // typed P(None, None): converts to P()
  STATIC_REQUIRE(std::is_same_v<typename decltype(w)::sharding_type::spec_type, P<>>);
  auto const h = tessera::to_host(w);
  for (float v : h) CHECK(v == 4.0f);
}
