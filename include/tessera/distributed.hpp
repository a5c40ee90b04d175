#pragma once
// Several processes joined over MPI (JAX's multi-controller model: jax.distributed.initialize,
// process_index, process_count, multihost_utils.process_allgather). The one tessera header
// that includes <mpi.h> (through runtime/mpi_environment.hpp); link tessera::mpi (find_package(tessera COMPONENTS mpi)).
//
// Meshes span every process's devices and arrays on them hold their own process's blocks;
// element-wise work, device_put, make_array_from_process_local_data and process_allgather work
// across processes. Moving blocks between processes is not done yet and is refused with a
// message (docs/across-processes.md).

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <span>
#include <exception>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <thread>
#include <vector>

#include "tessera/detail/xtensor/xarray.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/runtime/team.hpp"
#include "tessera/array/to_host.hpp"
#include "tessera/runtime/mpi_async.hpp"
#include "tessera/runtime/fnv1a.hpp"
#include "tessera/runtime/mpi_collectives.hpp"
#include "tessera/runtime/mpi_environment.hpp"
#include "tessera/runtime/runtime.hpp"

namespace tessera {

namespace distributed {
class runtime;
}

namespace detail {
/// The live distributed runtime of this process, if any (one at a time, as in JAX).
inline std::atomic<distributed::runtime const*> current_distributed{nullptr};
}  // namespace detail

namespace distributed {

/// jax.distributed.initialize() with jax_num_cpu_devices=k: this process joins the others of
/// its MPI job and gets k logical devices (a tessera::runtime of k threads, current while the
/// object lives; meshes made meanwhile may use every process's devices). Global device ids are process-major: process p's devices are
/// first_device_id() to first_device_id() + k - 1, as JAX numbers them. MPI is initialised
/// here only if it is not yet, and finalised only if it was initialised here.
///
/// A process leaving this object's scope by an exception ends the whole job (MPI_Abort, with a
/// message naming the process), since the other processes may be waiting for it; an exception
/// caught inside the scope is the program's own business.
class runtime {
 public:
  /// MPI_Init_thread(&argc, &argv) if MPI is not initialised, then k local devices.
  runtime(int& argc, char**& argv, int local_devices) : runtime(&argc, &argv, local_devices) {}
  /// The same, for a program that initialised MPI itself or passes no arguments to it.
  explicit runtime(int local_devices) : runtime(nullptr, nullptr, local_devices) {}
  runtime(runtime const&) = delete;
  runtime& operator=(runtime const&) = delete;
  ~runtime() {
    if (std::uncaught_exceptions() > uncaught_) {
      std::fprintf(stderr,
                   "tessera: process %d of %d is leaving its distributed runtime with an exception; ending the job "
                   "(MPI_Abort) so that the other processes do not wait for it\n",
                   env_.rank(), env_.size());
      std::fflush(stderr);
      MPI_Abort(env_.comm(), 1);
    }
    local_.pool().agree = nullptr;
    local_.pool().exchange_in_place = nullptr;
    local_.pool().gather_bytes = nullptr;
    local_.pool().collective_between_processes = nullptr;
    local_.pool().process_groups = nullptr;
    detail::async_engine.store(nullptr);  // asynchronous collectives (runtime/mpi_async.hpp)
    async_.reset();
    {
      std::lock_guard lock(local_.pool().exchange_scratch_mutex);
      local_.pool().process_layouts = nullptr;  // their group handles name the communicators freed below
    }
    for (auto& g : groups_) MPI_Comm_free(&g.comm);
    local_.pool().abort_processes = nullptr;
    local_.pool().gather_refusal.clear();
    local_.pool().funneled_thread = std::thread::id{};
    detail::mpi_blocking_collectives.store(false);
    detail::current_distributed.store(nullptr);
  }

