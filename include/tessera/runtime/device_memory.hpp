#pragma once
// A device's memory: blocks freed by its arrays are kept and handed out again,
// as XLA's BFC allocator and PyTorch's caching allocator do. A reused block was
// first touched by this device's thread, so it stays near the device's core, and
// a new array costs no page faults (measured here: 180 ms of faults for a fresh
// 64 MiB buffer, 3 ms to copy into a touched one).

#include <bit>
#include <cstddef>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera::detail {

/// The cache of freed blocks of one device (thread-safe: arrays die on any thread).
class device_memory {
 public:
  static constexpr std::size_t alignment = 64;
  /// Blocks of this many bytes or more start on a page (4 KiB), so that a checkpoint writes them
  /// to disk with O_DIRECT straight from device memory (checkpoint/raw_io.hpp), not through a
  /// bounce buffer: a 1 GiB save took 0.94-1.05 s with 64-byte alignment, 0.59-0.64 s with pages
  /// (bench/RESULTS.md, "Page-aligned blocks"). The page costs at most 1.6% of such a block.
  static constexpr std::size_t page_aligned_from = std::size_t{256} << 10;
  /// The alignment of a block of size class `cls`: 64 bytes, or a page from page_aligned_from.
  static constexpr std::size_t alignment_of(std::size_t cls) { return cls >= page_aligned_from ? 4096 : alignment; }
  /// Most bytes kept per device; blocks freed past it go back to the system.
  static constexpr std::size_t default_cache_limit = std::size_t{512} << 20;

  device_memory() = default;
  device_memory(device_memory const&) = delete;
  device_memory& operator=(device_memory const&) = delete;
  ~device_memory() { trim(); }

  /// The largest request: no allocation can be larger, and up to it a size class cannot wrap.
  static constexpr std::size_t max_bytes = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

  /// Size class of a request: the next of 4 steps per power of two (at most 25% slack).
  /// Throws std::length_error past max_bytes, where rounding up would wrap to a small class.
  static std::size_t size_class(std::size_t bytes) {
    if (bytes <= alignment) return alignment;
    if (bytes > max_bytes)
      throw std::length_error("tessera: device memory: a request of " + std::to_string(bytes) +
                              " bytes is more than std::ptrdiff_t can count (" + std::to_string(max_bytes) + ")");
    std::size_t const p = std::bit_floor(bytes - 1);  // largest power of two < bytes
    std::size_t const step = p / 4 < alignment ? alignment : p / 4;
    return (bytes + step - 1) / step * step;
  }

  /// A block of at least `bytes`, aligned to alignment_of(its class); its capacity is size_class(bytes).
  void* allocate(std::size_t bytes) {
    std::size_t const cls = size_class(bytes);
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
        return p;
      }
    }
    return ::operator new(cls, std::align_val_t{alignment_of(cls)});
  }

  /// Returns a block from allocate(bytes) for reuse.
  void release(void* p, std::size_t bytes) noexcept {
    std::size_t const cls = size_class(bytes);
    {
      std::lock_guard lock(mutex_);
      if (cached_ + cls <= limit_) {
        try {
          free_[cls].push_back(p);
          cached_ += cls;
          return;
        } catch (...) {
          // no room to remember it: give it back below
        }
      }
    }
    ::operator delete(p, std::align_val_t{alignment_of(cls)});
  }

  /// Gives every cached block back to the system.
  void trim() noexcept {
    std::lock_guard lock(mutex_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) ::operator delete(p, std::align_val_t{alignment_of(cls)});
    free_.clear();
    cached_ = 0;
  }

  /// Bytes held in the cache now.
  std::size_t cached_bytes() const {
    std::lock_guard lock(mutex_);
    return cached_;
  }
  /// Sets the most bytes kept (0 turns caching off) and trims to it.
  void set_cache_limit(std::size_t bytes) {
    {
      std::lock_guard lock(mutex_);
      limit_ = bytes;
    }
    if (cached_bytes() > bytes) trim();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::size_t limit_ = default_cache_limit;
};

}  // namespace tessera::detail
