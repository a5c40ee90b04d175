// shard_map on meshes that span processes (parallel/across_processes.hpp), under mpirun with
// P processes of K devices each (ctest: 1x8, 2x4, 4x2, 2x1; the argument is K). Every
// collective's result, gathered with process_allgather, is compared with what each process
// computes itself from the global host input with plain xtensor; grad through a shard_map
// across processes with the global-view gradient; collective_counter in every process; and
// processes in different collectives throw collective_mismatch in every process (checked mode).
// The collectives also run unchecked, in int32 on meshes in process order (MPI's own calls) and
// interleaved (the gathered path), and with MPI's calls cut into rounds of a few bytes; with the
// argument "uneven", processes of 1, 2, ... devices.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "mpi_expect.hpp"

namespace {

using tessera_mpi_test::failures;
using tessera_mpi_test::me;

using tessera::none;
using tessera::P;

template <class A, class B>
bool close(A const& a, B const& b, double tol = 1e-5) {
  if (a.size() != b.size()) return false;
  auto ib = b.begin();
  for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib)
    if (std::abs(double(*ia) - double(*ib)) > tol * (1 + std::abs(double(*ib)))) return false;
  return true;
}

/// The global input: x(i, j) = i + j / 10.
xt::xtensor<float, 2> input(std::size_t rows, std::size_t cols) {
  xt::xtensor<float, 2> x = xt::zeros<float>({rows, cols});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) x(i, j) = static_cast<float>(i) + static_cast<float>(j) / 10.0f;
  return x;
}

void check_collectives(std::size_t n) {
  auto const mesh = tessera::make_mesh<"data">({static_cast<int>(n)});
  std::size_t const b = 2, cols = 4;  // block rows
  auto const host = input(n * b, cols);
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"data", none>{}));
  auto block = [&](std::size_t d) { return xt::xtensor<float, 2>(xt::view(host, xt::range(d * b, d * b + b), xt::all())); };

  // psum and pmean over every process's devices.
  xt::xtensor<float, 2> sum = xt::zeros<float>({b, cols});
  for (std::size_t d = 0; d < n; ++d) sum += block(d);
  auto const ps = tessera::shard_map([](auto const& v) { return tessera::psum<"data">(v); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}));
  tessera::collective_counter counter;
  auto const got = tessera::process_allgather(ps(x), true);
  EXPECT(counter.count("all-reduce") == 1);  // in every process
  EXPECT(close(got, sum));
  auto const pm = tessera::shard_map([](auto const& v) { return tessera::pmean<"data">(v); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}));
  EXPECT(close(tessera::process_allgather(pm(x), true), sum / static_cast<float>(n)));
  auto const mx = tessera::shard_map([](auto const& v) { return tessera::pmax<"data">(v); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}));
  EXPECT(close(tessera::process_allgather(mx(x), true), block(n - 1)));

  // all_gather, tiled: every device holds the whole input.
  auto const ag = tessera::shard_map([](auto const& v) { return tessera::all_gather<"data">(v, 0, tessera::tiled); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}));
  EXPECT(close(tessera::process_allgather(ag(x), true), host));

  // psum_scatter, tiled: device d keeps rows [d, d + 1) of the sum of the blocks (here of n rows each).
  auto const hs = input(n * n, cols);
  auto const xs = tessera::device_put(hs, tessera::named_sharding(mesh, P<"data", none>{}));
  xt::xtensor<float, 2> total = xt::zeros<float>({n, cols});
  for (std::size_t d = 0; d < n; ++d) total += xt::view(hs, xt::range(d * n, d * n + n), xt::all());
  auto const rs = tessera::shard_map([](auto const& v) { return tessera::psum_scatter<"data">(v, 0, tessera::tiled); },
                                     mesh, tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<"data", none>{}));
  EXPECT(close(tessera::process_allgather(rs(xs), true), total));

  // all_to_all, tiled: blocks (n, cols) split along rows, concatenated along columns.
  auto const a2a = tessera::shard_map(
      [](auto const& v) { return tessera::all_to_all<"data">(v, 0, 1, tessera::tiled); }, mesh,
      tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<"data", none>{}));
  auto const t = tessera::process_allgather(a2a(xs), true);
  xt::xtensor<float, 2> expect_t = xt::zeros<float>({n, n * cols});
  for (std::size_t d = 0; d < n; ++d)      // device d's result row: chunk d of every device's block
    for (std::size_t s = 0; s < n; ++s)    // from device s
      for (std::size_t j = 0; j < cols; ++j) expect_t(d, s * cols + j) = hs(s * n + d, j);
  EXPECT(close(t, expect_t));

  // ppermute: a cycle, each device gets the previous device's block.
  std::vector<std::pair<int, int>> perm;
  for (std::size_t d = 0; d < n; ++d) perm.emplace_back(static_cast<int>(d), static_cast<int>((d + 1) % n));
  auto const pp = tessera::shard_map([perm](auto const& v) { return tessera::ppermute<"data">(v, perm); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<"data", none>{}));
  auto const shifted = tessera::process_allgather(pp(x), true);
  for (std::size_t d = 0; d < n; ++d)
    EXPECT(close(xt::xtensor<float, 2>(xt::view(shifted, xt::range(d * b, d * b + b), xt::all())), block((d + n - 1) % n)));

  // A 2-D mesh: psum along "model" (pairs of neighbouring devices: within a process, or across
  // two when each has one device) and along "data".
  auto const mesh2 = tessera::make_mesh<"data", "model">({static_cast<int>(n / 2), 2});
  auto const x2 = tessera::device_put(host, tessera::named_sharding(mesh2, P<tessera::axes<"data", "model">, none>{}));
  auto const pmod = tessera::shard_map([](auto const& v) { return tessera::psum<"model">(v); }, mesh2,
                                       tessera::in_specs(P<tessera::axes<"data", "model">, none>{}),
                                       tessera::out_specs(P<"data", none>{}));
  auto const gm = tessera::process_allgather(pmod(x2), true);
  for (std::size_t r = 0; r < n / 2; ++r)
    EXPECT(close(xt::xtensor<float, 2>(xt::view(gm, xt::range(r * b, r * b + b), xt::all())),
                 xt::xtensor<float, 2>(block(2 * r) + block(2 * r + 1))));
}

