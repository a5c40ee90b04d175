// tessera/distributed.hpp under mpirun (ctest label mpi; tests/CMakeLists.txt runs it with 2 and
// 3 processes). Each process checks its own results against values it computes itself from the
// process count; every process then reports its failures to the others, and the test fails if
// any process failed.
//
//   distributed_test user-init   the program initialises MPI itself: tessera must neither
//                                finalise it nor disturb MPI_COMM_WORLD
//   distributed_test tessera-init tessera initialises MPI and finalises it
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "mpi_expect.hpp"

namespace {

using tessera_mpi_test::failures;

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (std::exception const& e) {
    return e.what();
  }
  return "";
}

void check_gathers(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();

  // Untiled: each process's (2, 3) block stacked along a new dimension 0.
  xt::xtensor<float, 2> mine = xt::reshape_view(xt::arange<float>(6.0f), {2, 3}) + 100.0f * static_cast<float>(me);
  auto all = tessera::process_allgather(mine);
  EXPECT(all.dimension() == 3);
  EXPECT(all.shape()[0] == static_cast<std::size_t>(n) && all.shape()[1] == 2 && all.shape()[2] == 3);
  for (int p = 0; p < n; ++p)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j)
        EXPECT(all(static_cast<std::size_t>(p), i, j) == static_cast<float>(i * 3 + j) + 100.0f * static_cast<float>(p));

  // Tiled with uneven rows: process p gives p + 1 rows of 4 doubles (the v-variant).
  xt::xtensor<double, 2> rows = xt::zeros<double>({static_cast<std::size_t>(me + 1), std::size_t{4}});
  for (std::size_t i = 0; i < rows.shape()[0]; ++i)
    for (std::size_t j = 0; j < 4; ++j) rows(i, j) = 1000.0 * me + 10.0 * static_cast<double>(i) + static_cast<double>(j);
  auto cat = tessera::process_allgather(rows, true);
  std::size_t const total_rows = static_cast<std::size_t>(n * (n + 1) / 2);
  EXPECT(cat.dimension() == 2 && cat.shape()[0] == total_rows && cat.shape()[1] == 4);
  std::size_t r = 0;
  for (int p = 0; p < n; ++p)
    for (int i = 0; i <= p; ++i, ++r)
      for (std::size_t j = 0; j < 4; ++j)
        EXPECT(cat(r, j) == 1000.0 * p + 10.0 * i + static_cast<double>(j));

  // Counts over what one MPI call may move: rounds of a few bytes give the same answer.
  tessera::detail::mpi_max_bytes_per_call = 7;
  std::vector<std::size_t> const len{static_cast<std::size_t>(50 + 13 * me)};
  xt::xarray<std::int32_t> big = xt::arange<std::int32_t>(static_cast<std::int32_t>(len[0])) + 7 * me;
  auto const split = tessera::process_allgather(big, true);
  tessera::detail::mpi_max_bytes_per_call = static_cast<std::size_t>(INT_MAX);
  std::size_t k = 0;
  for (int p = 0; p < n; ++p)
    for (int i = 0; i < 50 + 13 * p; ++i, ++k) EXPECT(split(k) == i + 7 * p);
  EXPECT(k == split.size());

  // A scalar per process: a vector of them.
  xt::xarray<int> one = me * me;
  auto const scalars = tessera::process_allgather(one);
  EXPECT(scalars.dimension() == 1 && scalars.size() == static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) EXPECT(scalars(static_cast<std::size_t>(p)) == p * p);

  // A tessera::array of this process's devices (seed 004's process_allgather of an array).
  auto mesh = tessera::make_mesh<"x">({rt.local_device_count()}, tessera::local_devices());
  xt::xtensor<float, 1> local = xt::arange<float>(8.0f) * static_cast<float>(me + 1);
  auto x = tessera::device_put(local, tessera::named_sharding(mesh, tessera::P<"x">{}));
  auto const gathered = tessera::process_allgather(x);
  EXPECT(gathered.shape()[0] == static_cast<std::size_t>(n) && gathered.shape()[1] == 8);
  for (int p = 0; p < n; ++p)
    for (std::size_t i = 0; i < 8; ++i)
      EXPECT(gathered(static_cast<std::size_t>(p), i) == static_cast<float>(i) * static_cast<float>(p + 1));

  // Disagreeing processes: every process throws the same error (none waits), naming both shapes.
  if (n > 1) {
    xt::xtensor<float, 1> odd = xt::zeros<float>({static_cast<std::size_t>(me == 1 ? 5 : 4)});
    std::string const e = error_of([&] { (void)tessera::process_allgather(odd); });
    EXPECT(e.find("process 0 gives 4-byte elements of shape (4,)") != std::string::npos);
    EXPECT(e.find("process 1 gives 4-byte elements of shape (5,)") != std::string::npos);
    std::string const t = error_of([&] {
      if (me == 1) (void)tessera::process_allgather(xt::xtensor<double, 1>(xt::zeros<double>({std::size_t{4}})));
      else (void)tessera::process_allgather(xt::xtensor<float, 1>(xt::zeros<float>({std::size_t{4}})));
    });
    EXPECT(t.find("8-byte elements") != std::string::npos);
  }

  // An MPI error is an exception naming the call and the process (errors return on our communicator).
  std::string const m = error_of([&] {
    int v = 0;
    tessera::detail::mpi_check(MPI_Send(&v, 1, MPI_INT, n + 5, 0, rt.communicator()), "MPI_Send");
  });
  EXPECT(m.find("MPI_Send failed on process " + std::to_string(me)) != std::string::npos);

  // Under MPI_THREAD_FUNNELED only the runtime's thread may communicate.
  if (rt.mpi_thread_level() < MPI_THREAD_SERIALIZED) {
    std::string other;
    std::thread t([&] { other = error_of([&] { (void)tessera::process_allgather(mine); }); });
    t.join();
    EXPECT(other.find("from a thread other than the one that made the distributed runtime") != std::string::npos);
  }
}