  /// jax.process_index()
  int process_index() const { return env_.rank(); }
  /// jax.process_count()
  int process_count() const { return env_.size(); }
  /// jax.local_device_count()
  int local_device_count() const { return local_.local_device_count(); }
  /// jax.device_count(): the devices of every process.
  int device_count() const { return global_devices_; }
  /// The global id of this process's device 0 (process-major numbering).
  int first_device_id() const { return first_device_; }
  /// The number of devices of each process, in process order.
  std::vector<int> const& devices_per_process() const { return per_process_; }
  /// This process's devices, to run per-device code directly.
  tessera::runtime& local() { return local_; }
  /// The MPI threading level granted (MPI_THREAD_FUNNELED or higher).
  int mpi_thread_level() const { return env_.thread_level(); }
  /// tessera's own communicator (a duplicate of MPI_COMM_WORLD).
  MPI_Comm communicator() const { return env_.comm(); }
  /// For tessera's cross-process calls.
  detail::mpi_environment const& environment() const { return env_; }

  /// jax.config.update("jax_enable_checks", on), for collectives between processes: when on, the
  /// processes compare a signature of every collective of a shard_map (what it is, its axes and
  /// size) before moving its data, and again at the end of the body, and of every reshard and sum
  /// of partial results between processes, so processes in different collectives all throw
  /// collective_mismatch. When off, a shard_map makes only the MPI calls of
  /// its collectives, as JAX and MPI do, and a mismatch between processes is a wrong program whose
  /// behaviour is undefined: it may hang, or read one collective's bytes as another's. On by
  /// default in builds without NDEBUG, off with it. Every process must set the same, between
  /// shard_maps, since it decides which MPI calls they make.
  void set_checked_collectives(bool on) { local_.pool().checked_collectives.store(on); }
  /// Whether collectives between processes are checked (set_checked_collectives).
  bool checked_collectives() const { return local_.pool().checked_collectives.load(); }
  /// XLA's --xla_gpu_deterministic_ops, for sums between processes: when on, psum, pmean and
  /// psum_scatter give the same bits as on one process (the members' inputs are all-gathered and
  /// added in rank order); when off (the default), where the groups are whole processes, sums
  /// of more than 32 KiB of inputs are MPI_Allreduce and psum_scatter MPI_Reduce_scatter_block,
  /// which add in MPI's order: the same bits where two devices take part, otherwise within
  /// 2 (k - 1) eps sum |x| of the rank-order sum (k devices; docs/across-processes.md). Every
  /// process must set the same.
  void set_deterministic_collectives(bool on) { local_.pool().deterministic_collectives.store(on); }
  /// Whether sums between processes keep the single-process order (set_deterministic_collectives).
  bool deterministic_collectives() const { return local_.pool().deterministic_collectives.load(); }