/// A mesh whose rows of 4 devices span some processes but not all (2 x 4 on 4 processes of 2
/// devices: each row's group is its own pair of processes, with a communicator of its own).
void check_subgroups(std::size_t n) {
  if (n % 4 != 0) return;
  auto const mesh = tessera::make_mesh<"a", "b">({static_cast<int>(n / 4), 4});
  std::size_t const b = 2, cols = 3;
  auto const host = input(n * b, cols);
  using spec = P<tessera::axes<"a", "b">, none>;
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, spec{}));
  auto const sm = tessera::shard_map([](auto const& v) { return tessera::psum<"b">(v * 2.0f); }, mesh,
                                     tessera::in_specs(spec{}), tessera::out_specs(P<"a", none>{}));
  auto const got = tessera::process_allgather(sm(x), true);
  for (std::size_t row = 0; row < n / 4; ++row) {
    xt::xtensor<float, 2> expect = xt::zeros<float>({b, cols});
    for (std::size_t d = 4 * row; d < 4 * row + 4; ++d) expect += 2.0f * xt::view(host, xt::range(d * b, d * b + b), xt::all());
    EXPECT(close(xt::xtensor<float, 2>(xt::view(got, xt::range(row * b, row * b + b), xt::all())), expect));
  }
  // Twice, so the mesh's communicators are made once and used again.
  EXPECT(close(tessera::process_allgather(sm(x), true), got, 0));
}

/// More meshes than a pool keeps layouts of (process_layout_cache), each the devices in another
/// rotation, visited twice: each psum over "r" adds its blocks in that mesh's order, so a layout
/// of the wrong mesh would give another process's rows.
void check_many_meshes(std::size_t n) {
  std::size_t const meshes = 20, cols = 2;
  auto const host = input(n, cols);
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t m = 0; m < meshes; ++m) {
      std::vector<int> ids(n);
      for (std::size_t p = 0; p < n; ++p) ids[p] = static_cast<int>((p + m) % n);
      auto const mesh = tessera::make_mesh<"r">({static_cast<int>(n)}, ids);
      auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"r", none>{}));
      // Block p (rows p) scaled by its position along "r", then summed: sum_p p * host(p, :).
      auto const sm = tessera::shard_map(
          [](auto const& v) { return tessera::psum<"r">(v * static_cast<float>(tessera::axis_index<"r">())); }, mesh,
          tessera::in_specs(P<"r", none>{}), tessera::out_specs(P<>{}));
      auto const got = tessera::process_allgather(sm(x), true);
      xt::xtensor<float, 2> expect = xt::zeros<float>({std::size_t{1}, cols});
      for (std::size_t p = 0; p < n; ++p)
        for (std::size_t j = 0; j < cols; ++j) expect(0, j) += static_cast<float>(p) * host(p, j);
      EXPECT(close(got, expect));
    }
}

