#pragma once
// tessera::save(path, tree): one HDF5 file, one dataset per leaf named by its tree path, holding
// the global array; each device's block is written by its own process straight from the
// device's memory, replicated blocks once (by the holder of replica 0, as Orbax does). Across
// processes all of them create the one file's datasets collectively through parallel HDF5
// (MPI-IO), then each writes its blocks' bytes at the offsets HDF5 allocated (checkpoint/raw_io.hpp;
// through H5Dwrite, collectively, with the checksum or without direct_io). The file is written
// under a temporary name and renamed once every process has finished, so a
// crash or a kill in the middle leaves the previous checkpoint whole (docs/checkpoints.md).

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/checkpoint/hdf5_file.hpp"
#include "tessera/checkpoint/raw_io.hpp"
#include "tessera/checkpoint/tree_paths.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/tree/tree_util.hpp"
#include "tessera/version.hpp"

namespace tessera {

/// How tessera::save writes (orbax.checkpoint's save_args and options, in part).
struct save_options {
  /// A Fletcher-32 checksum per chunk (HDF5's fletcher32 filter; a chunk is one block of the
  /// saving sharding), so that a flipped byte in the data is found when it is read back, by
  /// tessera and by h5py. Off by default, as in Orbax and h5py: HDF5 computes it a byte pair at a
  /// time (5 s per GiB written and 3 s per GiB read on the test machine, five times the write
  /// itself), and chunked datasets go through H5Dwrite. HDF5 1.10 checksums its metadata either
  /// way, and a truncated file is found either way (docs/checkpoints.md, "Speed").
  bool checksum = false;
  /// Write the datasets' bytes with pwrite (O_DIRECT where the file system takes it) at the offsets
  /// HDF5 allocated for them, then one fsync, instead of through H5Dwrite (and, across processes,
  /// MPI-IO's collective writes). HDF5 still writes all the metadata (collectively, across
  /// processes). Needs every process to see the file through POSIX calls (a local disk, NFS,
  /// Lustre, GPFS). Checksummed datasets go through H5Dwrite (chunked, filtered).
  bool direct_io = true;
  /// Called on every process after it has written each leaf (its dataset path): progress
  /// reports; tests use it to stop a process in the middle of a save.
  std::function<void(std::string const& leaf)> on_leaf_written{};
};

namespace detail {

/// One block a process writes: where in the global array, and its row-major data.
struct block_write {
  std::vector<hsize_t> start, count;
  void const* data;
};

/// What one leaf needs written, with its type erased: the save of every tree, and the
/// background writes of checkpoint_manager, go through one non-template function.
struct leaf_plan {
  std::string path;                  // dataset name (the tree path)
  h5_handle (*type)() = nullptr;     // the element type's HDF5 memory type
  std::size_t element_size = 0;
  std::vector<hsize_t> shape;        // global shape (empty: a rank-0 array)
  std::vector<hsize_t> chunk;        // one block of the sharding (the largest)
  std::string sharding;              // repr(sharding), an attribute
  std::string dtype;                 // numpy's name
  std::vector<block_write> blocks;   // this process's blocks of replica 0, not empty
};

template <class S>
std::string sharding_repr(S const& s) {
  std::ostringstream os;
  if constexpr (requires { os << s; }) os << s;
  return os.str();
}

/// The plan of one array: this process's devices' blocks of replica 0, pointing into device memory.
template <class T, std::size_t N, class S>
leaf_plan plan_leaf(array<T, N, S> const& x, std::string path, std::string const& file = {}) {
  leaf_plan p;
  p.path = path.empty() ? std::string("array") : std::move(path);
  p.type = &h5_type<T>;
  p.element_size = sizeof(T);
  p.dtype = std::string(dtype_name<T>());
  p.sharding = sharding_repr(x.sharding());
  auto const& shape = x.shape();
  auto const chunk = x.sharding().shard_shape(shape);
  for (std::size_t i = 0; i < N; ++i) {
    p.shape.push_back(shape[i]);
    p.chunk.push_back(chunk[i]);
  }
  require_parallel_hdf5_for(x.pool()->size(), x.pool()->global_size(), "save", file, p.path);
  auto const& ids = x.sharding().device_ids();
  for (std::size_t pos = 0; pos < ids.size(); ++pos) {
    if (!x.pool()->is_local(ids[pos]) || x.sharding().replica_id(pos) != 0) continue;
    auto const b = x.sharding().block(pos, shape);
    block_write w;
    bool empty = false;
    for (std::size_t i = 0; i < N; ++i) {
      w.start.push_back(b[i].start);
      w.count.push_back(b[i].size());
      empty = empty || b[i].size() == 0;
    }
    if (empty) continue;
    w.data = x.block_data(pos);
    p.blocks.push_back(std::move(w));
  }
  return p;
}

template <class T>
inline constexpr bool always_false_v = false;

/// The plans of every leaf of `tree`, in tree_leaves order.
template <class Tree>
std::vector<leaf_plan> plan_tree(Tree const& tree, std::string const& file) {
  std::vector<leaf_plan> plans;
  auto const paths = tree_leaf_paths<Tree>();
  std::size_t k = 0;
  tessera::detail::apply(
      [&](auto const&... leaf) {
        (
            [&](auto const& x) {
              using L = std::remove_cvref_t<decltype(x)>;
              if constexpr (array_type<L>) {
                plans.push_back(plan_leaf(x, paths[k++], file));
              } else {
                static_assert(always_false_v<L>,
                              "tessera::save / checkpoint_manager::save: every leaf of the tree must be a "
                              "tessera::array (put host values on devices with device_put first)");
              }
            }(leaf),
            ...);
      },
      tree_leaves(tree));
  return plans;
}

/// Makes the file durable under its final name: fsync the file, rename it, fsync the folder.
inline void commit_rename(std::string const& tmp, std::string const& path, std::string_view op) {
  int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd < 0 || ::fsync(fd) != 0) {
    int const e = errno;
    if (fd >= 0) ::close(fd);
    throw checkpoint_error(where_text(op, path, {}) + "fsync of the temporary file '" + tmp +
                           "' failed: " + std::strerror(e));
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int const e = errno;
    throw checkpoint_error(where_text(op, path, {}) + "renaming the temporary file '" + tmp + "' to it failed: " +
                           std::strerror(e));
  }
  auto dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);  // the rename itself survives a power cut
    ::close(dfd);
  }
}

