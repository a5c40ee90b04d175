#pragma once
// Asynchronous collectives between processes where they are not one MPI call per device
// (parallel/async_across_processes.hpp takes those: one device per process, in MPI's layout):
// several devices per process (a 2 x 4 mesh over 2 processes), groups inside a process, other
// layouts. As the blocking collectives' gathered path (parallel/across_processes.hpp), every
// local device's input goes to every process of the group in one MPI call per process, and each
// device computes its result with the loops of the collectives within a process; here the call
// is nonblocking, MPI_Iallgatherv, posted by whichever local device starts the collective last
// (the team's rendezvous counts them), so no device waits for another at its start. In checked
// mode that last device first compares signatures with the other processes, a blocking exchange
// as before every collective. Posting in the last start keeps each process's MPI calls in program
// order: a later collective, blocking or not, needs every local device, the last one included,
// to have left this start.
//
// wait() waits until every local device has started (team::await_async, which also catches a
// device that went to another collective), then until the exchange is posted; the first local
// device to wait completes the request, the others find it done. A group inside the process
// makes no MPI call: its members' inputs are read from the rendezvous. psum, pmean, pmax and
// pmin over groups that are whole processes (a 1-D mesh over every device) post MPI_Iallreduce of
// the local reduction instead, as the blocking call does (reduce_plan).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "tessera/parallel/across_processes.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/async_process.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// psum/pmean/pmax/pmin_async's alternative to the gathered exchange where the group is whole
/// processes holding every local device (process_group::per_process != 0), as the blocking call's
/// mapped path does: the last local device reduces the local inputs (`local`, in team order) and
/// posts MPI_Iallreduce of that, so each process sends one block instead of all of them.
struct reduce_plan {
  std::uint8_t op = 0;       // process_async_op's: 0 sum, 1 max, 2 min
  std::uint32_t dtype = 0;   // the elements' dtype_code
  std::size_t count = 0;     // elements per device
  void (*local)(async_rendezvous const& rv, std::size_t devices, std::byte* out, std::size_t count,
                std::uint8_t op) = nullptr;
};

/// reduce_plan::local for elements T.
template <class T>
void reduce_local_inputs(async_rendezvous const& rv, std::size_t devices, std::byte* out, std::size_t count,
                         std::uint8_t op) {
  reduce_op const r = op == 0 ? reduce_op::sum : op == 1 ? reduce_op::max : reduce_op::min;
  reduce_inputs<T>([&rv](std::size_t j) { return static_cast<T const*>(rv.entries[j].in); }, devices, r,
                   reinterpret_cast<T*>(out), 0, count);
}

/// One asynchronous collective's exchange between processes, shared by this process's devices
/// (the team rendezvous's process_part).
struct gathered_exchange {
  std::atomic<bool> posted{false};    // set once `error`, or the request and buffers, are in place
  std::exception_ptr error;           // of the start (a mismatch, an MPI error): every wait throws it
  std::size_t bytes = 0;              // each device's input
  bool reduced = false;               // `recv` is the group's reduction (a reduce_plan), not the inputs
  std::shared_ptr<exchange_buffers> kept;  // where `send` and `recv` came from and go back to
  byte_buffer send, recv;
  std::vector<std::uint64_t> counts;  // bytes from each member process, in rank order
  std::vector<std::size_t> offset;    // each process's block in `recv`, by process
  std::mutex done_mutex;
  bool done = false;                  // the request completed (under done_mutex)
  std::exception_ptr wait_error;      // of completing it
  std::unique_ptr<process_request> req;

  gathered_exchange() = default;
  gathered_exchange(gathered_exchange const&) = delete;
  gathered_exchange& operator=(gathered_exchange const&) = delete;
  ~gathered_exchange() {
    req.reset();  // completed first: MPI may still write `recv`
    if (kept) {
      kept->give_async(std::move(send));
      kept->give_async(std::move(recv));
    }
  }
};

inline std::shared_ptr<void> make_gathered_exchange() { return std::make_shared<gathered_exchange>(); }

/// Whether a collective of `bytes` per device can be started this way from frame f: a distributed
/// runtime's engine, and the most one process may receive (every mesh device's input) in one call.
/// The same answer in every process, since it depends on the mesh and the sizes only.
inline bool gathered_async_possible(spmd_frame const& f, std::size_t bytes) {
  process_async_engine const* e = async_engine.load();
  if (f.xp == nullptr || e == nullptr) return false;
  std::size_t const devices = std::max<std::size_t>(1, f.xp->layout->process_of.size());
  return bytes <= e->max_bytes() / devices;
}

/// Whether psum/pmean/pmax/pmin_async of `count` elements of T (op: reduce_plan's) over a group of
/// k goes as a reduce_plan: where the blocking call makes MPI_Allreduce of the local sums
/// (parallel/across_processes.hpp's all_reduce_across_processes), and, for sums, between two
/// processes only, where MPI's order cannot change the bits.
template <class T>
bool reduce_plan_fits(spmd_frame const& f, op_signature const& sig, std::uint8_t op, std::size_t count, std::size_t k) {
  if constexpr (!mpi_reducible<T>) {
    return false;
  } else {
    process_run const& r = *f.xp;
    process_group const& pg = group_for(r, sig);
    if (pg.per_process == 0 || pg.local || count * sizeof(T) * k <= gathered_reduce_bytes) return false;
    return op != 0 || (pg.members.size() == 2 && !(r.deterministic && k > 2));
  }
}

