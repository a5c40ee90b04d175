#pragma once
// build_array for asynchronous dispatch: the fill is queued on the devices and the array is
// returned at once, a future (array::block_until_ready). The fill must own what it reads
// (operands by value: arrays share their blocks), since it runs after the caller has returned.

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera::detail {

/// A queued fill, type-erased: build_array_queued's body is compiled once per (T, N, S), not
/// once per fill (a program makes hundreds of fills: issue 31's compile time).
template <class T, std::size_t N>
struct queued_fill {
  virtual ~queued_fill() = default;
  virtual void operator()(std::size_t pos, std::array<slice, N> const& block, T* out) = 0;
};
template <class T, std::size_t N, class Fill>
struct queued_fill_of final : queued_fill<T, N> {
  explicit queued_fill_of(Fill f) : fill(std::move(f)) {}
  /// The fill made in place from `a` (its members): no move of it, and of what it owns, to inline.
  template <class... Args>
  explicit queued_fill_of(std::in_place_t, Args&&... a) : fill{std::forward<Args>(a)...} {}
  void operator()(std::size_t pos, std::array<slice, N> const& block, T* out) override { fill(pos, block, out); }
  Fill fill;
};

/// The queued part of build_array_queued: each device's block of `shape` in the layout `v` is
/// filled into a new buffer stored at `buffers`, which `keep` (the array's storage) owns; empty
/// blocks only if fill_empty. Compiled once per (T, N), not once per sharding: a program has
/// dozens of shardings (issue 31's compile time).
template <class T, std::size_t N>
std::shared_ptr<dispatch_completion> enqueue_fill(device_pool& pool, sharding_layout_view const& v, shape_t<N> const& shape,
                                                  std::vector<device_buffer<T>>* buffers, std::shared_ptr<void> keep,
                                                  char const* where, bool fill_empty,
                                                  std::shared_ptr<queued_fill<T, N>> fill) {
  struct task {
    std::shared_ptr<queued_fill<T, N>> fill;
    std::shared_ptr<void> keep;
    std::vector<device_buffer<T>>* buffers;
    device_pool* pool;
    std::vector<std::array<slice, N>> blocks;
    std::vector<int> pos_of;
    trace_label label;
    char const* where;
    bool fill_empty;
    void operator()(int d) {
      std::size_t const p = static_cast<std::size_t>(pos_of[static_cast<std::size_t>(d)]);
      auto const& block = blocks[p];
      device_buffer<T> buf(element_count(block_shape(block)), device_buffer<T>::uninitialized, &pool->memory(d));
      trace_span span(label.category ? label.category : "evaluate", label.category ? label.name.c_str() : where,
                      buf.size() * sizeof(T));
      if (span.active() && !label.detail.empty()) span.detail(label.detail);
      if (fill_empty || buf.size() != 0) (*fill)(p, block, buf.data());
      (*buffers)[p] = std::move(buf);
    }
  };
  std::vector<int> const& ids = *v.ids;
  auto t = std::make_shared<task>(task{std::move(fill), std::move(keep), buffers, &pool, view_blocks<N>(v, shape),
                                       positions_by_device(ids, pool.global_size()),
                                       tracing() ? this_trace_label : trace_label{}, where, fill_empty});
  return pool.enqueue(std::span<int const>(ids), where, std::move(t));
}

/// An erased fill called through build_array_erased's function pointer (once per (T, N)).
template <class T, std::size_t N>
void call_queued_fill(void* fill, std::size_t pos, std::array<slice, N> const& block, T* out) {
  (*static_cast<queued_fill<T, N>*>(fill))(pos, block, out);
}

/// build_array_queued's body, on an erased fill.
template <class T, std::size_t N, class S>
array<T, N, S> build_array_queued_erased(S const& s, shape_t<N> const& shape, char const* where, bool fill_empty,
                                         std::shared_ptr<queued_fill<T, N>> fill) {
  auto pool = pool_for(s, where);
  if (!pool->queues_here())
    return build_array_erased<T, N, S>(s, shape, where, fill_empty, &call_queued_fill<T, N>, fill.get(), pool);
  auto st = new_storage<T, N, S>(s, shape, where, pool);
  auto* buffers = &st->buffers;
  auto done = enqueue_fill<T, N>(*pool, s.layout_view(), shape, buffers, st, where, fill_empty, std::move(fill));
  return array<T, N, S>(std::move(st), std::move(done));
}

/// build_array_queued_erased on the sharding of type S over mesh m, made here: the callers (one
/// per expression type) then hold no copy of the mesh to make and destroy.
template <class T, std::size_t N, class S>
array<T, N, S> build_array_queued_on(typename S::mesh_type const& m, shape_t<N> const& shape, char const* where,
                                     bool fill_empty, std::shared_ptr<queued_fill<T, N>> fill) {
  return build_array_queued_erased<T, N, S>(S(m), shape, where, fill_empty, std::move(fill));
}

/// Builds an array whose block on each device is written by `fill(pos, block, out)` on that
/// device's thread, as build_array does, but queued (asynchronous dispatch) when the calling
/// thread may queue on the sharding's pool (device_pool::queues_here); otherwise it runs and
/// waits like build_array. `fill` is moved into the queued task and must own what it reads.
/// Empty blocks are filled only when FillEmpty (out is then null).
template <class T, std::size_t N, class S, bool FillEmpty = false, class Fill>
array<T, N, S> build_array_queued(S const& s, shape_t<N> const& shape, char const* where, Fill fill) {
  // Owned through the base class: the shared_ptr's control block is then one type per (T, N),
  // not one per fill (make_shared's would be some thirty functions per fill).
  std::shared_ptr<queued_fill<T, N>> erased(static_cast<queued_fill<T, N>*>(new queued_fill_of<T, N, Fill>(std::move(fill))));
  return build_array_queued_erased<T, N, S>(s, shape, where, FillEmpty, std::move(erased));
}

/// build_array_queued on the sharding of type S over mesh m (no sharding, nor copy of the mesh,
/// made in the caller: one per node type).
template <class T, std::size_t N, class S, class Fill>
array<T, N, S> build_array_queued_on(typename S::mesh_type const& m, shape_t<N> const& shape, char const* where,
                                     Fill fill) {
  std::shared_ptr<queued_fill<T, N>> erased(static_cast<queued_fill<T, N>*>(new queued_fill_of<T, N, Fill>(std::move(fill))));
  return build_array_queued_on<T, N, S>(m, shape, where, false, std::move(erased));
}

}  // namespace tessera::detail
