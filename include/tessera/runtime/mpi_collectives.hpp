#pragma once
// Exchanges between processes over tessera's MPI communicator: nonblocking calls waited on by
// polling, so a local request to abort is seen while waiting (the job ends instead of hanging;
// a process of one device, which has no other thread to fail, makes the blocking calls),
// and byte counts of any size, cut into rounds that fit MPI's int counts and displacements
// (OpenMPI 4.1 has no MPI-4 large-count calls).

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tessera/runtime/mpi_environment.hpp"

namespace tessera::detail {

/// The most bytes one MPI call moves in all (its counts and displacements are ints); tests
/// lower it to exercise the rounds.
inline std::atomic<std::size_t> mpi_max_bytes_per_call{static_cast<std::size_t>(INT_MAX)};

/// Set by a local failure that must end the job: a process waiting in a collective sees it and
/// calls MPI_Abort, since the other processes would otherwise wait for it forever.
inline std::atomic<bool> mpi_abort_requested{false};

/// Whether collectives may be MPI's blocking calls: set by a distributed runtime whose process
/// has one device. That device's tasks run on the calling thread (device_pool::run), so no other
/// thread of the process can fail and ask to abort while it waits, and OpenMPI's blocking
/// collectives are faster than its nonblocking ones at small sizes (3.5 against 5.2 us for a
/// 4 KiB all-reduce, bench/RESULTS.md).
inline std::atomic<bool> mpi_blocking_collectives{false};

/// Waits for a nonblocking MPI call, polling so that a requested abort ends the job.
inline void mpi_wait(MPI_Comm comm, MPI_Request& request, char const* call) {
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    if (mpi_abort_requested.load(std::memory_order_relaxed)) {
      std::fprintf(stderr, "tessera: process %d stops the job while waiting in %s: a local failure was reported\n",
                   world_rank_or_minus_one(), call);
      std::fflush(stderr);
      MPI_Abort(comm, 1);
    }
    if (spins > (1u << 16)) std::this_thread::yield();  // other processes may share this core
  }
}

/// One MPI collective: `blocking()` (MPI_Allgather, ...) where mpi_blocking_collectives allows it,
/// else `start(&request)` (MPI_Iallgather, ...) waited on by polling; `call` names it in errors.
template <class Blocking, class Start>
void mpi_collective(MPI_Comm comm, char const* call, Blocking&& blocking, Start&& start) {
  if (mpi_blocking_collectives.load(std::memory_order_relaxed)) {
    mpi_check(blocking(), call);
    return;
  }
  MPI_Request req{};
  mpi_check(start(&req), call);
  mpi_wait(comm, req, call);
}

/// MPI_Allgather of one fixed-size record per process (small: metadata).
template <class T>
std::vector<T> mpi_allgather_values(mpi_environment const& env, T const& mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  std::vector<T> all(static_cast<std::size_t>(env.size()));
  int const n = static_cast<int>(sizeof(T));
  mpi_collective(
      env.comm(), "MPI_Allgather",
      [&] { return MPI_Allgather(&mine, n, MPI_BYTE, all.data(), n, MPI_BYTE, env.comm()); },
      [&](MPI_Request* r) { return MPI_Iallgather(&mine, n, MPI_BYTE, all.data(), n, MPI_BYTE, env.comm(), r); });
  return all;
}

/// Every process's bytes, concatenated in process order into `out` (MPI_Allgatherv for any
/// sizes): `counts` holds each process's byte count, known to all (gathered before).
inline void mpi_allgatherv_into(MPI_Comm comm, int rank, std::span<std::byte const> mine,
                                std::span<std::uint64_t const> counts, std::byte* out);
