#pragma once
// One persistent std::thread per logical device, and dispatch of a callable to
// all of them or a subset. Each device runs a FIFO of tasks; a dispatch appends
// one task to the queue of each device it uses and bumps that device's "go"
// counter, so it touches only those devices. run() waits for its tasks;
// enqueue() returns at once with a dispatch_completion (asynchronous dispatch,
// runtime/dispatch_queue.hpp).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tessera/detail/erased_call.hpp"
#include "tessera/detail/linkage.hpp"
#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/device_memory.hpp"
#include "tessera/runtime/dispatch_queue.hpp"
#include "tessera/runtime/exchange_rows.hpp"
#include "tessera/runtime/trace.hpp"
#include "tessera/runtime/wait_policy.hpp"

namespace tessera::detail {

class device_pool;
/// The pool and device id of the calling thread, if it is a device thread.
struct device_thread_identity {
  device_pool const* pool = nullptr;
  int device = -1;
};
inline thread_local device_thread_identity this_device_thread{};

/// A pool whose one device's task runs on the calling thread (device_pool::run with a single
/// device), linked to the ones this thread already runs that way: that thread holds their
/// dispatches, and a dispatch on one of them from inside would wait for itself.
struct inline_dispatch_frame {
  device_pool const* pool = nullptr;
  inline_dispatch_frame const* outer = nullptr;
};
inline thread_local inline_dispatch_frame const* this_inline_dispatch = nullptr;

/// Called before each device thread is started (tests use it to make a start fail as a
/// resource limit would); the default starts every thread.
using thread_start_hook = void (*)(int device);

/// Who waits for whom across pools: an entry (a, b) says a device of pool a is in, or waits
/// for, a dispatch on pool b, so a's running dispatch cannot end before b's. A cycle is a
/// deadlock, and the dispatch that would close it is refused instead of waiting forever.
struct cross_pool_waits {
  std::mutex mutex;
  std::vector<std::pair<device_pool const*, device_pool const*>> edges;

  static cross_pool_waits& instance() {
    static cross_pool_waits w;
    return w;
  }
  /// Whether `from` waits, through any chain of dispatches, for `to` (mutex held).
  bool reaches(device_pool const* from, device_pool const* to) const;
  void erase(device_pool const* a, device_pool const* b) {
    std::lock_guard lock(mutex);
    auto it = std::find(edges.begin(), edges.end(), std::pair{a, b});
    if (it != edges.end()) edges.erase(it);
  }
};

/// The std::thread pool behind a tessera::runtime: device d is worker thread d.
class device_pool {
 public:
  explicit device_pool(int num_devices, thread_start_hook before_start = nullptr);
  device_pool(device_pool const&) = delete;
  device_pool& operator=(device_pool const&) = delete;
  ~device_pool() { stop_and_join(); }