/// The temporary name a save writes before renaming (docs/checkpoints.md, "Atomic").
inline std::string temporary_path(std::string const& path) { return path + ".tessera-tmp"; }

/// "[0:4, 0:1024]": a block, for messages.
inline std::string block_text(block_write const& b) {
  std::string s;
  for (std::size_t d = 0; d < b.start.size(); ++d)
    s += (d ? ", " : "") + std::to_string(b.start[d]) + ":" + std::to_string(b.start[d] + b.count[d]);
  return "[" + s + "]";
}

/// Whether leaf p's bytes are written by raw_writer (save_options::direct_io): decided from the
/// sharding alone, so every process decides alike (the HDF5 calls that follow are collective).
/// Short runs too (a column-sharded matrix's rows): they go through the page cache, which merges
/// them, and H5Dwrite is then used for checksummed datasets only (a contiguous dataset's H5Dwrite
/// that fails on a full disk leaves its sieve buffer dirty, the file cannot be closed, and HDF5
/// crashes closing it at exit).
inline bool writes_raw(leaf_plan const& p, save_options const& o) {
  if (!o.direct_io || o.checksum) return false;
  for (auto c : p.chunk)
    if (c == 0) return false;
  return true;
}

/// Creates leaf p's dataset and writes its blocks through H5Dwrite, or, where writes_raw, only
/// creates it (contiguous, its space allocated now) and returns the file offset of its bytes;
/// throws checkpoint_error naming the leaf.
inline std::uint64_t write_leaf(hid_t file, checkpoint_group const& g, leaf_plan const& p, save_options const& o,
                                std::string const& path, std::string_view op) {
  std::string const& leaf = p.path;
  std::size_t const rank = p.shape.size();
  bool const raw = writes_raw(p, o);
  h5_handle space = rank == 0 ? h5_handle(H5Screate(H5S_SCALAR), H5Sclose)
                              : h5_handle(H5Screate_simple(static_cast<int>(rank), p.shape.data(), nullptr), H5Sclose);
  h5_handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);  // every element is written: no fill pass first
  if (raw) H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY);  // the offset is known before any write
  bool chunked = o.checksum && rank > 0;
  std::vector<hsize_t> chunk = p.chunk;
  for (hsize_t c : chunk) chunked = chunked && c > 0;
  if (chunked) {
    // HDF5 refuses chunks of 4 GiB or more: halve the largest dimension until the chunk fits.
    auto bytes = [&] {
      hsize_t b = p.element_size;
      for (hsize_t c : chunk) b *= c;
      return b;
    };
    while (bytes() >= (hsize_t{1} << 32)) {
      auto it = std::max_element(chunk.begin(), chunk.end());
      *it = (*it + 1) / 2;
    }
    H5Pset_chunk(dcpl.get(), static_cast<int>(rank), chunk.data());
    H5Pset_fletcher32(dcpl.get());
  }
  h5_handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);  // "layers/0/w": the groups on the way
  auto type = p.type();
  auto dset = checked(H5Dcreate2(file, leaf.c_str(), type.get(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
                      H5Dclose, op, path, leaf, "creating the dataset");
  write_string_attribute(dset.get(), "sharding", p.sharding, op, path, leaf);
  write_string_attribute(dset.get(), "tessera_version", TESSERA_VERSION_STRING, op, path, leaf);
  if (raw) {
    haddr_t const addr = H5Dget_offset(dset.get());
    if (addr == HADDR_UNDEF) throw_hdf5(op, path, leaf, "the dataset's bytes have no place in the file");
    return static_cast<std::uint64_t>(addr);
  }

  h5_handle dxpl(H5Pcreate(H5P_DATASET_XFER), H5Pclose);
  std::size_t calls = p.blocks.size();
#ifdef H5_HAVE_PARALLEL
  if (g.across()) {
    // Filtered datasets need collective writes; every process makes as many H5Dwrite calls as
    // the process with most blocks, the extra ones with nothing selected.
    H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE);
    calls = max_over_processes(g, calls);
  }
#endif
  std::string error;
  for (std::size_t i = 0; i < calls; ++i) {
    h5_handle fspace(H5Scopy(space.get()), H5Sclose);
    h5_handle mspace;
    void const* data = &calls;  // any non-null address: nothing is read from it when nothing is selected
    if (i < p.blocks.size()) {
      auto const& b = p.blocks[i];
      if (rank == 0) {
        mspace = h5_handle(H5Screate(H5S_SCALAR), H5Sclose);
      } else {
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, b.start.data(), nullptr, b.count.data(), nullptr);
        mspace = h5_handle(H5Screate_simple(static_cast<int>(rank), b.count.data(), nullptr), H5Sclose);
      }
      data = b.data;
    } else {
      hsize_t one = 1;
      mspace = h5_handle(H5Screate_simple(1, &one, nullptr), H5Sclose);
      H5Sselect_none(mspace.get());
      H5Sselect_none(fspace.get());
    }
    if (H5Dwrite(dset.get(), type.get(), mspace.get(), fspace.get(), dxpl.get(), data) < 0 && error.empty()) {
      error = where_text(op, path, leaf) + "writing the block " + (i < p.blocks.size() ? block_text(p.blocks[i]) : "[]") +
              " of " + p.dtype + " failed (HDF5: " + hdf5_error_text() + ")";
    }
  }
  if (dset.close() < 0 && error.empty())
    error = where_text(op, path, leaf) + "closing the dataset failed (HDF5: " + hdf5_error_text() + ")";
  if (!all_ok(g, error.empty()))
    throw checkpoint_error(error.empty() ? where_text(op, path, leaf) + "another process failed to write its blocks"
                                         : error);
  return 0;
}