/// The last local device's part of a start: checks that the local devices agree (checked, that
/// the processes do too), packs their inputs in team order and posts MPI_Iallgatherv over the
/// group's communicator (or, with a reduce_plan, MPI_Iallreduce of their reduction).
inline void post_gathered(spmd_frame& f, async_rendezvous const& rv, gathered_exchange& x, op_signature const& sig,
                          std::size_t bytes, reduce_plan const* plan) {
  process_run& r = *f.xp;
  std::size_t const local = f.t->size();
  bool local_ok = true;
  for (std::size_t q = 1; q < local; ++q) local_ok = local_ok && rv.entries[q].sig.same_as(rv.entries[0].sig);
  if (r.checked) {
    try {
      compare_between_processes(r, local_ok, signature_hash(sig), bytes, sig);
    } catch (collective_mismatch const&) {
      r.async_mismatch.value.store(true);
      throw;
    }
  } else if (!local_ok) {
    throw_local_mismatch(sig);
  }
  x.bytes = bytes;
  process_group const& pg = group_for(r, sig);
  if (pg.local || bytes == 0) return;
  x.kept = r.buffers;
  // gathered_async_possible kept the exchange within one call, so the engine cannot refuse it.
  auto post = [&](process_async_op const& op) {
    x.req = async_engine.load()->start(op);
    if (!x.req)
      throw std::logic_error("tessera: an asynchronous collective between processes could not be posted (" +
                             describe_collective(sig) + ")");
  };
  if (plan != nullptr) {
    x.reduced = true;
    x.send = x.kept->take_async(bytes);
    x.recv = x.kept->take_async(bytes);
    plan->local(rv, local, x.send.data(), plan->count, plan->op);
    process_async_op op;
    op.what = process_async_op::kind::all_reduce;
    op.op = plan->op;
    op.dtype = plan->dtype;
    op.group = pg.handle;
    op.send = x.send.data();
    op.recv = x.recv.data();
    op.count = plan->count;
    post(op);
    return;
  }
  x.send = x.kept->take_async(local * bytes);
  for (std::size_t q = 0; q < local; ++q) std::memcpy(x.send.data() + q * bytes, rv.entries[q].in, bytes);
  x.counts.resize(pg.members.size());
  x.offset.assign(r.layout->per_process.size(), 0);
  std::size_t total = 0;
  for (std::size_t j = 0; j < pg.members.size(); ++j) {
    x.counts[j] = r.layout->per_process[pg.members[j]] * bytes;
    x.offset[pg.members[j]] = total;
    total += static_cast<std::size_t>(x.counts[j]);
  }
  x.recv = x.kept->take_async(total);
  process_async_op op;
  op.what = process_async_op::kind::all_gather_v;
  op.group = pg.handle;
  op.send = x.send.data();
  op.recv = x.recv.data();
  op.count = local * bytes;
  op.counts = x.counts.data();
  post(op);
}

/// Device f's start of collective `sig` between processes, with input `in` of `bytes` (kept alive
/// by `keep`): the rendezvous its wait needs. The last local device posts the exchange; an error
/// there is thrown by that start and by every local device's wait.
inline std::shared_ptr<async_rendezvous> start_gathered(spmd_frame& f, op_signature const& sig, void const* in,
                                                        std::shared_ptr<void const> keep, std::size_t bytes,
                                                        reduce_plan const* plan = nullptr) {
  bool last = false;
  auto rv = f.t->async().start(f.t->size(), f.team_pos, sig, in, std::move(keep), &last, &make_gathered_exchange);
  if (last) {
    auto& x = *static_cast<gathered_exchange*>(rv->process_part.get());
    try {
      post_gathered(f, *rv, x, sig, bytes, plan);
    } catch (...) {
      x.error = std::current_exception();
    }
    x.posted.store(true, std::memory_order_release);
    f.t->async().wake();
    if (x.error) std::rethrow_exception(x.error);
  }
  return rv;
}

/// Device f's wait for the exchange of `rv`: every local device has started it, and it has been
/// posted and completed (by this device or another local one).
inline gathered_exchange& complete_gathered(spmd_frame& f, async_rendezvous const& rv, op_signature const& sig) {
  team& t = *f.t;
  group everyone;
  everyone.members.resize(t.size());
  for (std::size_t q = 0; q < t.size(); ++q) everyone.members[q] = q;
  everyone.rank = f.team_pos;
  t.await_async(f.team_pos, everyone, rv, sig);
  auto& x = *static_cast<gathered_exchange*>(rv.process_part.get());
  while (!x.posted.load(std::memory_order_acquire)) {
    std::uint32_t const seen = t.async().word();
    if (x.posted.load(std::memory_order_acquire)) break;
    if (t.aborted()) throw collective_aborted();
    t.async().sleep(seen);
  }
  if (x.error) std::rethrow_exception(x.error);
  {
    std::lock_guard lock(x.done_mutex);
    if (!x.done) {
      x.done = true;
      if (x.req) {
        try {
          x.req->wait();
        } catch (...) {
          x.wait_error = std::current_exception();
        }
      }
    }
  }
  if (x.wait_error) std::rethrow_exception(x.wait_error);
  return x;
}

/// The group's reduction, where the exchange made one (a reduce_plan), else nullptr.
template <class T>
T const* gathered_reduction(async_rendezvous const& rv) {
  auto const& x = *static_cast<gathered_exchange const*>(rv.process_part.get());
  return x.reduced ? reinterpret_cast<T const*>(x.recv.data()) : nullptr;
}

/// The input of mesh position q in the exchange: from the rendezvous for this process's devices,
/// from what the other processes sent otherwise.
template <class T>
T const* gathered_input(process_run const& r, async_rendezvous const& rv, gathered_exchange const& x, std::size_t q) {
  std::size_t const p = r.layout->process_of[q], i = r.layout->index_in_process[q];
  if (p == r.layout->process) return static_cast<T const*>(rv.entries[i].in);
  return reinterpret_cast<T const*>(x.recv.data() + x.offset[p] + i * x.bytes);
}

}  // namespace tessera::detail