  /// Number of logical devices of this process (jax.local_device_count()).
  int size() const { return n_; }
  /// Number of devices of every process (jax.device_count()): size() unless processes joined.
  int global_size() const { return global_; }
  /// The global id of this process's device 0 (process-major ids, as JAX numbers them).
  int first_id() const { return first_; }
  /// Whether global device id d is one of this process's devices (addressable here).
  bool is_local(int d) const { return d >= first_ && d < first_ + n_; }
  /// Whether other processes' devices are in the id space (a distributed runtime joined).
  bool spans_processes() const { return global_ != n_; }
  /// The process whose device global id d is (0 without a distributed runtime).
  int process_of(int d) const {
    auto it = std::upper_bound(process_first_.begin(), process_first_.end(), d);
    return it == process_first_.begin() ? 0 : static_cast<int>(it - process_first_.begin()) - 1;
  }
  /// Whether the devices `ids` belong to more than one process: the same answer in every
  /// process, so that all of them take, or all skip, a step they take together.
  bool spans_processes(std::span<int const> ids) const {
    if (!spans_processes()) return false;  // one process: no search per device
    for (int d : ids)
      if (process_of(d) != process_of(ids.front())) return true;
    return false;
  }
  /// Places this process's devices at global ids first .. first + size() - 1 of `global`;
  /// `process_first` lists each process's first id (tessera::distributed::runtime, once,
  /// before any mesh is made).
  void set_process_span(int first, int global, std::vector<int> process_first) {
    if (first < 0 || global < n_ || first > global - n_)
      throw std::invalid_argument("tessera: devices " + std::to_string(first) + " to " + std::to_string(first + n_ - 1) +
                                  " do not fit in " + std::to_string(global) + " global devices");
    first_ = first;
    queues_->first.store(first, std::memory_order_relaxed);  // before any dispatch: published by the queues' mutex
    global_ = global;
    process_first_ = std::move(process_first);
  }
  /// What the processes agree on before they act together (debug builds compare the host data
  /// every process gives device_put): called with a hash and what it is of; throws on disagreement.
  std::function<void(std::uint64_t, char const*)> agree;
  /// The bytes of every process of group `group` (a handle from process_groups, 0: every
  /// process), concatenated in process order into `out` (`counts[i]` from its i-th process,
  /// known to all): MPI_Allgatherv, set by tessera::distributed::runtime. Called by one device
  /// thread of each process at a time (shard_map's collectives across processes).
  std::function<void(std::size_t group, std::span<std::byte const> mine, std::span<std::uint64_t const> counts,
                     std::byte* out)>
      gather_bytes;
  /// The process groups of a mesh's collectives, made once per mesh (`mesh` names it: its axis
  /// sizes and device ids): `colors[m]` is this process's group for the axis subset m (processes
  /// of one color form a group; -1: no group of its own, use every process). Gives the group
  /// handle for each m (0: every process), for gather_bytes. Every process calls it together.
  std::function<std::vector<std::size_t>(std::vector<std::uint64_t> const& mesh, std::vector<int> const& colors)>
      process_groups;
  /// One MPI collective of a shard_map across processes, as the user would write it (MPI_Iallreduce,
  /// MPI_Ireduce_scatter_block, MPI_Ialltoall over group `group`'s communicator), described without
  /// MPI's types: parallel/across_processes.hpp makes it, the distributed runtime runs it.
  struct process_collective {
    enum class kind : std::uint8_t { all_reduce, reduce_scatter, all_to_all };
    kind what = kind::all_reduce;
    std::uint8_t op = 0;         // all_reduce, reduce_scatter: 0 sum, 1 max, 2 min; all_to_all: 1 to leave this process's block out
    std::uint32_t dtype = 0;     // the elements' dtype_code (all_to_all: 1, bytes)
    std::size_t group = 0;       // a handle from process_groups
    void const* send = nullptr;  // nullptr: in place, in `recv` (all_reduce)
    void* recv = nullptr;
    std::size_t count = 0;  // elements: in all (all_reduce), each process receives (reduce_scatter), to each process (all_to_all)
  };
  /// Runs a process_collective (set by tessera::distributed::runtime). Called by one device thread
  /// of each process at a time, all of the group's processes together.
  std::function<void(process_collective const&)> collective_between_processes;
  /// Whether the processes compare each collective's signature before it (a mismatch is then a
  /// collective_mismatch everywhere instead of a hang); set by the distributed runtime.
  std::atomic<bool> checked_collectives{true};
  /// Whether sums between processes keep the single-process order (the gathered path) instead of MPI's.
  std::atomic<bool> deterministic_collectives{false};
  /// Ends every process of the job with `message` (MPI_Abort): a device failed in a shard_map
  /// across processes, or a process before a reshard's exchange, and the other processes would
  /// wait for it. Set by the distributed runtime.
  std::function<void(std::string const& message)> abort_processes;
  /// Why device threads may not call gather_bytes (MPI granted less than
  /// MPI_THREAD_SERIALIZED), or empty.
  std::string gather_refusal;
  /// The one thread that may run a shard_map across processes (MPI_THREAD_FUNNELED: the thread
  /// that made the distributed runtime), or none: anyone may.
  std::thread::id funneled_thread{};
  /// Buffers a shard_map across processes keeps for the next one (parallel/across_processes.hpp),
  /// so that each call does not allocate and fault in its exchange buffers again.
  std::shared_ptr<void> exchange_scratch;
  /// The layouts among the processes of the meshes shard_maps ran on (parallel/across_processes.hpp),
  /// computed once per mesh rather than on every call.
  std::shared_ptr<void> process_layouts;
  /// Guards exchange_scratch and process_layouts (host threads may run shard_maps on one pool at once).
  std::mutex exchange_scratch_mutex;
  /// One message of an exchange_in_place: `bytes` at `data` sent to, or received from, process `peer`.
  struct exchange_message {
    int peer = 0;
    bool receive = false;
    std::byte* data = nullptr;
    std::size_t bytes = 0;
  };
  /// Moves bytes between processes straight from and into their places (set by
  /// tessera::distributed::runtime): every process calls it together, each listing its messages
  /// in one order all of them follow (messages between two processes match in that order);
  /// in checked mode the processes first compare `signature`, a hash of what they are doing
  /// (`what`), and all throw collective_mismatch if any differs. How reshards move blocks.
  std::function<void(std::vector<exchange_message> const& messages, std::uint64_t signature, std::string const& what)>
      exchange_in_place;
  /// Staging rows for an exchange, emptied: the ones the last exchange gave back, if any.
  std::unique_ptr<exchange_rows> take_exchange_rows() {
    std::unique_ptr<exchange_rows> rows;
    {
      std::lock_guard lock(exchange_scratch_mutex);
      rows = std::move(kept_rows_);
    }
    if (!rows) rows = std::make_unique<exchange_rows>();
    rows->reset();
    return rows;
  }
  /// Keeps an exchange's rows for the next one (up to 256 MiB; larger ones are let go).
  void give_back_exchange_rows(std::unique_ptr<exchange_rows> rows) noexcept {
    if (!rows || rows->capacity() > (std::size_t{256} << 20)) return;
    std::lock_guard lock(exchange_scratch_mutex);
    kept_rows_ = std::move(rows);
  }
  /// The number of processes whose devices are in the id space (1 without a distributed runtime).
  int process_count() const { return process_first_.empty() ? 1 : static_cast<int>(process_first_.size()); }
  /// A number naming this pool in messages: 1 for the first made in the process, then 2, ...
  std::uint64_t id() const { return id_; }
  /// "runtime 2 (4 devices)", for messages.
  std::string name() const;
  /// Device d's memory (its cache of freed blocks); d is a global id of this process's devices.
  device_memory& memory(int d) const { return memory_[static_cast<std::size_t>(d - first_)]; }

