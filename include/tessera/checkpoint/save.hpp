#pragma once
// tessera::save(path, tree): one HDF5 file, one dataset per leaf named by its tree path, holding
// the global array; each device's block is written by its own process straight from the
// device's memory, replicated blocks once (by the holder of replica 0, as Orbax does), and across
// processes all of them write collectively into the one file through parallel HDF5 (MPI-IO). The
// file is written under a temporary name and renamed once every process has finished, so a
// crash or a kill in the middle leaves the previous checkpoint whole (docs/checkpoints.md).

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
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
#include "tessera/checkpoint/tree_paths.hpp"
#include "tessera/tree/tree_util.hpp"
#include "tessera/version.hpp"

namespace tessera {

/// How tessera::save writes (orbax.checkpoint's save_args and options, in part).
struct save_options {
  /// A Fletcher-32 checksum per chunk (HDF5's fletcher32 filter; a chunk is one block of the
  /// saving sharding), so that a flipped byte in the data is found when it is read back. Off:
  /// contiguous datasets, no checksum of the data (HDF5 still checksums its metadata).
  bool checksum = true;
  /// Called on every process after it has written each leaf (its dataset path): progress
  /// reports; tests use it to stop a process in the middle of a save.
  std::function<void(std::string const& leaf)> on_leaf_written;
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
  std::apply(
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

/// Writes one dataset and its blocks; returns normally or throws checkpoint_error naming the leaf.
inline void write_leaf(hid_t file, checkpoint_group const& g, leaf_plan const& p, save_options const& o,
                       std::string const& path, std::string_view op) {
  std::string const& leaf = p.path;
  std::size_t const rank = p.shape.size();
  h5_handle space = rank == 0 ? h5_handle(H5Screate(H5S_SCALAR), H5Sclose)
                              : h5_handle(H5Screate_simple(static_cast<int>(rank), p.shape.data(), nullptr), H5Sclose);
  h5_handle dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);  // every element is written: no fill pass first
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
      std::string blk;
      if (i < p.blocks.size())
        for (std::size_t d = 0; d < rank; ++d)
          blk += (d ? ", " : "") + std::to_string(p.blocks[i].start[d]) + ":" +
                 std::to_string(p.blocks[i].start[d] + p.blocks[i].count[d]);
      error = where_text(op, path, leaf) + "writing the block [" + blk + "] of " + p.dtype + " failed (HDF5: " +
              hdf5_error_text() + ")";
    }
  }
  if (dset.close() < 0 && error.empty())
    error = where_text(op, path, leaf) + "closing the dataset failed (HDF5: " + hdf5_error_text() + ")";
  if (!all_ok(g, error.empty()))
    throw checkpoint_error(error.empty() ? where_text(op, path, leaf) + "another process failed to write its blocks"
                                         : error);
}

/// The whole save: the temporary file, every leaf, the close, then the rename by process 0 once
/// every process has closed the file. On failure the temporary file is removed and every
/// process throws.
inline void write_checkpoint(std::string const& path, checkpoint_group const& g, std::vector<leaf_plan> const& plans,
                             save_options const& o, std::string_view op) {
  hdf5_guard guard;
  auto const mpi_lock = g.lock();
  std::string const tmp = temporary_path(path);
  std::string error;
  try {
    auto fapl = file_access(g);
    auto file = checked(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose, op, path, {},
                        "creating the temporary file '" + tmp + "'");
    write_string_attribute(file.get(), "tessera_version", TESSERA_VERSION_STRING, op, path, {});
    write_string_attribute(file.get(), "tessera_format", "tessera checkpoint 1: one dataset per leaf, named by its tree path",
                           op, path, {});
    for (auto const& p : plans) {
      write_leaf(file.get(), g, p, o, path, op);
      if (o.on_leaf_written) o.on_leaf_written(p.path);
    }
    if (file.close() < 0)
      error = where_text(op, path, {}) + "closing (flushing) the temporary file '" + tmp + "' failed (HDF5: " +
              hdf5_error_text() + ")";
  } catch (std::exception const& e) {
    error = e.what();
  }
  // Every process has closed the file (or failed) before process 0 renames it.
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
