// Seed 004's sharding strategies for C = A @ B across processes (JAX's multi-controller SPMD):
//     mpirun -np P ./example_mpi_matmul_strategies K     (P processes of K device threads, P x K = 8)
// Every process runs this same program; the 1-D mesh spans the 8 devices of all processes
// (process-major ids, as JAX numbers them). The strategies are examples/matmul_strategies.cpp's:
// rows, columns, seed 004's distributed_matmul inputs and its auto_sharded_matmul
// (out_shardings=P(None, None)), the contracting dimension (all-reduce, or reduce-scatter under a
// constraint), and 2-D blocks on seed 004's (2, 2) mesh of devices[:4]. Each is explained before
// it runs and counted while it runs (a collective_counter in every process), and its result is read
// with tessera::process_allgather where the single-process example calls to_host: the global value,
// on every process, which each process checks against its own host product.
//
// Process 0 prints (visualize_array_sharding draws only there); every process's checks count: the
// last line is "yes" only if all of them hold (each process's flag gathered with process_allgather).
// ctest runs it as 1 x 8, 2 x 4 and 4 x 2 against examples/mpi/matmul_strategies.expected, which is
// examples/matmul_strategies.expected with two lines added after the first, seed 004's
//
//     local_chunks = jax.experimental.multihost_utils.process_allgather(sharded_matrix)
//
// On the seed's one process the array is fully addressable, so process_allgather stacks each
// process's copy along a new dimension: shape (1, 8000, 8000), which the seed prints as "Number of
// chunks: 1". Across processes the array is not fully addressable and the call means its global
// value, (8000, 8000), not each process's chunks: tessera returns it for tiled=false too (so that
// call's shape depends on the layout: (1, 256, 256) on 1 x 8, (256, 256) on 2 x 4 and 4 x 2), while
// recent JAX accepts only tiled=True there. Here it is called with tiled=true, which gives the
// global (256, 256) in every layout (on 1 x 8 the one process's copy, concatenated). The chunks the
// seed means are each process's addressable_shards(): the second line gathers their first rows from
// every process (host data, tiled=true: concatenated in process order).
//
// Differences from seed 004: 256 x 256 normal samples instead of 1024 x 1024 ones (a wrong block
// shows), as in the single-process example. The 2-D mesh is devices[:4], as in the seed: on 2 x 4
// it lies on process 0 alone (process 1 holds no block of strategy 5's arrays and takes part only in
// gathering them: process_allgather gives every process the global value), on 4 x 2 on processes 0 and 1. Differences from the
// single-process example: the two process_allgather lines; results read with process_allgather;
// visualize_array_sharding without colours (mpirun gives its processes a terminal for stdout).
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {

constexpr int devices = 8;
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
bool printer = false;

// Process 0 prints.
void say(std::string const& text) {
  if (printer) std::cout << text;
}

char const* yes_no(bool b) { return b ? "yes" : "no"; }

// explain(c), then c evaluated under a collective_counter (through `run`, e.g. a jitted function),
// its global value (process_allgather) compared with the host's.
template <class E, class Run>
void strategy(std::string const& name, E const& c, Run const& run, xt::xtensor<float, 2> const& expected) {
  say("--- " + name + "\n");
  auto const plan = tessera::explain(c);
  if (printer) std::cout << plan;
  tessera::collective_counter counter;
  auto const result = run();
  auto const events = counter.events();
  auto const host = tessera::process_allgather(result, /*tiled=*/true);  // its global value, on every process
  bool const value_ok = host.dimension() == 2 && host.shape()[0] == n && host.shape()[1] == n &&
                        xt::amax(xt::abs(host - expected))() < tolerance;
  bool const plan_ok = events == plan.collectives && tessera::typeof(result) == plan.result;
  say(std::string("max error < 1e-3: ") + yes_no(value_ok) + "\n");
  say(std::string("collectives run match the plan: ") + yes_no(plan_ok) + "\n");
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

int main(int argc, char** argv) {
  int const local = argc > 1 ? std::atoi(argv[1]) : 8;
  tessera::distributed::runtime rt{argc, argv, local};
  if (rt.device_count() != devices) {
    if (rt.process_index() == 0)
      std::fprintf(stderr, "run it as P processes of K devices with P x K = %d (got %d x %d)\n", devices,
                   rt.process_count(), local);
    return 2;
  }
  printer = rt.process_index() == 0;

  // The same matrices on every process (the same keys): device_put gives each process's devices
  // their blocks from its own copy.
  auto const keys = jr::split(jr::key(0), 2);
  xt::xtensor<float, 2> const a = jr::normal(keys[0], {n, n});
  xt::xtensor<float, 2> const b = jr::normal(keys[1], {n, n});
  auto const expected = host_matmul(a, b);

  // mesh_1d = Mesh(devices, axis_names=('devices',)): every process's devices.
  auto const mesh_1d = tessera::make_mesh<"devices">({devices});
  auto const rows = tessera::named_sharding(mesh_1d, P<"devices", none>{});
  auto const cols = tessera::named_sharding(mesh_1d, P<none, "devices">{});
  auto const replicated = tessera::named_sharding(mesh_1d, P<>{});
  auto const a_rows = tessera::device_put(a, rows);
  auto const a_cols = tessera::device_put(a, cols);
  auto const a_repl = tessera::device_put(a, replicated);
  auto const b_rows = tessera::device_put(b, rows);
  auto const b_cols = tessera::device_put(b, cols);
  auto const b_repl = tessera::device_put(b, replicated);
  if (printer) std::cout << "A, B: float32[" << n << "," << n << "] on " << mesh_1d << "\n";

  // Seed 004's local_chunks = multihost_utils.process_allgather(sharded_matrix), tiled: the global
  // value on every process, whatever the number of processes.
  auto const gathered = tessera::process_allgather(a_rows, /*tiled=*/true);
  bool const gathered_ok = gathered.dimension() == 2 && gathered.shape()[0] == n && gathered.shape()[1] == n &&
                           xt::all(xt::equal(gathered, a));
  say("process_allgather(A P('devices', None), tiled=True): shape (" + std::to_string(gathered.shape()[0]) + ", " +
      std::to_string(gathered.shape()[1]) + ") on every process, equal to A: " + yes_no(gathered_ok) + "\n");
  all_ok = all_ok && gathered_ok;
  // The chunks the seed means: this process's addressable shards; their first rows, from every process.
  auto const shards = a_rows.addressable_shards();
  xt::xtensor<std::size_t, 1> first_rows = xt::zeros<std::size_t>({shards.size()});
  for (std::size_t i = 0; i < shards.size(); ++i) first_rows(i) = shards[i].index[0].start;
  auto const all_first_rows = tessera::process_allgather(first_rows, /*tiled=*/true);
  std::string list;
  for (std::size_t i = 0; i < all_first_rows.size(); ++i) list += (i ? " " : "") + std::to_string(all_first_rows(i));
  say("first rows of every process's addressable shards of A, process_allgather(tiled=True): [" + list + "]\n\n");

  // 1. Row sharding: each device multiplies its 32 rows of A by the whole B.
  jitted("1. rows: A P('devices', None) @ B P()", matmul, a_rows, b_repl, expected);

  // 2. Column sharding: each device multiplies the whole A by its 32 columns of B.
  jitted("2. columns: A P() @ B P(None, 'devices')", matmul, a_repl, b_cols, expected);

  // 3. Seed 004's distributed_matmul inputs: A by rows, B by columns. C keeps A's rows on 'devices',
  // so B's columns cannot keep the axis too: B is gathered first (the right operand gives way),
  // across the processes where 'devices' spans them.
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

  // 5. 2-D blocks on seed 004's mesh_2d = Mesh(devices[:4].reshape(2, 2), ('rows', 'cols')): global
  // devices 0-3, on process 0 alone under 2 x 4, on processes 0 and 1 under 4 x 2.
  auto const mesh_2d = tessera::make_mesh<"rows", "cols">({2, 2});
  auto const blocks = tessera::named_sharding(mesh_2d, P<"rows", "cols">{});
  auto const a_blocks = tessera::device_put(a, blocks);
  auto const b_blocks = tessera::device_put(b, blocks);
  auto const b_krows = tessera::device_put(b, tessera::named_sharding(mesh_2d, P<"cols", none>{}));
  if (printer) std::cout << "\nmesh_2d: " << mesh_2d << "\n";
  // A's column blocks meet B's row blocks on 'cols': C's blocks of rows are partial over 'cols'.
  jitted("5. blocks: A P('rows', 'cols') @ B P('cols', None)", matmul, a_blocks, b_krows, expected);
  jitted("5. the same under with_sharding_constraint(C, P('rows', 'cols'))", constrained_to(blocks), a_blocks,
         b_krows, expected);
  auto const c_blocks = tessera::jit(constrained_to(blocks))(a_blocks, b_krows);
  // No colours: mpirun hands its processes a terminal for stdout even when its own output is a pipe.
  tessera::visualize_options plain;
  plain.use_color = 0;
  tessera::visualize_array_sharding(c_blocks, std::cout, plain);
  // Both operands in seed 004's block sharding: B's rows are on 'rows', A's columns on 'cols', so B's
  // rows give way; then A's columns, the contracting dimension sharded on one side only, would make
  // C partial over 'cols' while C's columns are on 'cols': as in JAX's dot_general rule, the one-sided
  // contracting dimension gives way, and C keeps both blocks' axes: two all-gathers, no all-reduce.
  jitted("5. blocks: A P('rows', 'cols') @ B P('rows', 'cols')", matmul, a_blocks, b_blocks, expected);

  // Every process's checks, gathered: host data stacked along a new dimension, one entry per process.
  xt::xtensor<int, 1> const mine{all_ok ? 1 : 0};
  bool const everywhere = xt::all(xt::equal(tessera::process_allgather(mine), 1));
  say(std::string("\nall strategies match the host product: ") + yes_no(everywhere) + "\n");
  return everywhere ? 0 : 1;
}