  /// Runs f(device) on each listed device's own thread and waits for all of them. Ids are
  /// global; devices of other processes are skipped (their process runs the same call).
  /// Exceptions are collected per device and rethrown here as one device_error.
  template <class F>
  void run(std::span<int const> devices, F&& f) {
    // Only this thunk depends on the task's type: the dispatch itself is compiled once, not
    // once per lambda (a program makes hundreds of them; issue 14).
    run_task(devices, &call_erased<std::remove_reference_t<F>, int>, erased_context(f));
  }

  /// run's body: `fn(ctx, device)` on each listed device's own thread, and wait.
  void run_task(std::span<int const> devices, void (*fn)(void*, int), void* ctx);

  /// Queues `(*task)(device)` on each listed device (global ids; other processes' devices are
  /// skipped) behind the work queued before, and returns without waiting (JAX's async
  /// dispatch): the completion says when every device has run it, and holds what they threw,
  /// named `what` (a string literal). The task is shared by the devices and kept alive until the
  /// last of them has run it, so it must own what it reads. The dispatch runs before returning
  /// (and its failures are thrown at once) when asynchronous dispatch is off (set_async_dispatch),
  /// and runs before returning with its failures kept in the completion when it cannot be queued:
  /// a pool of one device (its task runs on the calling thread), a pool spanning processes (the
  /// MPI calls of two dispatches must not overlap), or a caller that is itself a device thread.
  template <class F>
  std::shared_ptr<dispatch_completion> enqueue(std::span<int const> devices, char const* what, std::shared_ptr<F> task) {
    void* ctx = task.get();
    return enqueue_task(devices, what, &call_erased<F, int>, ctx, std::shared_ptr<void>(std::move(task)));
  }
  /// enqueue's body: `fn(ctx, device)`, `keep` owning what ctx points to.
  std::shared_ptr<dispatch_completion> enqueue_task(std::span<int const> devices, char const* what,
                                                    void (*fn)(void*, int), void* ctx, std::shared_ptr<void> keep);
  /// Whether enqueue would queue (and not run before returning) a dispatch made on this thread now.
  bool queues_here() const {
    return n_ > 1 && !spans_processes() && this_device_thread.pool == nullptr && this_inline_dispatch == nullptr &&
           async_dispatch();
  }
  /// How long a thread waiting for this pool's devices spins before it yields and sleeps (ns).
  std::uint32_t caller_spin() const { return caller_spin_; }
  /// Waits until every dispatch queued so far on this pool has run (failures stay with their arrays).
  void synchronize();
  /// Most dispatches queued and not yet run before enqueue waits for the oldest (bounds memory).
  static constexpr std::size_t max_queued = 256;