/// multihost_utils.broadcast_one_to_all and sync_global_devices.
void check_broadcast_and_sync(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();
  auto const values_of = [](int p) {
    xt::xtensor<double, 2> v = xt::reshape_view(xt::arange<double>(12.0), {3, 4}) + 100.0 * p;
    return v;
  };
  // Process 0 is the source by default; every process gets its values, whatever it passed.
  auto const from0 = tessera::broadcast_one_to_all(values_of(me));
  EXPECT(from0.dimension() == 2 && from0.shape()[0] == 3 && from0.shape()[1] == 4);
  EXPECT(from0 == values_of(0));
  // Another source, an expression as x, and rounds of a few bytes (MPI's int counts split).
  tessera::detail::mpi_max_bytes_per_call = 5;
  auto const last = tessera::broadcast_one_to_all(xt::xtensor<std::int16_t, 1>(xt::arange<std::int16_t>(9)) *
                                                      static_cast<std::int16_t>(me + 1),
                                                  me == n - 1);
  tessera::detail::mpi_max_bytes_per_call = static_cast<std::size_t>(INT_MAX);
  for (std::size_t i = 0; i < 9; ++i) EXPECT(last(i) == static_cast<std::int16_t>(i) * n);
  // A scalar, and a fully addressable array of this process's devices.
  EXPECT(tessera::broadcast_one_to_all(xt::xarray<int>(7 * me + 3), me == 1)() == 10);
  auto const local = tessera::make_mesh<"x">({rt.local_device_count()}, tessera::local_devices());
  auto const a = tessera::device_put(xt::xtensor<float, 1>(xt::arange<float>(6.0f) + static_cast<float>(me)),
                                     tessera::named_sharding(local, tessera::P<"x">{}));
  auto const from_array = tessera::broadcast_one_to_all(a, me == n - 1);
  for (std::size_t i = 0; i < 6; ++i) EXPECT(from_array(i) == static_cast<float>(i) + static_cast<float>(n - 1));
  // Refusals, on every process alike (none is left in a broadcast).
  std::string const two = error_of([&] { (void)tessera::broadcast_one_to_all(values_of(me), me <= 1); });
  EXPECT(two.find("2 processes say is_source = true; exactly one must") != std::string::npos);
  std::string const none = error_of([&] { (void)tessera::broadcast_one_to_all(values_of(me), false); });
  EXPECT(none.find("0 processes say is_source = true") != std::string::npos);
  std::string const shapes = error_of([&] {
    if (me == 1) (void)tessera::broadcast_one_to_all(xt::xtensor<double, 1>(xt::zeros<double>({std::size_t{5}})));
    else (void)tessera::broadcast_one_to_all(xt::xtensor<double, 1>(xt::zeros<double>({std::size_t{4}})));
  });
  EXPECT(shapes.find("process 0 gives 8-byte elements of shape (4,) and process 1 gives 8-byte elements of shape (5,)") !=
         std::string::npos);
  // After the refusals the processes are still in step.
  EXPECT(tessera::broadcast_one_to_all(xt::xarray<int>(me + 40))() == 40);

  // sync_global_devices: a barrier, so no process leaves it before the last one arrives (the
  // last one here comes 300 ms late; the others' wait is measured from the same start).
  tessera::sync_global_devices("start");
  auto const t0 = std::chrono::steady_clock::now();
  if (me == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  tessera::sync_global_devices("late");
  EXPECT(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(150));
  tessera::sync_global_devices("");
  // Processes at different barriers all throw, naming both.
  std::string const apart = error_of([&] { tessera::sync_global_devices(me == 1 ? "epoch 2" : "epoch 1"); });
  EXPECT(apart.find("process 0 is at the barrier 'epoch 1' and process 1 at 'epoch 2'") != std::string::npos);
  tessera::sync_global_devices("after the mismatch");
}

/// The value every process expects at (i, j) of the global test arrays.
float global_value(std::size_t i, std::size_t j) { return static_cast<float>(i * 10 + j); }

/// Arrays on meshes spanning every process: each process holds its devices' blocks only.
void check_global(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();
  std::size_t const rows_per_process = 4, cols = 3;
  std::size_t const rows = rows_per_process * static_cast<std::size_t>(n);
  auto mesh = tessera::make_mesh<"data">({rt.device_count()});  // process-major: this process's devices are contiguous
  auto const rows_sharding = tessera::named_sharding(mesh, tessera::P<"data", tessera::none>{});
  // make_array_from_process_local_data: this process's 4 rows of the global (4n, 3) array.
  xt::xtensor<float, 2> local = xt::zeros<float>({rows_per_process, cols});
  for (std::size_t i = 0; i < rows_per_process; ++i)
    for (std::size_t j = 0; j < cols; ++j) local(i, j) = global_value(static_cast<std::size_t>(me) * rows_per_process + i, j);
  auto x = tessera::make_array_from_process_local_data(rows_sharding, local, {rows, cols});
  EXPECT(x.is_fully_addressable() == (n == 1));
  auto const shards = x.addressable_shards();
  EXPECT(shards.size() == 2);
  for (std::size_t k = 0; k < shards.size(); ++k) {
    EXPECT(shards[k].device == rt.first_device_id() + static_cast<int>(k));
    std::size_t const r0 = shards[k].index[0].start;
    EXPECT(r0 == static_cast<std::size_t>(me) * rows_per_process + 2 * k);
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < cols; ++j) EXPECT(shards[k].data(i, j) == global_value(r0 + i, j));
  }
  // visualize_array_sharding: drawn by process 0 only.
  std::ostringstream drawn;
  tessera::visualize_array_sharding(x, drawn);
  EXPECT(drawn.str().empty() == (me != 0));
  if (me == 0) EXPECT(drawn.str().find("CPU " + std::to_string(rt.device_count() - 1)) != std::string::npos);
  // Element-wise work on arrays laid out alike needs no other process: each runs its blocks.
  tessera::array y = 2.0f * x + 1.0f;
  // The global value, on every process (tiled: with one process the array is fully addressable
  // and gathered as host-local data, concatenated).
  auto const all = tessera::process_allgather(y, true);
  EXPECT(all.dimension() == 2 && all.shape()[0] == rows && all.shape()[1] == cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) EXPECT(all(i, j) == 2.0f * global_value(i, j) + 1.0f);
  {
    // An array on process 0's devices alone (the mesh of the first 2 devices) is fully
    // addressable there and nowhere else: every process still gets its global value.
    auto const m0 = tessera::make_mesh<"x">({2});
    xt::xtensor<float, 1> const h0{1.0f, 2.0f};
    auto const a0 = tessera::device_put(h0, tessera::named_sharding(m0, tessera::P<"x">{}));
    auto const g0 = tessera::process_allgather(a0);
    EXPECT(g0.size() == 2 && g0.flat(0) == 1.0f && g0.flat(1) == 2.0f);
  }
  // device_put of host data every process has (checked alike in debug builds).
  xt::xtensor<float, 2> host = xt::zeros<float>({rows, cols});
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) host(i, j) = global_value(i, j);
  auto z = tessera::device_put(host, rows_sharding);
  auto const zall = tessera::process_allgather(z, true);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) EXPECT(zall(i, j) == host(i, j));
  // A 2-D mesh over the processes and their devices: (data, model), rows by process and columns by device.
  auto mesh2 = tessera::make_mesh<"data", "model">({n, 2});
  xt::xtensor<float, 2> host2 = xt::zeros<float>({static_cast<std::size_t>(2 * n), std::size_t{4}});
  for (std::size_t i = 0; i < host2.shape()[0]; ++i)
    for (std::size_t j = 0; j < 4; ++j) host2(i, j) = global_value(i, j);
  auto const s2 = tessera::named_sharding(mesh2, tessera::P<"data", "model">{});
  xt::xtensor<float, 2> local2 = xt::view(host2, xt::range(2 * me, 2 * me + 2), xt::all());
  auto w = tessera::make_array_from_process_local_data(s2, local2, {host2.shape()[0], 4});
  tessera::array w2 = w * w;
  auto const wall = tessera::process_allgather(w2, true);
  for (std::size_t i = 0; i < host2.shape()[0]; ++i)
    for (std::size_t j = 0; j < 4; ++j) EXPECT(wall(i, j) == host2(i, j) * host2(i, j));
  // A replicated array is every process's: replicated -> sharded needs no other process.
  auto rep = tessera::device_put(host, tessera::named_sharding(mesh, tessera::P<>{}));
  auto resharded = tessera::device_put(rep, rows_sharding);
  auto const rall = tessera::process_allgather(resharded, true);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) EXPECT(rall(i, j) == host(i, j));
  if (n > 1) {
    // What is not done across processes yet fails with a message, on every process, never a hang.
    EXPECT(error_of([&] { (void)tessera::to_host(x); }).find("process_allgather") != std::string::npos);
    // shard_map over every process's devices: with MPI_THREAD_SERIALIZED (tessera's own
    // initialisation) it runs; under the user's MPI_THREAD_FUNNELED it is refused, saying why.
    auto body = [](auto blk) { return xt::xtensor<float, 2>(blk * blk); };
    auto const sm = tessera::shard_map(body, mesh, tessera::in_specs(tessera::P<"data", tessera::none>{}),
                                       tessera::out_specs(tessera::P<"data", tessera::none>{}));
    if (rt.environment().thread_level() >= MPI_THREAD_SERIALIZED) {
      auto const sq = tessera::process_allgather(sm(x), true);
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) EXPECT(sq(i, j) == host(i, j) * host(i, j));
    } else {
      EXPECT(error_of([&] { (void)sm(x); }).find("needs MPI_THREAD_SERIALIZED") != std::string::npos);
    }
    // Local data of the wrong shape names both shapes.
    xt::xtensor<float, 2> wrong = xt::zeros<float>({rows_per_process + 1, cols});
    EXPECT(error_of([&] { (void)tessera::make_array_from_process_local_data(rows_sharding, wrong, {rows, cols}); })
               .find("gives local data of shape (5, 3) but its devices hold a part of shape (4, 3)") != std::string::npos);
