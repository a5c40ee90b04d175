#pragma once
// MPI as tessera uses it, politely: initialised only if nobody has, finalised only if we
// initialised it, and always through a duplicate of MPI_COMM_WORLD whose errors come back as
// return codes, so user code on MPI_COMM_WORLD is never disturbed and an MPI failure is a C++
// exception. Needs <mpi.h>: only tessera/distributed.hpp includes this header.

// The C API only: OpenMPI's and MPICH's deprecated C++ bindings warn under -Wextra.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace tessera {

/// An MPI call failed: the call, the process and MPI's own words (JAX: a RuntimeError from the
/// distributed runtime).
class mpi_error : public std::runtime_error {
 public:
  mpi_error(std::string const& what, int code) : std::runtime_error(what), code_(code) {}
  /// The MPI error code.
  int code() const noexcept { return code_; }

 private:
  int code_;
};

namespace detail {

/// MPI's text for an error code.
inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

/// This process's rank in MPI_COMM_WORLD, for messages (-1 before MPI_Init).
inline int world_rank_or_minus_one() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Throws mpi_error for a failed MPI call.
inline void mpi_check(int rc, char const* call) {
  if (rc == MPI_SUCCESS) return;
  throw mpi_error("tessera: " + std::string(call) + " failed on process " + std::to_string(world_rank_or_minus_one()) +
                      ": " + mpi_error_string(rc),
                  rc);
}

/// The threading level's name, for messages.
inline char const* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI threading level";
  }
}

/// MPI for the life of a distributed runtime. tessera calls MPI from one thread at a time: the
/// host thread (reshards, sums and gathers between processes) or, inside a shard_map whose
/// mesh spans processes, one device thread per process (parallel/across_processes.hpp), never
/// two at once (a mutex). So it asks for MPI_THREAD_SERIALIZED, not MULTIPLE (which costs locks
/// inside MPI on every call). Where MPI grants only FUNNELED, everything but those shard_map
/// collectives works, and they throw saying so.
class mpi_environment {
 public:
  mpi_environment(int* argc, char*** argv) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (fin) throw std::logic_error("tessera::distributed::runtime: MPI was already finalised in this process; it cannot be initialised again");
    if (!init) {
      int provided = MPI_THREAD_SINGLE;
      mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      we_initialised_ = true;
      level_ = provided;
    } else {
      MPI_Query_thread(&level_);
    }
    if (level_ < MPI_THREAD_FUNNELED) {
      std::string const msg = std::string("tessera::distributed::runtime: MPI provides ") + thread_level_name(level_) +
                              "; tessera's device threads need at least MPI_THREAD_FUNNELED (initialise MPI with "
                              "MPI_Init_thread, or let tessera do it)";
      finalize();
      throw std::runtime_error(msg);
    }
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (level_ == MPI_THREAD_FUNNELED && !is_main) {
      finalize();
      throw std::logic_error(
          "tessera::distributed::runtime: MPI was initialised with MPI_THREAD_FUNNELED on another thread; make the "
          "runtime on the thread that initialised MPI");
    }
    // One communicator of our own: our messages never match the user's, and errors return.
    mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    mpi_check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    owner_ = std::this_thread::get_id();
  }
  mpi_environment(mpi_environment const&) = delete;
  mpi_environment& operator=(mpi_environment const&) = delete;
  ~mpi_environment() {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    finalize();
  }

  /// tessera's duplicate of MPI_COMM_WORLD.
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// The threading level MPI granted.
  int thread_level() const { return level_; }
  /// Whether tessera initialised MPI (and so finalises it).
  bool initialised_here() const { return we_initialised_; }
  /// Refuses an MPI call from another thread than the runtime's (MPI_THREAD_FUNNELED's rule).
  void check_caller(char const* what) const {
    if (level_ < MPI_THREAD_SERIALIZED && std::this_thread::get_id() != owner_)
      throw std::logic_error(std::string("tessera: ") + what +
                             " was called from a thread other than the one that made the distributed runtime; under "
                             "MPI_THREAD_FUNNELED only that thread may communicate across processes");
  }
  /// Serialises tessera's own calls (several host threads may share a runtime).
  std::mutex& call_mutex() const { return mutex_; }

 private:
  void finalize() noexcept {
    if (!we_initialised_) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
    we_initialised_ = false;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, level_ = MPI_THREAD_SINGLE;
  bool we_initialised_ = false;
  std::thread::id owner_;
  mutable std::mutex mutex_;
};

}  // namespace detail
}  // namespace tessera
