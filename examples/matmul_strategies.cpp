// Seed 004's sharding strategies for a matrix product C = A @ B, written as
// whole-array code: tessera::matmul on sharded arrays, the sharding of C and
// the collectives it needs decided from the operands' specs (the contraction
// rule), printed by explain() before anything runs, counted while it runs by a
// collective_counter, and C checked against a product on the host.
//   1. row sharding, P('devices', None), of A with B replicated: no communication;
//   2. column sharding, P(None, 'devices'), of B with A replicated: none either;
//   3. seed 004's distributed_matmul inputs, A by rows and B by columns on one
//      axis: C's rows and columns cannot both be split over it, so B's columns
//      are gathered (Auto axes; on Explicit axes this does not compile), and
//      seed 004's auto_sharded_matmul, out_shardings=P(None, None), gathers C;
//   4. the contracting dimension sharded, A P(None, 'devices') and B
//      P('devices', None): each device's product is a partial sum, completed
//      by an all-reduce, or by a reduce-scatter under a sharded constraint;
//   5. 2-D block sharding on seed 004's (2, 2) mesh ('rows', 'cols'): A
//      P('rows', 'cols') with B P('cols', None), partial over 'cols'; and A
//      and B both P('rows', 'cols'), as seed 004 shards its demo matrix.
// Seed 004's matrices are 1024 x 1024 ones (every entry of C is 1024); these are
// 256 x 256 normal samples (jax.random.normal), so that a wrong block shows,
// and small enough for the sanitizer builds.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <string>

#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>
#include <tessera/random.hpp>


namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr std::size_t n = 256;
// The products sum 256 float32 terms of size ~1 in some order (entries of C up to ~60), the host
// sums in double: errors of a few 1e-5 are float32 rounding, a wrong block would be off by ~10.
constexpr float tolerance = 1e-3f;

// A @ B on the host, in double.
xt::xtensor<float, 2> host_matmul(xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  std::size_t const m = a.shape()[0], k = a.shape()[1], nn = b.shape()[1];
  xt::xtensor<double, 2> c = xt::zeros<double>({m, nn});
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < nn; ++j) c(i, j) += double(a(i, p)) * double(b(p, j));
  return xt::cast<float>(c);
}

bool all_ok = true;

// explain(c), then c evaluated under a collective_counter (through `run`, e.g. a jitted function),
// its value compared with the host's.
template <class E, class Run>
void strategy(std::string const& name, E const& c, Run const& run, xt::xtensor<float, 2> const& expected) {
  std::printf("--- %s\n", name.c_str());
  auto const plan = tessera::explain(c);
  std::cout << plan;
  tessera::collective_counter counter;
  auto const result = run();
  auto const events = counter.events();
  auto const host = tessera::to_host(result);
  float const err = xt::amax(xt::abs(host - expected))();
  bool const value_ok = err < tolerance;
  bool const plan_ok = events == plan.collectives && tessera::typeof(result) == plan.result;
  std::printf("max error < 1e-3: %s\n", value_ok ? "yes" : "no");
  std::printf("collectives run match the plan: %s\n", plan_ok ? "yes" : "no");
  all_ok = all_ok && value_ok && plan_ok;
}

// strategy() for jit(body)(x, y), planned from body(x, y).
template <class F, class X, class Y>
void jitted(std::string const& name, F const& body, X const& x, Y const& y, xt::xtensor<float, 2> const& expected) {
  strategy(name, body(x, y), [&] { return tessera::jit(body)(x, y); }, expected);
}

auto const matmul = [](auto const& x, auto const& y) { return tessera::matmul(x, y); };

// with_sharding_constraint(x @ y, s)
template <class S>
auto constrained_to(S const& s) {
  return [s](auto const& x, auto const& y) { return tessera::with_sharding_constraint(tessera::matmul(x, y), s); };
}

}  // namespace

