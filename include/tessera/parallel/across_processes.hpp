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
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/device_pool.hpp"
#include "tessera/runtime/fnv1a.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// One device's part of a collective across processes.
struct process_contribution {
  std::uint64_t hash = 0;
  void const* data = nullptr;
  std::size_t bytes = 0;
};

/// The processes a collective over some mesh axes involves, from this process's side: those
/// that own a member of a group of one of its devices, and the handle of their communicator.
struct process_group {
  std::vector<std::size_t> members;  // processes, ascending (this one included)
  std::size_t handle = 0;            // for device_pool::gather_bytes (0: every process)
  bool local = false;                // only this process: no MPI at all
};

/// Bytes that are written before they are read, so never zero-filled (a std::vector's resize
/// cleared 4 MiB per collective: 18% of a 4 MiB psum between two processes).
class byte_buffer {
 public:
  void resize(std::size_t n) {
    if (n > capacity_) {
      data_.reset(new std::byte[n]);  // default-initialised: not cleared
      capacity_ = n;
    }
    size_ = n;
  }
  std::byte* data() { return data_.get(); }
  std::byte const* data() const { return data_.get(); }
  std::size_t size() const { return size_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0, size_ = 0;
};

/// The exchange buffers, kept by the device pool from one shard_map to the next.
struct exchange_buffers {
  byte_buffer send, gathered;
};

/// A shard_map run over a mesh that spans processes: what its devices in this process share.
struct process_run {
  std::vector<process_group> groups;          // by axis mask (bit a: mesh axis a); [0]: every process
  device_pool* pool = nullptr;
  std::size_t process = 0;                    // this process
  std::vector<std::size_t> process_of;        // each mesh position's process
  std::vector<std::size_t> index_in_process;  // its rank among that process's mesh positions
  std::vector<std::size_t> per_process;       // mesh positions in each process
  std::vector<process_contribution> mine;     // by team position (this process's devices)
  std::shared_ptr<exchange_buffers> buffers;  // taken from the pool, given back at the end
  std::byte const* gathered = nullptr;        // every member process's inputs
  std::vector<std::uint64_t> offset;          // each process's block in `gathered`

