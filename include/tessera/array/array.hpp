#pragma once
// The sharded array: a global shape, a sharding, and one block per device in
// the memory of that device. An array made by a queued dispatch (asynchronous
// dispatch, runtime/dispatch_queue.hpp) is a future: its shape and sharding are
// known at once, and every read of its blocks waits until the devices wrote them.

#include <algorithm>
#include <concepts>
#include <array>
#include <cstddef>
#include <memory>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "tessera/core/tuple_traits.hpp"
#include "tessera/detail/linkage.hpp"
#include "tessera/detail/xtensor/xadapt.hpp"

#include "tessera/array/shape.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/dtype.hpp"
#include "tessera/core/sharding.hpp"
#include "tessera/runtime/device_buffer.hpp"
#include "tessera/runtime/device_pool.hpp"

namespace tessera {

/// A read-only view of one block, usable as an xtensor expression.
template <class T, std::size_t N>
using block_view = decltype(xt::adapt(std::declval<T const*>(), std::size_t{}, xt::no_ownership(),
                                      std::declval<shape_t<N>>()));

/// jax.Shard: one device's piece of an array.
template <class T, std::size_t N>
struct shard {
  /// shard.device (the device id)
  int device;
  /// shard.index: the block's slice in each dimension
  std::array<slice, N> index;
  /// shard.replica_id: 0 for the first copy of a block, 1.. for the others
  int replica_id;
  /// shard.data: the block, an xtensor view of the device's buffer
  block_view<T, N> data;
};

namespace detail {
/// Two NamedShardings of one mesh type whose specs mean one layout (P() and P(None, None)).
/// A concept of its own, so that clang checks the mesh types only for NamedShardings.
template <class S1, class S2>
concept same_layout_shardings = requires {
  S1::spec_dims;
  S2::spec_dims;
  typename S1::mesh_type;
  typename S2::mesh_type;
} && std::is_same_v<typename S1::mesh_type, typename S2::mesh_type> && same_layout(S1::spec_dims, S2::spec_dims);

/// An operation needed a block of another process's device; across processes, only
/// element-wise work on arrays laid out alike, device_put, make_array_from_process_local_data
/// and process_allgather are done so far (docs/across-processes.md).
[[noreturn]] TESSERA_LINKAGE void throw_not_addressable(int device, int first, int local);

/// What an array owns; shared between copies of the array, since arrays are immutable like jax.Array.
template <class T, std::size_t N, class S>
struct array_storage {
  S sharding;
  shape_t<N> shape;
  std::shared_ptr<device_pool> pool;
  std::vector<device_buffer<T>> buffers;  // one per device, in the sharding's device order; none at all
                                          // for a value explain() only planned (shape and layout)
};

/// A value that explain() only planned was read (autodiff/tracer.hpp's placeholder).
[[noreturn]] inline void throw_planned_value() {
  throw std::logic_error("tessera: a value that explain() only planned was read; the function given to "
                         "explain(grad(f), ...) must not read its traced values (print them, gather them)");
}
}  // namespace detail

/// jax.Array: an immutable N-d array of T laid out over devices by a sharding S.
/// Copies share the blocks (as Python references to one jax.Array do). Made by a queued
/// dispatch, it is a future (JAX's async dispatch): block_until_ready() waits for it, and
/// reading its blocks (to_host, addressable_shards, a computation on it) waits as needed.
template <element_type T, std::size_t N, sharding S>
class array {
  static_assert(diagnostic::spec_must_not_be_longer_than_rank<S::spec_size, N, (S::spec_size <= N)>::value);

 public:
  using value_type = T;
  using sharding_type = S;
  /// x.ndim
  static constexpr std::size_t rank = N;

  /// For the library's factories; users call device_put or make_array_from_callback.
  explicit array(std::shared_ptr<detail::array_storage<T, N, S>> st) : st_(std::move(st)) {}
  /// For the library's queued dispatches: blocks the devices write until `ready` finishes.
  array(std::shared_ptr<detail::array_storage<T, N, S>> st, std::shared_ptr<detail::dispatch_completion> ready)
      : st_(std::move(st)), ready_(std::move(ready)) {}
  /// Evaluates a sharded expression of this type (`tessera::array r = a + b;`, expr/evaluate.hpp).
  template <class E>
    requires requires(E const& e) {
      { e.evaluate() } -> std::same_as<array>;
    }
  array(E const& e) : array(e.evaluate()) {}  // NOLINT: an expression converts to its value
  /// The same values typed with another spec of the same layout (`P()` and `P(None, None)`
  /// are one layout but two C++ types), so `w = step(w);` compiles: the blocks are copied,
  /// device by device, with no communication.
  template <class S2>
    requires(!std::is_same_v<S2, S>) && detail::same_layout_shardings<S2, S>
  array(array<T, N, S2> const& o)  // NOLINT: the same layout converts implicitly
      : st_(std::make_shared<detail::array_storage<T, N, S>>(
            detail::array_storage<T, N, S>{S(o.sharding().mesh()), o.shape(), o.pool(), {}})) {
    auto const& ids = st_->sharding.device_ids();
    st_->buffers.reserve(ids.size());
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (!st_->pool->is_local(ids[p])) {  // another process's block: that process copies it
        st_->buffers.emplace_back();
        continue;
      }
      std::size_t const n = detail::element_count(detail::block_shape(st_->sharding.block(p, st_->shape)));
      device_buffer<T> b(n, device_buffer<T>::uninitialized, &st_->pool->memory(ids[p]));
      std::copy(o.block_data(p), o.block_data(p) + n, b.data());
      st_->buffers.push_back(std::move(b));
    }
  }

