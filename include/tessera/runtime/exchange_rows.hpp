#pragma once
// The staging bytes of an exchange between processes (reshards and sums of partial results across
// processes): filled before they are read, so never cleared, and kept by the device pool from one
// exchange to the next, so that an exchange does not fault in fresh pages each time.

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace tessera::detail {

/// std::allocator whose value-initialisation of a trivial element does nothing: resize() leaves
/// new bytes as they are.
template <class T>
struct uninitialized_allocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = uninitialized_allocator<U>;
  };
  uninitialized_allocator() = default;
  template <class U>
  uninitialized_allocator(uninitialized_allocator<U> const&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialised: left as is
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// Bytes that resize() does not clear.
using byte_row = std::vector<std::byte, uninitialized_allocator<std::byte>>;

/// The staging bytes of an exchange between processes: regions packed before they are sent
/// (those not contiguous in their block) and regions received before they are unpacked or summed.
struct exchange_rows {
  byte_row packed, staged;

  /// Empties both, keeping their memory.
  void reset() {
    packed.clear();
    staged.clear();
  }
  /// Bytes held in all (capacity), to bound what the pool keeps.
  std::size_t capacity() const { return packed.capacity() + staged.capacity(); }
};

}  // namespace tessera::detail
