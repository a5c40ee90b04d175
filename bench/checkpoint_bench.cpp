// Checkpoint speed (issue 34), each figure next to its floor measured in the same run, the two
// alternated so that both see the same load on a shared machine:
//   1. tessera::save of MIB MiB of float32 sharded over 8 devices (rows, P("x", None)) against
//      `dd if=/dev/zero bs=1M conv=fsync` writing as many bytes on the same file system;
//   2. tessera::load of it against `dd of=/dev/null bs=1M` reading the checkpoint file, both with
//      the file out of the page cache (posix_fadvise DONTNEED; cold) and in it (warm); the first
//      load of a process also pays for fresh memory (page faults), reported apart;
//   3. the save with the Fletcher-32 checksum (save_options::checksum), once;
//   4. seed 004's training loop (a linear model, params (1000, 100) float32 sharded P("devices",
//      None), SGD on the mean squared error) for STEPS steps, without saving and with a
//      checkpoint_manager saving every step (skip_while_busy: a save that finds the previous one
//      still being written is skipped), and the same with Orbax's policy (each save waits for the
//      previous one), with the time of one save and one step.
// Reports the median of the ratios of the alternated pairs and their range (the noise).
//   checkpoint_bench DIR [MIB=1024] [REPEATS=5] [STEPS=300]     (MIB=0: only the training loop)
//   LOOP_DEVICES=N: the loop on N devices (default 8; fewer than the cores leaves one for the writer)
// With a parallel HDF5 it runs under mpirun too (mpirun -np 2 checkpoint_bench DIR): each process
// has 8 / np devices, the processes write one file, and process 0 runs dd. bench/run_checkpoint.sh
// runs it next to h5py and Orbax.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <xtensor/xbuilder.hpp>

#include <tessera/array.hpp>
#include <tessera/autodiff.hpp>
#include <tessera/checkpoint.hpp>
#include <tessera/random.hpp>

using tessera::none;
using tessera::P;
using clk = std::chrono::steady_clock;