 private:
  runtime(int* argc, char*** argv, int local_devices)
      : env_(argc, argv), local_(checked_count(local_devices)), uncaught_(std::uncaught_exceptions()) {
    distributed::runtime const* expected = nullptr;
    if (!detail::current_distributed.compare_exchange_strong(expected, this))
      throw std::logic_error("tessera::distributed::runtime: this process already has one; make one per process");
    try {
      per_process_ = detail::mpi_allgather_values<int>(env_, local_devices);
      first_device_ = std::accumulate(per_process_.begin(), per_process_.begin() + env_.rank(), 0);
      long total = std::accumulate(per_process_.begin(), per_process_.end(), 0L);
      if (total > 1 << 20)
        throw std::invalid_argument("tessera::distributed::runtime: " + std::to_string(total) +
                                    " devices over all processes; at most 2^20");
      global_devices_ = static_cast<int>(total);
      // From here meshes name every process's devices; this process runs its own.
      std::vector<int> firsts(per_process_.size(), 0);
      for (std::size_t r = 1; r < firsts.size(); ++r) firsts[r] = firsts[r - 1] + per_process_[r - 1];
      local_.pool().set_process_span(first_device_, global_devices_, std::move(firsts));
      local_.pool().agree = [this](std::uint64_t hash, char const* what) { agree_on(hash, what); };
      local_.pool().exchange_in_place = [this](std::vector<detail::device_pool::exchange_message> const& messages,
                                               std::uint64_t signature, std::string const& what) {
        env_.check_caller(what.c_str());
        std::lock_guard lock(env_.call_mutex());
        if (local_.pool().checked_collectives.load()) agree_on_signature(signature, what);
        detail::mpi_exchange_messages(env_, messages);
      };
      // shard_map's collectives across processes: one device thread of each process calls it.
      local_.pool().gather_bytes = [this](std::size_t group, std::span<std::byte const> mine,
                                          std::span<std::uint64_t const> counts, std::byte* out) {
        env_.check_caller("a shard_map collective across processes");
        std::lock_guard lock(env_.call_mutex());
        if (group == 0) {
          detail::mpi_allgatherv_into(env_, mine, counts, out);
        } else {
          auto const& g = groups_.at(group - 1);
          detail::mpi_allgatherv_into(g.comm, g.rank, mine, counts, out);
        }
      };
      // The same collectives as the MPI call a user would write, over the group's communicator.
      local_.pool().collective_between_processes = [this](detail::device_pool::process_collective const& c) {
        env_.check_caller("a shard_map collective across processes");
        std::lock_guard lock(env_.call_mutex());
        group_comm const g = c.group == 0 ? group_comm{env_.comm(), env_.rank(), env_.size()} : groups_.at(c.group - 1);
        MPI_Comm const comm = g.comm;
        using kind = detail::device_pool::process_collective::kind;
        if (c.what == kind::all_to_all) {
          detail::mpi_alltoall_rounds(comm, g.size, g.rank, c.send, c.recv, c.count, c.op == 1);
          return;
        }
        MPI_Datatype const type = detail::mpi_type_of(c.dtype);
        if (type == MPI_DATATYPE_NULL) throw std::logic_error("tessera: no MPI type for a collective's elements");
        MPI_Op const op = c.op == 1 ? MPI_MAX : c.op == 2 ? MPI_MIN : MPI_SUM;
        std::size_t const elem = c.dtype & 0xFFu;
        if (c.what == kind::all_reduce) detail::mpi_allreduce_rounds(comm, c.send, c.recv, c.count, elem, type, op);
        else detail::mpi_reduce_scatter_rounds(comm, c.send, c.recv, c.count, elem, type, op);
      };
      // Asynchronous collectives' nonblocking calls, over the same communicators.
      async_ = std::make_unique<detail::async_mpi_engine>(env_, [this](std::size_t group) {
        if (group == 0) return detail::async_group_comm{env_.comm(), env_.rank(), env_.size()};
        auto const& g = groups_.at(group - 1);
        return detail::async_group_comm{g.comm, g.rank, g.size};
      });
      detail::async_engine.store(async_.get());
#ifdef NDEBUG
      local_.pool().checked_collectives.store(false);
#else
      local_.pool().checked_collectives.store(true);
#endif
      // One communicator per group of processes that a mesh's collectives over some axes
      // involve, made once per mesh (MPI_Comm_split, every process together).
      local_.pool().process_groups = [this](std::vector<std::uint64_t> const& mesh, std::vector<int> const& colors) {
        env_.check_caller("shard_map across processes");
        std::lock_guard lock(env_.call_mutex());
        auto it = mesh_groups_.find(mesh);
        if (it != mesh_groups_.end()) return it->second;
        std::vector<std::size_t> handles(colors.size(), 0);
        for (std::size_t m = 0; m < colors.size(); ++m) {
          if (colors[m] < 0) continue;
          MPI_Comm c = MPI_COMM_NULL;
          detail::mpi_check(MPI_Comm_split(env_.comm(), colors[m], env_.rank(), &c), "MPI_Comm_split");
          detail::mpi_check(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
          int r = 0, n = 0;
          detail::mpi_check(MPI_Comm_rank(c, &r), "MPI_Comm_rank");
          detail::mpi_check(MPI_Comm_size(c, &n), "MPI_Comm_size");
          groups_.push_back(group_comm{c, r, n});
          handles[m] = groups_.size();
        }
        mesh_groups_.emplace(mesh, handles);
        return handles;
      };
      // A process of one device runs that device's tasks on the calling thread (device_pool::run):
      // nothing else of the process can fail while it waits, so where every process has one
      // device, collectives are MPI's blocking calls (a blocking call does not match a
      // nonblocking one: all processes must choose alike); and under MPI_THREAD_FUNNELED the
      // runtime's own thread may make them.
      detail::mpi_blocking_collectives.store(
          std::all_of(per_process_.begin(), per_process_.end(), [](int k) { return k == 1; }));
      if (env_.thread_level() < MPI_THREAD_SERIALIZED) local_.pool().funneled_thread = std::this_thread::get_id();
      if (env_.thread_level() < MPI_THREAD_SERIALIZED && local_devices > 1)
        local_.pool().gather_refusal =
            std::string("its collectives between processes are made by device threads, which needs "
                        "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE, but MPI was initialised with ") +
            detail::thread_level_name(env_.thread_level()) + " (call MPI_Init_thread asking for MPI_THREAD_SERIALIZED, or let tessera initialise MPI)";
      local_.pool().abort_processes = [this](std::string const& message) {
        std::fprintf(stderr, "tessera: process %d of %d ends the job (MPI_Abort): %s\n",
                     env_.rank(), env_.size(), message.c_str());
        std::fflush(stderr);
        detail::mpi_abort_requested.store(true);
        MPI_Abort(env_.comm(), 1);
      };
    } catch (...) {
      detail::async_engine.store(nullptr);
      async_.reset();
      detail::mpi_blocking_collectives.store(false);
      detail::current_distributed.store(nullptr);
      throw;
    }
  }
  /// Every process gives `hash` of `what`; all of them throw together if any differs.
  void agree_on(std::uint64_t hash, char const* what) const {
    env_.check_caller(what);
    std::lock_guard lock(env_.call_mutex());
    auto const all = detail::mpi_allgather_values(env_, hash);
    for (std::size_t p = 1; p < all.size(); ++p)
      if (all[p] != all[0])
        throw std::invalid_argument(std::string("tessera: ") + what + " differs between process 0 and process " +
                                    std::to_string(p) + "; every process must give the same (checked in debug builds)");
  }
  /// Before an exchange: every process says what it is in (a hash and its first 63 characters);
  /// a process doing something else is a collective_mismatch on every process, not a hang or
  /// bytes read as the wrong thing.
  void agree_on_signature(std::uint64_t signature, std::string const& what) const {
    struct record {
      std::uint64_t signature;
      char what[64];
    };
    record mine{signature, {}};
    what.copy(mine.what, sizeof mine.what - 1);
    auto const all = detail::mpi_allgather_values(env_, mine);
    for (std::size_t p = 1; p < all.size(); ++p)
      if (all[p].signature != all[0].signature)
        throw tessera::collective_mismatch("tessera: the processes are in different operations between processes: "
                                           "process 0 in " + std::string(all[0].what) + ", process " +
                                           std::to_string(p) + " in " + std::string(all[p].what) +
                                           "; every process must run the same program (SPMD)");
  }
  static int checked_count(int k) {
    if (k < 1)
      throw std::invalid_argument("tessera::distributed::runtime: the number of local devices must be at least 1, got " +
                                  std::to_string(k));
    return k;
  }

  detail::mpi_environment env_;  // first in, last out: MPI outlives the device threads
  tessera::runtime local_;
  int uncaught_ = 0;
  /// A communicator of some processes (a mesh's collectives over some of its axes).
  struct group_comm {
    MPI_Comm comm;
    int rank;
    int size;
  };
  std::vector<group_comm> groups_;
  std::map<std::vector<std::uint64_t>, std::vector<std::size_t>> mesh_groups_;
  std::vector<int> per_process_;
  std::unique_ptr<detail::async_mpi_engine> async_;  // after groups_: gone before the communicators
  int first_device_ = 0;
  int global_devices_ = 0;
};

}  // namespace distributed

/// jax.process_index(): this process's index in its distributed runtime, 0 without one.
inline int process_index() {
  auto const* rt = detail::current_distributed.load();
  return rt ? rt->process_index() : 0;
}
/// jax.process_count(): the number of processes, 1 without a distributed runtime.
inline int process_count() {
  auto const* rt = detail::current_distributed.load();
  return rt ? rt->process_count() : 1;
}

namespace detail {

/// What each process says about the data it gathers, checked to agree before any data moves.
struct gather_header {
  std::uint32_t elem_size = 0;
  std::uint32_t elem_kind = 0;  // 1 float, 2 signed, 3 unsigned, 4 bool
  std::uint32_t rank = 0;
  std::uint32_t tiled = 0;
  std::uint64_t dims[8] = {};
};

template <class T>
constexpr std::uint32_t elem_kind() {
  if constexpr (std::is_same_v<T, bool>) return 4;
  else if constexpr (std::is_floating_point_v<T>) return 1;
  else if constexpr (std::is_signed_v<T>) return 2;
  else return 3;
}

inline std::string dims_string(gather_header const& h) {
  std::string s = "(";
  for (std::uint32_t i = 0; i < h.rank; ++i) s += (i ? ", " : "") + std::to_string(h.dims[i]);
  return s + (h.rank == 1 ? ",)" : ")");
}

/// What one process says about its x (a gather's or a broadcast's), before any data moves.
template <class T>
gather_header header_of(std::vector<std::size_t> const& shape, char const* where) {
  if (shape.size() > 8) throw std::invalid_argument(std::string("tessera::") + where + ": rank above 8 is not supported");
  gather_header h;
  h.elem_size = sizeof(T);
  h.elem_kind = elem_kind<T>();
  h.rank = static_cast<std::uint32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) h.dims[i] = shape[i];
  return h;
}

/// Gathers each process's row-major host data (`data`, of `shape`); every process checks every
/// header, so all of them throw the same error together (none is left waiting).
template <class T>
xt::xarray<T> process_allgather_host(T const* data, std::vector<std::size_t> const& shape, bool tiled) {
  auto const* rt = current_distributed.load();
  std::size_t count = 1;
  for (auto d : shape) count *= d;
  if (rt == nullptr) {  // one process: the data itself, stacked or not
    std::vector<std::size_t> s = shape;
    if (!tiled) s.insert(s.begin(), 1);
    xt::xarray<T> out = xt::xarray<T>::from_shape(s);
    std::copy(data, data + count, out.data());
    return out;
  }
  auto const& env = rt->environment();
  env.check_caller("tessera::process_allgather");
  gather_header mine = header_of<T>(shape, "process_allgather");
  if (tiled && shape.empty())
    throw std::invalid_argument("tessera::process_allgather: tiled=true concatenates along dimension 0, and a scalar has none");
  mine.tiled = tiled ? 1u : 0u;
  std::lock_guard lock(env.call_mutex());
  auto const all = mpi_allgather_values(env, mine);
  for (std::size_t p = 1; p < all.size(); ++p) {
    auto const& a = all[0];
    auto const& b = all[p];
    bool same = a.elem_size == b.elem_size && a.elem_kind == b.elem_kind && a.rank == b.rank && a.tiled == b.tiled;
    for (std::uint32_t i = tiled ? 1 : 0; same && i < a.rank; ++i) same = a.dims[i] == b.dims[i];
    if (!same) {
      std::ostringstream os;
      os << "tessera::process_allgather: process 0 gives " << a.elem_size << "-byte elements of shape " << dims_string(a)
         << (a.tiled ? " (tiled)" : "") << " and process " << p << " gives " << b.elem_size
         << "-byte elements of shape " << dims_string(b) << (b.tiled ? " (tiled)" : "")
         << "; every process must give the same element type, rank and "
         << (tiled ? "shape after dimension 0" : "shape");
      throw std::invalid_argument(os.str());
    }
  }
  // Every process's byte count follows from its header: no second exchange before the data.
  std::vector<std::uint64_t> counts;
  for (auto const& h : all) {
    std::uint64_t n = sizeof(T);
    for (std::uint32_t i = 0; i < h.rank; ++i) n *= h.dims[i];
    counts.push_back(n);
  }
  std::vector<std::size_t> out_shape;
  if (tiled) {
    std::uint64_t rows = 0;
    for (auto const& h : all) rows += h.dims[0];
    out_shape.push_back(static_cast<std::size_t>(rows));
    out_shape.insert(out_shape.end(), shape.begin() + 1, shape.end());
  } else {
    out_shape.push_back(all.size());
    out_shape.insert(out_shape.end(), shape.begin(), shape.end());
  }
  xt::xarray<T> out = xt::xarray<T>::from_shape(out_shape);
  mpi_allgatherv_into(env, std::span<std::byte const>(reinterpret_cast<std::byte const*>(data), count * sizeof(T)),
                      counts, reinterpret_cast<std::byte*>(out.data()));
  return out;
}

}  // namespace detail

namespace detail {

/// The global value of an array whose blocks are spread over processes: each process sends the
/// first copy (replica 0) of every block its devices hold, in position order, and every process
/// puts every block in place.
template <class T, std::size_t N, class S>
xt::xarray<T> gather_global(array<T, N, S> const& x) {
  auto const* rt = current_distributed.load();
  if (rt == nullptr) throw std::logic_error("tessera::process_allgather: no distributed runtime");
  auto const& env = rt->environment();
  env.check_caller("tessera::process_allgather");
  auto const& s = x.sharding();
  auto const& ids = s.device_ids();
  auto const& pool = *x.pool();
  auto const shape = x.shape();
  std::vector<T> mine;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (s.replica_id(p) != 0 || !pool.is_local(ids[p])) continue;
    std::size_t const n = element_count(block_shape(s.block(p, shape)));
    T const* b = x.block_data(p);
    mine.insert(mine.end(), b, b + n);
  }
  std::vector<std::uint64_t> counts;
  std::vector<std::byte> bytes;
  {
    std::lock_guard lock(env.call_mutex());
    bytes = mpi_allgatherv_bytes(
        env, std::span<std::byte const>(reinterpret_cast<std::byte const*>(mine.data()), mine.size() * sizeof(T)), counts);
  }
  auto const& per = rt->devices_per_process();
  std::vector<std::size_t> offset(per.size() + 1, 0);
  for (std::size_t r = 0; r < per.size(); ++r) offset[r + 1] = offset[r] + static_cast<std::size_t>(counts[r]);
  std::vector<std::size_t> cursor(offset.begin(), offset.end() - 1);
  auto out = xt::xtensor<T, N>::from_shape(shape);
  auto const whole = full_block(shape);
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (s.replica_id(p) != 0) continue;
    auto const block = s.block(p, shape);
    std::size_t const n = element_count(block_shape(block));
    auto const r = static_cast<std::size_t>(pool.process_of(ids[p]));
    if (cursor[r] + n * sizeof(T) > offset[r + 1])
      throw std::logic_error("tessera::process_allgather: process " + std::to_string(r) + " sent fewer bytes than its blocks need");
    // The received bytes hold the block as it was sent (offsets are multiples of sizeof(T)).
    if (n != 0) copy_region(reinterpret_cast<T const*>(bytes.data() + cursor[r]), block, out.data(), whole, block);
    cursor[r] += n * sizeof(T);
  }
  return xt::xarray<T>(out);
}

}  // namespace detail

