#pragma once
// Shared machinery of the factories: which pool, device id -> position, and
// filling every device's block in parallel on the device's own thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/core/sharding_layout.hpp"
#include "tessera/detail/erased_call.hpp"
#include "tessera/detail/linkage.hpp"
#include "tessera/runtime/runtime.hpp"
#include "tessera/runtime/team.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera::detail {

/// The runtime a sharding's mesh was made on (0: none named).
template <class S>
std::uint64_t runtime_id_of(S const& s) {
  if constexpr (requires { s.mesh().runtime_id(); }) return s.mesh().runtime_id();
  else return 0;
}

/// The pool of the runtime numbered `id` (0: the current one) and device ids `ids`.
TESSERA_LINKAGE std::shared_ptr<device_pool> pool_for_devices(std::uint64_t id, std::vector<int> const& ids, char const* where);
/// Ends the job (the distributed runtime's MPI_Abort), naming `where` and `error`: this process
/// failed where the other processes wait for it in an exchange. Nothing without that runtime.
TESSERA_LINKAGE void end_job_before_exchange(device_pool& pool, char const* where, char const* error);

/// The pool a sharding's devices belong to (its mesh's runtime, else the current one),
/// checked to hold every device the sharding names.
template <class S>
std::shared_ptr<device_pool> pool_for(S const& s, char const* where) {
  return pool_for_devices(runtime_id_of(s), s.device_ids(), where);
}

/// Refuses work whose devices exchange data when some of them are another process's: the
/// exchanges between processes are not done yet, and waiting for devices that never come here
/// would hang (docs/across-processes.md).
inline void require_one_process(device_pool const& pool, std::vector<int> const& ids, char const* where) {
  for (int d : ids)
    if (!pool.is_local(d))
      throw std::runtime_error(std::string("tessera::") + where + ": the mesh has device " + std::to_string(d) +
                               " of another process (this process has devices " + std::to_string(pool.first_id()) +
                               " to " + std::to_string(pool.first_id() + pool.size() - 1) +
                               "); collectives between processes are not done yet: use a mesh of this process's "
                               "devices, or gather with tessera::process_allgather");
}

/// An argument of jit or shard_map must live on the devices it is computed on (`pool`); JAX too
/// refuses arrays committed to other devices there. Moving it is the user's explicit device_put.
template <class A>
void check_argument_pool(A const& x, std::shared_ptr<device_pool> const& pool, char const* where, std::size_t index) {
  if (x.pool() != pool)
    throw std::invalid_argument(std::string("tessera::") + where + ": argument " + std::to_string(index) +
                                " lives on " + x.pool()->name() + " but the computation runs on " + pool->name() +
                                "; arrays of two runtimes are on different devices: device_put it onto the mesh first");
}

/// The same against the runtime of sharding s's mesh.
template <class A, class S>
void check_argument_runtime(A const& x, S const& s, char const* where, std::size_t index) {
  check_argument_pool(x, pool_for(s, where), where, index);
}

/// Each device id's position in `ids` (-1 for the pool's devices `ids` does not list): how a
/// device running its part of a dispatch finds its block.
inline std::vector<int> positions_by_device(std::vector<int> const& ids, int global_size) {
  std::vector<int> pos_of(static_cast<std::size_t>(global_size), -1);
  for (std::size_t p = 0; p < ids.size(); ++p) pos_of[static_cast<std::size_t>(ids[p])] = static_cast<int>(p);
  return pos_of;
}

/// The part of build_array that runs on the devices, compiled once per element type and rank:
/// each device of this process in the layout `v` allocates its block of `shape` (p its
/// position, into `buffers[p]`) and fills it with `fill(ctx, p, block, out)`; empty blocks only
/// if fill_empty.
template <class T, std::size_t N>
void fill_blocks(device_pool& pool, sharding_layout_view const& v, shape_t<N> const& shape,
                 std::vector<device_buffer<T>>& buffers, char const* where, bool fill_empty,
                 void (*fill)(void*, std::size_t, std::array<slice, N> const&, T*), void* ctx) {
  std::vector<int> const& ids = *v.ids;
  std::vector<std::array<slice, N>> const blocks = view_blocks<N>(v, shape);
  std::vector<int> const pos_of = positions_by_device(ids, pool.global_size());  // run skips other processes' devices
  trace_label const label = tracing() ? this_trace_label : trace_label{};
  pool.run(std::span<int const>(ids), [&](int d) {
    std::size_t const p = static_cast<std::size_t>(pos_of[static_cast<std::size_t>(d)]);
    auto const& block = blocks[p];
    device_buffer<T> buf(element_count(block_shape(block)), device_buffer<T>::uninitialized, &pool.memory(d));
    // A device_put from the host is a transfer; a reshard or a sum of partial results says what
    // it is through trace_as; everything else that makes an array is evaluation.
    trace_span span(label.category ? label.category : std::string_view(where) == "device_put" ? "transfer" : "evaluate",
                    label.category ? label.name.c_str() : where, buf.size() * sizeof(T));
    if (span.active() && !label.detail.empty()) span.detail(label.detail);
    if (fill_empty || buf.size() != 0) fill(ctx, p, block, buf.data());
    buffers[p] = std::move(buf);
  });
}