  process_run() = default;
  process_run(process_run&&) = default;
  process_run& operator=(process_run&&) = delete;
  ~process_run() {
    if (pool != nullptr && buffers) {
      std::lock_guard lock(pool->exchange_scratch_mutex);
      pool->exchange_scratch = std::move(buffers);
    }
  }
  std::exception_ptr error;                   // of the last exchange, for every local device
  bool mismatch = false;                      // that error was a collective_mismatch (thrown everywhere)
};

/// The state of a shard_map over mesh devices `ids` (axis sizes `sizes`), `local` of them in this
/// process. Called by every process together (it may make communicators).
inline process_run make_process_run(device_pool& pool, std::vector<int> const& ids, std::vector<std::size_t> const& sizes,
                                    std::size_t local) {
  if (!pool.gather_refusal.empty()) throw std::runtime_error("tessera::shard_map: " + pool.gather_refusal);
  if (!pool.gather_bytes || !pool.process_groups)
    throw std::logic_error(
        "tessera::shard_map: the mesh has devices of other processes but nothing joins the processes; make a "
        "tessera::distributed::runtime in every process (tessera/distributed.hpp)");
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
  {
    std::lock_guard lock(pool.exchange_scratch_mutex);
    r.buffers = std::static_pointer_cast<exchange_buffers>(std::exchange(pool.exchange_scratch, nullptr));
  }
  if (!r.buffers) r.buffers = std::make_shared<exchange_buffers>();
  // For each subset of the axes, the processes each process's groups involve. Where those sets
  // partition the processes, each set gets a communicator of its own (made once per mesh), and a
  // set of one process needs no MPI at all (a collective along an axis inside the processes).
  std::size_t const rank = sizes.size();
  std::size_t const masks = rank <= 4 ? std::size_t{1} << rank : 1;
  std::vector<int> colors(masks, -1);
  r.groups.resize(masks);
  std::vector<std::size_t> all(procs);
  for (std::size_t p = 0; p < procs; ++p) all[p] = p;
  for (std::size_t m = 0; m < masks; ++m) {
    std::vector<std::uint64_t> sets(procs, 0);  // bit r of sets[p]: process r takes part with p
    bool ok = procs <= 64;
    if (m == 0 || !ok) {
      r.groups[m].members = all;
      continue;
    }
    std::vector<std::size_t> axes;
    for (std::size_t a = 0; a < rank; ++a)
      if ((m >> a) & 1u) axes.push_back(a);
    for (std::size_t q = 0; q < ids.size(); ++q)
      for (std::size_t member : group_along(q, sizes, axes).members)
        sets[r.process_of[q]] |= std::uint64_t{1} << r.process_of[member];
    bool singletons = true;
    for (std::size_t p = 0; p < procs && ok; ++p) {
      singletons = singletons && sets[p] == (std::uint64_t{1} << p);
      for (std::size_t q = 0; q < procs; ++q)
        if (((sets[p] >> q) & 1u) && sets[q] != sets[p]) ok = false;  // not a partition
    }
    auto& g = r.groups[m];
    if (!ok) {
      g.members = all;
      continue;
    }
    for (std::size_t q = 0; q < procs; ++q)
      if ((sets[r.process] >> q) & 1u) g.members.push_back(q);
    g.local = singletons;
    if (!singletons) colors[m] = static_cast<int>(g.members.front());
  }
  std::vector<std::uint64_t> key(sizes.begin(), sizes.end());
  for (int d : ids) key.push_back(static_cast<std::uint64_t>(d));
  std::vector<std::size_t> const handles = pool.process_groups(key, colors);
  for (std::size_t m = 0; m < masks; ++m) r.groups[m].handle = handles[m];
  return r;
}

/// What a device is doing, as processes compare it.
inline std::uint64_t signature_hash(op_signature const& s) {
  std::uint64_t const fields[] = {s.seq, s.kind, s.axes, s.order, s.count, s.param, s.dtype};
  return fnv1a(fields, sizeof(fields));
}

/// The first device's part: every device's signature in the processes of the collective's
/// group, then their inputs.
inline void exchange_contributions(process_run& r, op_signature const& sig) {
  std::size_t const local = r.mine.size();
  std::size_t const procs = r.per_process.size();
  std::uint64_t const mask = sig.axes;
  process_group const& g = mask < r.groups.size() ? r.groups[mask] : r.groups[0];
  std::size_t const bytes = local == 0 ? 0 : r.mine[0].bytes;
  bool local_ok = true;
  for (std::size_t i = 1; i < local; ++i) local_ok = local_ok && r.mine[i].hash == r.mine[0].hash && r.mine[i].bytes == bytes;
  // 1. The signatures and sizes, over every process (whatever the group: a process that is in
  // another collective, or has returned, then meets this exchange, never a hang): the same
  // everywhere, or all of them throw. A process whose own devices disagree says so with a
  // signature no collective has (0), so the others throw too.
  std::uint64_t const head[2] = {local_ok ? r.mine[0].hash : 0, bytes};
  std::vector<std::uint64_t> counts(procs, 2 * sizeof(std::uint64_t));
  std::vector<std::uint64_t> heads(2 * procs);
  r.pool->gather_bytes(0, std::span<std::byte const>(reinterpret_cast<std::byte const*>(head), sizeof(head)), counts,
                       reinterpret_cast<std::byte*>(heads.data()));
  for (std::size_t p = 0; p < procs; ++p)
    if (heads[2 * p] != head[0] || heads[2 * p + 1] != head[1]) {
      r.mismatch = true;
      throw collective_mismatch(
          "tessera::shard_map across processes: the devices are not in the same collective: this process's "
          "devices are in " +
          (sig.describe ? sig.describe(sig) : std::string("a collective")) + ", and process " + std::to_string(p) +
          "'s " +
          (heads[2 * p + 1] != head[1] ? "give " + std::to_string(heads[2 * p + 1]) + " bytes against " +
                                             std::to_string(head[1])
                                       : "are in another one (or have returned)") +
          "; every process must run the same collectives in the same order");
    }
  if (!local_ok) {
    r.mismatch = true;
    throw collective_mismatch("tessera::shard_map across processes: this process's devices are not in the same "
                              "collective (" + (sig.describe ? sig.describe(sig) : std::string("a collective")) + ")");
  }
  // This process's inputs, contiguous: one device's input as it is, several packed.
  std::byte const* send = static_cast<std::byte const*>(local == 1 ? r.mine[0].data : nullptr);
  if (local != 1) {
    r.buffers->send.resize(local * bytes);
    for (std::size_t i = 0; i < local; ++i)
      if (bytes != 0) std::memcpy(r.buffers->send.data() + i * bytes, r.mine[i].data, bytes);
    send = r.buffers->send.data();
  }
  r.offset.assign(procs + 1, 0);
  if (g.local) {  // every member is a device of this process: no data between processes
    r.gathered = send;
    return;
  }
  // 2. The inputs of the group's processes (its own communicator, made once per mesh), every
  // device's in mesh order within its process, the processes in order.
  counts.resize(g.members.size());
  std::size_t total = 0;
  for (std::size_t j = 0; j < g.members.size(); ++j) {
    counts[j] = r.per_process[g.members[j]] * bytes;
    r.offset[g.members[j]] = total;
    total += counts[j];
  }
  r.buffers->gathered.resize(total);
  if (bytes != 0) r.pool->gather_bytes(g.handle, std::span<std::byte const>(send, local * bytes), counts, r.buffers->gathered.data());
  r.gathered = r.buffers->gathered.data();
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
    out[j] = reinterpret_cast<T const*>(r.gathered + r.offset[r.process_of[q]] +
                                        r.index_in_process[q] * count * sizeof(T));
  }
  return out;
}

}  // namespace tessera::detail