/// The bytes of the leaves HDF5 left to raw_writer, into the closed temporary file: each process
/// its own blocks, then an fsync. No MPI call: checkpoint_manager runs it in its thread across
/// processes too. Returns the error ("" for none).
inline std::string write_raw_leaves(std::string const& tmp, std::vector<leaf_plan> const& plans,
                                    std::vector<std::uint64_t> const& offsets, save_options const& o,
                                    std::string const& path, std::string_view op) {
  raw_writer w(tmp);
  if (int const e = w.open_error())
    return where_text(op, path, {}) + "opening the temporary file '" + tmp + "' to write the arrays failed: " +
           std::strerror(e);
  for (std::size_t k = 0; k < plans.size(); ++k) {
    auto const& p = plans[k];
    if (!writes_raw(p, o)) continue;
    for (auto const& b : p.blocks) {
      int e = 0;
      for_each_run(p.shape, b.start, b.count, p.element_size, [&](std::uint64_t file, std::size_t mem, std::size_t n) {
        if (!e) e = w.write(offsets[k] + file, static_cast<std::byte const*>(b.data) + mem, n);
      });
      if (e)
        return where_text(op, path, p.path) + "writing the block " + block_text(b) + " of " + p.dtype + " failed: " +
               std::strerror(e) + " (errno " + std::to_string(e) + ")";
    }
    if (o.on_leaf_written) o.on_leaf_written(p.path);
  }
  if (int const e = w.finish())
    return where_text(op, path, {}) + "flushing the temporary file '" + tmp + "' to disk failed: " + std::strerror(e) +
           " (errno " + std::to_string(e) + ")";
  return {};
}

