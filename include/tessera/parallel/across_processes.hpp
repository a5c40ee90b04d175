#pragma once
// The collectives of a shard_map whose mesh spans processes (tessera/distributed.hpp), in two
// levels: this process's devices meet at a barrier over shared memory as always, then one of
// them makes the process's one MPI call for the collective (through the hooks the distributed
// runtime sets on the device pool), and every device takes its result from it.
//
// Where the mesh's groups along the collective's axes are whole processes (every process holds
// the same number L of a group's devices, as consecutive ranks, in process order: a 1-D mesh of
// every device, or the rows of one over processes), the MPI call is the one a user would write,
// over the group's communicator: psum and pmean MPI_Allreduce (after the L local inputs are
// summed over shared memory), pmax and pmin MPI_Allreduce with MPI_MAX and MPI_MIN, all_gather
// MPI_Allgather straight into the result, psum_scatter MPI_Reduce_scatter_block, all_to_all
// MPI_Alltoall of each process's pieces for the other. Elsewhere (other layouts, ppermute,
// element types MPI cannot add, sums in deterministic mode, and psum, pmean, pmax and pmin of at
// most 32 KiB of inputs in all, where OpenMPI's MPI_Iallreduce is the slower) every member's input is
// all-gathered and every device computes its result with the same loops as within a process
// (runtime/collectives.hpp), so the bits are the same as on one process.
//
// In checked mode (distributed::runtime::set_checked_collectives; on without NDEBUG), the
// processes first exchange each collective's signature (a hash of what it is and its size):
// devices in different collectives, or a different number of them, throw collective_mismatch
// in every process instead of waiting for each other. Unchecked, that exchange is not made.
//
// MPI is called from a device thread here (one per process at a time), so the distributed
// runtime asks MPI for MPI_THREAD_SERIALIZED.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <thread>
#include <vector>

#include "tessera/core/slice.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/copy_box.hpp"
#include "tessera/runtime/device_pool.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// One device's part of a collective across processes.
struct process_contribution {
  std::uint64_t hash = 0;
  void const* data = nullptr;
  std::size_t bytes = 0;
  void* out = nullptr;  // its result (the MPI-mapped collectives)
};

/// The processes a collective over some mesh axes involves, from this process's side: those
/// that own a member of a group of one of its devices, and the handle of their communicator.
struct process_group {
  std::vector<std::size_t> members;  // processes, ascending (this one included)
  std::size_t handle = 0;            // for device_pool::gather_bytes (0: every process)
  bool local = false;                // only this process: no MPI at all
  // Where every group along these axes is whole processes, each holding `per_process` of its
  // devices as consecutive ranks in its own device order, the processes in rank order: the
  // layout MPI's collectives take (0 otherwise). Then this process's devices are one group's
  // ranks [rank * per_process, + per_process), `rank` being this process's in the communicator.
  std::size_t per_process = 0;
  std::size_t rank = 0;
};

/// Bytes that are written before they are read, so never zero-filled (a std::vector's resize
/// cleared 4 MiB per collective: 18% of a 4 MiB psum between two processes).
class byte_buffer {
 public:
  byte_buffer() = default;
  byte_buffer(byte_buffer&& o) noexcept
      : data_(std::move(o.data_)), capacity_(std::exchange(o.capacity_, 0)), size_(std::exchange(o.size_, 0)) {}
  byte_buffer& operator=(byte_buffer&& o) noexcept {
    data_ = std::move(o.data_);
    capacity_ = std::exchange(o.capacity_, 0);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }
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
  std::size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0, size_ = 0;
};

/// The exchange buffers, kept by the device pool from one shard_map to the next.
struct exchange_buffers {
  byte_buffer send, gathered;  // the gathered path (devices read `gathered` after it returns)
  byte_buffer pack, unpack;    // the MPI-mapped collectives (done with before they return)

  /// A buffer of n bytes for an asynchronous collective's exchange (parallel/async_gathered.hpp),
  /// a kept one where one is large enough: fresh ones cost their page faults every time (a 16 MiB
  /// all_gather_async over 2 x 2 devices took 30% longer).
  byte_buffer take_async(std::size_t n) {
    byte_buffer b;
    {
      std::lock_guard lock(async_mutex_);
      auto best = async_free_.end();
      for (auto it = async_free_.begin(); it != async_free_.end(); ++it)
        if (it->capacity() >= n && (best == async_free_.end() || it->capacity() < best->capacity())) best = it;
      if (best == async_free_.end() && !async_free_.empty()) best = async_free_.begin();
      if (best != async_free_.end()) {
        b = std::move(*best);
        async_free_.erase(best);
      }
    }
    b.resize(n);
    return b;
  }
  /// Keeps `b` for a later take_async (a few: as many as are usually in flight at once).
  void give_async(byte_buffer&& b) {
    if (b.capacity() == 0) return;
    std::lock_guard lock(async_mutex_);
    if (async_free_.size() < async_kept) async_free_.push_back(std::move(b));
  }