inline void mpi_allgatherv_into(mpi_environment const& env, std::span<std::byte const> mine,
                                std::span<std::uint64_t const> counts, std::byte* out) {
  mpi_allgatherv_into(env.comm(), env.rank(), mine, counts, out);
}
/// The same over communicator `comm`, where this process is `rank` and `counts` has one entry per member.
inline void mpi_allgatherv_into(MPI_Comm comm, int rank, std::span<std::byte const> mine,
                                std::span<std::uint64_t const> counts, std::byte* out) {
  std::size_t const p = counts.size();
  std::size_t const limit = std::max<std::size_t>(mpi_max_bytes_per_call.load(), p);
  // Equal shares that fit one call (the common case): the plain call, straight into place, with
  // no displacements to compute (a 4 KiB all_gather is a couple of microseconds).
  if (p != 0 && std::all_of(counts.begin(), counts.end(), [&](std::uint64_t c) { return c == counts[0]; }) &&
      counts[0] <= limit / p) {
    int const n = static_cast<int>(counts[0]);
    mpi_collective(
        comm, "MPI_Allgather", [&] { return MPI_Allgather(mine.data(), n, MPI_BYTE, out, n, MPI_BYTE, comm); },
        [&](MPI_Request* r) { return MPI_Iallgather(mine.data(), n, MPI_BYTE, out, n, MPI_BYTE, comm, r); });
    return;
  }
  std::vector<std::uint64_t> offset(p + 1, 0);
  for (std::size_t r = 0; r < p; ++r) {
    if (counts[r] > SIZE_MAX - offset[r])
      throw std::length_error("tessera::process_allgather: the gathered data would exceed the address space");
    offset[r + 1] = offset[r] + counts[r];
  }
  auto const me = static_cast<std::size_t>(rank);
  std::vector<int> rc(p), rd(p);
  if (offset[p] <= limit) {  // one call, straight into place
    for (std::size_t r = 0; r < p; ++r) {
      rc[r] = static_cast<int>(counts[r]);
      rd[r] = static_cast<int>(offset[r]);
    }
    mpi_collective(
        comm, "MPI_Allgatherv",
        [&] { return MPI_Allgatherv(mine.data(), rc[me], MPI_BYTE, out, rc.data(), rd.data(), MPI_BYTE, comm); },
        [&](MPI_Request* r) {
          return MPI_Iallgatherv(mine.data(), rc[me], MPI_BYTE, out, rc.data(), rd.data(), MPI_BYTE, comm, r);
        });
    return;
  }
  // Rounds: each process sends up to `share` bytes of what it has left, so one round's total
  // (and every displacement in it) stays within an int.
  std::size_t const share = limit / p;
  std::vector<std::uint64_t> sent(p, 0);
  std::vector<std::byte> round_buf;
  for (;;) {
    std::size_t total = 0;
    for (std::size_t r = 0; r < p; ++r) {
      rc[r] = static_cast<int>(std::min<std::uint64_t>(counts[r] - sent[r], share));
      rd[r] = static_cast<int>(total);
      total += static_cast<std::size_t>(rc[r]);
    }
    if (total == 0) break;
    round_buf.resize(total);
    std::byte const* const from = mine.data() + sent[me];
    mpi_collective(
        comm, "MPI_Allgatherv",
        [&] { return MPI_Allgatherv(from, rc[me], MPI_BYTE, round_buf.data(), rc.data(), rd.data(), MPI_BYTE, comm); },
        [&](MPI_Request* r) {
          return MPI_Iallgatherv(from, rc[me], MPI_BYTE, round_buf.data(), rc.data(), rd.data(), MPI_BYTE, comm, r);
        });
    for (std::size_t r = 0; r < p; ++r) {
      if (rc[r] > 0) std::memcpy(out + offset[r] + sent[r], round_buf.data() + rd[r], static_cast<std::size_t>(rc[r]));
      sent[r] += static_cast<std::uint64_t>(rc[r]);
    }
  }
}

/// Point-to-point messages in place: each of `messages` (peer, direction, bytes) posted in the
/// order given, in pieces that fit MPI's int counts, all with one tag, so that two processes'
/// lists in the same order match message by message; then waited on. Every process calls it
/// together (a process with no message still calls).
template <class Message>
void mpi_exchange_messages(mpi_environment const& env, std::vector<Message> const& messages) {
  std::size_t const limit = std::max<std::size_t>(mpi_max_bytes_per_call.load(), 1);
  std::vector<MPI_Request> requests;
  for (auto const& m : messages) {
    if (m.peer == env.rank()) throw std::logic_error("tessera: an exchange between processes lists a message to itself");
    for (std::size_t off = 0; off < m.bytes; off += limit) {
      int const count = static_cast<int>(std::min(limit, m.bytes - off));
      MPI_Request r{};
      if (m.receive)
        mpi_check(MPI_Irecv(m.data + off, count, MPI_BYTE, m.peer, 0, env.comm(), &r), "MPI_Irecv");
      else
        mpi_check(MPI_Isend(m.data + off, count, MPI_BYTE, m.peer, 0, env.comm(), &r), "MPI_Isend");
      requests.push_back(r);
    }
  }
  if (mpi_blocking_collectives.load(std::memory_order_relaxed)) {
    if (!requests.empty())
      mpi_check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    return;
  }
  for (auto& r : requests) mpi_wait(env.comm(), r, "an exchange between processes (MPI_Isend/MPI_Irecv)");
}

