#pragma once
// Nonblocking collectives between processes, as the asynchronous collectives of a shard_map
// across processes describe them (parallel/async_across_processes.hpp), without MPI's types:
// tessera::distributed::runtime sets the engine that runs them (runtime/mpi_async.hpp).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tessera::detail {

/// A nonblocking exchange between processes in flight. wait() completes it (and throws on an
/// MPI error); the destructor of one not waited for completes it too, without throwing, since
/// its buffers may not go while MPI still writes them.
class process_request {
 public:
  virtual ~process_request() = default;
  virtual void wait() = 0;
};

/// One nonblocking exchange over a process group's communicator (a handle of
/// device_pool::process_groups; 0: every process), this process being rank `rank` of `size`.
struct process_async_op {
  enum class kind : std::uint8_t { all_gather, all_reduce, reduce_scatter, permute, all_to_all, all_gather_v };
  kind what = kind::all_gather;
  std::uint8_t op = 0;         // all_reduce, reduce_scatter: 0 sum, 1 max, 2 min
  std::uint32_t dtype = 0;     // the elements' dtype_code (all_gather, permute: bytes, count in bytes)
  std::size_t group = 0;
  void const* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;       // elements (bytes for all_gather, permute, all_to_all: to each process) this process sends, or keeps (reduce_scatter)
  int send_to = -1;            // permute: the ranks in the group sent to and received from (-1: none)
  int receive_from = -1;
  std::uint64_t const* counts = nullptr;  // all_gather_v: the bytes each rank of the group sends (count: this one's)
};

/// Runs process_async_ops; one per process, owned by its distributed runtime.
class process_async_engine {
 public:
  virtual ~process_async_engine() = default;
  /// The exchange, started; nullptr where it cannot be one nonblocking call (more bytes than
  /// MPI's int counts take): the caller then runs the blocking collective instead.
  virtual std::unique_ptr<process_request> start(process_async_op const& op) = 0;
  /// The most bytes one start may move (send or receive in all); more take the blocking path.
  virtual std::size_t max_bytes() const = 0;
};

/// The engine of this process's distributed runtime, or none.
inline std::atomic<process_async_engine*> async_engine{nullptr};

}  // namespace tessera::detail