 private:
  static constexpr std::size_t async_kept = 8;
  std::mutex async_mutex_;
  std::vector<byte_buffer> async_free_;
};

/// Where a mesh's devices are among the processes and which processes its collectives involve:
/// a function of the mesh alone, computed on its first shard_map and kept by the pool.
struct process_layout {
  std::vector<process_group> groups;          // by axis mask (bit a: mesh axis a); [0]: every process
  std::size_t process = 0;                    // this process
  std::vector<std::size_t> process_of;        // each mesh position's process
  std::vector<std::size_t> index_in_process;  // its rank among that process's mesh positions
  std::vector<std::size_t> per_process;       // mesh positions in each process
  std::vector<int> local_ids;                 // this process's device ids, in mesh order (the team)
};

/// The layouts of the meshes a pool's shard_maps ran on, newest last (kept in device_pool's
/// process_layouts; a few, since a program uses few meshes).
struct process_layout_cache {
  static constexpr std::size_t capacity = 16;
  struct entry {
    std::vector<std::size_t> sizes;
    std::vector<int> ids;
    std::shared_ptr<process_layout const> layout;
  };
  std::vector<entry> entries;
};

/// A shard_map run over a mesh that spans processes: what its devices in this process share.
struct process_run {
  std::shared_ptr<process_layout const> layout;
  std::vector<process_group> const& groups() const { return layout->groups; }
  device_pool* pool = nullptr;
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
  // The same, seen by an asynchronous collective's start (parallel/async_gathered.hpp): made by
  // whichever device starts last, possibly while the first one is in a blocking collective.
  struct sticky_flag {
    std::atomic<bool> value{false};
    sticky_flag() = default;
    sticky_flag(sticky_flag&& o) noexcept : value(o.value.load()) {}
  } async_mismatch;
  bool checked = true;                        // signatures compared between processes (set_checked_collectives)
  bool deterministic = false;                 // sums in rank order (set_deterministic_collectives)
};

/// The layout of mesh devices `ids` (axis sizes `sizes`) among the processes. Called by every
/// process together (it may make communicators).
inline process_layout make_process_layout(device_pool& pool, std::vector<int> const& ids,
                                          std::span<std::size_t const> sizes) {
  process_layout r;
  std::size_t const procs = static_cast<std::size_t>(pool.process_count());
  r.per_process.assign(procs, 0);
  r.process_of.resize(ids.size());
  r.index_in_process.resize(ids.size());
  for (std::size_t q = 0; q < ids.size(); ++q) {
    std::size_t const p = static_cast<std::size_t>(pool.process_of(ids[q]));
    r.process_of[q] = p;
    r.index_in_process[q] = r.per_process[p]++;
    if (pool.is_local(ids[q])) {
      r.process = p;
      r.local_ids.push_back(ids[q]);
    }
  }
  for (std::size_t p = 0; p < procs; ++p)
    if (r.per_process[p] == 0)
      throw std::invalid_argument("tessera::shard_map: the mesh has no device of process " + std::to_string(p) +
                                  "; a mesh that spans processes must hold devices of every process, since each "
                                  "process takes part in every collective");
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
    // Whether the groups are whole processes in MPI's layout (process_group::per_process).
    std::size_t const run = r.per_process[0];
    bool whole = true;
    for (std::size_t p = 0; p < procs; ++p) whole = whole && r.per_process[p] == run;
    for (std::size_t q = 0; q < ids.size(); ++q) {
      auto const members = group_along(q, sizes, axes).members;
      for (std::size_t member : members) sets[r.process_of[q]] |= std::uint64_t{1} << r.process_of[member];
      whole = whole && members.size() % run == 0;
      for (std::size_t j = 0; whole && j < members.size(); ++j) {
        std::size_t const first = members[j - j % run];
        whole = r.process_of[members[j]] == r.process_of[first] && r.index_in_process[members[j]] == j % run &&
                (j < run || j % run != 0 || r.process_of[first] > r.process_of[members[j - run]]);
      }
    }
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
    if (whole && !singletons) {
      g.per_process = run;
      g.rank = static_cast<std::size_t>(std::find(g.members.begin(), g.members.end(), r.process) - g.members.begin());
    }
  }
  std::vector<std::uint64_t> key(sizes.begin(), sizes.end());
  for (int d : ids) key.push_back(static_cast<std::uint64_t>(d));
  std::vector<std::size_t> const handles = pool.process_groups(key, colors);
  for (std::size_t m = 0; m < masks; ++m) {
    r.groups[m].handle = handles[m];
    if (!pool.collective_between_processes) r.groups[m].per_process = 0;  // only the gathered path
  }
  return r;
}