  /// x.shape
  shape_t<N> const& shape() const { return st_->shape; }
  /// x.ndim
  static constexpr std::size_t ndim() { return N; }
  /// x.size
  std::size_t size() const { return detail::element_count(st_->shape); }
  /// x.nbytes
  std::size_t nbytes() const { return size() * sizeof(T); }
  /// x.dtype, as JAX names it (`float32`).
  static constexpr std::string_view dtype() { return dtype_name<T>(); }
  /// x.sharding
  S const& sharding() const { return st_->sharding; }
  /// x.is_fully_replicated
  bool is_fully_replicated() const { return st_->sharding.is_fully_replicated(); }
  /// x.devices(): the sorted ids of the devices holding a block.
  std::vector<int> devices() const {
    auto ids = st_->sharding.device_ids();
    std::sort(ids.begin(), ids.end());
    return ids;
  }
  /// x.is_fully_addressable: every block is on this process's devices.
  bool is_fully_addressable() const {
    for (int d : st_->sharding.device_ids())
      if (!st_->pool->is_local(d)) return false;
    return true;
  }
  /// x.block_until_ready(): waits until the devices have computed the array; throws the
  /// device_error of the operation that made it (naming it) if a device failed.
  array const& block_until_ready() const {
    if (ready_) ready_->check(st_->pool->caller_spin());
    return *this;
  }
  /// x.is_ready(): whether the devices have computed the array (false while its dispatch is queued).
  bool is_ready() const { return !ready_ || ready_->finished(); }

  /// x.addressable_shards: one shard per device of this process, in the sharding's device order.
  std::vector<shard<T, N>> addressable_shards() const {
    block_until_ready();
    if (st_->buffers.empty()) detail::throw_planned_value();
    std::vector<shard<T, N>> out;
    auto const& ids = st_->sharding.device_ids();
    out.reserve(ids.size());
    for (std::size_t p = 0; p < ids.size(); ++p) {
      if (!st_->pool->is_local(ids[p])) continue;
      auto const index = st_->sharding.block(p, st_->shape);
      auto const& buf = st_->buffers[p];
      out.push_back(shard<T, N>{ids[p], index, st_->sharding.replica_id(p),
                                xt::adapt(buf.data(), buf.size(), xt::no_ownership(), detail::block_shape(index))});
    }
    return out;
  }

  /// The block held by the device at position `pos` of the sharding (library use). Another
  /// process's block is not here: an operation that needs it (a reshard, a reduction across
  /// processes) is refused instead of reading memory that is not there.
  T const* block_data(std::size_t pos) const {
    int const d = st_->sharding.device_ids()[pos];
    if (!st_->pool->is_local(d)) detail::throw_not_addressable(d, st_->pool->first_id(), st_->pool->size());
    // A device thread reading its own block of an array that a dispatch queued on this pool made:
    // its own part of that dispatch ran before the task now running (each device runs its queue
    // in order), so it reads at once, without waiting for its peers' parts. Anything else waits
    // (on a device thread too: what it waits for was queued before its own task), and a failed
    // part throws there.
    if (!own_block_written(d)) block_until_ready();
    if (st_->buffers.empty()) detail::throw_planned_value();
    return st_->buffers[pos].data();
  }
  /// The pool whose threads own the blocks.
  std::shared_ptr<detail::device_pool> const& pool() const { return st_->pool; }

 private:
  /// Whether the calling thread is device d's thread of the array's pool and has written d's
  /// block, without error, in the dispatch that makes the array.
  bool own_block_written(int d) const {
    if (!ready_) return false;
    auto const& me = detail::this_device_thread;
    return me.pool == st_->pool.get() && me.device == d - st_->pool->first_id() && ready_->ran_without_error(me.device);
  }

  std::shared_ptr<detail::array_storage<T, N, S>> st_;
  std::shared_ptr<detail::dispatch_completion> ready_;  // the queued dispatch that writes the blocks, if any
};

template <class T>
struct is_array : std::false_type {};
template <class T, std::size_t N, class S>
struct is_array<array<T, N, S>> : std::true_type {};
/// A tessera::array<...>.
template <class T>
concept array_type = is_array<std::remove_cvref_t<T>>::value;

/// jax.block_until_ready(x): waits for x, an array or a std::tuple of them (nested), and
/// returns it; throws the first failed operation's device_error. Other values pass through.
template <class X>
X const& block_until_ready(X const& x) {
  if constexpr (array_type<X>) {
    x.block_until_ready();
  } else if constexpr (requires { std::tuple_size<X>::value; std::get<0>(x); }) {
    tessera::detail::apply([](auto const&... e) { (tessera::block_until_ready(e), ...); }, x);
  }
  return x;
}

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

[[noreturn]] TESSERA_LINKAGE void detail::throw_not_addressable(int device, int first, int local) {
  throw std::runtime_error("tessera: this operation needs the block of device " + std::to_string(device) +
                           ", which belongs to another process (this process has devices " + std::to_string(first) +
                           " to " + std::to_string(first + local - 1) +
                           "); read it through an operation that moves blocks (device_put, a reduction, matmul), or "
                           "gather with tessera::process_allgather");
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