/// multihost_utils.process_allgather(x, tiled). For host data, or an array of this process's
/// devices only (fully addressable): every process's x, on every process, stacked along a new
/// leading dimension (tiled=false: shapes must be equal) or concatenated along dimension 0
/// (tiled=true: the other dimensions must be equal, dimension 0 may differ). For an array whose
/// blocks are on several processes' devices: its global value, on every process.
template <class E>
auto process_allgather(E const& x, bool tiled = false) {
  if constexpr (array_type<E>) {
    using T = typename E::value_type;
    // The processes take one route together: an array on one process's devices alone (a mesh of
    // the first devices, say) is fully addressable there and nowhere else, and is gathered as the
    // global array it is, from that process.
    bool const everywhere = [&] {
      auto const* rt = detail::current_distributed.load();
      if (rt == nullptr) return x.is_fully_addressable();
      std::lock_guard lock(rt->environment().call_mutex());
      auto const flags = detail::mpi_allgather_values<char>(rt->environment(), x.is_fully_addressable() ? char(1) : char(0));
      return std::all_of(flags.begin(), flags.end(), [](char f) { return f != 0; });
    }();
    if (!everywhere) return detail::gather_global(x);
    auto const host = to_host(x);
    return detail::process_allgather_host<T>(host.data(), std::vector<std::size_t>(host.shape().begin(), host.shape().end()), tiled);
  } else {
    using T = std::remove_cv_t<typename std::decay_t<E>::value_type>;
    if constexpr (detail::row_major_contiguous<E>) {  // read in place: no copy before the exchange
      return detail::process_allgather_host<T>(x.data(), std::vector<std::size_t>(x.shape().begin(), x.shape().end()), tiled);
    } else {
      xt::xarray<T> const host = x;
      return detail::process_allgather_host<T>(host.data(), std::vector<std::size_t>(host.shape().begin(), host.shape().end()), tiled);
    }
  }
}

