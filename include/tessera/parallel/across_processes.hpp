#pragma once
// The collectives of a shard_map whose mesh spans processes (tessera/distributed.hpp), in two
// levels: this process's devices meet at a barrier over shared memory as always, then one of
// them makes the process's one exchange with the others (an MPI all-gather of every device's
// input, through the hook the distributed runtime sets on the device pool), and every device
// computes its result from the members' inputs with the same loops as within a process
// (runtime/collectives.hpp), so the bits are the same as on one process.
//
// Before the data, the processes exchange each device's signature of the collective (a hash of
// what it is and its size): devices in different collectives, or a different number of them,
// throw collective_mismatch in every process instead of waiting for each other.
//
// MPI is called from a device thread here (one per process at a time), so the distributed
// runtime asks MPI for MPI_THREAD_SERIALIZED.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/device_pool.hpp"
#include "tessera/runtime/fnv1a.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// One device's part of a collective across processes.
struct process_contribution {
  std::uint64_t hash = 0;
  void const* data = nullptr;
  std::size_t bytes = 0;
};

/// A shard_map run over a mesh that spans processes: what its devices in this process share.
struct process_run {
  device_pool* pool = nullptr;
  std::size_t process = 0;                    // this process
  std::vector<std::size_t> process_of;        // each mesh position's process
  std::vector<std::size_t> index_in_process;  // its rank among that process's mesh positions
  std::vector<std::size_t> per_process;       // mesh positions in each process
  std::vector<process_contribution> mine;     // by team position (this process's devices)
  std::vector<std::byte> send, gathered;
  std::vector<std::uint64_t> offset;          // each process's block in `gathered`
  std::exception_ptr error;                   // of the last exchange, for every local device
  bool mismatch = false;                      // that error was a collective_mismatch (thrown everywhere)
};

/// The state of a shard_map over mesh devices `ids`, `local` of them in this process.
inline process_run make_process_run(device_pool& pool, std::vector<int> const& ids, std::size_t local) {
  if (!pool.gather_bytes)
    throw std::logic_error(
        "tessera::shard_map: the mesh has devices of other processes but nothing joins the processes; make a "
        "tessera::distributed::runtime in every process (tessera/distributed.hpp)");
  if (!pool.gather_refusal.empty()) throw std::runtime_error("tessera::shard_map: " + pool.gather_refusal);
  process_run r;
  r.pool = &pool;
  std::size_t const procs = static_cast<std::size_t>(pool.process_count());
  r.per_process.assign(procs, 0);
  r.process_of.resize(ids.size());
  r.index_in_process.resize(ids.size());
  for (std::size_t q = 0; q < ids.size(); ++q) {
    std::size_t const p = static_cast<std::size_t>(pool.process_of(ids[q]));
    r.process_of[q] = p;
    r.index_in_process[q] = r.per_process[p]++;
    if (pool.is_local(ids[q])) r.process = p;
  }
  for (std::size_t p = 0; p < procs; ++p)
    if (r.per_process[p] == 0)
      throw std::invalid_argument("tessera::shard_map: the mesh has no device of process " + std::to_string(p) +
                                  "; a mesh that spans processes must hold devices of every process, since each "
                                  "process takes part in every collective");
  r.mine.resize(local);
  return r;
}

/// What a device is doing, as processes compare it.
inline std::uint64_t signature_hash(op_signature const& s) {
  std::uint64_t const fields[] = {s.seq, s.kind, s.axes, s.order, s.count, s.param, s.dtype};
  return fnv1a(fields, sizeof(fields));
}

/// The first device's part: every process's devices' signatures, then their inputs.
inline void exchange_contributions(process_run& r, op_signature const& sig) {
  std::size_t const local = r.mine.size();
  std::size_t const procs = r.per_process.size();
  // 1. The signatures and sizes: all of them equal, or every process throws.
  std::vector<std::uint64_t> head(2 * local);
  for (std::size_t i = 0; i < local; ++i) {
    head[2 * i] = r.mine[i].hash;
    head[2 * i + 1] = r.mine[i].bytes;
  }
  std::vector<std::uint64_t> counts(procs);
  std::size_t total_heads = 0;
  for (std::size_t p = 0; p < procs; ++p) {
    counts[p] = 2 * r.per_process[p] * sizeof(std::uint64_t);
    total_heads += 2 * r.per_process[p];
  }
  std::vector<std::uint64_t> heads(total_heads);
  r.pool->gather_bytes(std::span<std::byte const>(reinterpret_cast<std::byte const*>(head.data()), head.size() * 8),
                       counts, reinterpret_cast<std::byte*>(heads.data()));
  for (std::size_t j = 0, p = 0, k = 0; j < total_heads / 2; ++j, ++k) {
    while (k == r.per_process[p]) {
      ++p;
      k = 0;
    }
    if (heads[2 * j] != head[0] || heads[2 * j + 1] != head[1]) {
      r.mismatch = true;
      throw collective_mismatch(
          "tessera::shard_map across processes: the devices are not in the same collective: this process's first "
          "device is in " +
          (sig.describe ? sig.describe(sig) : std::string("a collective")) + ", and device " + std::to_string(k) +
          " of process " + std::to_string(p) +
          (heads[2 * j + 1] != head[1] ? " gives " + std::to_string(heads[2 * j + 1]) + " bytes against " +
                                             std::to_string(head[1])
                                       : " is in another one (or has returned)") +
          "; every process must run the same collectives in the same order");
    }
  }
  // 2. The inputs, every device's in mesh order within its process.
  std::size_t const bytes = r.mine.empty() ? 0 : r.mine[0].bytes;
  r.send.resize(local * bytes);
  for (std::size_t i = 0; i < local; ++i)
    if (bytes != 0) std::memcpy(r.send.data() + i * bytes, r.mine[i].data, bytes);
  r.offset.assign(procs + 1, 0);
  for (std::size_t p = 0; p < procs; ++p) {
    counts[p] = r.per_process[p] * bytes;
    r.offset[p + 1] = r.offset[p] + counts[p];
  }
  r.gathered.resize(r.offset[procs]);
  if (bytes != 0) r.pool->gather_bytes(std::span<std::byte const>(r.send), counts, r.gathered.data());
}

/// The inputs of every member of group g, in rank order, for the collective `sig` this device
/// (frame f) is in with `in` (bytes of it). Every local device calls it at once.
template <class T>
std::vector<T const*> inputs_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in,
                                              std::size_t count) {
  process_run& r = *f.xp;
  std::size_t const i = f.team_pos;
  r.mine[i] = process_contribution{signature_hash(sig), in, count * sizeof(T)};
  f.t->arrive_and_wait(i);  // every local device has published its input
  if (i == 0) {
    r.error = nullptr;
    r.mismatch = false;
    try {
      exchange_contributions(r, sig);
    } catch (...) {
      r.error = std::current_exception();
    }
  }
  f.t->arrive_and_wait(i);  // the exchange is done (or failed, for all of them)
  if (r.error) std::rethrow_exception(r.error);
  std::vector<T const*> out(g.size());
  for (std::size_t j = 0; j < g.size(); ++j) {
    std::size_t const q = g.members[j];
    out[j] = reinterpret_cast<T const*>(r.gathered.data() + r.offset[r.process_of[q]] +
                                        r.index_in_process[q] * count * sizeof(T));
  }
  return out;
}

}  // namespace tessera::detail