void check_grad(std::size_t n) {
  auto const mesh = tessera::make_mesh<"data">({static_cast<int>(n)});
  std::size_t const rows = 4 * n;
  xt::xtensor<double, 2> xh = xt::zeros<double>(std::array<std::size_t, 2>{rows, 3});
  xt::xtensor<double, 2> yh = xt::zeros<double>(std::array<std::size_t, 2>{rows, 2});
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < 3; ++j) xh(i, j) = std::sin(0.3 * static_cast<double>(i * 3 + j));
    for (std::size_t j = 0; j < 2; ++j) yh(i, j) = std::cos(0.7 * static_cast<double>(i * 2 + j));
  }
  xt::xtensor<double, 2> wh = {{0.1, -0.2}, {0.3, 0.05}, {-0.4, 0.2}};
  auto const x = tessera::device_put(xh, tessera::named_sharding(mesh, P<"data", none>{}));
  auto const y = tessera::device_put(yh, tessera::named_sharding(mesh, P<"data", none>{}));
  auto const w = tessera::device_put(wh, tessera::named_sharding(mesh, P<>{}));
  auto const sm = tessera::shard_map(
      [](auto const& wv, auto const& xv, auto const& yv) {
        auto const d = tessera::sigmoid(tessera::matmul(xv, wv)) - yv;
        return tessera::pmean<"data">(tessera::mean(d * d));
      },
      mesh, tessera::in_specs(P<>{}, P<"data", none>{}, P<"data", none>{}), tessera::out_specs(P<>{}));
  auto const g = tessera::grad([&](auto const& v) { return sm(v, x, y); })(w);
  auto const global = tessera::grad([&](auto const& v) {
    auto const d = tessera::sigmoid(tessera::matmul(x, v)) - y;
    return tessera::mean(d * d);
  })(w);
  EXPECT(close(tessera::process_allgather(g, true), tessera::process_allgather(global, true), 1e-12));
}

