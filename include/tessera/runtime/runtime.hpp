#pragma once
// The user's handle on a device pool, and which pool is current.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessera/detail/linkage.hpp"
#include "tessera/runtime/device_pool.hpp"

namespace tessera {

namespace detail {
/// The live runtimes, in the order they were made, each with the host thread that made it.
struct runtime_registry {
  struct entry {
    std::shared_ptr<device_pool> pool;
    std::thread::id owner;
  };
  std::mutex mutex;
  std::vector<entry> live;
  std::shared_ptr<device_pool> fallback;          // made on first use when no runtime is live
  std::vector<std::weak_ptr<device_pool>> known;  // every pool a mesh may name, by id()
};
inline runtime_registry& registry() {
  static runtime_registry r;
  return r;
}
/// Remembers a pool so meshes made on it find it again (pruning pools that are gone).
TESSERA_LINKAGE void remember_pool(runtime_registry& r, std::shared_ptr<device_pool> const& p);

/// Size of the default runtime: TESSERA_NUM_DEVICES, else the number of cores.
inline int default_device_count() {
  if (char const* env = std::getenv("TESSERA_NUM_DEVICES"); env && *env) {
    char* end = nullptr;
    long const n = std::strtol(env, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096)
      throw std::invalid_argument(std::string("tessera: TESSERA_NUM_DEVICES='") + env +
                                  "' is not a device count between 1 and 4096");
    return static_cast<int>(n);
  }
  unsigned const hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

/// The pool new meshes use on this host thread: the innermost live runtime this thread made;
/// else the process default, the oldest live runtime (usually main's); else one made on
/// first use with default_device_count() devices. Per thread, as jax.default_device is.
TESSERA_LINKAGE std::shared_ptr<device_pool> current_pool();

/// The pool with this id() if it still lives (a mesh names the runtime it was made on).
TESSERA_LINKAGE std::shared_ptr<device_pool> pool_by_id(std::uint64_t id);
}  // namespace detail

/// A set of logical CPU devices, one std::thread each (`jax_num_cpu_devices=N`).
/// While it lives it is the current runtime of the host thread that made it (and of host
/// threads that made none, if it is the oldest live one): meshes made meanwhile use its
/// devices, and so does everything computed on them. Arrays keep the threads alive, so an
/// array may outlive the runtime object that made it.
class runtime {
 public:
  /// N logical devices.
  explicit runtime(int num_devices) : pool_(std::make_shared<detail::device_pool>(num_devices)) {
    auto& r = detail::registry();
    std::lock_guard lock(r.mutex);
    r.live.push_back({pool_, std::this_thread::get_id()});
    detail::remember_pool(r, pool_);
  }
  /// As many devices as TESSERA_NUM_DEVICES says, else one per core.
  runtime() : runtime(detail::default_device_count()) {}
  runtime(runtime const&) = delete;
  runtime& operator=(runtime const&) = delete;
  ~runtime() {
    auto& r = detail::registry();
    std::lock_guard lock(r.mutex);
    auto it = std::find_if(r.live.begin(), r.live.end(), [&](auto const& e) { return e.pool == pool_; });
    if (it != r.live.end()) r.live.erase(it);
  }

  /// len(jax.devices()): every process's devices once processes joined (tessera/distributed.hpp).
  int device_count() const { return pool_->global_size(); }
  /// jax.local_device_count(): this process's devices.
  int local_device_count() const { return pool_->size(); }
  /// A number naming this runtime in messages (`runtime 2 (4 devices)`).
  std::uint64_t id() const { return pool_->id(); }
  /// The underlying pool, to run per-device code directly.
  detail::device_pool& pool() const { return *pool_; }

 private:
  std::shared_ptr<detail::device_pool> pool_;
};

/// jax.device_count(): devices of the current runtime, of every process once processes joined.
inline int device_count() { return detail::current_pool()->global_size(); }

/// jax.local_device_count(): the current runtime's devices in this process.
inline int local_device_count() { return detail::current_pool()->size(); }

/// jax.devices(): ids of the current runtime's devices (of every process).
inline std::vector<int> devices() {
  std::vector<int> ids(static_cast<std::size_t>(device_count()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  return ids;
}

/// jax.local_devices(): ids of this process's devices.
inline std::vector<int> local_devices() {
  auto const pool = detail::current_pool();
  std::vector<int> ids(static_cast<std::size_t>(pool->size()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = pool->first_id() + static_cast<int>(i);
  return ids;
}

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS
namespace detail {

TESSERA_LINKAGE void remember_pool(runtime_registry& r, std::shared_ptr<device_pool> const& p) {
  std::erase_if(r.known, [](auto const& w) { return w.expired(); });
  r.known.push_back(p);
}

TESSERA_LINKAGE std::shared_ptr<device_pool> current_pool() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  auto const me = std::this_thread::get_id();
  for (auto it = r.live.rbegin(); it != r.live.rend(); ++it)
    if (it->owner == me) return it->pool;
  if (!r.live.empty()) return r.live.front().pool;
  if (!r.fallback) {
    r.fallback = std::make_shared<device_pool>(default_device_count());
    remember_pool(r, r.fallback);
  }
  return r.fallback;
}

TESSERA_LINKAGE std::shared_ptr<device_pool> pool_by_id(std::uint64_t id) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  for (auto const& w : r.known)
    if (auto p = w.lock(); p && p->id() == id) return p;
  return nullptr;
}

}  // namespace detail
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