#ifndef NDEBUG
    // Different host data on different processes: debug builds refuse it on every process.
    xt::xtensor<float, 2> differs = host;
    differs(0, 0) = static_cast<float>(me);
    EXPECT(error_of([&] { (void)tessera::device_put(differs, rows_sharding); })
               .find("the host data given to device_put differs between process 0 and process") != std::string::npos);
#endif
  }
}

/// Every addressable shard of `a` holds the global values `value(i, j)` of its slice.
template <class A, class F>
void expect_shards(A const& a, F const& value) {
  for (auto const& sh : a.addressable_shards())
    for (std::size_t i = 0; i < sh.data.shape()[0]; ++i)
      for (std::size_t j = 0; j < sh.data.shape()[1]; ++j)
        EXPECT(sh.data(i, j) == value(sh.index[0].start + i, sh.index[1].start + j));
}

/// Reshards that move blocks between processes (one exchange, point to point), against the
/// values each process computes itself; and the same with the exchange cut into small pieces.
void check_reshard_across(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();
  auto const d = static_cast<std::size_t>(rt.device_count());
  std::size_t const rows = 2 * d, cols = d;
  auto mesh = tessera::make_mesh<"data">({rt.device_count()});
  auto const by_rows = tessera::named_sharding(mesh, tessera::P<"data", tessera::none>{});
  xt::xtensor<float, 2> local = xt::zeros<float>({rows / static_cast<std::size_t>(n), cols});
  for (std::size_t i = 0; i < local.shape()[0]; ++i)
    for (std::size_t j = 0; j < cols; ++j) local(i, j) = global_value(static_cast<std::size_t>(me) * local.shape()[0] + i, j);
  auto x = tessera::make_array_from_process_local_data(by_rows, local, {rows, cols});
  auto value = [](std::size_t i, std::size_t j) { return global_value(i, j); };
  for (std::size_t piece : {std::size_t{0}, std::size_t{8}}) {
    auto const keep = tessera::detail::mpi_max_bytes_per_call.load();
    if (piece != 0) tessera::detail::mpi_max_bytes_per_call.store(piece);  // 8 bytes a message: many pieces
    tessera::collective_counter counter;
    // sharded -> replicated: every process receives the others' rows (an all-gather).
    auto rep = tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<>{}));
    expect_shards(rep, value);
    EXPECT(counter.count("all-gather") == 1);
    // rows -> columns (an all-to-all) and back.
    auto by_cols = tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<tessera::none, "data">{}));
    expect_shards(by_cols, value);
    auto back = tessera::device_put(by_cols, by_rows);
    expect_shards(back, value);
    // A 2-D mesh: (data, model) blocks to (model, data) blocks, and to rows over model only.
    auto mesh2 = tessera::make_mesh<"data", "model">({n, 2});
    auto const s2 = tessera::named_sharding(mesh2, tessera::P<"data", "model">{});
    auto y = tessera::device_put(rep, s2);  // replicated -> sharded: no exchange
    expect_shards(y, value);
    auto t = tessera::device_put(y, tessera::named_sharding(mesh2, tessera::P<"model", "data">{}));
    expect_shards(t, value);
    auto m = tessera::device_put(t, tessera::named_sharding(mesh2, tessera::P<"model", tessera::none>{}));
    expect_shards(m, value);
    // An Auto conflict in an expression moves the right operand the same way.
    tessera::array sum = x + by_cols;
    auto const all = tessera::process_allgather(sum, true);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) EXPECT(all(i, j) == 2.0f * global_value(i, j));
    // Sums between processes: reductions over the sharded rows, and a product contracting them
    // (partial sums combined over the processes, each region sent once).
    auto col_sums = tessera::eval(tessera::sum<0>(x));
    auto row_max = tessera::eval(tessera::max<1>(by_cols));
    auto all_mean = tessera::eval(tessera::mean(x));
    auto gram = tessera::eval(tessera::matmul(tessera::transpose(x), x));  // [cols, cols], contracting the rows
    auto gram_rs = tessera::eval(tessera::matmul(tessera::transpose(x), x, tessera::P<"data", tessera::none>{}));
    double total = 0;
    for (auto const& sh : col_sums.addressable_shards())
      for (std::size_t j = 0; j < cols; ++j) {
        float want = 0;
        for (std::size_t i = 0; i < rows; ++i) want += global_value(i, j);
        EXPECT(sh.data(j) == want);
      }
    for (auto const& sh : row_max.addressable_shards())
      for (std::size_t i = 0; i < sh.data.shape()[0]; ++i)
        EXPECT(sh.data(i) == global_value(sh.index[0].start + i, cols - 1));
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) total += global_value(i, j);
    for (auto const& sh : all_mean.addressable_shards())
      EXPECT(std::abs(double(sh.data()) - total / double(rows * cols)) < 1e-3);
    auto gram_value = [&](std::size_t a, std::size_t b) {
      double g = 0;
      for (std::size_t i = 0; i < rows; ++i) g += double(global_value(i, a)) * double(global_value(i, b));
      return float(g);
    };
    expect_shards(gram, gram_value);
    expect_shards(gram_rs, gram_value);
    tessera::detail::mpi_max_bytes_per_call.store(keep);
  }
  if (n > 1) {
    // Processes in different reshards, in checked mode (the default without NDEBUG): a
    // collective_mismatch on every process naming both, not a hang or bytes read as the wrong
    // layout; afterwards they go on together.
    bool const was_checked = rt.checked_collectives();
    rt.set_checked_collectives(true);
    std::string const e = error_of([&] {
      if (me == 0) (void)tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<>{}));
      else (void)tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<tessera::none, "data">{}));
    });
    EXPECT(e.find("the processes are in different operations between processes: process 0 in a reshard of "
                  "float32(" + std::to_string(rows) + ", " + std::to_string(cols) + ")") != std::string::npos);
    auto again = tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<>{}));
    expect_shards(again, value);
    rt.set_checked_collectives(false);  // unchecked, the same reshard makes only its own messages
    expect_shards(tessera::device_put(x, tessera::named_sharding(mesh, tessera::P<>{})), value);
    rt.set_checked_collectives(was_checked);
  }
}

