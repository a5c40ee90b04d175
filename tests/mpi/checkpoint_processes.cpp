// Checkpoints across processes (issue 34): run under mpirun by tests/mpi/checkpoint_sequence.cmake.
//   checkpoint_processes K save DIR     every process writes its devices' blocks of tree A into
//                                       DIR/ckpt.h5 through parallel HDF5 (MPI-IO), collectively;
//                                       then reads it back into other shardings and a manager round
//   checkpoint_processes K load DIR     reads DIR/ckpt.h5 (saved by another number of processes)
//                                       into several shardings, each process its own blocks, and
//                                       checks every element bit for bit against A's formula
//   checkpoint_processes K kill DIR     starts saving tree B over DIR/ckpt.h5; process 1 kills
//                                       itself (SIGKILL) after writing its first leaf
// K is the number of devices of each process. Exit status 0 when every check holds.

#include <tessera/distributed.hpp>  // first: it includes <mpi.h> without MPI's C++ bindings

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <utility>

#include <tessera/array.hpp>
#include <tessera/checkpoint.hpp>

#include "mpi_expect.hpp"

namespace {

using tessera_mpi_test::failures;
using tessera_mpi_test::me;

using tessera::none;
using tessera::P;

/// Element (i, j) of leaf `leaf` of tree `seed`: values whose bits differ between A and B.
template <class T>
T value(int seed, int leaf, std::size_t i, std::size_t j) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(seed * 1000 + leaf * 100) + static_cast<T>(i) * T(0.1) + static_cast<T>(j) / T(3);
  else
    return static_cast<T>(seed * 1000000 + leaf * 10000 + static_cast<int>(i * 100 + j));
}

template <class T, std::size_t N, class S>
auto make(int seed, int leaf, tessera::shape_t<N> shape, S const& s) {
  return tessera::make_array_from_callback(shape, s, [&](std::array<tessera::slice, N> const& b) {
    auto out = xt::xtensor<T, N>::from_shape(tessera::detail::block_shape(b));
    if constexpr (N == 1) {
      for (std::size_t i = 0; i < b[0].size(); ++i) out(i) = value<T>(seed, leaf, b[0].start + i, 0);
    } else {
      for (std::size_t i = 0; i < b[0].size(); ++i)
        for (std::size_t j = 0; j < b[1].size(); ++j) out(i, j) = value<T>(seed, leaf, b[0].start + i, b[1].start + j);
    }
    return out;
  });
}

/// Every addressable element of x equals leaf `leaf` of tree `seed`, bit for bit.
template <class T, std::size_t N, class S>
void check(tessera::array<T, N, S> const& x, int seed, int leaf) {
  for (auto const& sh : x.addressable_shards()) {
    std::size_t k = 0;
    auto const& b = sh.index;
    if constexpr (N == 1) {
      for (std::size_t i = 0; i < b[0].size(); ++i, ++k) {
        T const want = value<T>(seed, leaf, b[0].start + i, 0);
        EXPECT(std::memcmp(&sh.data.data()[k], &want, sizeof(T)) == 0);
      }
    } else {
      for (std::size_t i = 0; i < b[0].size(); ++i)
        for (std::size_t j = 0; j < b[1].size(); ++j, ++k) {
          T const want = value<T>(seed, leaf, b[0].start + i, b[1].start + j);
          EXPECT(std::memcmp(&sh.data.data()[k], &want, sizeof(T)) == 0);
        }
    }
  }
}

/// Tree `seed` over every device: a matrix sharded by rows (37 rows: uneven; rows of 16400
/// bytes, so its blocks are written with pwrite/O_DIRECT at HDF5's offsets, their edges in pages
/// that two processes share), a replicated vector, and an int64 matrix sharded by columns.
auto make_tree(int seed, int devices) {
  auto m = tessera::make_mesh<"x">({devices});
  return std::make_tuple(make<float, 2>(seed, 0, {37, 4100}, tessera::named_sharding(m, P<"x", none>{})),
                         std::make_pair(make<float, 1>(seed, 1, {16}, tessera::named_sharding(m, P<>{})),
                                        make<std::int64_t, 2>(seed, 2, {6, 20}, tessera::named_sharding(m, P<none, "x">{}))));
}