/// The first part of a save, HDF5's (collective across processes): the temporary file, every
/// dataset and attribute, the bytes of the leaves that go through H5Dwrite, the close. Returns,
/// for each leaf that writes_raw, the file offset of its bytes (write_raw_leaves writes them).
/// Throws checkpoint_error on every process together, the temporary file removed.
inline std::vector<std::uint64_t> begin_checkpoint(std::string const& path, checkpoint_group const& g,
                                                   std::vector<leaf_plan> const& plans, save_options const& o,
                                                   std::string_view op) {
  hdf5_guard guard;
  auto const mpi_lock = g.lock();
  std::string const tmp = temporary_path(path);
  std::string error;
  std::vector<std::uint64_t> offsets;
  try {
    auto fapl = file_access(g);
    auto file = checked(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, op, path, {},
                        "creating the temporary file '" + tmp + "'");
    write_string_attribute(file.get(), "tessera_version", TESSERA_VERSION_STRING, op, path, {});
    write_string_attribute(file.get(), "tessera_format", "tessera checkpoint 1: one dataset per leaf, named by its tree path",
                           op, path, {});
    for (auto const& p : plans) {
      offsets.push_back(write_leaf(file.get(), g, p, o, path, op));
      if (!writes_raw(p, o) && o.on_leaf_written) o.on_leaf_written(p.path);
    }
    if (file.close() < 0)
      error = where_text(op, path, {}) + "closing (flushing) the temporary file '" + tmp + "' failed (HDF5: " +
              hdf5_error_text() + ")";
  } catch (std::exception const& e) {
    error = e.what();
  }
  if (!all_ok(g, error.empty())) {
    if (g.rank == 0) std::remove(tmp.c_str());
    throw checkpoint_error(error.empty() ? where_text(op, path, {}) + "another process failed; nothing was saved"
                                         : error);
  }
  return offsets;
}

/// The end of a save: once every process has written its part (`error` is this process's
/// failure, "" for none), process 0 fsyncs and renames the temporary file into place; on failure
/// anywhere it is removed and every process throws.
inline void finish_checkpoint(std::string const& path, checkpoint_group const& g, std::string error,
                              std::string_view op) {
  auto const mpi_lock = g.lock();
  std::string const tmp = temporary_path(path);
  bool ok = all_ok(g, error.empty());
  if (ok && g.rank == 0) {
    try {
      commit_rename(tmp, path, op);
    } catch (std::exception const& e) {
      error = e.what();
    }
  }
  ok = all_ok(g, error.empty());
  if (!ok) {
    if (g.rank == 0) std::remove(tmp.c_str());
    throw checkpoint_error(error.empty() ? where_text(op, path, {}) + "another process failed; nothing was saved"
                                         : error);
  }
}

/// The whole save in one thread: HDF5's part, the raw bytes, the commit.
inline void write_checkpoint(std::string const& path, checkpoint_group const& g, std::vector<leaf_plan> const& plans,
                             save_options const& o, std::string_view op) {
  auto const offsets = begin_checkpoint(path, g, plans, o, op);
  bool const any_raw = std::any_of(plans.begin(), plans.end(), [&](leaf_plan const& p) { return writes_raw(p, o); });
  std::string error;
  if (any_raw) {
    try {
      error = write_raw_leaves(temporary_path(path), plans, offsets, o, path, op);
    } catch (std::exception const& e) {  // on_leaf_written's
      error = e.what();
    }
  }
  finish_checkpoint(path, g, std::move(error), op);
}

}  // namespace detail

/// orbax.checkpoint.StandardCheckpointer().save(path, tree) (and PyTreeCheckpointer): writes every
/// leaf of `tree` (an array, or a tuple, pair, std::array, struct, Hana struct or hana::map of
/// them) to the HDF5 file `path`, one dataset per leaf named by tree_leaf_paths (a tree that is
/// one array: dataset "array"), with attributes "sharding" and "tessera_version". Every process
/// of a distributed runtime calls it with the same tree; it returns once the file is renamed
/// into place. Throws checkpoint_error (and leaves any previous file at `path` as it was).
template <class Tree>
void save(std::string const& path, Tree const& tree, save_options const& options = {}) {
  auto const plans = detail::plan_tree(tree, path);
  detail::write_checkpoint(path, detail::current_checkpoint_group(), plans, options, "save");
}

}  // namespace tessera