  /// Runs f(device) on every device of this process.
  template <class F>
  void run_all(F&& f) {
    run_all_task(&call_erased<std::remove_reference_t<F>, int>, erased_context(f));
  }

  /// run_all's body: `fn(ctx, device)` on every device of this process.
  void run_all_task(void (*fn)(void*, int), void* ctx) {
    std::vector<int> all(static_cast<std::size_t>(n_));
    for (int d = 0; d < n_; ++d) all[static_cast<std::size_t>(d)] = first_ + d;
    run_task(std::span<int const>(all), fn, ctx);
  }

 private:
  /// One device's part of a dispatch.
  struct queued_task {
    void (*fn)(void*, int) = nullptr;
    void* ctx = nullptr;
    std::shared_ptr<void> keep;  // owns *ctx (queued dispatches); none for run()'s, whose caller waits
    std::shared_ptr<dispatch_completion> done;
  };
  struct alignas(64) slot {
    wait_word go;  // bumped after each push, and to stop
    std::mutex mutex;
    std::deque<queued_task> queue;  // guarded by mutex
    bool active = false;  // written and read by the dispatching thread only (under dispatch_mutex_)
  };
  /// What the device threads use: shared with them, so that a device thread that drops the last
  /// owner of its pool (a task's arrays) can still finish its loop after the pool is gone.
  struct queues {
    std::unique_ptr<slot[]> slots;
    std::atomic<bool> stopping{false};
    std::atomic<int> first{0};  // the global id of device 0 (set_process_span may move it)
  };

  /// The slot of device d (a device id is an int, as in JAX; the array index is unsigned).
  slot& slot_of(int d) { return queues_->slots[static_cast<std::size_t>(d)]; }

  /// Appends a task to local device d's queue and wakes it.
  void push(int d, queued_task t) {
    slot& s = slot_of(d);
    {
      std::lock_guard lock(s.mutex);
      s.queue.push_back(std::move(t));
    }
    s.go.bump();
  }
  /// Marks the listed local devices, refusing a device listed twice (it would run the task twice).
  void mark_devices(std::span<int const> devices);

  /// Runs the one device's task on this thread, as that device: per-device state (the device
  /// identity, the trace track) is the device's while it runs and the caller's again after.
  void run_here(void (*fn)(void*, int), void* ctx);

  /// Takes the dispatch lock for run(). From a device thread of another pool, the wait is
  /// recorded while it lasts, and refused at once when the pool dispatching here is itself
  /// (through any chain) waiting for the caller's pool: neither could ever finish.
  class nested_dispatch {
   public:
    explicit nested_dispatch(device_pool& to);
    static std::string cycle_message(device_pool const& to, device_pool const* from);
    ~nested_dispatch() {
      if (from_ != nullptr) cross_pool_waits::instance().erase(from_, &to_);
    }
    nested_dispatch(nested_dispatch const&) = delete;
    nested_dispatch& operator=(nested_dispatch const&) = delete;

   private:
    device_pool& to_;
    device_pool const* from_;
    bool locked_ = false;
  };

  static std::atomic<std::uint64_t>& next_id() {
    static std::atomic<std::uint64_t> n{1};
    return n;
  }
  /// Wakes every started thread to stop, and joins them.
  void stop_and_join() noexcept;

  static void worker(std::shared_ptr<queues> qs, device_pool const* self, int d, std::uint64_t id, std::uint32_t spin);