/// Sums over processes large enough to be split (tessera/array/sum_partials.hpp: each process
/// sums a chunk of the block, then the chunks are gathered), on a mesh whose rows of summing
/// devices hold one or several devices of each process, against sums each process computes.
/// The values are small integers, so every order of summing gives the same floats.
void check_large_sums(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();
  auto const k = static_cast<std::size_t>(rt.local_device_count());
  auto const np = static_cast<std::size_t>(n), d = np * k;
  std::size_t const cols = 70001;  // 280 KiB of floats per block, chunks of unequal length
  auto v = [](std::size_t i, std::size_t j) { return static_cast<float>((i * 7 + j * 3) % 17); };
  auto local_rows = [&](std::size_t rows_here, std::size_t first_row, std::size_t width) {
    xt::xtensor<float, 2> l = xt::zeros<float>({rows_here, width});
    for (std::size_t i = 0; i < rows_here; ++i)
      for (std::size_t j = 0; j < width; ++j) l(i, j) = v(first_row + i, j);
    return l;
  };
  auto column_sum = [&](std::size_t rows, std::size_t j) {
    float s = 0;
    for (std::size_t i = 0; i < rows; ++i) s += v(i, j);
    return s;
  };
  {  // One row of every device (k per process): sum and max over all of them, replicated.
    auto mesh = tessera::make_mesh<"data">({static_cast<int>(d)});
    auto x = tessera::make_array_from_process_local_data(tessera::named_sharding(mesh, tessera::P<"data", tessera::none>{}),
                                                         local_rows(k, static_cast<std::size_t>(me) * k, cols), {d, cols});
    auto s = tessera::eval(tessera::sum<0>(x));
    auto mx = tessera::eval(tessera::max<0>(x));
    EXPECT(s.addressable_shards().size() == k);
    for (auto const& sh : s.addressable_shards())
      for (std::size_t j = 0; j < cols; ++j) EXPECT(sh.data(j) == column_sum(d, j));
    for (auto const& sh : mx.addressable_shards())
      for (std::size_t j = 0; j < cols; ++j) {
        float want = 0;
        for (std::size_t i = 0; i < d; ++i) want = std::max(want, v(i, j));
        EXPECT(sh.data(j) == want);
      }
  }
  {  // A (processes, k) mesh: rows sharded over "data" only, so each "model" column of the mesh
     // sums apart (one device of each process); then blocks over "model" too (chunks of a block
     // that does not start at 0).
    auto mesh2 = tessera::make_mesh<"data", "model">({n, static_cast<int>(k)});
    auto x = tessera::make_array_from_process_local_data(
        tessera::named_sharding(mesh2, tessera::P<"data", tessera::none>{}), local_rows(2, 2 * static_cast<std::size_t>(me), cols),
        {2 * np, cols});
    auto s = tessera::eval(tessera::sum<0>(x));
    for (auto const& sh : s.addressable_shards())
      for (std::size_t j = 0; j < cols; ++j) EXPECT(sh.data(j) == column_sum(2 * np, j));
    std::size_t const wide = k * cols;
    auto y = tessera::make_array_from_process_local_data(
        tessera::named_sharding(mesh2, tessera::P<"data", "model">{}), local_rows(2, 2 * static_cast<std::size_t>(me), wide),
        {2 * np, wide});
    auto sy = tessera::eval(tessera::sum<0>(y));
    for (auto const& sh : sy.addressable_shards()) {
      EXPECT(sh.data.shape()[0] == cols);
      for (std::size_t j = 0; j < cols; ++j) EXPECT(sh.data(j) == column_sum(2 * np, sh.index[0].start + j));
    }
  }
}