namespace {

int me = 0;

double seconds_since(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

void barrier() {
#ifdef H5_HAVE_PARALLEL
  MPI_Barrier(MPI_COMM_WORLD);
#endif
}

/// Seconds of `f` on every process (from a barrier to the last one's end).
double timed(std::function<void()> const& f) {
  barrier();
  auto const t = clk::now();
  f();
  barrier();
  return seconds_since(t);
}

/// Seconds of a shell command run by process 0 (the others wait).
double timed_shell(std::string const& cmd) {
  return timed([&] {
    if (me == 0 && std::system(cmd.c_str()) != 0) std::fprintf(stderr, "failed: %s\n", cmd.c_str());
  });
}

/// Drops the file's pages from the page cache (process 0; the file is clean: fsync'd by the save).
void evict(std::string const& path) {
  barrier();
  if (me == 0) {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      ::close(fd);
    }
  }
  barrier();
}

struct ratios {
  std::vector<double> v;
  void add(double r) { v.push_back(r); }
  std::string text() {
    std::sort(v.begin(), v.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.2fx (range %.2f-%.2f over %zu pairs)", v[v.size() / 2], v.front(), v.back(), v.size());
    return buf;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void say(char const* fmt, auto... args) {
  if (me == 0) {
    std::printf(fmt, args...);
    std::fflush(stdout);
  }
}

// Seed 004's model: params (1000, 100), a batch of 32 rows, the mean squared error, SGD at 0.01.
constexpr std::size_t n_in = 1000, n_out = 100, batch = 32;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [MIB] [REPEATS] [STEPS]\n", argv[0]);
    return 2;
  }
  std::string const dir = argv[1];
  std::size_t const mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1024;
  int const repeats = argc > 3 ? std::atoi(argv[3]) : 5;
  int const steps = argc > 4 ? std::atoi(argv[4]) : 300;
#ifdef H5_HAVE_PARALLEL
  char const* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  int const np = size ? std::atoi(size) : 1;
  tessera::distributed::runtime rt(argc, argv, 8 / np);
  me = rt.process_index();
#else
  int const np = 1;
  tessera::runtime rt{8};
#endif
  std::filesystem::create_directories(dir);
  std::string const path = dir + "/bench.h5";
  std::string const dd_file = dir + "/dd.bin";
  std::size_t const cols = 1024;
  std::size_t const rows = mib * (1 << 20) / (cols * sizeof(float));
  auto mesh = tessera::make_mesh<"x">({8});
  auto s = tessera::named_sharding(mesh, P<"x", none>{});
  auto x = tessera::make_array_from_callback(tessera::shape_t<2>{rows, cols}, s, [](auto const& b) {
    // Random values, as a trained model's parameters are (and as run_checkpoint.sh gives Orbax
    // and h5py, Orbax compressing what it writes): a 64-bit LCG per block, seeded by its place.
    xt::xtensor<float, 2> blk = xt::empty<float>({b[0].size(), b[1].size()});
    std::uint64_t state = 0x9e3779b97f4a7c15ULL ^ (b[0].start + 1);
    for (float& v : blk) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      v = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    return blk;
  });
  double const mb = static_cast<double>(rows * cols * sizeof(float)) / 1e6;
  say("%zu MiB float32 over 8 devices, %d process(es); %d alternated pairs\n", mib, np, repeats);

  // 1. Save against dd conv=fsync.
  std::string const dd_write = "dd if=/dev/zero of=" + dd_file + " bs=1M count=" + std::to_string(mib) + " conv=fsync status=none";
  std::string const dd_read = "dd if=" + path + " of=/dev/null bs=1M status=none";
  ratios save_r, cold_r, warm_r;
  std::vector<double> t_save, t_ddw, t_cold, t_ddc, t_warm, t_ddr;
  double first_load = 0, first_dd = 0;
  for (int r = 0; r < (mib > 0 ? repeats : 0); ++r) {
    double const d = timed_shell(dd_write);
    if (me == 0) std::filesystem::remove(dd_file);
    double const t = timed([&] { tessera::save(path, x); });
    t_ddw.push_back(d), t_save.push_back(t), save_r.add(d / t);
    // 2. Load, the file out of the page cache, then in it.
    evict(path);
    double const dc = timed_shell(dd_read);
    evict(path);
    double const lc = timed([&] { auto y = tessera::load(path, x); });
    if (r == 0) {  // the first load of the process: fresh memory (page faults) on top of the reading
      first_load = lc, first_dd = dc;
      continue;
    }
    t_ddc.push_back(dc), t_cold.push_back(lc), cold_r.add(dc / lc);
    double const dw = timed_shell(dd_read);
    double const lw = timed([&] { auto y = tessera::load(path, x); });
    t_ddr.push_back(dw), t_warm.push_back(lw), warm_r.add(dw / lw);
  }
  if (mib > 0) {
  say("save:               tessera %.3f s (%.0f MB/s), dd conv=fsync %.3f s (%.0f MB/s): %s of dd's bandwidth\n",
      median(t_save), mb / median(t_save), median(t_ddw), mb / median(t_ddw), save_r.text().c_str());
  if (!t_cold.empty()) {
    say("load, file on disk: tessera %.3f s (%.0f MB/s), dd %.3f s (%.0f MB/s): %s\n", median(t_cold),
        mb / median(t_cold), median(t_ddc), mb / median(t_ddc), cold_r.text().c_str());
    say("load, file cached:  tessera %.3f s (%.0f MB/s), dd %.3f s (%.0f MB/s): %s\n", median(t_warm),
        mb / median(t_warm), median(t_ddr), mb / median(t_ddr), warm_r.text().c_str());
  }
  say("first load of the process (into fresh memory, file on disk): %.3f s (%.0f MB/s), dd %.3f s: %.2fx\n", first_load,
      mb / first_load, first_dd, first_dd / first_load);

  // 3. With the checksum.
  {
    double const t = timed([&] { tessera::save(path, x, {.checksum = true}); });
    double const l = timed([&] { auto y = tessera::load(path, x); });
    say("with the Fletcher-32 checksum: save %.3f s (%.0f MB/s), load %.3f s (%.0f MB/s)\n", t, mb / t, l, mb / l);
  }
  barrier();
  if (me == 0) std::filesystem::remove(path);
  }

  // 4. Seed 004's training loop, saving every step.
  {
    namespace jr = tessera::random;
    // LOOP_DEVICES (default 8): the loop's mesh. Fewer devices than cores leaves a core free for
    // the writing thread and the kernel's I/O, what a machine with more cores than devices has.
    char const* loop_env = std::getenv("LOOP_DEVICES");
    int const loop_devices = loop_env ? std::atoi(loop_env) : 8;
    auto const m = tessera::make_mesh<"devices">({loop_devices});
    auto const rows_s = tessera::named_sharding(m, P<"devices", none>{});
    auto const [k1, k2] = jr::split(jr::PRNGKey(42));
    auto const xb = tessera::device_put(xt::xtensor<float, 2>(jr::normal(k1, tessera::shape_t<2>{batch, n_in})), rows_s);
    auto const yb = tessera::device_put(xt::xtensor<float, 2>(jr::normal(k2, tessera::shape_t<2>{batch, n_out})), rows_s);
    auto const loss_fn = [](auto const& p, auto const& xs, auto const& ys) {
      auto const d = tessera::matmul(xs, p) - ys;
      return tessera::mean(d * d);
    };
    auto fresh = [&] { return tessera::device_put(xt::xtensor<float, 2>(xt::ones<float>({n_in, n_out})), rows_s); };
    float last = 0;
    auto step = [&](auto& p) {
      auto const [loss, g] = tessera::value_and_grad(loss_fn)(p, xb, yb);
      p = p - 0.01f * g;
      last = loss.addressable_shards().front().data.data()[0];  // (to_host refuses arrays across processes)
    };
    // One save and one step, alone.
    std::string const mdir = dir + "/mgr";
    std::vector<double> t_one_save, t_one_step;
    {
      auto p = fresh();
      for (int i = 0; i < 5; ++i) t_one_step.push_back(timed([&] { step(p); }));
      tessera::checkpoint_manager mgr{mdir, {.max_to_keep = 2}};
      for (int i = 0; i < 5; ++i)
        t_one_save.push_back(timed([&] {
          mgr.save(i, p);
          mgr.wait();
        }));
    }
    auto clean = [&] {
      barrier();
      if (me == 0) std::filesystem::remove_all(mdir);
      barrier();
    };
    clean();
    double in_save = 0;  // seconds inside checkpoint_manager::save, over the skip_while_busy loops
    std::vector<double> final_wait;
    // Mode 3's minimum_interval: ten times one save, so that the saves' I/O takes at most a tenth
    // of the loop's time (Orbax's ContinuousCheckpointingPolicy(minimum_interval_secs)).
    auto const interval = std::chrono::duration<double>(10 * median(t_one_save));
    // 0: no saving; 1: every step, skip_while_busy; 2: every step, Orbax's wait; 3: 1 with minimum_interval
    auto loop = [&](int mode) {
      auto p = fresh();
      std::unique_ptr<tessera::checkpoint_manager> mgr;
      if (mode) {
        tessera::checkpoint_manager_options o{.max_to_keep = 2, .skip_while_busy = mode != 2};
        if (mode == 3) o.minimum_interval = interval;
        mgr = std::make_unique<tessera::checkpoint_manager>(mdir, o);
      }
      int written = 0;
      double const t = timed([&] {
        for (int i = 0; i < steps; ++i) {
          step(p);
          if (mgr) {
            auto const t0 = clk::now();
            written += mgr->save(i, p, /*force=*/i == steps - 1) ? 1 : 0;
            if (mode == 1) in_save += seconds_since(t0);
          }
        }
      });
      // The last step's checkpoint on disk: the forced save's write (once per run, not per step).
      double const tail = timed([&] {
        if (mgr) mgr->wait();
      });
      mgr.reset();
      clean();
      if (mode == 1) final_wait.push_back(tail);
      return std::make_pair(t, written);
    };
    // `repeats` pairs of the loop without saving and with `mode`, ABBA (neither runs first in every pair).
    struct paired {
      ratios r;
      std::vector<double> plain, with;
      int written = 0;
    };
    auto alternated = [&](int mode) {
      paired p;
      for (int r = 0; r < repeats; ++r) {
        double a = 0, b = 0;
        if (r % 2 == 0) {
          a = loop(0).first;
          std::tie(b, p.written) = loop(mode);
        } else {
          std::tie(b, p.written) = loop(mode);
          a = loop(0).first;
        }
        p.plain.push_back(a), p.with.push_back(b), p.r.add(b / a);
      }
      return p;
    };
    paired skip = alternated(1);
    ratios wait_r;
    std::vector<double> t_wait;
    for (int r = 0; r < std::min(repeats, 2); ++r) {
      double const a = loop(0).first;
      double const c = loop(2).first;
      t_wait.push_back(c), wait_r.add(c / a);
    }
    paired spaced = alternated(3);
    say("seed 004's loop on %d devices, %d steps: one step %.2f ms, one save %.2f ms (save + wait)\n", loop_devices, steps,
        median(t_one_step) * 1e3, median(t_one_save) * 1e3);
    say("  without saving %.3f s; saving every step (skip_while_busy) %.3f s: %s the time, %d of %d steps written;\n"
        "  %.1f ms per loop inside save() (the copies, the starts, the checks); then %.1f ms for the last step's\n"
        "  checkpoint to be on disk (wait() after the forced save, once per run, not counted above)\n",
        median(skip.plain), median(skip.with), skip.r.text().c_str(), skip.written, steps, in_save / repeats * 1e3,
        median(final_wait) * 1e3);
    say("  saving every step, each save waiting for the previous (Orbax's policy): %.3f s: %s the time\n",
        median(t_wait), wait_r.text().c_str());
    say("  saving every step, skip_while_busy and minimum_interval %.1f ms (ten saves): %.3f s: %s the time, %d of %d steps written\n",
        interval.count() * 1e3, median(spaced.with), spaced.r.text().c_str(), spaced.written, steps);
    say("  final loss %.6f\n", static_cast<double>(last));
  }
  return 0;
}