int main() {
  tessera::runtime rt{8};

  auto const keys = jr::split(jr::key(0), 2);
  xt::xtensor<float, 2> const a = jr::normal(keys[0], {n, n});
  xt::xtensor<float, 2> const b = jr::normal(keys[1], {n, n});
  auto const expected = host_matmul(a, b);

  // mesh_1d = Mesh(devices, axis_names=('devices',))
  auto const mesh_1d = tessera::make_mesh<"devices">({8});
  auto const rows = tessera::named_sharding(mesh_1d, P<"devices", none>{});
  auto const cols = tessera::named_sharding(mesh_1d, P<none, "devices">{});
  auto const replicated = tessera::named_sharding(mesh_1d, P<>{});
  auto const a_rows = tessera::device_put(a, rows);
  auto const a_cols = tessera::device_put(a, cols);
  auto const a_repl = tessera::device_put(a, replicated);
  auto const b_rows = tessera::device_put(b, rows);
  auto const b_cols = tessera::device_put(b, cols);
  auto const b_repl = tessera::device_put(b, replicated);
  std::cout << "A, B: float32[" << n << "," << n << "] on " << mesh_1d << "\n\n";

  // 1. Row sharding: each device multiplies its 32 rows of A by the whole B.
  jitted("1. rows: A P('devices', None) @ B P()", matmul, a_rows, b_repl, expected);

  // 2. Column sharding: each device multiplies the whole A by its 32 columns of B.
  jitted("2. columns: A P() @ B P(None, 'devices')", matmul, a_repl, b_cols, expected);

  // 3. Seed 004's distributed_matmul inputs: A by rows, B by columns. C keeps A's rows on 'devices',
  // so B's columns cannot keep the axis too: B is gathered first (the right operand gives way).
  jitted("3. A P('devices', None) @ B P(None, 'devices')", matmul, a_rows, b_cols, expected);
  // auto_sharded_matmul: pjit(matmul, in_shardings=(rows, cols), out_shardings=P(None, None)).
  auto const full = tessera::named_sharding(mesh_1d, P<none, none>{});
  auto const auto_sharded_matmul = tessera::jit(matmul, tessera::in_shardings(rows, cols), tessera::out_shardings(full));
  strategy("3. the same with out_shardings=P(None, None)", tessera::reshard(matmul(a_rows, b_cols), P<none, none>{}),
           [&] { return auto_sharded_matmul(a, b); }, expected);

  // 4. The contracting dimension sharded: every device multiplies A's 32 columns by B's 32 rows, a
  // partial sum of all of C. Used as it is, C is replicated: an all-reduce. Constrained to rows: each
  // device sums only its rows of the partial products, a reduce-scatter, an eighth of the data out.
  jitted("4. contracting: A P(None, 'devices') @ B P('devices', None)", matmul, a_cols, b_rows, expected);
  jitted("4. the same under with_sharding_constraint(C, P('devices', None))", constrained_to(rows), a_cols, b_rows,
         expected);

  // 5. 2-D blocks on seed 004's mesh_2d = Mesh(devices[:4].reshape(2, 2), ('rows', 'cols')).
  auto const mesh_2d = tessera::make_mesh<"rows", "cols">({2, 2});
  auto const blocks = tessera::named_sharding(mesh_2d, P<"rows", "cols">{});
  auto const a_blocks = tessera::device_put(a, blocks);
  auto const b_blocks = tessera::device_put(b, blocks);
  auto const b_krows = tessera::device_put(b, tessera::named_sharding(mesh_2d, P<"cols", none>{}));
  std::cout << "\nmesh_2d: " << mesh_2d << "\n";
  // A's column blocks meet B's row blocks on 'cols': C's blocks of rows are partial over 'cols'.
  jitted("5. blocks: A P('rows', 'cols') @ B P('cols', None)", matmul, a_blocks, b_krows, expected);
  jitted("5. the same under with_sharding_constraint(C, P('rows', 'cols'))", constrained_to(blocks), a_blocks,
         b_krows, expected);
  auto const c_blocks = tessera::jit(constrained_to(blocks))(a_blocks, b_krows);
  tessera::visualize_array_sharding(c_blocks);
  // Both operands in seed 004's block sharding: B's rows are on 'rows', A's columns on 'cols', so B's
  // rows give way; then A's columns, the contracting dimension sharded on one side only, would make
  // C partial over 'cols' while C's columns are on 'cols': as in JAX's dot_general rule, the one-sided
  // contracting dimension gives way, and C keeps both blocks' axes: two all-gathers, no all-reduce.
  jitted("5. blocks: A P('rows', 'cols') @ B P('rows', 'cols')", matmul, a_blocks, b_blocks, expected);

  std::printf("\nall strategies match the host product: %s\n", all_ok ? "yes" : "no");
  return all_ok ? 0 : 1;
}
