// shard_map on meshes that span processes (parallel/across_processes.hpp), under mpirun with
// P processes of K devices each (ctest: 1x8, 2x4, 4x2, 2x1; the argument is K). Every
// collective's result, gathered with process_allgather, is compared with what each process
// computes itself from the global host input with plain xtensor; grad through a shard_map
// across processes with the global-view gradient; collective_counter in every process; and
// processes in different collectives throw collective_mismatch in every process.
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

namespace {

int failures = 0;
int me = -1;

#define EXPECT(cond)                                                                                \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      ++failures;                                                                                   \
      std::fprintf(stderr, "process %d: %s:%d: failed: %s\n", me, __FILE__, __LINE__, #cond);      \
    }                                                                                               \
  } while (0)

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

void check_mismatch(tessera::distributed::runtime const& rt, std::size_t n) {
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
}

}  // namespace

int main(int argc, char** argv) {
  int const k = argc > 1 ? std::atoi(argv[1]) : 2;
  int total = 0, rank = 0, size = 1;
  {
    tessera::distributed::runtime rt{argc, argv, k};
    me = rank = rt.process_index();
    size = rt.process_count();
    auto const n = static_cast<std::size_t>(rt.device_count());
    check_collectives(n);
    check_subgroups(n);
    check_grad(n);
    if (size > 1) check_mismatch(rt, n);
    int const mine = failures;
    MPI_Allreduce(&mine, &total, 1, MPI_INT, MPI_SUM, rt.communicator());
  }
  if (rank == 0) std::printf("shard_map_processes: %d processes x %d devices, %d failures\n", size, k, total);
  return total == 0 ? 0 : 1;
}
