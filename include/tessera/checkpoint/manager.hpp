#pragma once
// checkpoint_manager: orbax.checkpoint.CheckpointManager with async checkpointing. save(step,
// tree) copies this process's blocks to host memory and returns; a thread of its own writes
// them (tessera::save's format and commit) while the training loop runs its next steps, then
// deletes the checkpoints beyond max_to_keep. wait() waits; destruction waits too, so no save in
// flight is lost.

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <regex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/checkpoint/hdf5_file.hpp"
#include "tessera/checkpoint/load.hpp"
#include "tessera/checkpoint/save.hpp"

namespace tessera {

/// orbax.checkpoint.CheckpointManagerOptions (the part tessera has).
struct checkpoint_manager_options {
  /// max_to_keep: the newest checkpoints kept; older ones are deleted after each save. 0 keeps all (None).
  std::size_t max_to_keep = 0;
  /// enable_async_checkpointing: write in a background thread (docs/checkpoints.md, "In the background").
  bool enable_async_checkpointing = true;
  /// What save(step, tree) does while the previous save is still being written: false (Orbax's
  /// way) waits for it; true skips the step (save returns false and copies nothing), so a loop that
  /// saves every step never waits for the disk, and the checkpoints on disk are as new as the
  /// disk's speed allows. save(step, tree, /*force=*/true) waits in either case (the last step).
  bool skip_while_busy = false;
  /// ContinuousCheckpointingPolicy(minimum_interval_secs=...): a save that starts less than this
  /// after the previous one started is skipped as well (save returns false; `force` still saves),
  /// which bounds what the checkpoints cost the file system and the loop (docs/checkpoints.md,
  /// "Saving every step"). Zero (the default): back-to-back saves, as Orbax's None.
  std::chrono::duration<double> minimum_interval{0};
  /// How each checkpoint is written (checksums, progress).
  save_options save{};
};

/// orbax.checkpoint.CheckpointManager(directory, options): numbered checkpoints `<dir>/<step>.h5`.
class checkpoint_manager {
 public:
  /// CheckpointManager(directory, options=CheckpointManagerOptions(...)); the folder is made if missing.
  explicit checkpoint_manager(std::filesystem::path dir, checkpoint_manager_options options = {})
      : dir_(std::move(dir)), options_(std::move(options)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec && !std::filesystem::is_directory(dir_))
      throw checkpoint_error("tessera::checkpoint_manager: cannot make the folder '" + dir_.string() + "': " + ec.message());
  }
  checkpoint_manager(checkpoint_manager const&) = delete;
  checkpoint_manager& operator=(checkpoint_manager const&) = delete;
  /// Waits for the save in flight and commits it (its error, if any, is printed: a destructor cannot throw it).
  ~checkpoint_manager() {
    try {
      wait();
    } catch (std::exception const& e) {
      std::fprintf(stderr, "tessera::checkpoint_manager: the last save failed: %s\n", e.what());
    }
    drop_busy_sample();
  }

  /// manager.save(step, tree, force=False): copies this process's blocks of `tree` to host memory
  /// and returns while a background thread writes `<dir>/<step>.h5`. Returns false (and saves
  /// nothing) for a step not newer than the latest, as Orbax's should_save, and, with
  /// skip_while_busy (unless `force`), while the previous save is still being written. Otherwise
  /// it first waits for the previous save. Every process of a distributed runtime calls it alike.
  template <class Tree>
  bool save(std::int64_t step, Tree const& tree, bool force = false) {
    auto group = detail::current_checkpoint_group();
    if (!options_.skip_while_busy && !force && options_.minimum_interval.count() > 0) {
      // Every process skips alike: a step is skipped where any process finds it too soon.
      bool soon = too_soon();
      if (group.across()) {
        auto const lock = group.lock();
        soon = detail::max_over_processes(group, soon ? 1 : 0) != 0;
      }
      if (soon) return false;
    }
    if (options_.skip_while_busy) {
      // Across processes the agreement on "busy" is the one posted at the end of the last call
      // (a nonblocking MPI_Iallreduce): no blocking collective in a step that skips.
      bool const any_busy = busy(group);
      struct post_sample {
        checkpoint_manager& m;
        detail::checkpoint_group const& g;
        ~post_sample() { m.post_busy_sample(g); }
      } const post{*this, group};
      if (any_busy && !force) return false;
      return start_save(step, tree, group);
    }
    return start_save(step, tree, group);
  }