  std::uint64_t id_;
  int n_ = 0;
  int first_ = 0;   // global id of device 0
  int global_ = 0;  // devices of every process
  std::vector<int> process_first_{0};  // each process's first global id
  std::uint32_t worker_spin_ = 0;
  std::uint32_t caller_spin_ = 0;
  std::shared_ptr<queues> queues_;
  std::unique_ptr<device_memory[]> memory_;
  std::vector<std::thread> threads_;
  std::mutex dispatch_mutex_;
  std::deque<std::shared_ptr<dispatch_completion>> in_flight_;  // queued dispatches, oldest first (under dispatch_mutex_)
  std::unique_ptr<exchange_rows> kept_rows_;  // guarded by exchange_scratch_mutex
};

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE bool cross_pool_waits::reaches(device_pool const* from, device_pool const* to) const {
  std::vector<device_pool const*> todo{from}, seen;
  while (!todo.empty()) {
    device_pool const* p = todo.back();
    todo.pop_back();
    if (p == to) return true;
    if (std::find(seen.begin(), seen.end(), p) != seen.end()) continue;
    seen.push_back(p);
    for (auto const& [a, b] : edges)
      if (a == p) todo.push_back(b);
  }
  return false;
}

TESSERA_LINKAGE device_pool::device_pool(int num_devices, thread_start_hook before_start)
    : id_(next_id().fetch_add(1, std::memory_order_relaxed)) {
  if (num_devices < 1)
    throw std::invalid_argument("tessera::runtime: the number of devices must be at least 1, got " +
                                std::to_string(num_devices));
  n_ = num_devices;
  global_ = num_devices;
  // Devices plus the dispatching thread compete for cores.
  worker_spin_ = spin_budget(static_cast<unsigned>(n_));
  caller_spin_ = spin_budget(static_cast<unsigned>(n_));
  queues_ = std::make_shared<queues>();
  queues_->slots = std::make_unique<slot[]>(static_cast<std::size_t>(n_));
  memory_ = std::make_unique<device_memory[]>(static_cast<std::size_t>(n_));
  threads_.reserve(static_cast<std::size_t>(n_));
  try {
    for (int d = 0; d < n_; ++d) {
      if (before_start) before_start(d);
      threads_.emplace_back([qs = queues_, this, d, id = id_, spin = worker_spin_] { worker(qs, this, d, id, spin); });
    }
  } catch (...) {
    // A thread the system refused (a process or memory limit): the ones already started
    // must be stopped and joined here, or destroying them would call std::terminate.
    int const started = static_cast<int>(threads_.size());
    stop_and_join();
    std::string const what = "tessera::runtime: started " + std::to_string(started) + " of " +
                             std::to_string(n_) + " device threads, then the system refused another (" +
                             device_error::message_of(std::current_exception()) +
                             "); the started ones were stopped. Ask for fewer devices or raise the limit";
    try {
      throw;
    } catch (std::system_error const& e) {
      throw std::system_error(e.code(), what);
    } catch (...) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again), what);
    }
  }
}

TESSERA_LINKAGE std::string device_pool::name() const {
  return "runtime " + std::to_string(id_) + " (" + std::to_string(n_) + (n_ == 1 ? " device)" : " devices)");
}

TESSERA_LINKAGE void device_pool::run_task(std::span<int const> devices, void (*fn)(void*, int), void* ctx) {
  if (this_device_thread.pool == this)
    throw std::logic_error("tessera: a dispatch to the devices was started from device " +
                           std::to_string(this_device_thread.device) +
                           "'s own thread; per-device code must not start another dispatch on the same runtime");
  int local_count = 0;
  for (int d : devices) {
    if (d < 0 || d >= global_)
      throw std::out_of_range("tessera: device id " + std::to_string(d) + " is out of range: the runtime has " +
                              std::to_string(global_) + " devices");
    local_count += is_local(d) ? 1 : 0;
  }
  if (local_count == 0) return;
  trace_span span("dispatch", "dispatch");  // on the calling thread: from the wake-up to the last device done
  nested_dispatch nested(*this);  // a device thread of another pool: refuse a wait that would never end
  std::lock_guard lock(dispatch_mutex_, std::adopt_lock);  // one dispatch at a time per pool
  if (n_ == 1) {
    // One device (runtime{1}, or a process of one device across processes): its task runs on
    // the calling thread, which would otherwise only wait for it. A wake-up costs more than a
    // small task (microseconds), and the two threads would share a core.
    if (local_count > 1)
      throw std::invalid_argument("tessera: device id " + std::to_string(first_) +
                                  " is listed twice in one dispatch; each device runs the task once");
    run_here(fn, ctx);
    return;
  }
  mark_devices(devices);
  auto done = std::make_shared<dispatch_completion>("dispatch", first_, n_, local_count);
  for (int d : devices)
    if (is_local(d)) push(d - first_, queued_task{fn, ctx, nullptr, done});
  done->wait(caller_spin_);
  for (int d : devices)
    if (is_local(d)) slot_of(d - first_).active = false;
  if (done->failed()) throw device_error(done->take_failures());
}

