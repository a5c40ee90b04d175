#pragma once
// The user's handle on a device pool, and which pool is current.

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessera/runtime/device_pool.hpp"

namespace tessera {

namespace detail {
struct runtime_registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<device_pool>> stack;  // innermost live runtime last
  std::shared_ptr<device_pool> fallback;            // created on first use when no runtime is live
};
inline runtime_registry& registry() {
  static runtime_registry r;
  return r;
}

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

/// The pool new arrays and meshes use: the innermost live runtime, else the default one.
inline std::shared_ptr<device_pool> current_pool() {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.stack.empty()) return r.stack.back();
  if (!r.fallback) r.fallback = std::make_shared<device_pool>(default_device_count());
  return r.fallback;
}
}  // namespace detail

/// A set of logical CPU devices, one std::thread each (`jax_num_cpu_devices=N`).
/// While it lives it is the current runtime: meshes and arrays created meanwhile use its devices.
/// Arrays keep the threads alive, so an array may outlive the runtime object that made it.
class runtime {
 public:
  /// N logical devices.
  explicit runtime(int num_devices) : pool_(std::make_shared<detail::device_pool>(num_devices)) {
    auto& r = detail::registry();
    std::lock_guard lock(r.mutex);
    r.stack.push_back(pool_);
  }
  /// As many devices as TESSERA_NUM_DEVICES says, else one per core.
  runtime() : runtime(detail::default_device_count()) {}
  runtime(runtime const&) = delete;
  runtime& operator=(runtime const&) = delete;
  ~runtime() {
    auto& r = detail::registry();
    std::lock_guard lock(r.mutex);
    auto it = std::find(r.stack.rbegin(), r.stack.rend(), pool_);
    if (it != r.stack.rend()) r.stack.erase(std::next(it).base());
  }

  /// len(jax.devices())
  int device_count() const { return pool_->size(); }
  /// The underlying pool, to run per-device code directly.
  detail::device_pool& pool() const { return *pool_; }

 private:
  std::shared_ptr<detail::device_pool> pool_;
};

/// jax.device_count(): devices of the current runtime.
inline int device_count() { return detail::current_pool()->size(); }

/// jax.devices(): ids of the current runtime's devices.
inline std::vector<int> devices() {
  std::vector<int> ids(static_cast<std::size_t>(device_count()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
  return ids;
}

}  // namespace tessera