/// psum, pmax, pmin, pmean, all_gather, psum_scatter and all_to_all on a 1-D mesh "d" of
/// `ids` (global device ids in mesh order), in int32 so that any order of the sums gives the
/// same bits: every result equals plain xtensor's. In process order the collectives are MPI's
/// own calls (MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, MPI_Alltoall, after the
/// process's devices combine or pack their inputs); with the processes interleaved they take
/// the gathered path.
void check_layout(std::vector<int> const& ids, char const* layout, std::size_t widen = 1) {
  using I = std::int32_t;
  std::size_t const n = ids.size();
  auto const mesh = tessera::make_mesh<"d">({static_cast<int>(n)}, ids);
  std::size_t const b = 2 * n, cols = 2 * n * widen;  // each device's block: (b, cols)
  xt::xtensor<I, 2> host = xt::zeros<I>({n * b, cols});
  for (std::size_t i = 0; i < n * b; ++i)
    for (std::size_t j = 0; j < cols; ++j) host(i, j) = static_cast<I>(7 * i + 3 * j) - 50;
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"d", none>{}));
  auto block = [&](std::size_t d) { return xt::xtensor<I, 2>(xt::view(host, xt::range(d * b, d * b + b), xt::all())); };
  xt::xtensor<I, 2> sum = xt::zeros<I>({b, cols}), big = block(0), small = block(0);
  for (std::size_t d = 0; d < n; ++d) {
    sum += block(d);
    big = xt::maximum(big, block(d));
    small = xt::minimum(small, block(d));
  }
  auto report = [&](bool ok, char const* what) {
    if (!ok) {
      ++failures;
      std::fprintf(stderr, "process %d: %s layout: %s differs from xtensor's\n", me, layout, what);
    }
  };
  auto const in = tessera::in_specs(P<"d", none>{});
  auto run = [&](auto body, auto out) { return tessera::process_allgather(tessera::shard_map(body, mesh, in, out)(x), true); };
  report(run([](auto const& v) { return tessera::psum<"d">(v); }, tessera::out_specs(P<>{})) == sum, "psum");
  report(run([](auto const& v) { return tessera::pmax<"d">(v); }, tessera::out_specs(P<>{})) == big, "pmax");
  report(run([](auto const& v) { return tessera::pmin<"d">(v); }, tessera::out_specs(P<>{})) == small, "pmin");
  report(close(run([](auto const& v) { return tessera::pmean<"d">(v); }, tessera::out_specs(P<>{})),
               xt::xtensor<double, 2>(xt::cast<double>(sum) / static_cast<double>(n))),
         "pmean");
  // all_gather along rows (the inputs one after the other: MPI_Allgather into the result), along
  // columns (interleaved: the gathered path), and stacked.
  report(run([](auto const& v) { return tessera::all_gather<"d">(v, 0, tessera::tiled); }, tessera::out_specs(P<>{})) ==
             host,
         "all_gather along rows");
  xt::xtensor<I, 2> by_cols = xt::zeros<I>({b, n * cols});
  for (std::size_t d = 0; d < n; ++d) xt::view(by_cols, xt::all(), xt::range(d * cols, d * cols + cols)) = block(d);
  report(run([](auto const& v) { return tessera::all_gather<"d">(v, 1, tessera::tiled); }, tessera::out_specs(P<>{})) ==
             by_cols,
         "all_gather along columns");
  auto const stacked = run([](auto const& v) { return tessera::all_gather<"d">(v, 0); }, tessera::out_specs(P<>{}));
  report(stacked.size() == host.size() && std::equal(stacked.begin(), stacked.end(), host.begin()), "all_gather stacked");
  // psum_scatter: device r keeps the r-th of n chunks of the sum, along rows or columns; laid
  // out along that dimension again, the chunks are the sum.
  report(run([](auto const& v) { return tessera::psum_scatter<"d">(v, 0, tessera::tiled); },
             tessera::out_specs(P<"d", none>{})) == sum,
         "psum_scatter along rows");
  report(run([](auto const& v) { return tessera::psum_scatter<"d">(v, 1, tessera::tiled); },
             tessera::out_specs(P<none, "d">{})) == sum,
         "psum_scatter along columns");
  // all_to_all: split rows, concatenate columns; split columns, concatenate rows; rows both.
  std::size_t const rp = b / n, cp = cols / n;
  xt::xtensor<I, 2> rows_cols = xt::zeros<I>({b, n * cols}), rows_rows = xt::zeros<I>({n * b, cols});
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t i = 0; i < rp; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          rows_cols(d * rp + i, s * cols + j) = host(s * b + d * rp + i, j);
          rows_rows(d * b + s * rp + i, j) = host(s * b + d * rp + i, j);
        }
  report(run([](auto const& v) { return tessera::all_to_all<"d">(v, 0, 1, tessera::tiled); },
             tessera::out_specs(P<"d", none>{})) == rows_cols,
         "all_to_all rows to columns");
  report(run([](auto const& v) { return tessera::all_to_all<"d">(v, 1, 0, tessera::tiled); },
             tessera::out_specs(P<none, "d">{})) == host,
         "all_to_all columns to rows");
  report(run([](auto const& v) { return tessera::all_to_all<"d">(v, 0, 0, tessera::tiled); },
             tessera::out_specs(P<"d", none>{})) == rows_rows,
         "all_to_all rows to rows");
  (void)cp;
}