TESSERA_LINKAGE void device_pool::mark_devices(std::span<int const> devices) {
  for (int d : devices) {
    if (!is_local(d)) continue;
    // A device listed twice would run the task twice and count it twice: the wait would never
    // end. The `active` flags find it without an allocation on the dispatch path.
    if (slot_of(d - first_).active) {
      for (int e : devices)
        if (is_local(e)) slot_of(e - first_).active = false;
      throw std::invalid_argument("tessera: device id " + std::to_string(d) +
                                  " is listed twice in one dispatch; each device runs the task once");
    }
    slot_of(d - first_).active = true;
  }
}

TESSERA_LINKAGE std::shared_ptr<dispatch_completion> device_pool::enqueue_task(std::span<int const> devices,
                                                                              char const* what, void (*fn)(void*, int),
                                                                              void* ctx, std::shared_ptr<void> keep) {
  if (!queues_here()) {
    // Run now. With asynchronous dispatch off, a failure is thrown here, by the call that made
    // it (the debugging mode); otherwise it waits in the completion as a queued one would.
    bool const throw_now = !async_dispatch();
    auto done = std::make_shared<dispatch_completion>(what, first_, n_, 0);
    try {
      run_task(devices, fn, ctx);
    } catch (device_error const& e) {
      if (throw_now) throw;
      done->set_failures(e.failures());
    }
    return done;
  }
  int local_count = 0;
  for (int d : devices) {
    if (d < 0 || d >= global_)
      throw std::out_of_range("tessera: device id " + std::to_string(d) + " is out of range: the runtime has " +
                              std::to_string(global_) + " devices");
    local_count += is_local(d) ? 1 : 0;
  }
  auto done = std::make_shared<dispatch_completion>(what, first_, n_, local_count);
  if (local_count == 0) return done;
  trace_span span("dispatch", "enqueue");
  std::lock_guard lock(dispatch_mutex_);  // one order of the dispatches on every device
  // Bound the work in flight: past max_queued dispatches, wait for the oldest (the host is then
  // that far ahead of the devices, and the arrays the queued work holds stay alive meanwhile).
  while (!in_flight_.empty() && in_flight_.front()->finished()) in_flight_.pop_front();
  if (in_flight_.size() >= max_queued) {
    in_flight_.front()->wait(caller_spin_);
    in_flight_.pop_front();
  }
  mark_devices(devices);
  for (int d : devices)
    if (is_local(d)) {
      slot_of(d - first_).active = false;
      push(d - first_, queued_task{fn, ctx, keep, done});
    }
  in_flight_.push_back(done);
  return done;
}

TESSERA_LINKAGE void device_pool::synchronize() {
  std::vector<std::shared_ptr<dispatch_completion>> all;
  {
    std::lock_guard lock(dispatch_mutex_);
    while (!in_flight_.empty() && in_flight_.front()->finished()) in_flight_.pop_front();
    all.assign(in_flight_.begin(), in_flight_.end());
  }
  // Every device runs its queue in order, but a dispatch may skip devices: wait for each.
  for (auto const& c : all) c->wait(caller_spin_);
}

