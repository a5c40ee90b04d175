#pragma once
// One persistent std::thread per logical device, and dispatch of a callable to
// all of them or a subset. Work is published through per-device "go" counters,
// so a dispatch touches only the devices it uses.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/device_memory.hpp"
#include "tessera/runtime/wait_policy.hpp"

namespace tessera::detail {

class device_pool;
/// The pool and device id of the calling thread, if it is a device thread.
struct device_thread_identity {
  device_pool const* pool = nullptr;
  int device = -1;
};
inline thread_local device_thread_identity this_device_thread{};

/// The std::thread pool behind a tessera::runtime: device d is worker thread d.
class device_pool {
 public:
  explicit device_pool(int num_devices) {
    if (num_devices < 1)
      throw std::invalid_argument("tessera::runtime: the number of devices must be at least 1, got " +
                                  std::to_string(num_devices));
    n_ = num_devices;
    // Devices plus the dispatching thread compete for cores.
    worker_spin_ = spin_budget(static_cast<unsigned>(n_));
    caller_spin_ = spin_budget(static_cast<unsigned>(n_));
    slots_ = std::make_unique<slot[]>(static_cast<std::size_t>(n_));
    memory_ = std::make_unique<device_memory[]>(static_cast<std::size_t>(n_));
    threads_.reserve(static_cast<std::size_t>(n_));
    for (int d = 0; d < n_; ++d) threads_.emplace_back([this, d] { worker(d); });
  }
  device_pool(device_pool const&) = delete;
  device_pool& operator=(device_pool const&) = delete;
  ~device_pool() {
    stopping_.store(true, std::memory_order_release);
    for (int d = 0; d < n_; ++d) {
      slots_[d].go.bump();
    }
    for (int d = 0; d < n_; ++d) {
      // The last owner may let go on a device thread (a task dropping the last array of
      // a runtime that is gone); that thread cannot join itself, and returns on its own.
      if (this_device_thread.pool == this && this_device_thread.device == d)
        threads_[static_cast<std::size_t>(d)].detach();
      else
        threads_[static_cast<std::size_t>(d)].join();
    }
  }

  /// Number of logical devices.
  int size() const { return n_; }
  /// Device d's memory (its cache of freed blocks).
  device_memory& memory(int d) const { return memory_[static_cast<std::size_t>(d)]; }

  /// Runs f(device) on each listed device's own thread and waits for all of them.
  /// Exceptions are collected per device and rethrown here as one device_error.
  template <class F>
  void run(std::span<int const> devices, F&& f) {
    if (this_device_thread.pool == this)
      throw std::logic_error("tessera: a dispatch to the devices was started from device " +
                             std::to_string(this_device_thread.device) +
                             "'s own thread; per-device code must not start another dispatch on the same runtime");
    for (int d : devices)
      if (d < 0 || d >= n_)
        throw std::out_of_range("tessera: device id " + std::to_string(d) + " is out of range: the runtime has " +
                                std::to_string(n_) + " devices");
    if (devices.empty()) return;
    std::lock_guard lock(dispatch_mutex_);  // one dispatch at a time per pool
    auto fn = [](void* ctx, int d) { (*static_cast<std::remove_reference_t<F>*>(ctx))(d); };
    task_fn_ = fn;
    task_ctx_ = const_cast<void*>(static_cast<void const*>(std::addressof(f)));
    remaining_.store(static_cast<int>(devices.size()), std::memory_order_relaxed);
    std::uint32_t const done_before = done_.load();
    for (int d : devices) {
      // A device listed twice would be woken once and counted twice: the wait would never end.
      // The `active` flags find it without an allocation on the dispatch path.
      if (slots_[d].active) {
        for (int e : devices) slots_[e].active = false;
        throw std::invalid_argument("tessera: device id " + std::to_string(d) +
                                    " is listed twice in one dispatch; each device runs the task once");
      }
      slots_[d].error = nullptr;
      slots_[d].active = true;
    }
    for (int d : devices) wake(d);
    done_.wait_for_change(done_before, caller_spin_);
    std::vector<device_error::failure> failures;
    for (int d = 0; d < n_; ++d) {
      if (!slots_[d].active) continue;
      slots_[d].active = false;
      if (slots_[d].error) failures.emplace_back(d, std::exchange(slots_[d].error, nullptr));
    }
    if (!failures.empty()) throw device_error(std::move(failures));
  }

  /// Runs f(device) on every device.
  template <class F>
  void run_all(F&& f) {
    std::vector<int> all(static_cast<std::size_t>(n_));
    for (int d = 0; d < n_; ++d) all[static_cast<std::size_t>(d)] = d;
    run(std::span<int const>(all), std::forward<F>(f));
  }

 private:
  struct alignas(64) slot {
    wait_word go;
    bool active = false;          // written and read by the dispatching thread only
    std::exception_ptr error;
  };

  void wake(int d) { slots_[d].go.bump(); }

  void worker(int d) {
    this_device_thread = {this, d};
    std::uint32_t seen = 0;
    for (;;) {
      seen = slots_[d].go.wait_for_change(seen, worker_spin_);
      if (stopping_.load(std::memory_order_acquire)) return;
      try {
        task_fn_(task_ctx_, d);
      } catch (...) {
        slots_[d].error = std::current_exception();
      }
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        done_.bump();
      }
    }
  }

  int n_ = 0;
  std::uint32_t worker_spin_ = 0;
  std::uint32_t caller_spin_ = 0;
  std::unique_ptr<slot[]> slots_;
  std::unique_ptr<device_memory[]> memory_;
  std::vector<std::thread> threads_;
  std::mutex dispatch_mutex_;
  void (*task_fn_)(void*, int) = nullptr;
  void* task_ctx_ = nullptr;
  alignas(64) std::atomic<int> remaining_{0};
  alignas(64) wait_word done_;
  std::atomic<bool> stopping_{false};
};

}  // namespace tessera::detail
