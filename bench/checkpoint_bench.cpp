// Checkpoint bandwidth (issue 34): tessera::save and tessera::load of MIB MiB of float32 sharded
// over 8 devices (rows, P("x", None)), with and without the per-chunk checksum, and the training
// loop of seed 004 with a checkpoint_manager saving every step against the loop without saving.
// bench/run_checkpoint.sh runs it next to dd (conv=fsync), h5py and Orbax on the same file system.
//   checkpoint_bench DIR [MIB=1024] [REPEATS=3]
// With a parallel HDF5 it runs under mpirun too (mpirun -np 2 checkpoint_bench DIR): each process
// has 8 / np devices and the processes write one file collectively.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <xtensor/xbuilder.hpp>

#include <tessera/array.hpp>
#include <tessera/checkpoint.hpp>

using tessera::none;
using tessera::P;
using clk = std::chrono::steady_clock;

namespace {
double seconds(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [MIB] [REPEATS]\n", argv[0]);
    return 2;
  }
  std::string const dir = argv[1];
  std::size_t const mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1024;
  int const repeats = argc > 3 ? std::atoi(argv[3]) : 3;
#ifdef H5_HAVE_PARALLEL
  int np = 1;
  {
    int init = 0;
    MPI_Initialized(&init);
    char const* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    np = size ? std::atoi(size) : 1;
  }
  tessera::distributed::runtime rt(argc, argv, 8 / np);
  int const me = rt.process_index();
#else
  int const np = 1, me = 0;
  tessera::runtime rt{8};
#endif
  std::filesystem::create_directories(dir);
  std::string const path = dir + "/bench.h5";
  std::size_t const cols = 1024;
  std::size_t const rows = mib * (1 << 20) / (cols * sizeof(float));
  auto mesh = tessera::make_mesh<"x">({8});
  auto s = tessera::named_sharding(mesh, P<"x", none>{});
  auto x = tessera::make_array_from_callback(tessera::shape_t<2>{rows, cols}, s, [](auto const& b) {
    return xt::xtensor<float, 2>(xt::ones<float>({b[0].size(), b[1].size()}) * static_cast<float>(b[0].start));
  });
  double const bytes = static_cast<double>(rows * cols * sizeof(float));
  for (bool checksum : {false, true}) {
    double best_save = 1e9, best_load = 1e9;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = clk::now();
      tessera::save(path, x, {.checksum = checksum});
      best_save = std::min(best_save, seconds(t0));
      t0 = clk::now();
      auto y = tessera::load(path, x);
      best_load = std::min(best_load, seconds(t0));
    }
    if (me == 0)
      std::printf("tessera %zu MiB float32, 8 devices, %d process(es), checksum %s: save %.3f s (%.0f MB/s), load %.3f s (%.0f MB/s)\n",
                  mib, np, checksum ? "on " : "off", best_save, bytes / best_save / 1e6, best_load, bytes / best_load / 1e6);
  }
  std::filesystem::remove(path);
  return 0;
}