/// multihost_utils.sync_global_devices(name): waits until every process has reached the barrier
/// named `name`. The processes compare the names first, so processes at different barriers all
/// throw, naming both, instead of passing each other.
inline void sync_global_devices(std::string_view name) {
  auto const* rt = detail::current_distributed.load();
  if (rt == nullptr) return;  // one process: nobody to wait for
  auto const& env = rt->environment();
  env.check_caller("tessera::sync_global_devices");
  std::uint64_t const h = detail::fnv1a(name.data(), name.size(), 14695981039346656037ull);
  std::vector<std::uint64_t> hashes;
  {
    std::lock_guard lock(env.call_mutex());
    hashes = detail::mpi_allgather_values(env, h);
  }
  std::size_t const other = static_cast<std::size_t>(
      std::find_if(hashes.begin(), hashes.end(), [&](std::uint64_t x) { return x != hashes[0]; }) - hashes.begin());
  if (other == hashes.size()) return;
  // Every process saw the same hashes, so all of them are here: gather the names for the message.
  std::vector<std::uint64_t> lengths;
  std::vector<std::byte> const names = [&] {
    std::lock_guard lock(env.call_mutex());
    return detail::mpi_allgatherv_bytes(env, std::as_bytes(std::span<char const>(name.data(), name.size())), lengths);
  }();
  std::vector<std::string> each;
  std::size_t start = 0;
  for (auto n : lengths) {
    each.emplace_back(reinterpret_cast<char const*>(names.data()) + start, static_cast<std::size_t>(n));
    start += static_cast<std::size_t>(n);
  }
  throw std::runtime_error("tessera::sync_global_devices: process 0 is at the barrier '" + each[0] + "' and process " +
                           std::to_string(other) + " at '" + each[other] +
                           "'; every process must reach the same barriers in the same order");
}

