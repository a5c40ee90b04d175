#pragma once
// Asynchronous dispatch (JAX's async dispatch, docs/async.md): a dispatch is queued on each
// device's FIFO and the host thread goes on; what it produces carries a dispatch_completion,
// which readers wait for. Every device runs its queue in the order the dispatches were made
// (one order per runtime), so a task only ever waits for tasks queued before it, and the
// queues cannot wait for each other in a circle.

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/wait_policy.hpp"

namespace tessera {

namespace detail {
/// The process-wide switch: -1 until first read (then TESSERA_ASYNC_DISPATCH decides), 0 or 1.
inline std::atomic<int>& async_dispatch_flag() {
  static std::atomic<int> flag{-1};
  return flag;
}
/// TESSERA_ASYNC_DISPATCH: "0"/"false"/"off" turn asynchronous dispatch off; unset, "1"/"true"/"on" leave it on.
inline bool async_dispatch_from_environment() {
  char const* env = std::getenv("TESSERA_ASYNC_DISPATCH");
  if (env == nullptr || *env == '\0') return true;
  std::string const v(env);
  if (v == "0" || v == "false" || v == "False" || v == "off") return false;
  if (v == "1" || v == "true" || v == "True" || v == "on") return true;
  throw std::invalid_argument("tessera: TESSERA_ASYNC_DISPATCH='" + v + "' is not 0 or 1 (or false/true, off/on)");
}
}  // namespace detail

/// Whether evaluation and jit return before the devices finish (jax_cpu_enable_async_dispatch);
/// on by default, off with TESSERA_ASYNC_DISPATCH=0 or set_async_dispatch(false).
inline bool async_dispatch() {
  int v = detail::async_dispatch_flag().load(std::memory_order_relaxed);
  if (v < 0) {
    int const from_env = detail::async_dispatch_from_environment() ? 1 : 0;
    int expected = -1;
    detail::async_dispatch_flag().compare_exchange_strong(expected, from_env, std::memory_order_relaxed);
    v = detail::async_dispatch_flag().load(std::memory_order_relaxed);
  }
  return v == 1;
}

/// jax.config.update("jax_cpu_enable_async_dispatch", on): off, every dispatch waits for its
/// devices and a device's error is thrown by the call that made it (for debugging). Returns
/// the previous setting. Work queued before the switch still completes in order.
inline bool set_async_dispatch(bool on) {
  bool const before = async_dispatch();
  detail::async_dispatch_flag().store(on ? 1 : 0, std::memory_order_relaxed);
  return before;
}

namespace detail {

/// One dispatch's progress on the devices of this process it runs on: finished when each of
/// them has run its task. Shared by the queued tasks and by the arrays the dispatch makes
/// (their readiness), so whichever lets go last frees it.
class dispatch_completion {
 public:
  /// `what` names the operation in errors (a string literal); `first` is the global id of the
  /// pool's device 0, `devices` the pool's device count, `count` the devices that run a task.
  dispatch_completion(char const* what, int first, int devices, int count)
      : what_(what), first_(first), n_(devices), remaining_(count),
        errors_(std::make_unique<std::exception_ptr[]>(static_cast<std::size_t>(devices))),
        ran_(std::make_unique<unsigned char[]>(static_cast<std::size_t>(devices))) {
    if (count == 0) finished_.store(true, std::memory_order_release);
  }
  dispatch_completion(dispatch_completion const&) = delete;
  dispatch_completion& operator=(dispatch_completion const&) = delete;

  /// The operation's name, as errors give it.
  char const* what() const { return what_; }
  /// Whether every device has run its task (jax.Array.is_ready()).
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  /// Whether a device threw (meaningful once finished()).
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  /// Waits until every device has run its task, spinning for up to `spin_ns` first.
  void wait(std::uint32_t spin_ns = 0) const {
    while (!finished()) {
      std::uint32_t const v = done_.load();
      if (finished()) break;
      done_.wait_for_change(v, spin_ns);
    }
  }
  /// Waits, then throws a device_error naming the operation if a device threw.
  void check(std::uint32_t spin_ns = 0) const {
    if (!finished()) wait(spin_ns);
    if (failed()) throw device_error(failures(), what_);
  }
  /// The devices that threw, in device order (once finished()).
  std::vector<device_error::failure> failures() const {
    std::vector<device_error::failure> out;
    for (int d = 0; d < n_; ++d)
      if (errors_[static_cast<std::size_t>(d)]) out.emplace_back(d + first_, errors_[static_cast<std::size_t>(d)]);
    return out;
  }

  /// The devices that threw, moved out (once finished()): the waiting thread then owns the
  /// exceptions it reads, and a device thread that lets go of the completion last frees none.
  std::vector<device_error::failure> take_failures() {
    std::vector<device_error::failure> out;
    for (int d = 0; d < n_; ++d)
      if (errors_[static_cast<std::size_t>(d)])
        out.emplace_back(d + first_, std::exchange(errors_[static_cast<std::size_t>(d)], nullptr));
    return out;
  }
  /// Device `local` (0-based in the pool) threw `e`: called on that device's thread, before finish_one.
  void fail(int local, std::exception_ptr e) {
    errors_[static_cast<std::size_t>(local)] = std::move(e);
    failed_.store(true, std::memory_order_relaxed);  // published by finish_one's release
  }
  /// Device `local` has run its task (on that device's thread, before finish_one).
  void ran(int local) { ran_[static_cast<std::size_t>(local)] = 1; }
  /// Whether device `local`'s task has run without throwing; to be asked on that device's thread
  /// only (it reads what that thread wrote), where a later task reads the blocks the device
  /// wrote itself without waiting for its peers' parts of the dispatch.
  bool ran_without_error(int local) const {
    auto const i = static_cast<std::size_t>(local);
    return ran_[i] != 0 && !errors_[i];
  }
  /// One device has run its task; the last one marks the dispatch finished and wakes the waiters.
  void finish_one() {
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      finished_.store(true, std::memory_order_release);
      done_.bump();
    }
  }
  /// A dispatch that ran before it was returned (synchronous mode, one device): its failures, if any.
  void set_failures(std::vector<device_error::failure> const& fs) {
    for (auto const& [d, e] : fs) fail(d - first_, e);
  }

 private:
  char const* what_;
  int first_;
  int n_;
  std::atomic<int> remaining_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> failed_{false};
  mutable wait_word done_;
  std::unique_ptr<std::exception_ptr[]> errors_;  // one per device of the pool, each written by its device only
  std::unique_ptr<unsigned char[]> ran_;           // likewise: whether the device's task has run
};

}  // namespace detail
}  // namespace tessera