  /// manager.wait_until_finished(): waits for the save in flight (across processes, commits it)
  /// and throws its error, if it failed.
  void wait() {
    restore_priority();
    if (worker_.joinable()) worker_.join();
    if (last_) spare_ = std::move(std::exchange(last_, nullptr)->host);
    if (auto job = std::exchange(committing_, nullptr)) {
      try {
        detail::finish_checkpoint(job->path, job->group, job->error, "checkpoint_manager::save");
        remove_old(job->group);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
    rethrow();
  }

 private:
  template <class Tree>
  bool start_save(std::int64_t step, Tree const& tree, detail::checkpoint_group const& group) {
    wait();
    if (auto latest = latest_step(); latest && step <= *latest) return false;
    last_start_ = std::chrono::steady_clock::now();
    auto job = std::make_shared<pending>();
    job->path = path_of(step).string();
    job->plans = detail::plan_tree(tree, job->path);
    std::size_t k = 0;
    for (auto& p : job->plans) {
      for (auto& b : p.blocks) {  // the copy to host: the arrays may change as soon as save returns
        std::size_t bytes = p.element_size;
        for (auto c : b.count) bytes *= static_cast<std::size_t>(c);
        // The previous save's buffers where they fit: a loop that saves every step pays no page faults.
        host_buffer h;
        if (k < spare_.size() && spare_[k].bytes == bytes) h = std::move(spare_[k]);
        else h = {bytes, host_bytes(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{detail::raw_align()})))};
        ++k;
        std::memcpy(h.data.get(), b.data, bytes);
        b.data = h.data.get();
        job->host.push_back(std::move(h));
      }
    }
    spare_.clear();
    last_ = job;
    job->group = group;
    char const* const op = "checkpoint_manager::save";
    if (!options_.enable_async_checkpointing) {
      run(*job);
      rethrow();
    } else if (!group.across()) {
      done_ = false;
      worker_ = std::thread([this, job] {
        lower_priority();
        run(*job);
      });
    } else {
      // Across processes the thread makes no MPI call (docs/checkpoints.md): HDF5's collective
      // part (the file, the datasets, the leaves that go through H5Dwrite) happens here, the
      // arrays' bytes in the thread, and the commit (the processes agree, process 0 renames) at
      // the next wait(), save() or restore(), or in the destructor.
      job->offsets = detail::begin_checkpoint(job->path, group, job->plans, options_.save, op);
      committing_ = job;
      worker_ = std::thread([this, job] {
        lower_priority();
        try {
          job->error = detail::write_raw_leaves(detail::temporary_path(job->path), job->plans, job->offsets,
                                                options_.save, job->path, "checkpoint_manager::save");
        } catch (std::exception const& e) {
          job->error = e.what();
        }
        job->done = true;
      });
    }
    return true;
  }

 public:
  /// manager.latest_step(): the newest step saved and committed, or none.
  std::optional<std::int64_t> latest_step() const {
    auto s = all_steps();
    if (s.empty()) return std::nullopt;
    return s.back();
  }
  /// manager.all_steps(), ascending (unfinished temporary files are not steps).
  std::vector<std::int64_t> all_steps() const {
    std::vector<std::int64_t> out;
    std::error_code ec;
    static std::regex const name(R"(([0-9]+)\.h5)");
    for (auto const& e : std::filesystem::directory_iterator(dir_, ec)) {
      std::smatch m;
      std::string const f = e.path().filename().string();
      if (std::regex_match(f, m, name)) out.push_back(std::stoll(m[1].str()));
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  /// manager.restore(step, args=target): waits for a save in flight, then load(path_of(step), target).
  template <class Target>
  auto restore(std::int64_t step, Target const& target) {
    wait();
    return load(path_of(step).string(), target);
  }
  /// The file of `step`: `<dir>/<step>.h5`.
  std::filesystem::path path_of(std::int64_t step) const { return dir_ / (std::to_string(step) + ".h5"); }
  /// manager.directory
  std::filesystem::path const& directory() const { return dir_; }

 private:
  /// The host copies start on raw_writer's unit (a page), as device_memory's large blocks do, so
  /// that it writes them with O_DIRECT straight from them rather than through its bounce buffer.
  struct aligned_delete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{detail::raw_align()}); }
  };
  using host_bytes = std::unique_ptr<std::byte[], aligned_delete>;
  struct host_buffer {
    std::size_t bytes = 0;
    host_bytes data;
  };
  struct pending {
    std::vector<detail::leaf_plan> plans;
    std::vector<host_buffer> host;
    std::vector<std::uint64_t> offsets;  // across processes: from begin_checkpoint
    std::string error;                   // across processes: the thread's, committed by wait()
    std::atomic<bool> done{false};
    detail::checkpoint_group group;
    std::string path;
  };

  /// With skip_while_busy the training loop never waits for the writing thread, which then runs at
  /// SCHED_IDLE (Linux, per thread): it takes only the CPU time the cores leave and never preempts
  /// a device thread (the slowest of which ends a step); the disk sets its pace anyway. With the
  /// default policy the loop waits for it, so it keeps the loop's priority.
  void lower_priority() const {
#ifdef __linux__
    if (options_.skip_while_busy) {
      sched_param none{};
      (void)::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &none);
    }