/// multihost_utils.broadcast_one_to_all(x, is_source): the source process's x on every process, as
/// an xt::xarray. The source is process 0, or the one process whose is_source is true. Every
/// process gives x of the same element type and shape (the others' values are not read); a
/// disagreement, or a number of sources other than one, throws on every process.
template <class E>
auto broadcast_one_to_all(E const& x, std::optional<bool> is_source = std::nullopt) {
  auto const* rt = detail::current_distributed.load();
  bool const source = is_source.value_or(rt == nullptr || rt->process_index() == 0);
  if (rt == nullptr && !source)
    throw std::invalid_argument("tessera::broadcast_one_to_all: no process is the source (is_source is false on the "
                                "only process)");
  // Only the source's values are read: another process's host expression is not evaluated, and
  // its result is written only by the broadcast (a 4 MiB copy was a third of the call). An
  // array is read everywhere, so that one that is not fully addressable throws on every process.
  auto value = [&] {
    if constexpr (array_type<E>) {
      return to_host(x);
    } else {
      using T = std::remove_cv_t<typename std::decay_t<E>::value_type>;
      if (source) return xt::xarray<T>(x);
      return xt::xarray<T>::from_shape(std::vector<std::size_t>(x.shape().begin(), x.shape().end()));
    }
  }();
  using T = typename decltype(value)::value_type;
  if (rt == nullptr) return value;
  auto const& env = rt->environment();
  env.check_caller("tessera::broadcast_one_to_all");
  std::vector<std::size_t> const shape(value.shape().begin(), value.shape().end());
  struct broadcast_header {
    detail::gather_header x;
    std::uint32_t source = 0;
  };
  broadcast_header mine{detail::header_of<T>(shape, "broadcast_one_to_all"), source ? 1u : 0u};
  std::lock_guard lock(env.call_mutex());
  auto const all = detail::mpi_allgather_values(env, mine);
  int root = -1, sources = 0;
  for (std::size_t p = 0; p < all.size(); ++p) {
    auto const& a = all[0].x;
    auto const& b = all[p].x;
    bool same = a.elem_size == b.elem_size && a.elem_kind == b.elem_kind && a.rank == b.rank;
    for (std::uint32_t i = 0; same && i < a.rank; ++i) same = a.dims[i] == b.dims[i];
    if (!same)
      throw std::invalid_argument("tessera::broadcast_one_to_all: process 0 gives " + std::to_string(a.elem_size) +
                                  "-byte elements of shape " + detail::dims_string(a) + " and process " +
                                  std::to_string(p) + " gives " + std::to_string(b.elem_size) +
                                  "-byte elements of shape " + detail::dims_string(b) +
                                  "; every process must give the source's element type and shape");
    if (all[p].source != 0) {
      ++sources;
      if (root < 0) root = static_cast<int>(p);
    }
  }
  if (sources != 1)
    throw std::invalid_argument("tessera::broadcast_one_to_all: " + std::to_string(sources) +
                                " processes say is_source = true; exactly one must");
  detail::mpi_bcast_rounds(env.comm(), value.data(), value.size() * sizeof(T), root);
  return value;
}