/// The layouts of check_layout: process order, the processes interleaved, process order with
/// blocks of 256 KiB and more (each device then does its own part of a collective's local work,
/// parallel/across_processes.hpp's run_mapped, and sums are MPI_Allreduce, not the gathered path
/// of small ones), and process order again with MPI's calls cut into rounds of a few bytes (as
/// counts over 2^31 are).
void check_layouts(tessera::distributed::runtime const& rt) {
  std::size_t const n = static_cast<std::size_t>(rt.device_count());
  std::size_t const procs = static_cast<std::size_t>(rt.process_count()), k = n / procs;
  std::vector<int> in_order(n), interleaved(n);
  for (std::size_t q = 0; q < n; ++q) {
    in_order[q] = static_cast<int>(q);
    interleaved[q] = static_cast<int>((q % procs) * k + q / procs);
  }
  check_layout(in_order, "process-order");
  check_layout(interleaved, "interleaved");
  check_layout(in_order, "process-order, wide,", 512);
  auto const keep = tessera::detail::mpi_max_bytes_per_call.load();
  tessera::detail::mpi_max_bytes_per_call.store(20);
  check_layout(in_order, "process-order, 20-byte rounds,");
  // Large enough for MPI_Allreduce (small sums take the gathered path), in rounds of a size
  // that is no multiple of the elements'.
  tessera::detail::mpi_max_bytes_per_call.store(10006);
  check_layout(in_order, "process-order, wide, 10006-byte rounds,", 512);
  tessera::detail::mpi_max_bytes_per_call.store(keep);
  // all_to_all with every piece sent on its own, input to output (large pieces, several devices
  // per process), at every size, and in rounds of a few bytes.
  auto const keep_pairwise = tessera::detail::pairwise_all_to_all_bytes.load();
  tessera::detail::pairwise_all_to_all_bytes.store(0);
  check_layout(in_order, "process-order, pairwise,");
  check_layout(in_order, "process-order, wide, pairwise,", 512);
  tessera::detail::mpi_max_bytes_per_call.store(20);
  check_layout(in_order, "process-order, pairwise, 20-byte rounds,");
  tessera::detail::mpi_max_bytes_per_call.store(keep);
  tessera::detail::pairwise_all_to_all_bytes.store(keep_pairwise);
}

/// psum of float32 over every device: within rounding of the sum in rank order by default (MPI
/// adds in its own order), and the same bits in deterministic mode (as on one process).
void check_float_sums(tessera::distributed::runtime& rt) {
  std::size_t const n = static_cast<std::size_t>(rt.device_count());
  auto const mesh = tessera::make_mesh<"d">({static_cast<int>(n)});
  std::size_t const b = 3, cols = 2048;  // 24 KiB per device: MPI_Allreduce, not the gathered path of small sums
  xt::xtensor<float, 2> host = xt::zeros<float>({n * b, cols});
  for (std::size_t i = 0; i < n * b; ++i)
    for (std::size_t j = 0; j < cols; ++j) host(i, j) = std::sin(0.37f * static_cast<float>(i * cols + j)) * 1000.0f;
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"d", none>{}));
  xt::xtensor<float, 2> in_rank_order = xt::view(host, xt::range(0, b), xt::all());
  xt::xtensor<double, 2> magnitude = xt::abs(xt::cast<double>(in_rank_order));
  for (std::size_t d = 1; d < n; ++d) {
    in_rank_order += xt::view(host, xt::range(d * b, d * b + b), xt::all());
    magnitude += xt::abs(xt::cast<double>(xt::view(host, xt::range(d * b, d * b + b), xt::all())));
  }
  auto const ps = tessera::shard_map([](auto const& v) { return tessera::psum<"d">(v); }, mesh,
                                     tessera::in_specs(P<"d", none>{}), tessera::out_specs(P<>{}));
  // Any order of n additions is within (n - 1) eps sum |x| of the exact sum, so two orders are
  // within twice that of each other (docs/across-processes.md states this tolerance).
  auto const got = tessera::process_allgather(ps(x), true);
  double const eps = static_cast<double>(std::numeric_limits<float>::epsilon());
  bool within = got.size() == in_rank_order.size();
  for (std::size_t i = 0; within && i < b; ++i)
    for (std::size_t j = 0; j < cols; ++j)
      within = within && std::abs(static_cast<double>(got(i, j)) - static_cast<double>(in_rank_order(i, j))) <=
                             2.0 * static_cast<double>(n - 1) * eps * magnitude(i, j);
  EXPECT(within);
  if (rt.process_count() == 2 && n == 2) EXPECT(got == in_rank_order);  // a + b: MPI's bits are the same
  EXPECT(!rt.deterministic_collectives());
  rt.set_deterministic_collectives(true);
  EXPECT(tessera::process_allgather(ps(x), true) == in_rank_order);
  rt.set_deterministic_collectives(false);
}