#endif
  }
  /// Before waiting for it: the writing thread back at the normal policy (allowed from SCHED_IDLE
  /// within RLIMIT_NICE; where refused, the wait is only longer).
  void restore_priority() {
#ifdef __linux__
    if (options_.skip_while_busy && worker_.joinable()) {
      sched_param none{};
      (void)::pthread_setschedparam(worker_.native_handle(), SCHED_OTHER, &none);
    }
#endif
  }

  /// Whether a save is still being written, on this process or (agreed in one collective call
  /// from the thread that saves) on any process, so that all of them skip the step together.
  bool busy(detail::checkpoint_group const& g) {
    if (!g.across()) return busy_here();
#ifdef H5_HAVE_PARALLEL
    auto const lock = g.lock();
    if (sample_.pending) {  // posted at the end of the last save(): all processes sampled then
      MPI_Wait(&sample_.request, MPI_STATUS_IGNORE);
      sample_.pending = false;
      if (sample_.comm == g.comm) return sample_.any != 0;
    }
#endif
    return detail::max_over_processes(g, busy_here() ? 1 : 0) != 0;
  }
  /// A save in flight here, or (minimum_interval) the last one started too recently.
  bool busy_here() const {
    return too_soon() || (worker_.joinable() && !(committing_ ? committing_->done.load() : done_.load()));
  }
  /// Whether less than minimum_interval has passed since the last save started.
  bool too_soon() const {
    return options_.minimum_interval.count() > 0 && last_start_ &&
           std::chrono::steady_clock::now() - *last_start_ < options_.minimum_interval;
  }
  /// The next call's answer to busy(), across processes: each process's state now, reduced without
  /// blocking (every process calls save() at the same points, so the collectives match). A save in
  /// flight now that finishes before the next call still counts as busy then: the step is skipped.
  void post_busy_sample(detail::checkpoint_group const& g) noexcept {
#ifdef H5_HAVE_PARALLEL
    if (!g.across() || sample_.pending) return;
    auto const lock = g.lock();
    sample_.mine = busy_here() ? 1 : 0;
    sample_.comm = g.comm;
    sample_.pending =
        MPI_Iallreduce(&sample_.mine, &sample_.any, 1, MPI_INT, MPI_MAX, g.comm, &sample_.request) == MPI_SUCCESS;
#else
    (void)g;
#endif
  }
  /// Completes a posted sample (before MPI goes; the destructor).
  void drop_busy_sample() noexcept {
#ifdef H5_HAVE_PARALLEL
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (sample_.pending && !finalized) MPI_Wait(&sample_.request, MPI_STATUS_IGNORE);
    sample_.pending = false;
#endif
  }

  /// The whole save, in one thread (one process, or without async checkpointing).
  void run(pending& job) {
    try {
      detail::write_checkpoint(job.path, job.group, job.plans, options_.save, "checkpoint_manager::save");
      remove_old(job.group);
    } catch (...) {
      error_ = std::current_exception();
    }
    done_ = true;
  }

  /// Deletes the checkpoints beyond max_to_keep (process 0), then every process goes on (so that
  /// all of them list the same steps).
  void remove_old(detail::checkpoint_group const& g) {
    if (g.rank == 0 && options_.max_to_keep > 0) {
      auto steps = all_steps();
      for (std::size_t i = 0; i + options_.max_to_keep < steps.size(); ++i) {
        std::error_code ec;
        std::filesystem::remove(path_of(steps[i]), ec);
      }
    }
    if (g.across()) {
      auto const lock = g.lock();
      detail::barrier(g);
    }
  }

  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  std::filesystem::path dir_;
  checkpoint_manager_options options_;
  std::thread worker_;
  std::atomic<bool> done_{true};          // the one-thread save has finished
  std::shared_ptr<pending> committing_;   // across processes: written by the thread, not yet committed
  std::shared_ptr<pending> last_;         // the save started last (its host buffers are reused)
  std::vector<host_buffer> spare_;        // the host buffers of the save before, once written
#ifdef H5_HAVE_PARALLEL
  struct {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Comm comm = MPI_COMM_NULL;
    int mine = 0, any = 0;
    bool pending = false;
  } sample_;                              // skip_while_busy across processes: see post_busy_sample
#endif
  std::exception_ptr error_;
  std::optional<std::chrono::steady_clock::time_point> last_start_;  // minimum_interval's clock
};

}  // namespace tessera
