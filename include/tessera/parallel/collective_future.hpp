#pragma once
// The handle of an asynchronous collective (parallel/async_collectives.hpp), and how a
// collective's input is kept alive while the collective is in flight.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "tessera/parallel/collectives.hpp"
#include "tessera/parallel/local_block.hpp"

namespace tessera {

namespace detail {
/// What a future does at wait(): complete the collective and make its value.
template <class R>
struct pending {
  virtual ~pending() = default;
  virtual R complete() = 0;
};
template <class R, class F>
struct pending_fn final : pending<R> {
  explicit pending_fn(F f) : f_(std::move(f)) {}
  R complete() override { return f_(); }
  F f_;
};
}  // namespace detail

/// The handle an asynchronous collective returns (JAX's all-gather-start result; the seed's
/// `future`): wait() blocks until the collective is done and gives its value, once. Move-only.
/// Dropped without wait(), the collective still completes for the other devices and its value
/// is discarded.
template <class R>
class collective_future {
 public:
  using value_type = R;
  collective_future() = default;
  explicit collective_future(std::unique_ptr<detail::pending<R>> p) : p_(std::move(p)) {}
  collective_future(collective_future&&) noexcept = default;
  collective_future& operator=(collective_future&&) noexcept = default;

  /// future.wait(): the collective's value, as the blocking call returns it.
  R wait() {
    if (!p_)
      throw std::logic_error(
          "tessera::collective_future::wait: this future holds no collective (it was waited on already, or moved "
          "from); wait() gives the value once");
    auto p = std::move(p_);
    return p->complete();
  }
  /// Whether wait() may still be called.
  bool valid() const noexcept { return p_ != nullptr; }

 private:
  std::unique_ptr<detail::pending<R>> p_;
};

namespace detail {

template <class F>
auto make_future(F f) {
  using R = std::invoke_result_t<F&>;
  return collective_future<R>(std::make_unique<pending_fn<R, F>>(std::move(f)));
}

/// A future whose value is already there (a collective that ran when it was started).
template <class R>
collective_future<std::remove_cvref_t<R>> ready_future(R&& value) {
  return make_future([v = std::forward<R>(value)]() mutable { return std::move(v); });
}

/// An asynchronous collective's input, owned for as long as a peer may read it.
template <class T>
struct held_input {
  T const* data = nullptr;
  std::shared_ptr<void const> keep;
};

/// Holds `v`'s elements (prepared by make_input as `in`): the copy make_input made, the block
/// itself (read-only; holding it keeps its memory), or else a copy, since the caller may change
/// its own container while the collective is in flight.
template <class V, class T, std::size_t N>
held_input<T> hold_input(V const& v, collective_input<T, N>&& in) {
  held_input<T> h;
  if (in.storage.data() != nullptr) {
    auto p = std::make_shared<result_buffer<T, N>>(std::move(in.storage));
    h.data = p->data();
    h.keep = std::move(p);
  } else if constexpr (is_local_block<std::remove_cvref_t<V>>::value) {
    auto p = std::make_shared<std::remove_cvref_t<V>>(v);
    h.data = p->data();
    h.keep = std::move(p);
  } else if (in.count() != 0) {
    auto p = std::make_shared<result_buffer<T, N>>(make_result<T>(in.shape));
    std::copy(in.data, in.data + in.count(), p->data());
    h.data = p->data();
    h.keep = std::move(p);
  }
  return h;
}

}  // namespace detail
}  // namespace tessera