/// The state of a shard_map over mesh devices `ids` (axis sizes `sizes`), `local` of them in this
/// process. Called by every process together (a mesh's first call may make communicators).
inline process_run make_process_run(device_pool& pool, std::vector<int> const& ids, std::span<std::size_t const> sizes,
                                    std::size_t local) {
  if (!pool.gather_refusal.empty()) throw std::runtime_error("tessera::shard_map: " + pool.gather_refusal);
  if (!pool.gather_bytes || !pool.process_groups)
    throw std::logic_error(
        "tessera::shard_map: the mesh has devices of other processes but nothing joins the processes; make a "
        "tessera::distributed::runtime in every process (tessera/distributed.hpp)");
  // Refused here, on the calling thread and before any MPI call, not inside the body (a device's
  // failure there would end the job).
  if (pool.funneled_thread != std::thread::id{} && std::this_thread::get_id() != pool.funneled_thread)
    throw std::logic_error(
        "tessera: shard_map across processes was called from a thread other than the one that made the distributed "
        "runtime; under MPI_THREAD_FUNNELED only that thread may communicate across processes");
  process_run r;
  r.pool = &pool;
  r.checked = pool.checked_collectives.load();
  r.deterministic = pool.deterministic_collectives.load();
  {
    std::lock_guard lock(pool.exchange_scratch_mutex);
    r.buffers = std::static_pointer_cast<exchange_buffers>(std::exchange(pool.exchange_scratch, nullptr));
    if (auto const* cache = static_cast<process_layout_cache const*>(pool.process_layouts.get()))
      for (auto const& e : cache->entries)
        if (std::ranges::equal(e.sizes, sizes) && e.ids == ids) r.layout = e.layout;
  }
  if (!r.buffers) r.buffers = std::make_shared<exchange_buffers>();
  if (!r.layout) {
    // Every process meets its first shard_map on a mesh at the same point of the program, so all
    // of them compute the layout (and call process_groups) together; a layout dropped from the
    // cache and computed again makes no MPI call (the runtime keeps each mesh's communicators).
    r.layout = std::make_shared<process_layout const>(make_process_layout(pool, ids, sizes));
    std::lock_guard lock(pool.exchange_scratch_mutex);
    if (!pool.process_layouts) pool.process_layouts = std::make_shared<process_layout_cache>();
    auto& entries = static_cast<process_layout_cache*>(pool.process_layouts.get())->entries;
    if (entries.size() == process_layout_cache::capacity) entries.erase(entries.begin());
    entries.push_back({std::vector<std::size_t>(sizes.begin(), sizes.end()), ids, r.layout});
  }
  r.mine.resize(local);
  return r;
}

