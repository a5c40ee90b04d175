#pragma once
// The handle of an asynchronous collective (parallel/async_collectives.hpp), and how a
// collective's input is kept alive while the collective is in flight.

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <cstdint>
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

/// ppermute's pairs checked against the axis size k: this device's (rank `me`) source, or -1,
/// and a hash of the pairs for the signature.
inline std::pair<long, std::uint64_t> permutation_source(std::vector<std::pair<int, int>> const& perm, std::size_t k,
                                                         std::size_t me, std::uint64_t h, char const* what) {
  std::vector<char> is_src(k, 0), is_dst(k, 0);
  long source = -1;
  long const n = static_cast<long>(k);
  for (auto const& [s, d] : perm) {
    if (s < 0 || s >= n || d < 0 || d >= n)
      throw std::invalid_argument(std::string(what) + ": the pair (" + std::to_string(s) + ", " + std::to_string(d) +
                                  ") is out of range for an axis of size " + std::to_string(k));
    if (is_src[static_cast<std::size_t>(s)]++)
      throw std::invalid_argument(std::string(what) + ": source " + std::to_string(s) + " appears twice in perm");
    if (is_dst[static_cast<std::size_t>(d)]++)
      throw std::invalid_argument(std::string(what) + ": destination " + std::to_string(d) + " appears twice in perm");
    if (static_cast<std::size_t>(d) == me) source = s;
    h = (h ^ (static_cast<std::uint64_t>(s) << 20 | static_cast<std::uint64_t>(d))) * std::uint64_t{1099511628211ull};
  }
  return {source, h};
}

}  // namespace detail
}  // namespace tessera
