#pragma once
// Memory owned by one device: 64-byte aligned (a cache line, and any SIMD width),
// allocated and first written by the device's own thread so that first touch
// places its pages near the core that will use them.

#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

namespace tessera {

/// A device's buffer of `size` elements of T (the storage of one shard).
template <class T>
class device_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "tessera: device buffers hold trivially copyable element types");

 public:
  static constexpr std::size_t alignment = 64;

  /// Tag: allocate without writing; the caller's first write is then the first touch.
  struct uninitialized_t {};
  static constexpr uninitialized_t uninitialized{};

  device_buffer() = default;
  /// Allocates and zero-fills; call it on the owning device's thread.
  explicit device_buffer(std::size_t size) : device_buffer(size, uninitialized) {
    if (size_ != 0) std::memset(static_cast<void*>(data_.get()), 0, size_ * sizeof(T));  // the first touch
  }
  /// Allocates only; the owning thread must write every element before anyone reads it.
  device_buffer(std::size_t size, uninitialized_t) : size_(size) {
    if (size_ == 0) return;
    data_.reset(static_cast<T*>(::operator new(size_ * sizeof(T), std::align_val_t{alignment})));
  }

  T* data() { return data_.get(); }
  T const* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  struct aligned_delete {
    void operator()(T* p) const { ::operator delete(static_cast<void*>(p), std::align_val_t{alignment}); }
  };
  std::unique_ptr<T, aligned_delete> data_;
  std::size_t size_ = 0;
};

}  // namespace tessera
