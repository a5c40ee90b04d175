#pragma once
// The nonblocking MPI calls of asynchronous collectives across processes
// (runtime/async_process.hpp): MPI_Iallgather(v), MPI_Iallreduce, MPI_Ireduce_scatter_block,
// MPI_Ialltoall and MPI_Isend/MPI_Irecv, posted at the start and completed at wait().
//
// Progress: MPI guarantees that a nonblocking collective advances only inside MPI calls
// (MPI-4.1 §3.9); OpenMPI 4.1 has no progress thread of its own, and its libnbc schedules
// advance a round per call into the library. So while a device computes between start and
// wait, something must call MPI: the engine runs a progress thread that, while requests are
// in flight, calls MPI_Test on them every `progress_interval` (under the runtime's MPI mutex:
// MPI_THREAD_SERIALIZED suffices), and sleeps on a condition variable otherwise. Measured
// (bench/run_async.sh, docs/async.md): without it the transfer happens inside wait(), after
// the local work, and nothing overlaps. TESSERA_ASYNC_PROGRESS=wait turns it off (the
// transfer then runs in wait()); under MPI_THREAD_FUNNELED it is off, since only the
// runtime's thread may call MPI.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/runtime/async_process.hpp"
#include "tessera/runtime/mpi_collectives.hpp"
#include "tessera/runtime/mpi_environment.hpp"

namespace tessera::detail {

/// A communicator of a process group, as the distributed runtime keeps it.
struct async_group_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

/// The tag of asynchronous ppermutes' messages: apart from tessera's other point-to-point
/// traffic (reshards use tag 0), so a ppermute in flight never takes another's message.
inline constexpr int async_permute_tag = 0x7a51;

class async_mpi_engine final : public process_async_engine {
 public:
  /// `comm_of(handle)`: the communicator of a process group handle (0: every process).
  async_mpi_engine(mpi_environment const& env, std::function<async_group_comm(std::size_t)> comm_of)
      : env_(env), comm_of_(std::move(comm_of)) {
    char const* mode = std::getenv("TESSERA_ASYNC_PROGRESS");
    bool const off = mode != nullptr && std::string(mode) == "wait";
    if (!off && env_.thread_level() >= MPI_THREAD_SERIALIZED) progress_ = std::thread([this] { progress_loop(); });
  }
  ~async_mpi_engine() override {
    {
      std::lock_guard lock(state_mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (progress_.joinable()) progress_.join();
  }
  async_mpi_engine(async_mpi_engine const&) = delete;
  async_mpi_engine& operator=(async_mpi_engine const&) = delete;

  /// Whether a progress thread drives the requests in flight.
  bool has_progress_thread() const { return progress_.joinable(); }

  std::unique_ptr<process_request> start(process_async_op const& op) override;
  std::size_t max_bytes() const override { return std::min<std::size_t>(mpi_max_bytes_per_call.load(), INT_MAX); }

  /// How often the progress thread calls MPI while requests are in flight.
  static constexpr std::chrono::microseconds progress_interval{20};

 private:
  class request;
  friend class request;

  void progress_loop() {
    std::unique_lock lock(state_mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !active_.empty(); });
      if (stopping_) return;
      lock.unlock();
      {
        std::lock_guard mpi(env_.call_mutex());
        std::lock_guard state(state_mutex_);
        for (MPI_Request* r : active_) {
          int done = 0;
          MPI_Test(r, &done, MPI_STATUS_IGNORE);  // errors surface in the owner's wait
        }
      }
      std::this_thread::sleep_for(progress_interval);
      lock.lock();
    }
  }
  void add(std::vector<MPI_Request>& rs) {
    {
      std::lock_guard lock(state_mutex_);
      for (auto& r : rs) active_.push_back(&r);
    }
    wake_.notify_one();
  }
  void remove(std::vector<MPI_Request>& rs) {
    std::lock_guard lock(state_mutex_);
    for (auto& r : rs) active_.erase(std::remove(active_.begin(), active_.end(), &r), active_.end());
  }

  mpi_environment const& env_;
  std::function<async_group_comm(std::size_t)> comm_of_;
  std::mutex state_mutex_;  // after env_.call_mutex() when both are held
  std::condition_variable wake_;
  std::vector<MPI_Request*> active_;
  bool stopping_ = false;
  std::thread progress_;
};

/// Requests of one started exchange.
class async_mpi_engine::request final : public process_request {
 public:
  request(async_mpi_engine& e, MPI_Comm comm) : e_(e), comm_(comm) {}
  ~request() override {
    if (!done_) complete(false);
  }
  void wait() override { complete(true); }
  std::vector<MPI_Request> requests;
  std::vector<int> counts, displs;  // MPI_Iallgatherv's, read by MPI until the request completes