/// A training step's gradient (issue 17) on data sharded over every process's devices: the
/// gradient of the replicated weights is summed over the processes, and equals the host's.
void check_grad_across(tessera::distributed::runtime& rt) {
  int const me = rt.process_index(), n = rt.process_count();
  std::size_t const per_process = 6, rows = per_process * static_cast<std::size_t>(n), cols = 3;
  auto mesh = tessera::make_mesh<"data">({rt.device_count()});
  auto const by_rows = tessera::named_sharding(mesh, tessera::P<"data", tessera::none>{});
  auto xv = [](std::size_t i, std::size_t j) { return 0.01f * global_value(i, j) - 0.5f; };
  auto yv = [](std::size_t i) { return (i % 2 == 0) ? 1.0f : 0.0f; };
  xt::xtensor<float, 2> xl = xt::zeros<float>({per_process, cols});
  xt::xtensor<float, 2> yl = xt::zeros<float>({per_process, std::size_t{1}});
  for (std::size_t i = 0; i < per_process; ++i) {
    std::size_t const gi = static_cast<std::size_t>(me) * per_process + i;
    for (std::size_t j = 0; j < cols; ++j) xl(i, j) = xv(gi, j);
    yl(i, 0) = yv(gi);
  }
  auto x = tessera::make_array_from_process_local_data(by_rows, xl, {rows, cols});
  auto y = tessera::make_array_from_process_local_data(by_rows, yl, {rows, std::size_t{1}});
  xt::xtensor<float, 2> wh = {{0.3f}, {-0.2f}, {0.1f}};
  auto w = tessera::device_put(wh, tessera::named_sharding(mesh, tessera::P<>{}));
  auto const [loss, gw] = tessera::value_and_grad([&](auto const& v) {
    auto const d = tessera::sigmoid(tessera::matmul(x, v)) - y;
    return tessera::mean(d * d);
  })(w);
  // The host's gradient of the same loss, in double.
  std::vector<double> g(cols, 0.0);
  double l = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    double z = 0;
    for (std::size_t j = 0; j < cols; ++j) z += double(xv(i, j)) * double(wh(j, 0));
    double const p = 1 / (1 + std::exp(-z)), d = p - double(yv(i));
    l += d * d / double(rows);
    for (std::size_t j = 0; j < cols; ++j) g[j] += 2 * d * p * (1 - p) * double(xv(i, j)) / double(rows);
  }
  for (auto const& sh : gw.addressable_shards())
    for (std::size_t j = 0; j < cols; ++j) EXPECT(std::abs(double(sh.data(j, 0)) - g[j]) < 1e-6);
  for (auto const& sh : loss.addressable_shards()) EXPECT(std::abs(double(sh.data()) - l) < 1e-6);
}

