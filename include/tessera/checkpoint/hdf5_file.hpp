#pragma once
// RAII over HDF5's C API for checkpoints (checkpoint/save.hpp, load.hpp, manager.hpp): handles
// that close themselves, HDF5's error stack turned into exceptions that name the file, the leaf
// and HDF5's own words, the element types, string attributes, and files opened serially or,
// with a parallel HDF5 inside a distributed runtime of several processes, over MPI-IO.
//
// HDF5 is not thread-safe in its MPI build (Debian's libhdf5-openmpi-dev: "Threadsafety: no"),
// and its automatic error printing is global state, so every call tessera makes holds one mutex
// (detail::hdf5_guard) that also silences the printing for its duration (and restores the
// user's handler after).

#include <hdf5.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/checkpoint/raw_io.hpp"
#include "tessera/core/dtype.hpp"

#ifdef H5_HAVE_PARALLEL
// Parallel HDF5 includes <mpi.h>; checkpoints across processes use the distributed runtime's communicator.
#include "tessera/distributed.hpp"
#endif

namespace tessera {

/// A checkpoint could not be written or read: the file is missing, not HDF5, truncated or
/// corrupted, a leaf is missing or extra, a shape or element type differs from the one asked for,
/// or the disk is full. The message names the file, the leaf and the values (Orbax raises
/// ValueError/FileNotFoundError for these).
class checkpoint_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

/// The one mutex of tessera's HDF5 calls (HDF5's MPI build is not thread-safe).
inline std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

/// Holds hdf5_mutex and turns HDF5's automatic error printing off (tessera reports the errors
/// in its exceptions), restoring the handler that was there on destruction.
class hdf5_guard {
 public:
  hdf5_guard() : lock_(hdf5_mutex()) {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  hdf5_guard(hdf5_guard const&) = delete;
  hdf5_guard& operator=(hdf5_guard const&) = delete;
  ~hdf5_guard() {
    H5Eclear2(H5E_DEFAULT);  // what is left there was reported (or retried by HDF5 itself)
    H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// HDF5's error stack, innermost first, as one line ("H5Fopen: unable to open file; H5F__open:
/// ... truncated file: eof = 800, sblock->base_addr = 0, stored_eof = 4096"), then cleared.
inline std::string hdf5_error_text() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, H5E_error2_t const* e, void* p) -> herr_t {
        auto& s = *static_cast<std::string*>(p);
        if (s.size() > 600) return 0;  // the innermost errors say what happened; the rest is the call path
        if (!s.empty()) s += "; ";
        s += e->func_name ? e->func_name : "?";
        s += ": ";
        s += e->desc ? e->desc : "";
        return 0;
      },
      &out);
  H5Eclear2(H5E_DEFAULT);
  return out.empty() ? std::string("no HDF5 error recorded") : out;
}

/// "file 'p', leaf 'w': " (or only the file), the start of every checkpoint message.
inline std::string where_text(std::string_view op, std::string const& file, std::string_view leaf) {
  std::string s = "tessera::" + std::string(op) + ": file '" + file + "'";
  if (!leaf.empty()) s += ", leaf '" + std::string(leaf) + "'";
  return s + ": ";
}

/// Throws checkpoint_error naming op, file, leaf, what failed and HDF5's error stack.
[[noreturn]] inline void throw_hdf5(std::string_view op, std::string const& file, std::string_view leaf,
                                    std::string const& what) {
  throw checkpoint_error(where_text(op, file, leaf) + what + " (HDF5: " + hdf5_error_text() + ")");
}

/// An HDF5 identifier that closes itself with `close` (H5Fclose, H5Dclose, ...).
class h5_handle {
 public:
  h5_handle() = default;
  h5_handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  h5_handle(h5_handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  h5_handle& operator=(h5_handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  h5_handle(h5_handle const&) = delete;
  h5_handle& operator=(h5_handle const&) = delete;
  ~h5_handle() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes now, reporting failure (closing a file flushes it: a full disk shows here).
  herr_t close() {
    herr_t r = 0;
    if (id_ >= 0 && close_) r = close_(id_);
    id_ = H5I_INVALID_HID;
    return r;
  }
  void reset() noexcept {
    if (id_ >= 0 && close_) {
      hdf5_guard g;
      close_(id_);
    }
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

/// A handle from a call returning hid_t, or checkpoint_error naming what failed.
inline h5_handle checked(hid_t id, herr_t (*close)(hid_t), std::string_view op, std::string const& file,
                         std::string_view leaf, std::string const& what) {
  if (id < 0) throw_hdf5(op, file, leaf, what);
  return h5_handle(id, close);
}
inline void checked(herr_t r, std::string_view op, std::string const& file, std::string_view leaf,
                    std::string const& what) {
  if (r < 0) throw_hdf5(op, file, leaf, what);
}

/// bool as h5py stores numpy's bool_: an 8-bit enum {FALSE = 0, TRUE = 1}.
inline h5_handle h5_bool_type() {
  hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  std::int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return h5_handle(t, H5Tclose);
}

/// The HDF5 memory type of T (a copy, closed by the handle).
template <element_type T>
h5_handle h5_type() {
  if constexpr (std::is_same_v<T, bool>) return h5_bool_type();
  hid_t base = -1;
  if constexpr (std::is_floating_point_v<T>) {
    base = sizeof(T) == 4 ? H5T_NATIVE_FLOAT : sizeof(T) == 8 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LDOUBLE;
  } else if constexpr (std::is_signed_v<T>) {
    base = sizeof(T) == 1 ? H5T_NATIVE_INT8 : sizeof(T) == 2 ? H5T_NATIVE_INT16 : sizeof(T) == 4 ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64;
  } else {
    base = sizeof(T) == 1 ? H5T_NATIVE_UINT8 : sizeof(T) == 2 ? H5T_NATIVE_UINT16 : sizeof(T) == 4 ? H5T_NATIVE_UINT32 : H5T_NATIVE_UINT64;
  }
  return h5_handle(H5Tcopy(base), H5Tclose);
}

/// A file type in numpy's words (float32, int64, bool, ...), for messages.
inline std::string h5_type_name(hid_t t) {
  std::size_t const bits = H5Tget_size(t) * 8;
  switch (H5Tget_class(t)) {
    case H5T_FLOAT: return "float" + std::to_string(bits);
    case H5T_INTEGER: return (H5Tget_sign(t) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_ENUM: return bits == 8 ? "bool (an 8-bit enum)" : "enum" + std::to_string(bits);
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound (a struct)";
    default: return "HDF5 type class " + std::to_string(static_cast<int>(H5Tget_class(t)));
  }
}

/// Whether the file's type t holds T's values exactly (the same kind, size and sign; any byte order).
template <element_type T>
bool h5_type_matches(hid_t t) {
  H5T_class_t const c = H5Tget_class(t);
  std::size_t const size = H5Tget_size(t);
  if constexpr (std::is_same_v<T, bool>) {
    return (c == H5T_ENUM || c == H5T_INTEGER) && size == 1;
  } else if constexpr (std::is_floating_point_v<T>) {
    return c == H5T_FLOAT && size == sizeof(T);
  } else {
    return c == H5T_INTEGER && size == sizeof(T) && (H5Tget_sign(t) == H5T_SGN_NONE) == std::is_unsigned_v<T>;
  }
}

/// Writes string attribute `name` = value on object `obj` (a variable-length UTF-8 string, which
/// h5py reads as str).
inline void write_string_attribute(hid_t obj, char const* name, std::string const& value, std::string_view op,
                                   std::string const& file, std::string_view leaf) {
  h5_handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  h5_handle space(H5Screate(H5S_SCALAR), H5Sclose);
  auto attr = checked(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose, op, file,
                      leaf, std::string("creating attribute '") + name + "'");
  char const* p = value.c_str();
  checked(H5Awrite(attr.get(), type.get(), &p), op, file, leaf, std::string("writing attribute '") + name + "'");
}

/// String attribute `name` of `obj` (variable- or fixed-length), or "" where it has none.
inline std::string read_string_attribute(hid_t obj, char const* name) {
  if (H5Aexists(obj, name) <= 0) return {};
  h5_handle attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return {};
  h5_handle ftype(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(ftype.get()) != H5T_STRING) return {};
  if (H5Tis_variable_str(ftype.get()) > 0) {
    h5_handle mtype(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mtype.get(), H5T_VARIABLE);
    H5Tset_cset(mtype.get(), H5Tget_cset(ftype.get()));
    char* p = nullptr;
    if (H5Aread(attr.get(), mtype.get(), &p) < 0 || !p) return {};
    std::string s(p);
    H5free_memory(p);
    return s;
  }
  std::vector<char> buf(H5Tget_size(ftype.get()) + 1, '\0');
  if (H5Aread(attr.get(), ftype.get(), buf.data()) < 0) return {};
  return std::string(buf.data());
}

/// The communicator of the processes that save and load together: the distributed runtime's,
/// where there is one with several processes and HDF5 is parallel; else none (one process).
struct checkpoint_group {
#ifdef H5_HAVE_PARALLEL
  MPI_Comm comm = MPI_COMM_NULL;
#endif
  int rank = 0;
  int size = 1;
  std::mutex* mpi_mutex = nullptr;  // the distributed runtime's: tessera makes one MPI call at a time
  bool across() const { return size > 1; }
  /// Holds the runtime's MPI mutex for a whole save or load across processes.
  std::unique_lock<std::mutex> lock() const {
    return mpi_mutex ? std::unique_lock<std::mutex>(*mpi_mutex) : std::unique_lock<std::mutex>();
  }
};

inline checkpoint_group current_checkpoint_group() {
  checkpoint_group g;
#ifdef H5_HAVE_PARALLEL
  if (auto const* rt = current_distributed.load(); rt && rt->process_count() > 1) {
    g.comm = rt->communicator();
    g.rank = rt->process_index();
    g.size = rt->process_count();
    g.mpi_mutex = &rt->environment().call_mutex();
  }
#endif
  return g;
}

/// A serial HDF5 cannot write one file from several processes: refused, naming the fix.
inline void require_parallel_hdf5_for(int local_devices, int global_devices, std::string_view op,
                                      std::string const& file, std::string_view leaf) {
#ifndef H5_HAVE_PARALLEL
  if (local_devices < global_devices)
    throw checkpoint_error(where_text(op, file, leaf) + "the array's runtime has " + std::to_string(global_devices) +
                           " devices over several processes, this process " + std::to_string(local_devices) +
                           "; checkpoints across processes need a parallel HDF5 (MPI-IO): build with one (Debian: "
                           "libhdf5-openmpi-dev; CMake finds it with HDF5_PREFER_PARALLEL, which tessera sets where "
                           "it finds an MPI)");
#else
  (void)local_devices, (void)global_devices, (void)op, (void)file, (void)leaf;
#endif
}

/// Every process's `ok`, and-ed (true without several processes): each process checks its own
/// part, then all of them throw together instead of some waiting in the next collective call.
inline bool all_ok(checkpoint_group const& g, bool ok) {
#ifdef H5_HAVE_PARALLEL
  if (g.across()) {
    int v = ok ? 1 : 0, r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_INT, MPI_LAND, g.comm);
    return r != 0;
  }
#else
  (void)g;
#endif
  return ok;
}

/// The largest `n` over the processes (n without several processes).
inline std::size_t max_over_processes(checkpoint_group const& g, std::size_t n) {
#ifdef H5_HAVE_PARALLEL
  if (g.across()) {
    unsigned long long v = n, r = 0;
    MPI_Allreduce(&v, &r, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, g.comm);
    return static_cast<std::size_t>(r);
  }
#else
  (void)g;
#endif
  return n;
}

inline void barrier(checkpoint_group const& g) {
#ifdef H5_HAVE_PARALLEL
  if (g.across()) MPI_Barrier(g.comm);
#else
  (void)g;
#endif
}

/// A file-access property list: MPI-IO over g's communicator where g spans processes, else
/// HDF5's default (sec2) driver. Format: HDF5 1.10 and later (superblock v3, object headers and
/// chunk indexes with checksums, so a flipped byte in the metadata is found when the file is
/// read; the 1.8 format's v1 B-tree chunk index has none, and a flip in a chunk's filter mask went
/// unseen. h5py built with HDF5 1.10 or later reads it).
inline h5_handle file_access(checkpoint_group const& g) {
  h5_handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG);  // closing the file closes what a failed read left open
  // Datasets of a page or more start on a page: their bytes are written with O_DIRECT
  // (checkpoint/raw_io.hpp), which needs aligned offsets, and no page holds two datasets' bytes.
  H5Pset_alignment(fapl.get(), raw_align(), raw_align());
#ifdef H5_HAVE_PARALLEL
  if (g.across()) {
    H5Pset_fapl_mpio(fapl.get(), g.comm, MPI_INFO_NULL);
    // Metadata read by one process and broadcast, not by every process (HDF5's advice at scale).
    H5Pset_all_coll_metadata_ops(fapl.get(), true);
    H5Pset_coll_metadata_write(fapl.get(), true);
  }
#else
  (void)g;
#endif
  return fapl;
}

}  // namespace detail
}  // namespace tessera
