// grad through shard_map bodies that call einsum, the indexing operations (take,
// vocab_parallel_take, take_along_axis, tril, triu) and the joining and cutting family
// (concatenate, stack, split, lax::slice, slice_in_dim, dynamic_slice, dynamic_update_slice,
// pad, flip, roll) on local tracers (autodiff/local_einsum.hpp, local_indexing.hpp,
// local_join_cut.hpp). One body picks the operation at run time; its gradient with respect to
// each differentiable argument is checked against central finite differences of the same
// shard_map run on blocks without grad (parallel/block_*.hpp, themselves checked against
// xtensor in their own tests), and its value under value_and_grad against that run's.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <xtensor/xtensor.hpp>

#include "tessera/tessera.hpp"

#include "grad_support.hpp"

namespace {

using tessera::none;
using tessera::P;
using tessera_test::max_abs_diff;
using tessera_test::numeric_gradient;
using tessera_test::values;

constexpr int operations = 24;

/// sum(sin(y)) * c: a different weight per term, and a nonlinearity, so a cotangent written to
/// the wrong place or summed the wrong number of times changes the gradient.
template <class Y>
auto term(Y const& y, double c) {
  return tessera::sum(tessera::sin(y)) * c;
}

/// The body: x [2, 6], u [2, 3] (blocks of [4, .] sharded over "x"), w [6, 3] replicated, ids
/// [2, 3] int32 blocks. Returns psum over the mesh of one operation's terms.
auto const body = [](int which, auto const& x, auto const& u, auto const& w, auto const& ids) {
  auto const loss = [&] {
    switch (which) {
      case 0: return term(tessera::einsum<"ij,jk->ki">(x, w), 1.0);         // a product with a replicated operand
      case 1: return term(tessera::einsum<"ij,kj->i">(u, w), 1.5);          // k only in w: summed there first
      case 2: return term(tessera::einsum<"ij->ji">(x), 0.5) + term(tessera::einsum<"ij->i">(u), 2.0);
      case 3: return term(tessera::einsum<"ij,k->jk">(u, tessera::sum<0>(x)), 1.0);  // i summed, an outer product
      case 4:  // row-parallel: a contracted dimension split over "x", partial sums psummed
        return term(tessera::psum<"x">(tessera::einsum<"ij,jk->ik">(tessera::transpose(x), u)), 1.0);
      case 5: return term(tessera::take<0>(w, ids), 1.0);
      case 6: return term(tessera::take<1>(w, ids), 0.7);
      case 7:  // Megatron's embedding: u's rows are this device's part of a [4, 3] table
        return term(tessera::psum<"x">(tessera::vocab_parallel_take(
                        u, ids, static_cast<std::size_t>(tessera::axis_index<"x">()) * 2)),
                    1.0);
      case 8: return term(tessera::take_along_axis<1>(x, ids), 1.0) + term(tessera::take_along_axis<-1>(u, ids), 0.3);
      case 9: return term(tessera::tril(w, -1), 1.0) + term(tessera::triu(x, 1), 0.5);
      case 10: return term(tessera::concatenate<1>(x, u, x), 1.0);
      case 11: return term(tessera::concatenate<0>(u, w), 1.0);  // a varying block and an invariant one
      case 12: return term(tessera::stack<1>(u, u * u), 1.0) + term(tessera::stack<-1>(x), 0.5);
      case 13: {
        auto const p = tessera::split<1>(x, {1, 4});
        return term(p[0], 1.0) + term(p[1], 2.0) + term(p[2], 3.0);
      }
      case 14: {
        auto const p = tessera::split<-1>(x, std::size_t{3});
        return term(p[0], 1.0) + term(p[2] * p[1], 2.0);
      }
      case 15: return term(tessera::lax::slice(x, {0, 1}, {2, 6}, {1, 2}), 1.0) + term(tessera::lax::slice(x, {1, 0}, {2, 2}), 2.0);
      case 16: return term(tessera::slice_in_dim<1>(x, -4, 5, 2), 1.0) + term(tessera::slice_in_dim<0>(w, 1, -1), 0.5);
      case 17: return term(tessera::dynamic_slice(x, {0, -2}, {2, 3}), 1.0) + term(tessera::dynamic_slice(w, {9, 1}, {2, 2}), 2.0);
      case 18: return term(tessera::dynamic_update_slice(x, u, {0, 2}), 1.0);
      case 19: return term(tessera::dynamic_update_slice(w, u, {-1, 0}) * w, 1.0);  // start clamped; u is varying, w not
      case 20: return term(tessera::pad(x, {{1, 0}, {0, 2}}, 0.25), 1.0) + term(tessera::pad(u * u, {{0, 1}, {2, 1}}), 1.0);
      case 21: return term(tessera::flip<1>(x) * x, 1.0) + term(tessera::flip(w) * w, 1.0);
      case 22: return term(tessera::roll<1>(x, -1) * x, 1.0) + term(tessera::roll<0>(w, 4) * w, 1.0);
      default: return term(tessera::roll<-1>(u, 7) * u, 1.0) + term(tessera::flip<0, 1>(u) * u, 0.5);
    }
  }();
  return tessera::psum<"x", "y">(loss);
};

/// grad of run with respect to the array `put` makes from its host value, against central
/// finite differences of run on arrays; and the value under value_and_grad.
template <class Run, class Put, class H>
void check_gradient(Run const& run, Put const& put, H const& h) {
  auto const f = [&](H const& v) { return static_cast<double>(tessera::to_host(run(put(v)))()); };
  auto const ng = numeric_gradient(f, h);
  auto const [value, g] = tessera::value_and_grad(run)(put(h));
  CHECK(std::abs(static_cast<double>(tessera::to_host(value)()) - f(h)) < 1e-12);
  CHECK(max_abs_diff(tessera::to_host(g), ng) < 1e-8);
}

}  // namespace