/// jax.make_array_from_process_local_data(sharding, local_data, global_shape): a global array
/// from each process's part of it. The blocks of this process's devices must cover a box of the
/// global array (a process's rows, say); local_data is that box, in row-major order.
template <class T, std::size_t N, class S>
array<T, N, S> make_array_from_process_local_data(S const& s, xt::xtensor<T, N> const& local_data,
                                                  shape_t<N> const& global_shape) {
  auto const pool = detail::pool_for(s, "make_array_from_process_local_data");
  auto const& ids = s.device_ids();
  std::array<slice, N> box{};
  bool any = false;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (!pool->is_local(ids[p])) continue;
    auto const b = s.block(p, global_shape);
    for (std::size_t k = 0; k < N; ++k) {
      box[k].start = any ? std::min(box[k].start, b[k].start) : b[k].start;
      box[k].stop = any ? std::max(box[k].stop, b[k].stop) : b[k].stop;
    }
    any = true;
  }
  std::string const where = "tessera::make_array_from_process_local_data";
  if (!any) throw std::invalid_argument(where + ": the sharding has none of this process's devices");
  // The box must be covered by the local blocks exactly: their volumes (distinct blocks) add up to it.
  std::vector<std::array<slice, N>> distinct;
  for (std::size_t p = 0; p < ids.size(); ++p)
    if (pool->is_local(ids[p])) {
      auto const b = s.block(p, global_shape);
      if (std::find(distinct.begin(), distinct.end(), b) == distinct.end()) distinct.push_back(b);
    }
  std::size_t covered = 0;
  for (auto const& b : distinct) covered += detail::element_count(detail::block_shape(b));
  auto const box_shape = detail::block_shape(box);
  if (covered != detail::element_count(box_shape))
    throw std::invalid_argument(where + ": this process's devices hold blocks that do not form one box of the global "
                                "array (its devices are not contiguous along the sharded axes); order the mesh so each "
                                "process holds a contiguous part");
  for (std::size_t k = 0; k < N; ++k)
    if (local_data.shape()[k] != box_shape[k]) {
      std::ostringstream os;
      os << where << ": process " << process_index() << " gives local data of shape (";
      for (std::size_t i = 0; i < N; ++i) os << (i ? ", " : "") << local_data.shape()[i];
      os << ") but its devices hold a part of shape (";
      for (std::size_t i = 0; i < N; ++i) os << (i ? ", " : "") << box_shape[i];
      os << ") of the global shape (";
      for (std::size_t i = 0; i < N; ++i) os << (i ? ", " : "") << global_shape[i];
      os << ")";
      throw std::invalid_argument(os.str());
    }
  // local_data holds the box (global coordinates); each device copies its block out of it.
  return detail::build_array<T, N, S>(s, global_shape, "device_put",
                                      [&](std::size_t, std::array<slice, N> const& block, T* out) {
                                        detail::copy_region(local_data.data(), box, out, block, block);
                                      });
}

}  // namespace tessera