/// MPI's type for the elements of a dtype_code (runtime/team.hpp), or MPI_DATATYPE_NULL where
/// tessera sends them as bytes only (bool, and element types MPI has no reduction for).
inline MPI_Datatype mpi_type_of(std::uint32_t dtype) {
  switch (dtype) {
    case 0x304u: return MPI_FLOAT;
    case 0x308u: return MPI_DOUBLE;
    case 0x201u: return MPI_INT8_T;
    case 0x202u: return MPI_INT16_T;
    case 0x204u: return MPI_INT32_T;
    case 0x208u: return MPI_INT64_T;
    case 0x001u: return MPI_UINT8_T;
    case 0x002u: return MPI_UINT16_T;
    case 0x004u: return MPI_UINT32_T;
    case 0x008u: return MPI_UINT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

/// MPI_Iallreduce of `count` elements of `elem` bytes (send == nullptr: in place in recv), in
/// rounds of at most mpi_max_bytes_per_call bytes (MPI counts are ints).
inline void mpi_allreduce_rounds(MPI_Comm comm, void const* send, void* recv, std::size_t count, std::size_t elem,
                                 MPI_Datatype type, MPI_Op op) {
  std::size_t const step = std::max<std::size_t>(1, std::max<std::size_t>(mpi_max_bytes_per_call.load(), elem) / elem);
  auto* out = static_cast<std::byte*>(recv);
  auto const* in = static_cast<std::byte const*>(send);
  for (std::size_t off = 0; off < count; off += step) {
    int const n = static_cast<int>(std::min(step, count - off));
    void const* const from = in == nullptr ? MPI_IN_PLACE : in + off * elem;
    std::byte* const to = out + off * elem;
    mpi_collective(
        comm, "MPI_Allreduce", [&] { return MPI_Allreduce(from, to, n, type, op, comm); },
        [&](MPI_Request* r) { return MPI_Iallreduce(from, to, n, type, op, comm, r); });
  }
}

/// MPI_Ireduce_scatter_block: `send` holds one block of `count` elements per process of comm, in
/// rank order; `recv` gets the reduction of this rank's block. In rounds where the whole exceeds
/// mpi_max_bytes_per_call: each round reduces the same slice of every block, packed.
inline void mpi_reduce_scatter_rounds(MPI_Comm comm, void const* send, void* recv, std::size_t count, std::size_t elem,
                                      MPI_Datatype type, MPI_Op op) {
  int size = 1;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  auto const p = static_cast<std::size_t>(size);
  std::size_t const limit = std::max<std::size_t>(mpi_max_bytes_per_call.load(), p * elem);
  auto const* in = static_cast<std::byte const*>(send);
  auto* out = static_cast<std::byte*>(recv);
  if (count * p * elem <= limit) {
    int const n = static_cast<int>(count);
    mpi_collective(
        comm, "MPI_Reduce_scatter_block", [&] { return MPI_Reduce_scatter_block(in, out, n, type, op, comm); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(in, out, n, type, op, comm, r); });
    return;
  }
  std::size_t const step = limit / (p * elem);
  std::vector<std::byte> packed(step * p * elem);
  for (std::size_t off = 0; off < count; off += step) {
    std::size_t const n = std::min(step, count - off);
    for (std::size_t r = 0; r < p; ++r) std::memcpy(packed.data() + r * n * elem, in + (r * count + off) * elem, n * elem);
    std::byte* const to = out + off * elem;
    int const k = static_cast<int>(n);
    mpi_collective(
        comm, "MPI_Reduce_scatter_block",
        [&] { return MPI_Reduce_scatter_block(packed.data(), to, k, type, op, comm); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(packed.data(), to, k, type, op, comm, r); });
  }
}

/// MPI_Ialltoall of `bytes` bytes to each process of comm (`send` and `recv` hold one block per
/// process, in rank order), in rounds where the whole exceeds mpi_max_bytes_per_call. With
/// `skip_self`, this process's own block is not moved (the caller copies it where it belongs):
/// MPI_Ialltoallv with a count of 0 for it.
/// The same where the caller knows the communicator's size and its own rank in it (a shard_map's
/// collectives: the runtime keeps them, and asking MPI on every small call costs).
inline void mpi_alltoall_rounds(MPI_Comm comm, int size, int me, void const* send, void* recv, std::size_t bytes,
                                bool skip_self = false) {
  auto const p = static_cast<std::size_t>(size);
  std::size_t const limit = std::max<std::size_t>(mpi_max_bytes_per_call.load(), p);
  auto const* in = static_cast<std::byte const*>(send);
  auto* out = static_cast<std::byte*>(recv);
  auto exchange = [&](std::byte const* from, std::byte* to, std::size_t n) {
    int const k = static_cast<int>(n);
    if (!skip_self) {
      mpi_collective(
          comm, "MPI_Alltoall", [&] { return MPI_Alltoall(from, k, MPI_BYTE, to, k, MPI_BYTE, comm); },
          [&](MPI_Request* r) { return MPI_Ialltoall(from, k, MPI_BYTE, to, k, MPI_BYTE, comm, r); });
      return;
    }
    std::vector<int> counts(p, k), displs(p);
    counts[static_cast<std::size_t>(me)] = 0;
    for (std::size_t r = 0; r < p; ++r) displs[r] = static_cast<int>(r * n);
    int const *c = counts.data(), *d = displs.data();
    mpi_collective(
        comm, "MPI_Alltoallv", [&] { return MPI_Alltoallv(from, c, d, MPI_BYTE, to, c, d, MPI_BYTE, comm); },
        [&](MPI_Request* r) { return MPI_Ialltoallv(from, c, d, MPI_BYTE, to, c, d, MPI_BYTE, comm, r); });
  };
  if (bytes * p <= limit) {
    exchange(in, out, bytes);
    return;
  }
  std::size_t const step = limit / p;
  std::vector<std::byte> packed(step * p), received(step * p);
  for (std::size_t off = 0; off < bytes; off += step) {
    std::size_t const n = std::min(step, bytes - off);
    for (std::size_t r = 0; r < p; ++r)
      if (!skip_self || r != static_cast<std::size_t>(me)) std::memcpy(packed.data() + r * n, in + r * bytes + off, n);
    exchange(packed.data(), received.data(), n);
    for (std::size_t r = 0; r < p; ++r)
      if (!skip_self || r != static_cast<std::size_t>(me)) std::memcpy(out + r * bytes + off, received.data() + r * n, n);
  }
}

inline void mpi_alltoall_rounds(MPI_Comm comm, void const* send, void* recv, std::size_t bytes, bool skip_self = false) {
  int size = 1, me = 0;
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  mpi_check(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
  mpi_alltoall_rounds(comm, size, me, send, recv, bytes, skip_self);
}

/// MPI_Ibcast of `bytes` bytes from process `root` of comm into `data` everywhere, in rounds of
/// at most mpi_max_bytes_per_call bytes (MPI counts are ints).
inline void mpi_bcast_rounds(MPI_Comm comm, void* data, std::size_t bytes, int root) {
  std::size_t const step = std::max<std::size_t>(1, mpi_max_bytes_per_call.load());
  auto* p = static_cast<std::byte*>(data);
  for (std::size_t off = 0; off < bytes; off += step) {
    int const n = static_cast<int>(std::min(step, bytes - off));
    mpi_collective(
        comm, "MPI_Bcast", [&] { return MPI_Bcast(p + off, n, MPI_BYTE, root, comm); },
        [&](MPI_Request* r) { return MPI_Ibcast(p + off, n, MPI_BYTE, root, comm, r); });
  }
}

/// Every process's bytes, concatenated in process order; `counts` receives each one's count.
inline std::vector<std::byte> mpi_allgatherv_bytes(mpi_environment const& env, std::span<std::byte const> mine,
                                                   std::vector<std::uint64_t>& counts) {
  counts = mpi_allgather_values<std::uint64_t>(env, static_cast<std::uint64_t>(mine.size()));
  std::uint64_t total = 0;
  for (auto c : counts) total += c;
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  mpi_allgatherv_into(env, mine, counts, out.data());
  return out;
}

}  // namespace tessera::detail
