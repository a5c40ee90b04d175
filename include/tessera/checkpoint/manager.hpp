#pragma once
// checkpoint_manager: orbax.checkpoint.CheckpointManager with async checkpointing. save(step,
// tree) copies this process's blocks to host memory and returns; a thread of its own writes
// them (tessera::save's format and commit) while the training loop runs its next steps, then
// deletes the checkpoints beyond max_to_keep. wait() waits; destruction waits too, so no save in
// flight is lost.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
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
  /// enable_async_checkpointing: write in a background thread (across processes, only where MPI
  /// grants MPI_THREAD_MULTIPLE; otherwise save() writes before it returns, docs/checkpoints.md).
  bool enable_async_checkpointing = true;
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
  /// Waits for the save in flight (its error, if any, is printed: a destructor cannot throw it).
  ~checkpoint_manager() {
    try {
      wait();
    } catch (std::exception const& e) {
      std::fprintf(stderr, "tessera::checkpoint_manager: the last save failed: %s\n", e.what());
    }
  }

  /// manager.save(step, tree): waits for the previous save, copies this process's blocks of
  /// `tree` to host memory, and returns while a background thread writes `<dir>/<step>.h5`.
  /// Returns false (and saves nothing) for a step not newer than the latest, as Orbax's
  /// should_save. Every process of a distributed runtime calls it alike.
  template <class Tree>
  bool save(std::int64_t step, Tree const& tree) {
    wait();
    if (auto latest = latest_step(); latest && step <= *latest) return false;
    auto job = std::make_shared<pending>();
    job->path = path_of(step).string();
    job->plans = detail::plan_tree(tree, job->path);
    for (auto& p : job->plans) {
      for (auto& b : p.blocks) {  // the copy to host: the arrays may change as soon as save returns
        std::size_t bytes = p.element_size;
        for (auto c : b.count) bytes *= static_cast<std::size_t>(c);
        auto host = std::make_unique_for_overwrite<std::byte[]>(bytes);
        std::memcpy(host.get(), b.data, bytes);
        b.data = host.get();
        job->host.push_back(std::move(host));
      }
    }
    job->group = detail::current_checkpoint_group();
    bool const background = options_.enable_async_checkpointing && can_write_in_background(job->group);
    if (background) {
      worker_ = std::thread([this, job] { run(*job); });
    } else {
      run(*job);
      rethrow();
    }
    return true;
  }

  /// manager.wait_until_finished(): waits for the save in flight and throws its error, if it failed.
  void wait() {
    if (worker_.joinable()) worker_.join();
    rethrow();
  }

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
  struct pending {
    std::vector<detail::leaf_plan> plans;
    std::vector<std::unique_ptr<std::byte[]>> host;
    detail::checkpoint_group group;
    std::string path;
  };

  /// Across processes a background thread makes MPI-IO calls while the training loop makes its
  /// own: MPI allows that only at MPI_THREAD_MULTIPLE (tessera asks for SERIALIZED).
  static bool can_write_in_background(detail::checkpoint_group const& g) {
    if (!g.across()) return true;
#ifdef H5_HAVE_PARALLEL
    int level = 0;
    MPI_Query_thread(&level);
    return level == MPI_THREAD_MULTIPLE;
#else
    return false;
#endif
  }

  void run(pending& job) {
    try {
      detail::write_checkpoint(job.path, job.group, job.plans, options_.save, "checkpoint_manager::save");
      job.host.clear();
      if (job.group.rank == 0 && options_.max_to_keep > 0) {
        auto steps = all_steps();
        for (std::size_t i = 0; i + options_.max_to_keep < steps.size(); ++i) {
          std::error_code ec;
          std::filesystem::remove(path_of(steps[i]), ec);
        }
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  void rethrow() {
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

  std::filesystem::path dir_;
  checkpoint_manager_options options_;
  std::thread worker_;
  std::exception_ptr error_;
};

}  // namespace tessera