/// What a device is doing, as processes compare it.
inline std::uint64_t signature_hash(op_signature const& s) {
  // A word at a time (FNV-1a's byte loop cost 4% of a 4 KiB all_to_all between two processes).
  std::uint64_t h = 14695981039346656037ull;
  for (std::uint64_t w : {std::uint64_t{s.seq}, std::uint64_t{s.kind}, s.axes, s.order, s.count, s.param,
                          std::uint64_t{s.dtype}}) {
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

/// The signature hash this process's devices publish: needed to compare them with each other
/// (several devices) or with other processes (checked mode), not otherwise.
inline std::uint64_t published_hash(process_run const& r, op_signature const& s) {
  return r.checked || r.mine.size() > 1 ? signature_hash(s) : 0;
}

inline std::string describe_collective(op_signature const& sig) {
  return sig.describe ? sig.describe(sig) : std::string("a collective");
}

/// The processes a collective over sig's axes involves.
inline process_group const& group_for(process_run const& r, op_signature const& sig) {
  return sig.axes < r.groups().size() ? r.groups()[sig.axes] : r.groups()[0];
}

/// Whether this process's devices (their published signatures) are in the same collective.
inline bool local_devices_agree(process_run const& r) {
  for (std::size_t i = 1; i < r.mine.size(); ++i)
    if (r.mine[i].hash != r.mine[0].hash || r.mine[i].bytes != r.mine[0].bytes) return false;
  return true;
}

[[noreturn]] inline void throw_local_mismatch(op_signature const& sig) {
  throw collective_mismatch("tessera::shard_map across processes: this process's devices are not in the same "
                            "collective (" + describe_collective(sig) + ")");
}

/// Checked mode's exchange before a collective: every process's
/// signature and size, over every process whatever the group, so that a process in another
/// collective, or one that has returned, meets it instead of leaving the others waiting; the
/// same everywhere, or all of them throw collective_mismatch. A process whose own devices
/// disagree says so with a signature no collective has (0), so the others throw too.
inline void compare_between_processes(process_run const& r, bool local_ok, std::uint64_t hash, std::uint64_t bytes,
                                      op_signature const& sig) {
  std::size_t const procs = r.layout->per_process.size();
  std::uint64_t const head[2] = {local_ok ? hash : 0, bytes};
  std::vector<std::uint64_t> counts(procs, 2 * sizeof(std::uint64_t));
  std::vector<std::uint64_t> heads(2 * procs);
  r.pool->gather_bytes(0, std::span<std::byte const>(reinterpret_cast<std::byte const*>(head), sizeof(head)), counts,
                       reinterpret_cast<std::byte*>(heads.data()));
  for (std::size_t p = 0; p < procs; ++p)
    if (heads[2 * p] != head[0] || heads[2 * p + 1] != head[1]) {
      throw collective_mismatch(
          "tessera::shard_map across processes: the devices are not in the same collective: this process's "
          "devices are in " +
          describe_collective(sig) + ", and process " + std::to_string(p) + "'s " +
          (heads[2 * p + 1] != head[1] ? "give " + std::to_string(heads[2 * p + 1]) + " bytes against " +
                                             std::to_string(head[1])
                                       : "are in another one (or have returned)") +
          "; every process must run the same collectives in the same order");
    }
  if (!local_ok) throw_local_mismatch(sig);
}

/// compare_between_processes of the devices' published contributions (the first device's part);
/// a mismatch is noted in r.mismatch.
inline void compare_signatures(process_run& r, op_signature const& sig) {
  bool const local_ok = local_devices_agree(r);
  try {
    compare_between_processes(r, local_ok, r.mine.empty() ? 0 : r.mine[0].hash, r.mine.empty() ? 0 : r.mine[0].bytes,
                              sig);
  } catch (collective_mismatch const&) {
    r.mismatch = true;
    throw;
  }
}

/// The gathered path (the first device's part): the inputs of the group's processes (its own
/// communicator, made once per mesh), every device's in mesh order within its process, the
/// processes in order.
inline void gather_contributions(process_run& r, op_signature const& sig) {
  std::size_t const local = r.mine.size();
  std::size_t const procs = r.layout->per_process.size();
  process_group const& g = group_for(r, sig);
  std::size_t const bytes = local == 0 ? 0 : r.mine[0].bytes;
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
  std::vector<std::uint64_t> counts(g.members.size());
  std::size_t total = 0;
  for (std::size_t j = 0; j < g.members.size(); ++j) {
    counts[j] = r.layout->per_process[g.members[j]] * bytes;
    r.offset[g.members[j]] = total;
    total += counts[j];
  }
  r.buffers->gathered.resize(total);
  if (bytes != 0) r.pool->gather_bytes(g.handle, std::span<std::byte const>(send, local * bytes), counts, r.buffers->gathered.data());
  r.gathered = r.buffers->gathered.data();
}

/// The inputs of every member of group g, in rank order, for the collective `sig` this device
/// (frame f) is in with `in` (bytes of it): the gathered path. Every local device calls it at once.
template <class T>
std::vector<T const*> inputs_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in,
                                              std::size_t count) {
  process_run& r = *f.xp;
  // Unchecked, the end of the body has nothing to compare between processes (the local devices
  // have met at the end already) and no data.
  if (sig.kind == 0 && !r.checked) return std::vector<T const*>(g.size(), nullptr);
  std::size_t const i = f.team_pos;
  r.mine[i] = process_contribution{published_hash(r, sig), in, count * sizeof(T), nullptr};
  f.t->arrive_and_wait(i);  // every local device has published its input
  if (i == 0) {
    r.error = nullptr;
    r.mismatch = false;
    try {
      if (r.checked) compare_signatures(r, sig);
      else if (!local_devices_agree(r)) throw_local_mismatch(sig);
      gather_contributions(r, sig);
    } catch (...) {
      r.error = std::current_exception();
    }
  }
  f.t->arrive_and_wait(i);  // the exchange is done (or failed, for all of them)
  if (r.error) std::rethrow_exception(r.error);
  std::vector<T const*> out(g.size());
  for (std::size_t j = 0; j < g.size(); ++j) {
    std::size_t const q = g.members[j];
    out[j] = reinterpret_cast<T const*>(r.gathered + r.offset[r.layout->process_of[q]] +
                                        r.layout->index_in_process[q] * count * sizeof(T));
  }
  return out;
}

/// Element types MPI adds, compares and sends as themselves (tessera's dtype codes of them are
/// mapped to MPI's types by the distributed runtime); others take the gathered path.
template <class T>
inline constexpr bool mpi_reducible =
    (std::is_same_v<T, float> || std::is_same_v<T, double> || (std::is_integral_v<T> && !std::is_same_v<T, bool>)) &&
    sizeof(T) <= 8;

/// Bytes of local work (a device's input times the process's devices) up to which the first
/// device does every device's part of a mapped collective itself: two barriers instead of five,
/// which on few cores costs less than the parallel copies save.
inline constexpr std::size_t mapped_serial_bytes = 256 * 1024;

/// A collective mapped onto one MPI call per process (process_group::per_process != 0): every
/// local device publishes its input and output (r.mine); the first device makes `setup` (sizing
/// shared buffers) and, in checked mode, compares signatures; `prepare(i)` is device i's part of
/// the local work before the MPI call (a sum or a packing over shared memory), `call` the MPI
/// call, `finish(i)` device i's part after it; they read r.mine, not the caller's own pointers.
/// With one device per process there is no barrier; up to mapped_serial_bytes the first device
/// makes every part between two barriers; above, each device makes its own.
template <class Setup, class Prepare, class Call, class Finish>
void run_mapped(spmd_frame& f, op_signature const& sig, void const* in, std::size_t bytes, void* out, Setup&& setup,
                Prepare&& prepare, Call&& call, Finish&& finish) {
  process_run& r = *f.xp;
  std::size_t const i = f.team_pos;
  std::size_t const local = r.mine.size();
  r.mine[i] = process_contribution{published_hash(r, sig), in, bytes, out};
  auto all_of_it = [&] {
    if (r.checked) compare_signatures(r, sig);
    else if (!local_devices_agree(r)) throw_local_mismatch(sig);
    setup();
    for (std::size_t j = 0; j < local; ++j) prepare(j);
    call();
    for (std::size_t j = 0; j < local; ++j) finish(j);
  };
  if (local == 1) {
    r.mismatch = false;
    all_of_it();
    return;
  }
  f.t->arrive_and_wait(i);  // every local device has published
  if (bytes * local <= mapped_serial_bytes) {
    if (i == 0) {
      r.error = nullptr;
      r.mismatch = false;
      try {
        all_of_it();
      } catch (...) {
        r.error = std::current_exception();
      }
    }
    f.t->arrive_and_wait(i);  // every device's result is written (or none, for all of them)
    if (r.error) std::rethrow_exception(r.error);
    return;
  }
  if (i == 0) {
    r.error = nullptr;
    r.mismatch = false;
    try {
      if (r.checked) compare_signatures(r, sig);
      setup();
    } catch (...) {
      r.error = std::current_exception();
    }
  }
  f.t->arrive_and_wait(i);
  if (r.error) std::rethrow_exception(r.error);
  // Unchecked, each device sees the same published signatures: all throw, or none.
  if (!r.checked && !local_devices_agree(r)) throw_local_mismatch(sig);
  prepare(i);
  f.t->arrive_and_wait(i);
  if (i == 0) {
    try {
      call();
    } catch (...) {
      r.error = std::current_exception();
    }
  }
  f.t->arrive_and_wait(i);
  if (r.error) std::rethrow_exception(r.error);
  finish(i);
  f.t->arrive_and_wait(i);  // the first device's output and the shared buffers were read
}

inline constexpr auto no_step = [](auto&&...) {};

/// Bytes per piece from which all_to_all with several devices per process sends each piece on its
/// own, from input to output, rather than packing them into one MPI_Alltoallv (tests lower it).
inline std::atomic<std::size_t> pairwise_all_to_all_bytes{64 * 1024};

/// Bytes of a group's inputs in all up to which psum, pmean, pmax and pmin take the gathered path
/// even where MPI_Allreduce could be used: OpenMPI 4.1's nonblocking MPI_Iallreduce (libnbc) is
/// slower there than an MPI_Iallgather and a local sum (2 processes, polled, best of 3: 4 KiB
/// 2.6 us against 2.0 us, 16 KiB 3.4 against 3.3, 64 KiB 5.7 against 8.5), and the sum is then in
/// rank order, the single-process bits.
inline constexpr std::size_t gathered_reduce_bytes = 32 * 1024;

/// psum, pmean, pmax, pmin of `count` elements between processes: MPI_Allreduce of the sum of
/// this process's inputs (written into its first device's output), or the gathered path.
template <class T>
void all_reduce_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in, T* out,
                                 std::size_t count, reduce_op op) {
  process_run& r = *f.xp;
  process_group const& pg = group_for(r, sig);
  bool const sum = op == reduce_op::sum;
  bool const small = count * sizeof(T) * g.size() <= gathered_reduce_bytes;
  if constexpr (mpi_reducible<T>) {
    if (pg.per_process != 0 && !small && op != reduce_op::prod && !(sum && r.deterministic && g.size() > 2)) {
      std::size_t const local = r.mine.size();
      auto first_out = [&r] { return static_cast<T*>(r.mine[0].out); };
      run_mapped(
          f, sig, in, count * sizeof(T), out, no_step,
          [&](std::size_t i) {
            if (local == 1) return;
            slice const s = block_range(count, local, i);
            reduce_inputs<T>([&](std::size_t j) { return static_cast<T const*>(r.mine[j].data); }, local, op,
                             first_out() + s.start, s.start, s.stop - s.start);
          },
          [&] {
            device_pool::process_collective c;
            c.what = device_pool::process_collective::kind::all_reduce;
            c.op = static_cast<std::uint8_t>(sum ? 0 : op == reduce_op::max ? 1 : 2);
            c.dtype = dtype_code<T>();
            c.group = pg.handle;
            c.send = local == 1 ? in : nullptr;
            c.recv = first_out();
            c.count = count;
            r.pool->collective_between_processes(c);
          },
          [&](std::size_t i) {
            if (i != 0) std::copy(first_out(), first_out() + count, static_cast<T*>(r.mine[i].out));
          });
      return;
    }
  }
  auto const ins = inputs_across_processes<T>(f, g, sig, in, count);
  reduce_inputs<T>([&](std::size_t j) { return ins[j]; }, ins.size(), op, out, 0, count);
}