/// A new array's storage on sharding s's pool (`pool` when the caller has it), one empty
/// buffer per device. Every array is made here: no shape whose element or byte count wraps
/// gets blocks.
template <class T, std::size_t N, class S>
std::shared_ptr<array_storage<T, N, S>> new_storage(S const& s, shape_t<N> const& shape, char const* where,
                                                    std::shared_ptr<device_pool> pool = nullptr) {
  (void)checked_element_count<T>(shape, where);
  if (!pool) pool = pool_for(s, where);
  auto st = std::make_shared<array_storage<T, N, S>>(array_storage<T, N, S>{s, shape, std::move(pool), {}});
  st->buffers.resize(s.num_devices());
  return st;
}

/// build_array's body, compiled once per (T, N, S) rather than once per fill (programs make
/// hundreds of fills; issue 14), and small: the storage (on `pool` when the caller has it),
/// then fill_blocks.
template <class T, std::size_t N, class S>
array<T, N, S> build_array_erased(S const& s, shape_t<N> const& shape, char const* where, bool fill_empty,
                                  void (*fill)(void*, std::size_t, std::array<slice, N> const&, T*), void* ctx,
                                  std::shared_ptr<device_pool> pool = nullptr) {
  auto st = new_storage<T, N, S>(s, shape, where, std::move(pool));
  fill_blocks<T, N>(*st->pool, s.layout_view(), shape, st->buffers, where, fill_empty, fill, ctx);
  return array<T, N, S>(std::move(st));
}

/// build_array_erased on the sharding of type S over mesh m, made here: the callers (one per
/// expression type) then hold no copy of the mesh to make and destroy.
template <class T, std::size_t N, class S>
array<T, N, S> build_array_erased_on(typename S::mesh_type const& m, shape_t<N> const& shape, char const* where,
                                     bool fill_empty, void (*fill)(void*, std::size_t, std::array<slice, N> const&, T*),
                                     void* ctx) {
  return build_array_erased<T, N, S>(S(m), shape, where, fill_empty, fill, ctx);
}

/// Builds an array whose block on each device is written by `fill(pos, block, out)` on that
/// device's thread, into a fresh, not yet touched buffer (so the fill is the first touch).
/// Empty blocks are filled only when FillEmpty (out is then null).
template <class T, std::size_t N, class S, bool FillEmpty = false, class Fill>
array<T, N, S> build_array(S const& s, shape_t<N> const& shape, char const* where, Fill&& fill) {
  return build_array_erased<T, N, S>(
      s, shape, where, FillEmpty, &call_erased<std::remove_reference_t<Fill>, std::size_t, std::array<slice, N> const&, T*>,
      erased_context(fill));
}

/// body(), for an operation whose processes exchange blocks (`across`): a failure on one process
/// only (a device's allocation, an MPI error) would leave the others waiting in an exchange, so
/// it ends the job instead, as a failed shard_map does. A collective_mismatch is every
/// process's, and is thrown as it is.
template <class Body>
auto ending_job_on_failure(device_pool& pool, bool across, char const* where, Body&& body) {
  try {
    return body();
  } catch (collective_mismatch const&) {
    throw;
  } catch (std::exception const& e) {
    if (across) end_job_before_exchange(pool, where, e.what());
    throw;
  }
}

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE void end_job_before_exchange(device_pool& pool, char const* where, char const* error) {
  if (pool.abort_processes)
    pool.abort_processes(std::string("a ") + where + " across processes failed on this process, which the others wait for: " + error);
}

TESSERA_LINKAGE std::shared_ptr<device_pool> pool_for_devices(std::uint64_t id, std::vector<int> const& ids, char const* where) {
  auto pool = id != 0 ? pool_by_id(id) : current_pool();
  if (!pool)
    throw std::invalid_argument(std::string("tessera::") + where + ": the mesh was made on runtime " +
                                std::to_string(id) +
                                ", which no longer exists (its runtime object and every array on it are gone); "
                                "make the mesh again while a runtime lives");
  long long highest = -1;
  for (int d : ids) highest = d > highest ? d : highest;
  if (highest >= pool->global_size())
    throw std::invalid_argument(std::string("tessera::") + where + ": the sharding uses device " +
                                std::to_string(highest) + " but " + pool->name() + " has devices 0 to " +
                                std::to_string(pool->global_size() - 1) + "; create tessera::runtime{" +
                                std::to_string(highest + 1) + "} (or more) before making the mesh");
  return pool;
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera::detail