 private:
  friend class async_mpi_engine;
  /// Tests until every request is done, taking the MPI mutex for each test only (the progress
  /// thread and other device threads call MPI between); a requested abort ends the job.
  void complete(bool report) {
    done_ = true;
    for (unsigned spins = 0;; ++spins) {
      int all = 1;
      {
        std::lock_guard mpi(e_.env_.call_mutex());
        std::lock_guard state(e_.state_mutex_);
        int const rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &all, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) {
          all = 1;
          failed_ = rc;
        }
        if (all) {
          for (auto& r : requests) e_.active_.erase(std::remove(e_.active_.begin(), e_.active_.end(), &r), e_.active_.end());
        }
      }
      if (all) break;
      if (mpi_abort_requested.load(std::memory_order_relaxed)) {
        std::fprintf(stderr, "tessera: process %d stops the job while waiting in an asynchronous collective: a local "
                             "failure was reported\n", world_rank_or_minus_one());
        std::fflush(stderr);
        MPI_Abort(comm_, 1);
      }
      if (spins > 64) std::this_thread::yield();
    }
    if (report && failed_ != MPI_SUCCESS) mpi_check(failed_, "an asynchronous collective between processes");
  }

  async_mpi_engine& e_;
  MPI_Comm comm_;
  bool done_ = false;
  int failed_ = MPI_SUCCESS;
};

inline std::unique_ptr<process_request> async_mpi_engine::start(process_async_op const& op) {
  async_group_comm const g = comm_of_(op.group);
  bool const bytes = op.what == process_async_op::kind::all_gather || op.what == process_async_op::kind::permute ||
                     op.what == process_async_op::kind::all_to_all;
  std::size_t const elem = bytes ? 1 : std::max<std::size_t>(1, op.dtype & 0xFFu);
  std::size_t total =
      op.what == process_async_op::kind::all_gather || op.what == process_async_op::kind::all_to_all
          ? op.count * static_cast<std::size_t>(g.size)
      : op.what == process_async_op::kind::reduce_scatter ? op.count * elem * static_cast<std::size_t>(g.size)
                                                          : op.count * elem;
  auto req = std::make_unique<request>(*this, g.comm);
  if (op.what == process_async_op::kind::all_gather_v) {
    total = 0;
    req->counts.resize(static_cast<std::size_t>(g.size));
    req->displs.resize(static_cast<std::size_t>(g.size));
    for (std::size_t j = 0; j < req->counts.size(); ++j) {
      if (op.counts[j] > static_cast<std::uint64_t>(INT_MAX) || total > static_cast<std::size_t>(INT_MAX)) return nullptr;
      req->counts[j] = static_cast<int>(op.counts[j]);
      req->displs[j] = static_cast<int>(total);
      total += static_cast<std::size_t>(op.counts[j]);
    }
  }
  if (total > std::min<std::size_t>(mpi_max_bytes_per_call.load(), INT_MAX)) return nullptr;  // rounds: blocking
  int const n = static_cast<int>(op.count);
  MPI_Datatype const type = mpi_type_of(op.dtype);
  MPI_Op const mop = op.op == 1 ? MPI_MAX : op.op == 2 ? MPI_MIN : MPI_SUM;
  {
    std::lock_guard mpi(env_.call_mutex());
    switch (op.what) {
      case process_async_op::kind::all_gather:
        req->requests.resize(1);
        mpi_check(MPI_Iallgather(op.send, n, MPI_BYTE, op.recv, n, MPI_BYTE, g.comm, &req->requests[0]),
                  "MPI_Iallgather");
        break;
      case process_async_op::kind::all_gather_v:
        req->requests.resize(1);
        mpi_check(MPI_Iallgatherv(op.send, n, MPI_BYTE, op.recv, req->counts.data(), req->displs.data(), MPI_BYTE,
                                  g.comm, &req->requests[0]),
                  "MPI_Iallgatherv");
        break;
      case process_async_op::kind::all_reduce:
        req->requests.resize(1);
        mpi_check(MPI_Iallreduce(op.send, op.recv, n, type, mop, g.comm, &req->requests[0]), "MPI_Iallreduce");
        break;
      case process_async_op::kind::reduce_scatter:
        req->requests.resize(1);
        mpi_check(MPI_Ireduce_scatter_block(op.send, op.recv, n, type, mop, g.comm, &req->requests[0]),
                  "MPI_Ireduce_scatter_block");
        break;
      case process_async_op::kind::all_to_all:
        req->requests.resize(1);
        mpi_check(MPI_Ialltoall(op.send, n, MPI_BYTE, op.recv, n, MPI_BYTE, g.comm, &req->requests[0]),
                  "MPI_Ialltoall");
        break;
      case process_async_op::kind::permute:
        req->requests.reserve(2);
        if (op.receive_from >= 0) {
          req->requests.emplace_back();
          mpi_check(MPI_Irecv(op.recv, n, MPI_BYTE, op.receive_from, async_permute_tag, g.comm, &req->requests.back()),
                    "MPI_Irecv");
        }
        if (op.send_to >= 0) {
          req->requests.emplace_back();
          mpi_check(MPI_Isend(op.send, n, MPI_BYTE, op.send_to, async_permute_tag, g.comm, &req->requests.back()),
                    "MPI_Isend");
        }
        break;
    }
  }
  if (progress_.joinable()) add(req->requests);
  return req;
}

}  // namespace tessera::detail