/// all_gather between processes: out[o][j][inner] = member j's in[o][inner]. With outer == 1 the
/// result is the members' inputs in rank order: MPI_Allgather of this process's inputs straight
/// into its first device's output; otherwise the gathered path.
template <class T>
void all_gather_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in, T* out,
                                 std::size_t outer, std::size_t inner) {
  process_run& r = *f.xp;
  process_group const& pg = group_for(r, sig);
  if (pg.per_process != 0 && outer == 1) {
    std::size_t const local = r.mine.size();
    std::size_t const bytes = inner * sizeof(T);
    std::size_t const total = inner * g.size();
    auto first_out = [&r] { return static_cast<T*>(r.mine[0].out); };
    run_mapped(
        f, sig, in, bytes, out, [&] { if (local > 1) r.buffers->pack.resize(local * bytes); },
        [&](std::size_t i) {
          if (local > 1 && bytes != 0) std::memcpy(r.buffers->pack.data() + i * bytes, r.mine[i].data, bytes);
        },
        [&] {
          std::byte const* send = local > 1 ? r.buffers->pack.data() : reinterpret_cast<std::byte const*>(in);
          if (bytes == 0) return;
          // Equal shares: on the stack for up to 64 processes (a 4 KiB all_gather is a couple of
          // microseconds; an allocation is a tenth of that).
          std::size_t const p = pg.members.size();
          std::array<std::uint64_t, 64> few;
          std::vector<std::uint64_t> many;
          std::span<std::uint64_t> counts(few.data(), std::min(p, few.size()));
          if (p > few.size()) {
            many.resize(p);
            counts = many;
          }
          std::fill(counts.begin(), counts.end(), std::uint64_t{local * bytes});
          r.pool->gather_bytes(pg.handle, std::span<std::byte const>(send, local * bytes), counts,
                               reinterpret_cast<std::byte*>(first_out()));
        },
        [&](std::size_t i) {
          if (i != 0) std::copy(first_out(), first_out() + total, static_cast<T*>(r.mine[i].out));
        });
    return;
  }
  auto const ins = inputs_across_processes<T>(f, g, sig, in, outer * inner);
  gather_inputs<T>([&](std::size_t j) { return ins[j]; }, ins.size(), out, outer, inner);
}

