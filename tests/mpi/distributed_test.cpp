// tessera/distributed.hpp under mpirun (ctest label mpi; tests/CMakeLists.txt runs it with 2 and
// 3 processes). Each process checks its own results against values it computes itself from the
// process count; every process then reports its failures to the others, and the test fails if
// any process failed.
//
//   distributed_test user-init   the program initialises MPI itself: tessera must neither
//                                finalise it nor disturb MPI_COMM_WORLD
//   distributed_test tessera-init tessera initialises MPI and finalises it
#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include <tessera/tessera.hpp>

namespace {

int failures = 0;
int rank_for_messages = -1;

#define EXPECT(cond)                                                                              \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      ++failures;                                                                                 \
      std::fprintf(stderr, "process %d: %s:%d: failed: %s\n", rank_for_messages, __FILE__, __LINE__, #cond); \
    }                                                                                             \
  } while (0)

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
  auto mesh = tessera::make_mesh<"x">({rt.local_device_count()});
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

void check_runtime(tessera::distributed::runtime& rt, int world_rank, int world_size) {
  EXPECT(rt.process_index() == world_rank);
  EXPECT(rt.process_count() == world_size);
  EXPECT(tessera::process_index() == world_rank);
  EXPECT(tessera::process_count() == world_size);
  EXPECT(rt.local_device_count() == 2);
  EXPECT(rt.device_count() == 2 * world_size);
  EXPECT(rt.first_device_id() == 2 * world_rank);  // process-major, as JAX numbers devices
  EXPECT(rt.mpi_thread_level() >= MPI_THREAD_FUNNELED);
  EXPECT(tessera::device_count() == 2);  // meshes are still made of this process's devices
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(rt.communicator(), MPI_COMM_WORLD, &cmp);
  EXPECT(cmp == MPI_CONGRUENT);  // a duplicate, not MPI_COMM_WORLD itself
  check_gathers(rt);
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
    rank_for_messages = world_rank;
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
    int finalized = 1;
    MPI_Finalized(&finalized);
    EXPECT(!finalized);  // tessera did not initialise MPI, so it did not finalise it
    {
      tessera::distributed::runtime again{2};  // and a second one works on the same MPI
      check_runtime(again, world_rank, world_size);
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
    rank_for_messages = world_rank;
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