TESSERA_LINKAGE void device_pool::run_here(void (*fn)(void*, int), void* ctx) {
  struct as_device {
    device_thread_identity identity = this_device_thread;
    trace_track track = this_trace_track;
    inline_dispatch_frame frame;
    as_device(device_pool const* p, std::uint64_t id) : frame{p, this_inline_dispatch} {
      this_device_thread = {p, 0};
      this_trace_track = {static_cast<int>(id), 0, 0};
      this_inline_dispatch = &frame;
    }
    ~as_device() {
      this_inline_dispatch = frame.outer;
      this_trace_track = track;
      this_device_thread = identity;
    }
    as_device(as_device const&) = delete;
    as_device& operator=(as_device const&) = delete;
  } scope(this, id_);
  try {
    trace_span span("dispatch", "task");
    fn(ctx, first_);  // the global id
  } catch (...) {
    std::vector<device_error::failure> failures;
    failures.emplace_back(first_, std::current_exception());
    throw device_error(std::move(failures));
  }
}

TESSERA_LINKAGE device_pool::nested_dispatch::nested_dispatch(device_pool& to) : to_(to), from_(this_device_thread.pool) {
  if (from_ == nullptr) {
    to_.dispatch_mutex_.lock();
    return;
  }
  for (auto const* f = this_inline_dispatch; f != nullptr; f = f->outer)
    if (f->pool == &to_)  // this thread runs to_'s task: to_'s dispatch waits for this one
      throw std::runtime_error(cycle_message(to_, from_));
  auto& w = cross_pool_waits::instance();
  {
    std::lock_guard graph(w.mutex);
    if (!to_.dispatch_mutex_.try_lock()) {
      if (w.reaches(&to_, from_)) throw std::runtime_error(cycle_message(to_, from_));
      w.edges.emplace_back(from_, &to_);
      locked_ = false;
    } else {
      w.edges.emplace_back(from_, &to_);
      locked_ = true;
    }
  }
  if (!locked_) {
    try {
      to_.dispatch_mutex_.lock();
    } catch (...) {
      w.erase(from_, &to_);
      throw;
    }
  }
}

TESSERA_LINKAGE std::string device_pool::nested_dispatch::cycle_message(device_pool const& to, device_pool const* from) {
  return "tessera: device " + std::to_string(this_device_thread.device) + " of " + from->name() +
         " started a dispatch on " + to.name() + ", whose running dispatch waits for " + from->name() +
         ": each would wait for the other forever, so this dispatch is refused; start the inner work "
         "after the outer dispatch returns, or keep it on one runtime";
}

TESSERA_LINKAGE void device_pool::stop_and_join() noexcept {
  queues_->stopping.store(true, std::memory_order_release);
  for (std::size_t d = 0; d < threads_.size(); ++d) queues_->slots[d].go.bump();
  for (std::size_t d = 0; d < threads_.size(); ++d) {
    // The last owner may let go on a device thread (a task dropping the last array of
    // a runtime that is gone); that thread cannot join itself, and returns on its own.
    if (threads_[d].get_id() == std::this_thread::get_id())
      threads_[d].detach();
    else if (threads_[d].joinable())
      threads_[d].join();
  }
}

TESSERA_LINKAGE void device_pool::worker(std::shared_ptr<queues> qs, device_pool const* self, int d, std::uint64_t id,
                                         std::uint32_t spin) {
  this_device_thread = {self, d};
  this_trace_track = {static_cast<int>(id), d, 0};
  slot& s = qs->slots[static_cast<std::size_t>(d)];
  for (;;) {
    std::uint32_t const seen = s.go.load();
    queued_task t;
    {
      std::lock_guard lock(s.mutex);
      if (!s.queue.empty()) {
        t = std::move(s.queue.front());
        s.queue.pop_front();
      }
    }
    if (t.fn == nullptr) {
      if (qs->stopping.load(std::memory_order_acquire)) return;
      s.go.wait_for_change(seen, spin);
      continue;
    }
    try {
      trace_span span("dispatch", "task");
      t.fn(t.ctx, qs->first.load(std::memory_order_relaxed) + d);  // the global id
    } catch (...) {
      t.done->fail(d, std::current_exception());
    }
    t.done->ran(d);
    t.done->finish_one();
    t = {};  // may let go of the last owner of the task's arrays, and of the pool: nothing of it is used after
  }
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera::detail