void check_mismatch(tessera::distributed::runtime& rt, std::size_t n) {
  // Checked mode (the default without NDEBUG) turns a mismatch into an error everywhere.
  bool const was_checked = rt.checked_collectives();
#ifdef NDEBUG
  EXPECT(!was_checked);
#else
  EXPECT(was_checked);
#endif
  rt.set_checked_collectives(true);
  auto const mesh = tessera::make_mesh<"data">({static_cast<int>(n)});
  auto const x = tessera::device_put(input(n, 3), tessera::named_sharding(mesh, P<"data", none>{}));
  bool const odd = rt.process_index() == rt.process_count() - 1;
  // The last process runs pmax where the others run psum: every process throws.
  auto const sm = tessera::shard_map(
      [odd](auto const& v) { return odd ? tessera::pmax<"data">(v) : tessera::psum<"data">(v); }, mesh,
      tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}), tessera::no_check_vma);
  std::string what;
  try {
    (void)sm(x);
  } catch (tessera::device_error const& e) {
    what = e.what();
  } catch (std::exception const& e) {
    what = e.what();
  }
  EXPECT(what.find("not in the same collective") != std::string::npos);
  // One more collective in one process: its extra exchange meets the others' end of the body.
  auto const extra = tessera::shard_map(
      [odd](auto const& v) {
        auto s = tessera::psum<"data">(v);
        if (odd) s = tessera::psum<"data">(s);
        return xt::xtensor<float, 2>(s);
      },
      mesh, tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}), tessera::no_check_vma);
  what.clear();
  try {
    (void)extra(x);
  } catch (std::exception const& e) {
    what = e.what();
  }
  EXPECT(what.find("not in the same collective") != std::string::npos);
  // The runtime still works after it.
  auto const ps = tessera::shard_map([](auto const& v) { return tessera::psum<"data">(v); }, mesh,
                                     tessera::in_specs(P<"data", none>{}), tessera::out_specs(P<>{}));
  EXPECT(tessera::process_allgather(ps(x), true).size() == 3);
  rt.set_checked_collectives(was_checked);
}

}  // namespace

/// Processes with different numbers of devices (process p has p + 1): the groups are not whole
/// processes of one size, so every collective takes the gathered path (MPI_Iallgatherv of
/// uneven shares), checked and unchecked, and in rounds.
int uneven(int argc, char** argv) {
  int rank = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &rank);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int total = 0, size = 1;
  {
    tessera::distributed::runtime rt{rank + 1};
    me = rt.process_index();
    size = rt.process_count();
    std::vector<int> ids(static_cast<std::size_t>(rt.device_count()));
    for (std::size_t q = 0; q < ids.size(); ++q) ids[q] = static_cast<int>(q);
    for (bool checked : {true, false}) {
      rt.set_checked_collectives(checked);
      check_layout(ids, checked ? "uneven, checked," : "uneven, unchecked,");
    }
    auto const keep = tessera::detail::mpi_max_bytes_per_call.load();
    tessera::detail::mpi_max_bytes_per_call.store(20);
    check_layout(ids, "uneven, 20-byte rounds,");
    tessera::detail::mpi_max_bytes_per_call.store(keep);
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
  }
  MPI_Finalize();
  if (rank == 0) std::printf("shard_map_processes: %d processes of 1 to %d devices, %d failures\n", size, size, total);
  return total == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "uneven") return uneven(argc, argv);
  int const k = argc > 1 ? std::atoi(argv[1]) : 2;
  int total = 0, rank = 0, size = 1;
  {
    tessera::distributed::runtime rt{argc, argv, k};
    me = rank = rt.process_index();
    size = rt.process_count();
    auto const n = static_cast<std::size_t>(rt.device_count());
    check_collectives(n);
    check_subgroups(n);
    check_many_meshes(n);
    check_grad(n);
    check_layouts(rt);
    check_float_sums(rt);
    if (size > 1) check_mismatch(rt, n);
    // The same collectives unchecked (the default with NDEBUG) and checked.
    rt.set_checked_collectives(!rt.checked_collectives());
    check_collectives(n);
    check_layouts(rt);
    rt.set_checked_collectives(!rt.checked_collectives());
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
  }
  if (rank == 0) std::printf("shard_map_processes: %d processes x %d devices, %d failures\n", size, k, total);
  return total == 0 ? 0 : 1;
}
