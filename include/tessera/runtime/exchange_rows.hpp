#pragma once
// The bytes of an exchange between processes (reshards and sums of partial results across
// processes): one row per process, filled before it is read, so never cleared, and kept by the
// device pool from one exchange to the next, so that a reshard does not fault in fresh pages each
// time (a fresh 4 MiB std::vector, zero-filled, was most of a 4 MiB reshard's cost).

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

/// One row of bytes per process: what this process sends to each (send[r]) and receives from each (recv[r]).
struct exchange_rows {
  std::vector<byte_row> send, recv;

  /// Empties every row for `processes` processes, keeping their memory.
  void reset(std::size_t processes) {
    send.resize(processes);
    recv.resize(processes);
    for (auto& r : send) r.clear();
    for (auto& r : recv) r.clear();
  }
  /// Bytes held in all (capacity), to bound what the pool keeps.
  std::size_t capacity() const {
    std::size_t n = 0;
    for (auto const& r : send) n += r.capacity();
    for (auto const& r : recv) n += r.capacity();
    return n;
  }
};

}  // namespace tessera::detail
