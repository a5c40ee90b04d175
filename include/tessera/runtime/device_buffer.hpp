#pragma once
// Memory owned by one device: 64-byte aligned (a cache line, and any SIMD width),
// allocated and first written by the device's own thread so that first touch
// places its pages near the core that will use them.

#include <cstddef>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/runtime/device_memory.hpp"

namespace tessera {

/// A device's buffer of `size` elements of T (the storage of one shard).
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "tessera: device buffers hold trivially copyable element types");

 public:
  static constexpr std::size_t alignment = detail::device_memory::alignment;
  /// Tag: allocate without writing; the caller's first write is then the first touch.
  struct uninitialized_t {};
  static constexpr uninitialized_t uninitialized{};

  device_buffer() = default;
  /// Allocates and zero-fills; call it on the owning device's thread.
  explicit device_buffer(std::size_t size, detail::device_memory* memory = nullptr)
      : device_buffer(size, uninitialized, memory) {
    if (size_ != 0) std::memset(static_cast<void*>(data_), 0, size_ * sizeof(T));  // the first touch
  }
  /// Allocates only (from `memory`'s cache when given); the owning thread must write every element before anyone reads it.
  device_buffer(std::size_t size, uninitialized_t, detail::device_memory* memory = nullptr)
      : size_(size), memory_(memory) {
    if (size_ == 0) return;
    // A byte count that wrapped would allocate a short block that the owner then fills past its end.
    if (size_ > detail::device_memory::max_bytes / sizeof(T))
      throw std::length_error("tessera::device_buffer: " + std::to_string(size_) + " elements of " +
                              std::to_string(sizeof(T)) + " bytes need more bytes than std::ptrdiff_t can count (" +
                              std::to_string(detail::device_memory::max_bytes) + ")");
    data_ = static_cast<T*>(memory_ ? memory_->allocate(bytes()) : ::operator new(bytes(), std::align_val_t{alignment}));
  }
  device_buffer(device_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), memory_(o.memory_) {}
  device_buffer& operator=(device_buffer&& o) noexcept {
    if (this != &o) {
      free();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      memory_ = o.memory_;
    }
    return *this;
  }
  ~device_buffer() { free(); }

  T* data() { return data_; }
  T const* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  std::size_t bytes() const { return size_ * sizeof(T); }
  void free() noexcept {
    if (!data_) return;
    if (memory_) memory_->release(data_, bytes());
    else ::operator delete(static_cast<void*>(data_), std::align_val_t{alignment});
    data_ = nullptr;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  detail::device_memory* memory_ = nullptr;
};

}  // namespace tessera