/// Reads `path` into other shardings and checks tree `seed`.
void load_and_check(std::string const& path, int seed, int devices) {
  using tessera::shape_dtype;
  // Restored as saved (when the device count matches the save's) is covered by `save`; here:
  // another spec, a 2-d mesh, and a mesh of process 0's devices only.
  auto m = tessera::make_mesh<"x">({devices});
  auto t1 = tessera::load(path, std::make_tuple(shape_dtype<float, 2>(tessera::named_sharding(m, P<none, "x">{})),
                                                std::make_pair(shape_dtype<float, 1>(tessera::named_sharding(m, P<"x">{})),
                                                               shape_dtype<std::int64_t, 2>(tessera::named_sharding(m, P<"x", none>{})))));
  check(std::get<0>(t1), seed, 0);
  check(std::get<1>(t1).first, seed, 1);
  check(std::get<1>(t1).second, seed, 2);
  if (devices % 2 == 0) {
    auto m2 = tessera::make_mesh<"a", "b">({2, devices / 2});
    auto w = tessera::load<float, 2>(path, "0", tessera::named_sharding(m2, P<"b", "a">{}));
    check(w, seed, 0);
  }
  auto m0 = tessera::make_mesh<"z">({1}, std::vector<int>{0});
  auto n = tessera::load<std::int64_t, 2>(path, "1/1", tessera::named_sharding(m0, P<"z">{}));
  check(n, seed, 2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s K save|load|kill DIR\n", argv[0]);
    return 2;
  }
  int const k = std::atoi(argv[1]);
  std::string const mode = argv[2];
  std::string const dir = argv[3];
  tessera::distributed::runtime rt(argc, argv, k);
  me = rt.process_index();
  int const devices = rt.device_count();
  std::string const path = dir + "/ckpt.h5";

  if (mode == "save") {
    auto const a = make_tree(1, devices);
    tessera::save(path, a);
    EXPECT(std::filesystem::exists(path));
    EXPECT(!std::filesystem::exists(path + ".tessera-tmp"));
    auto const same = tessera::load(path, a);
    check(std::get<0>(same), 1, 0);
    check(std::get<1>(same).first, 1, 1);
    check(std::get<1>(same).second, 1, 2);
    load_and_check(path, 1, devices);
    // The manager across processes: numbered checkpoints, the newest two kept.
    {
      tessera::checkpoint_manager mgr{dir + "/mgr", {.max_to_keep = 2}};
      for (int step = 1; step <= 3; ++step) EXPECT(mgr.save(step, make_tree(step, devices)));
      mgr.wait();
      EXPECT(mgr.all_steps() == (std::vector<std::int64_t>{2, 3}));
      auto const r = mgr.restore(2, a);
      check(std::get<0>(r), 2, 0);
      check(std::get<1>(r).second, 2, 2);
    }
    // skip_while_busy across processes: the processes agree on which steps they skip (else their
    // collective calls would not match and the job would hang); the forced last step is saved.
    {
      tessera::checkpoint_manager mgr{dir + "/skip", {.max_to_keep = 0, .skip_while_busy = true}};
      int taken = 0;
      for (int step = 1; step <= 12; ++step) taken += mgr.save(step, make_tree(step, devices), step == 12) ? 1 : 0;
      mgr.wait();
      auto const steps = mgr.all_steps();
      EXPECT(static_cast<int>(steps.size()) == taken);
      EXPECT(!steps.empty() && steps.back() == 12);
      auto const r = mgr.restore(12, a);
      check(std::get<0>(r), 12, 0);
      check(std::get<1>(r).second, 12, 2);
    }
    // minimum_interval across processes, with Orbax's policy (a blocking agreement) and with
    // skip_while_busy (the posted one): every process skips the same steps.
    for (bool const skip : {false, true}) {
      tessera::checkpoint_manager_options o{.max_to_keep = 0, .skip_while_busy = skip};
      o.minimum_interval = std::chrono::hours(1);
      tessera::checkpoint_manager mgr{dir + (skip ? "/interval_skip" : "/interval_wait"), o};
      EXPECT(mgr.save(1, make_tree(1, devices)));
      mgr.wait();
      for (int step = 2; step <= 4; ++step) EXPECT(!mgr.save(step, make_tree(step, devices)));
      EXPECT(mgr.save(5, make_tree(5, devices), /*force=*/true));
      mgr.wait();
      EXPECT(mgr.all_steps() == (std::vector<std::int64_t>{1, 5}));
      check(std::get<0>(mgr.restore(5, a)), 5, 0);
    }
  } else if (mode == "load") {
    load_and_check(path, 1, devices);
    // The save that was killed left its temporary file; the checkpoint itself is A.
    if (me == 0) std::printf("temporary file of the killed save %s\n",
                             std::filesystem::exists(path + ".tessera-tmp") ? "present" : "absent");
  } else if (mode == "kill") {
    auto const b = make_tree(2, devices);
    tessera::save_options o;
    o.on_leaf_written = [&](std::string const& leaf) {
      if (me == 1 && leaf == "0") {
        std::fprintf(stderr, "process 1 kills itself in the middle of the save (after leaf '0')\n");
        std::raise(SIGKILL);
      }
    };
    tessera::save(path, b, o);
    std::fprintf(stderr, "process %d: the save finished although process 1 was killed\n", me);
    return 3;
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (failures) std::fprintf(stderr, "process %d: %d checks failed\n", me, failures);
  else if (me == 0) std::printf("%s: every check passed (%d processes x %d devices)\n", mode.c_str(), rt.process_count(), k);
  return failures ? 1 : 0;
}