/// psum_scatter between processes (in is [outer][k * chunk]; out[o][:] = the sum over members of
/// in[o][rank * chunk, + chunk)): MPI_Reduce_scatter_block of this process's inputs, summed and
/// laid out by destination ([rank][outer][chunk]) unless one device's input is that already.
template <class T>
void reduce_scatter_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in, T* out,
                                     std::size_t outer, std::size_t chunk) {
  process_run& r = *f.xp;
  process_group const& pg = group_for(r, sig);
  std::size_t const k = g.size();
  if constexpr (mpi_reducible<T>) {
    if (pg.per_process != 0 && !(r.deterministic && k > 2)) {
      std::size_t const local = r.mine.size();
      bool const direct = local == 1 && outer == 1;
      std::size_t const piece = outer * chunk;  // elements each device keeps
      auto packed = [&r] { return reinterpret_cast<T*>(r.buffers->pack.data()); };
      auto received = [&r] { return reinterpret_cast<T const*>(r.buffers->unpack.data()); };
      run_mapped(
          f, sig, in, k * piece * sizeof(T), out,
          [&] {
            if (direct) return;
            r.buffers->pack.resize(k * piece * sizeof(T));
            if (local > 1) r.buffers->unpack.resize(local * piece * sizeof(T));
          },
          [&](std::size_t i) {
            if (direct) return;
            slice const ranks = block_range(k, local, i);
            for (std::size_t rank = ranks.start; rank < ranks.stop; ++rank)
              for (std::size_t o = 0; o < outer; ++o)
                reduce_inputs<T>([&](std::size_t j) { return static_cast<T const*>(r.mine[j].data); }, local,
                                 reduce_op::sum, packed() + (rank * outer + o) * chunk, (o * k + rank) * chunk, chunk);
          },
          [&] {
            device_pool::process_collective c;
            c.what = device_pool::process_collective::kind::reduce_scatter;
            c.dtype = dtype_code<T>();
            c.group = pg.handle;
            c.send = direct ? r.mine[0].data : packed();
            c.recv = local == 1 ? r.mine[0].out : static_cast<void*>(r.buffers->unpack.data());
            c.count = local * piece;
            r.pool->collective_between_processes(c);
          },
          [&](std::size_t i) {
            if (local > 1) std::copy(received() + i * piece, received() + (i + 1) * piece, static_cast<T*>(r.mine[i].out));
          });
      return;
    }
  }
  auto const ins = inputs_across_processes<T>(f, g, sig, in, outer * k * chunk);
  scatter_inputs<T>([&](std::size_t j) { return ins[j]; }, k, g.rank, out, outer, chunk);
}