TEST_CASE("grad through shard_map: einsum, indexing, joining and cutting on local tracers, against finite differences",
          "[grad][shard_map]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 2});
  auto const rows = tessera::named_sharding(mesh, P<"x", none>{});
  auto const replicated = tessera::named_sharding(mesh, P<>{});
  auto const xh = values<2>({4, 6}, 0.3);
  auto const uh = values<2>({4, 3}, 1.1);
  auto const wh = values<2>({6, 3}, 2.7);
  // In range for take along axis 0 (6 rows, negatives from the end) and axis 1 of u (3): the
  // repeats check that cotangents add up; case 7 sees -1 (no row) and 4 (past the table).
  xt::xtensor<std::int32_t, 2> const idh = {{0, -1, 2}, {2, 2, -3}, {1, 0, -1}, {-2, 1, 1}};
  xt::xtensor<std::int32_t, 2> const vocab_ids = {{0, 3, -1}, {4, 1, 2}, {3, 3, 0}, {2, 1, 4}};
  auto const put_rows = [&](xt::xtensor<double, 2> const& v) { return tessera::device_put(v, rows); };
  auto const put_rep = [&](xt::xtensor<double, 2> const& v) { return tessera::device_put(v, replicated); };
  auto const x = put_rows(xh);
  auto const u = put_rows(uh);
  auto const w = put_rep(wh);

  for (int which = 0; which < operations; ++which) {
    INFO("operation " << which);
    auto const ids = tessera::device_put(which == 7 ? vocab_ids : idh, rows);
    auto const sm = tessera::shard_map(
        [which](auto const& xb, auto const& ub, auto const& wb, auto const& ib) { return body(which, xb, ub, wb, ib); },
        mesh, tessera::in_specs(P<"x", none>{}, P<"x", none>{}, P<>{}, P<"x", none>{}), tessera::out_specs(P<>{}));
    check_gradient([&](auto const& v) { return sm(v, u, w, ids); }, put_rows, xh);
    check_gradient([&](auto const& v) { return sm(x, v, w, ids); }, put_rows, uh);
    check_gradient([&](auto const& v) { return sm(x, u, v, ids); }, put_rep, wh);
  }
}

TEST_CASE("grad through shard_map: the joining and cutting operations' errors on local tracers", "[grad][shard_map]") {
  tessera::runtime rt{2};
  auto const mesh = tessera::make_mesh<"x">({2});
  auto const x = tessera::device_put(values<2>({4, 6}, 0.3), tessera::named_sharding(mesh, P<"x", none>{}));
  auto const run = [&](auto f) {
    auto const sm = tessera::shard_map([f](auto const& b) { return tessera::psum<"x">(tessera::sum(f(b))); }, mesh,
                                       tessera::in_specs(P<"x", none>{}), tessera::out_specs(P<>{}));
    return tessera::grad([&](auto const& v) { return sm(v); })(x);
  };
  CHECK_THROWS_WITH(run([](auto const& b) { return tessera::split<1>(b, std::size_t{4})[0]; }),
                    Catch::Contains("does not result in an equal division"));
  CHECK_THROWS_WITH(run([](auto const& b) { return tessera::lax::slice(b, {0, 2}, {2, 7}); }),
                    Catch::Contains("cannot be sliced from 2 to 7"));
  CHECK_THROWS_WITH(run([](auto const& b) { return tessera::dynamic_slice(b, {0, 0}, {3, 1}); }),
                    Catch::Contains("slice size 3 does not fit the block (2, 6)"));
  CHECK_THROWS_WITH(run([](auto const& b) { return tessera::pad(b, {{0, -1}, {0, 0}}); }),
                    Catch::Contains("negative pad widths"));
  CHECK_THROWS_WITH(run([](auto const& b) { return tessera::concatenate<0>(b, tessera::transpose(b)); }),
                    Catch::Contains("differ outside the joined axis"));
}