void check_runtime(tessera::distributed::runtime& rt, int world_rank, int world_size) {
  EXPECT(rt.process_index() == world_rank);
  EXPECT(rt.process_count() == world_size);
  EXPECT(tessera::process_index() == world_rank);
  EXPECT(tessera::process_count() == world_size);
  EXPECT(rt.local_device_count() == 2);
  EXPECT(rt.device_count() == 2 * world_size);
  EXPECT(rt.first_device_id() == 2 * world_rank);  // process-major, as JAX numbers devices
  EXPECT(rt.mpi_thread_level() >= MPI_THREAD_FUNNELED);
  EXPECT(tessera::device_count() == 2 * world_size);  // jax.device_count(): every process's
  EXPECT(tessera::local_device_count() == 2);
  EXPECT(tessera::local_devices() == (std::vector<int>{2 * world_rank, 2 * world_rank + 1}));
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(rt.communicator(), MPI_COMM_WORLD, &cmp);
  EXPECT(cmp == MPI_CONGRUENT);  // a duplicate, not MPI_COMM_WORLD itself
  check_gathers(rt);
  check_broadcast_and_sync(rt);
  check_global(rt);
  check_reshard_across(rt);
  check_large_sums(rt);
  check_grad_across(rt);
}

/// Every process's failure count, summed (after the runtime is gone, on MPI_COMM_WORLD).
int total_failures() {
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  bool const user_init = argc > 1 && std::strcmp(argv[1], "user-init") == 0;
  if (user_init) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    tessera_mpi_test::me = world_rank;
    {
      tessera::distributed::runtime rt{2};
      EXPECT(!rt.environment().initialised_here());
      // The user's messages on MPI_COMM_WORLD do not meet tessera's on its duplicate.
      int token = world_rank, got = -1;
      int const next = (world_rank + 1) % world_size, prev = (world_rank + world_size - 1) % world_size;
      MPI_Sendrecv(&token, 1, MPI_INT, next, 0, &got, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      EXPECT(got == prev);
      check_runtime(rt, world_rank, world_size);
      EXPECT(tessera::process_index() == world_rank);
    }
    EXPECT(tessera::process_count() == 1);  // no runtime now
    {
      // Without a runtime this process is the only one: its own values, and no barrier to wait at.
      xt::xtensor<int, 1> const own = xt::arange<int>(3) + world_rank;
      EXPECT(tessera::broadcast_one_to_all(own) == own);
      EXPECT(error_of([&] { (void)tessera::broadcast_one_to_all(own, false); }).find("no process is the source") !=
             std::string::npos);
      tessera::sync_global_devices("alone");
    }
    int finalized = 1;
    MPI_Finalized(&finalized);
    EXPECT(!finalized);  // tessera did not initialise MPI, so it did not finalise it
    {
      tessera::distributed::runtime again{2};  // and a second one works on the same MPI
      check_runtime(again, world_rank, world_size);
    }
    {
      // A process of one device runs its device's tasks on this thread, MPI's main thread: its
      // shard_map collectives work under MPI_THREAD_FUNNELED too (blocking MPI calls), and
      // give what the same sums over the host data give.
      tessera::distributed::runtime one{1};
      auto const mesh = tessera::make_mesh<"p">({world_size});
      xt::xtensor<double, 1> host = xt::arange<double>(static_cast<double>(4 * world_size)) * 0.5;
      auto const x = tessera::device_put(host, tessera::named_sharding(mesh, tessera::P<"p">{}));
      auto const sm = tessera::shard_map([](auto blk) { return tessera::psum<"p">(blk); }, mesh,
                                         tessera::in_specs(tessera::P<"p">{}), tessera::out_specs(tessera::P<>{}));
      auto const total_sum = tessera::process_allgather(sm(x), true);
      EXPECT(total_sum.size() == 4);
      for (std::size_t i = 0; i < 4; ++i) {
        double want = 0;
        for (int r = 0; r < world_size; ++r) want += host(static_cast<std::size_t>(4 * r) + i);
        EXPECT(total_sum(i) == want);
      }
      // Another thread may not communicate under FUNNELED: refused with the reason, not a hang.
      std::string from_other;
      std::thread([&] { from_other = error_of([&] { (void)sm(x); }); }).join();
      EXPECT(from_other.find("MPI_THREAD_FUNNELED") != std::string::npos);
    }
    int const total = total_failures();
    MPI_Finalize();
    if (world_rank == 0) std::printf("distributed_test user-init: %d processes, %d failures\n", world_size, total);
    return total == 0 ? 0 : 1;
  }
  int total = 0;
  int world_rank = 0;
  {
    tessera::distributed::runtime rt{argc, argv, 2};
    EXPECT(rt.environment().initialised_here());
    int world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    tessera_mpi_test::me = world_rank;
    check_runtime(rt, world_rank, world_size);
    total = total_failures();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    std::fprintf(stderr, "process %d: tessera initialised MPI but did not finalise it\n", world_rank);
    return 1;
  }
  if (world_rank == 0) std::printf("distributed_test tessera-init: %d failures\n", total);
  return total == 0 ? 0 : 1;
}