/// all_to_all between processes (tiled, on a buffer of `shape`; see runtime/collectives.hpp):
/// MPI_Alltoall of each process's pieces for each other process, straight from the input into
/// the output where one device's pieces are contiguous there, else packed and unpacked.
template <class T>
void all_to_all_across_processes(spmd_frame& f, group const& g, op_signature const& sig, T const* in, T* out,
                                 std::span<std::size_t const> shape, std::size_t split, std::size_t concat) {
  process_run& r = *f.xp;
  process_group const& pg = group_for(r, sig);
  std::size_t const k = g.size();
  std::size_t count = 1;
  for (std::size_t e : shape) count *= e;
  if (pg.per_process != 0) {
    std::size_t const local = r.mine.size();
    // The piece each device sends each member: the shape with dimension `split` cut k ways.
    // Scalars first: the direct case (one device per process, pieces contiguous in the input and
    // the output) allocates nothing, since a small all_to_all costs about a microsecond.
    std::size_t pc = 1, before_split = 1, before_concat = 1;
    for (std::size_t a = 0; a < shape.size(); ++a) {
      std::size_t const e = a == split ? shape[a] / k : shape[a];
      pc *= e;
      if (a < split) before_split *= shape[a];
      if (a < concat) before_concat *= a == split ? e : shape[a];  // the output's shape before `concat`
    }
    bool const direct = local == 1 && before_split == 1 && before_concat == 1;
    std::size_t const block = local * local * pc;  // elements between two processes
    // Several devices per process, pieces contiguous on both sides and large: each piece goes
    // from its device's input straight into the other device's output, one message per pair of
    // devices (the process's own pieces are copied), instead of being packed before one
    // MPI_Alltoallv and unpacked after it (two copies that flat MPI ranks do not make).
    // Small pieces keep the one call: a message each costs more than their copies.
    if (local > 1 && before_split == 1 && before_concat == 1 && pc * sizeof(T) >= pairwise_all_to_all_bytes.load() &&
        r.pool->exchange_in_place) {
      std::size_t const procs = pg.members.size();
      std::size_t const bytes = pc * sizeof(T);
      run_mapped(
          f, sig, in, count * sizeof(T), out, no_step, no_step,
          [&] {
            std::vector<device_pool::exchange_message> messages;
            messages.reserve(2 * (procs - 1) * local * local);
            for (std::size_t qi = 0; qi < procs; ++qi) {
              if (qi == pg.rank) continue;
              int const peer = static_cast<int>(pg.members[qi]);
              // Sender's device outer, receiver's inner, on both sides: the messages match in order.
              for (std::size_t i = 0; i < local; ++i)
                for (std::size_t j = 0; j < local; ++j)
                  messages.push_back({peer, false,
                                      const_cast<std::byte*>(static_cast<std::byte const*>(r.mine[i].data)) +
                                          (qi * local + j) * bytes,
                                      bytes});
              for (std::size_t i = 0; i < local; ++i)
                for (std::size_t j = 0; j < local; ++j)
                  messages.push_back({peer, true, static_cast<std::byte*>(r.mine[j].out) + (qi * local + i) * bytes, bytes});
            }
            r.pool->exchange_in_place(messages, signature_hash(sig), "an all_to_all across processes");
          },
          [&](std::size_t i) {
            // This process's own pieces: device j's piece for device i.
            for (std::size_t j = 0; j < local && bytes != 0; ++j)
              std::memcpy(static_cast<std::byte*>(r.mine[i].out) + (pg.rank * local + j) * bytes,
                          static_cast<std::byte const*>(r.mine[j].data) + (pg.rank * local + i) * bytes, bytes);
          });
      return;
    }
    if (direct) {  // the one MPI call, from the input straight into the output
      run_mapped(f, sig, in, count * sizeof(T), out, no_step, no_step, [&] {
        device_pool::process_collective c;
        c.what = device_pool::process_collective::kind::all_to_all;
        c.dtype = 1;
        c.group = pg.handle;
        c.send = r.mine[0].data;
        c.recv = r.mine[0].out;
        c.count = block * sizeof(T);
        r.pool->collective_between_processes(c);
      }, no_step);
      return;
    }
    auto packed = [&r] { return reinterpret_cast<T*>(r.buffers->pack.data()); };
    auto received = [&r] { return reinterpret_cast<T const*>(r.buffers->unpack.data()); };
    std::vector<std::size_t> piece(shape.begin(), shape.end());
    piece[split] /= k;
    std::vector<std::size_t> out_shape = piece;
    out_shape[concat] *= k;
    std::vector<std::size_t> scratch(3 * shape.size()), zero(shape.size(), 0), start(shape.size(), 0);
    run_mapped(
        f, sig, in, count * sizeof(T), out,
        [&] {
          r.buffers->pack.resize(k * local * pc * sizeof(T));
          r.buffers->unpack.resize(k * local * pc * sizeof(T));
        },
        [&](std::size_t i) {
          // Piece for destination rank d at [d][i]: d's process gets [its local devices][ours].
          // This process's own pieces are not sent: finish copies them from the inputs.
          for (std::size_t d = 0; d < k; ++d) {
            if (d / local == pg.rank) continue;
            start[split] = d * piece[split];
            copy_box(static_cast<T const*>(r.mine[i].data), shape, std::span<std::size_t const>(start),
                     packed() + (d * local + i) * pc,
                     std::span<std::size_t const>(piece), std::span<std::size_t const>(zero),
                     std::span<std::size_t const>(piece), std::span<std::size_t>(scratch));
          }
          start[split] = 0;
        },
        [&] {
          device_pool::process_collective c;
          c.what = device_pool::process_collective::kind::all_to_all;
          c.op = 1;  // packed: this process's own block stays out of MPI
          c.dtype = 1;
          c.group = pg.handle;
          c.send = packed();
          c.recv = r.buffers->unpack.data();
          c.count = block * sizeof(T);
          r.pool->collective_between_processes(c);
        },
        [&](std::size_t i) {
          // From process q, device j's piece for us: [q][i][j]; it lands at source rank q * local + j.
          // From this process, straight from device j's input.
          std::vector<std::size_t> from(shape.size(), 0);
          from[split] = (pg.rank * local + i) * piece[split];
          for (std::size_t q = 0; q < k / local; ++q)
            for (std::size_t j = 0; j < local; ++j) {
              start[concat] = (q * local + j) * piece[concat];
              if (q == pg.rank)
                copy_box(static_cast<T const*>(r.mine[j].data), shape, std::span<std::size_t const>(from),
                         static_cast<T*>(r.mine[i].out), std::span<std::size_t const>(out_shape),
                         std::span<std::size_t const>(start), std::span<std::size_t const>(piece),
                         std::span<std::size_t>(scratch));
              else
                copy_box(received() + q * block + (i * local + j) * pc, std::span<std::size_t const>(piece),
                         std::span<std::size_t const>(zero), static_cast<T*>(r.mine[i].out),
                         std::span<std::size_t const>(out_shape), std::span<std::size_t const>(start),
                         std::span<std::size_t const>(piece), std::span<std::size_t>(scratch));
            }
          start[concat] = 0;
        });
    return;
  }
  auto const ins = inputs_across_processes<T>(f, g, sig, in, count);
  exchange_inputs<T>([&](std::size_t j) { return ins[j]; }, k, g.rank, out, shape, split, concat);
}

}  // namespace tessera::detail
