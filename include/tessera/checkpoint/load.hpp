#pragma once
// tessera::load(path, target): a tree of arrays read from a checkpoint into the shardings the
// target asks for (another spec, another mesh shape, another device count or number of processes
// than it was saved with); each process reads only the hyperslabs its devices hold, each distinct
// block once. load<T, N>(path, leaf, sharding) reads one leaf.

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/checkpoint/hdf5_file.hpp"
#include "tessera/checkpoint/raw_io.hpp"
#include "tessera/checkpoint/save.hpp"
#include "tessera/checkpoint/tree_paths.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/tree/tree_util.hpp"

namespace tessera {

/// jax.ShapeDtypeStruct(shape, dtype, sharding=s): what to restore a leaf as (Orbax's restore
/// target). Without a shape, the file's shape is taken (only its rank is checked); with one,
/// another shape in the file is an error. Not an aggregate, so a tree leaf and not a node.
template <element_type T, std::size_t N, sharding S>
class shape_dtype_struct {
 public:
  using value_type = T;
  using sharding_type = S;
  static constexpr std::size_t rank = N;
  /// The shape from the file.
  explicit shape_dtype_struct(S s) : sharding_(std::move(s)) {}
  /// The shape asked for.
  shape_dtype_struct(shape_t<N> shape, S s) : shape_(shape), sharding_(std::move(s)) {}
  std::optional<shape_t<N>> const& shape() const { return shape_; }
  S const& sharding() const { return sharding_; }

 private:
  std::optional<shape_t<N>> shape_;
  S sharding_;
};

/// jax.ShapeDtypeStruct(shape, T, sharding=s): shape_dtype<float>(shape_t<2>{64, 32}, s).
template <element_type T, std::size_t N, sharding S>
shape_dtype_struct<T, N, S> shape_dtype(shape_t<N> shape, S s) {
  return {shape, std::move(s)};
}
/// A target of element type T and rank N whose shape the file gives: shape_dtype<float, 2>(s).
template <element_type T, std::size_t N, sharding S>
shape_dtype_struct<T, N, S> shape_dtype(S s) {
  return shape_dtype_struct<T, N, S>(std::move(s));
}

namespace detail {

template <class L>
struct load_target;  // what a target leaf asks for: T, N, S, the sharding, maybe a shape
template <class T, std::size_t N, class S>
struct load_target<array<T, N, S>> {
  using value_type = T;
  using sharding_type = S;
  static constexpr std::size_t rank = N;
  static S const& sharding(array<T, N, S> const& x) { return x.sharding(); }
  static std::optional<shape_t<N>> shape(array<T, N, S> const& x) { return x.shape(); }
};
template <class T, std::size_t N, class S>
struct load_target<shape_dtype_struct<T, N, S>> {
  using value_type = T;
  using sharding_type = S;
  static constexpr std::size_t rank = N;
  static S const& sharding(shape_dtype_struct<T, N, S> const& x) { return x.sharding(); }
  static std::optional<shape_t<N>> shape(shape_dtype_struct<T, N, S> const& x) { return x.shape(); }
};

/// A POSIX file descriptor that closes itself (-1: none).
class posix_fd {
 public:
  posix_fd() = default;
  explicit posix_fd(int fd) : fd_(fd) {}
  posix_fd(posix_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  posix_fd& operator=(posix_fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~posix_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

/// An open checkpoint: the file, its datasets' names, its path and the processes reading it, and
/// the file opened for pread (the bytes of contiguous datasets, checkpoint/raw_io.hpp).
struct open_checkpoint {
  h5_handle file;
  std::set<std::string> datasets;
  std::string path;
  checkpoint_group group;
  std::string_view op;
  posix_fd fd;
};

/// The names of every dataset in the file ("layers/0/w").
inline std::set<std::string> list_datasets(hid_t file) {
  std::set<std::string> out;
  H5Lvisit(
      file, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t g, char const* name, H5L_info_t const* info, void* p) -> herr_t {
        if (info->type != H5L_TYPE_HARD) return 0;
        hid_t o = H5Oopen(g, name, H5P_DEFAULT);
        if (o < 0) return -1;  // an object header that cannot be read: a corrupted file
        if (H5Iget_type(o) == H5I_DATASET) static_cast<std::set<std::string>*>(p)->insert(name);
        H5Oclose(o);
        return 0;
      },
      &out);
  return out;
}

inline std::string names_text(std::set<std::string> const& names) {
  std::string s;
  for (auto const& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? std::string("none") : s;
}

/// Opens `path` for reading (over MPI-IO across processes), with the checks that name what is
/// wrong: no such file (and whether a save to it was cut short), not HDF5, unreadable.
inline open_checkpoint open_for_load(std::string const& path, std::string_view op) {
  open_checkpoint c;
  c.path = path;
  c.group = current_checkpoint_group();
  c.op = op;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    std::string what = std::filesystem::exists(path, ec) ? "it is not a regular file" : "no such file";
    if (std::filesystem::exists(temporary_path(path), ec))
      what += " (a save to it did not finish: '" + temporary_path(path) + "' is its unfinished temporary file)";
    throw checkpoint_error(where_text(op, path, {}) + what);
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    auto const size = std::filesystem::file_size(path, ec);
    throw checkpoint_error(where_text(op, path, {}) + "not an HDF5 file (no HDF5 signature in its " +
                           std::to_string(size) + " bytes; HDF5 error: " + hdf5_error_text() + ")");
  }
  auto fapl = file_access(c.group);
  c.file = checked(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, op, path, {},
                   "opening the file failed: it is truncated or corrupted");
  c.fd = posix_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));  // where it fails, H5Dread reads all
  c.datasets = list_datasets(c.file.get());
  if (H5Eget_num(H5E_DEFAULT) > 0)
    throw checkpoint_error(where_text(op, path, {}) + "listing its datasets failed: it is corrupted (HDF5: " +
                           hdf5_error_text() + ")");
  return c;
}

inline std::string dims_text(std::vector<hsize_t> const& d) {
  std::string s = "(";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + (d.size() == 1 ? ",)" : ")");
}

/// Reads leaf `leaf` as array<T, N, S> laid out by `s`: the checks (present, element type, rank,
/// shape), then each of this process's devices' blocks, each distinct block read once.
template <class T, std::size_t N, class S>
array<T, N, S> load_leaf(open_checkpoint& c, std::string const& leaf, S const& s,
                         std::optional<shape_t<N>> const& want) {
  std::string const& path = c.path;
  auto const op = c.op;
  if (!c.datasets.count(leaf))
    throw checkpoint_error(where_text(op, path, leaf) + "the file has no dataset '" + leaf +
                           "' (it has " + names_text(c.datasets) + ")");
  auto dset = checked(H5Dopen2(c.file.get(), leaf.c_str(), H5P_DEFAULT), H5Dclose, op, path, leaf,
                      "opening the dataset failed: the file is corrupted");
  h5_handle ftype(H5Dget_type(dset.get()), H5Tclose);
  if (!h5_type_matches<T>(ftype.get()))
    throw checkpoint_error(where_text(op, path, leaf) + "the file holds " + h5_type_name(ftype.get()) +
                           " elements, but " + std::string(dtype_name<T>()) + " was asked for");
  h5_handle space(H5Dget_space(dset.get()), H5Sclose);
  int const ndims = H5Sget_simple_extent_ndims(space.get());
  if (ndims < 0) throw_hdf5(op, path, leaf, "reading the dataset's shape failed: the file is corrupted");
  std::vector<hsize_t> dims(static_cast<std::size_t>(ndims));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  std::vector<hsize_t> asked;
  if (want)
    for (std::size_t i = 0; i < N; ++i) asked.push_back((*want)[i]);
  if (static_cast<std::size_t>(ndims) != N || (want && asked != dims))
    throw checkpoint_error(where_text(op, path, leaf) + "the file holds shape " + dims_text(dims) + " (rank " +
                           std::to_string(ndims) + "), but " +
                           (want ? "shape " + dims_text(asked) : std::string("rank ") + std::to_string(N)) +
                           " was asked for");
  shape_t<N> shape{};
  for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(dims[i]);
  (void)checked_element_count<T>(shape, "load");

  auto pool = pool_for(s, "load");
  require_parallel_hdf5_for(pool->size(), pool->global_size(), op, path, leaf);
  auto const& ids = s.device_ids();
  std::vector<device_buffer<T>> buffers(ids.size());
  std::vector<std::array<slice, N>> read_blocks;  // the distinct blocks read so far, and where
  std::vector<std::size_t> read_pos;
  auto mtype = h5_type<T>();
  // A contiguous dataset stored as T is in memory (h5py's default layout, and tessera's without
  // the checksum): its runs are read with pread at HDF5's offset, no H5Dread.
  std::uint64_t raw_base = 0;
  bool raw = false;
  if (c.fd.get() >= 0 && N > 0) {
    h5_handle dcpl(H5Dget_create_plist(dset.get()), H5Pclose);
    if (dcpl.valid() && H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl.get()) == 0 &&
        H5Pget_external_count(dcpl.get()) == 0 && H5Tequal(ftype.get(), mtype.get()) > 0) {
      haddr_t const addr = H5Dget_offset(dset.get());
      if (addr != HADDR_UNDEF) {
        raw = true;
        raw_base = static_cast<std::uint64_t>(addr);
      }
    }
    H5Eclear2(H5E_DEFAULT);
  }
  std::vector<unsigned long long> const file_shape(dims.begin(), dims.end());
  struct raw_block {
    std::byte* data;
    std::vector<unsigned long long> start, count;
    std::string text;
  };
  std::vector<raw_block> raw_reads;  // read after the loop, in parallel
  struct replica {
    std::size_t to, from, n;
  };
  std::vector<replica> replicas;
  std::string error;
  for (std::size_t pos = 0; pos < ids.size(); ++pos) {
    if (!pool->is_local(ids[pos])) continue;
    auto const b = s.block(pos, shape);
    std::size_t const n = element_count(block_shape(b));
    device_buffer<T> buf(n, device_buffer<T>::uninitialized, &pool->memory(ids[pos]));
    std::size_t k = 0;
    while (k < read_blocks.size() && read_blocks[k] != b) ++k;
    if (k < read_blocks.size()) {  // a replica of a block read already: copied (after the reads), not read again
      replicas.push_back({pos, read_pos[k], n});
    } else if (n > 0 && error.empty()) {
      h5_handle fspace(H5Scopy(space.get()), H5Sclose);
      h5_handle mspace;
      std::vector<hsize_t> start(N), count(N);
      for (std::size_t i = 0; i < N; ++i) {
        start[i] = b[i].start;
        count[i] = b[i].size();
      }
      if constexpr (N == 0) {
        mspace = h5_handle(H5Screate(H5S_SCALAR), H5Sclose);
      } else {
        H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
        mspace = h5_handle(H5Screate_simple(static_cast<int>(N), count.data(), nullptr), H5Sclose);
      }
      std::string const blk_text = [&] {
        std::string t;
        for (std::size_t i = 0; i < N; ++i) t += (i ? ", " : "") + std::to_string(start[i]) + ":" + std::to_string(start[i] + count[i]);
        return t;
      }();
      std::vector<unsigned long long> const st(start.begin(), start.end()), ct(count.begin(), count.end());
      if (raw && raw_worthwhile(file_shape, ct, sizeof(T))) {
        raw_reads.push_back({reinterpret_cast<std::byte*>(buf.data()), st, ct, blk_text});
      } else if (H5Dread(dset.get(), mtype.get(), mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()) < 0) {
        error = where_text(op, path, leaf) + "reading the block [" + blk_text + "] failed: the file is corrupted or truncated (HDF5: " +
                hdf5_error_text() + ")";
      }
      read_blocks.push_back(b);
      read_pos.push_back(pos);
    }
    buffers[pos] = std::move(buf);
  }
  // The preads, one thread per core: a read from the page cache is a copy into memory, which one
  // core does not saturate.
  if (!raw_reads.empty() && error.empty()) {
    std::vector<std::string> errors(raw_reads.size());
    auto read_one = [&](std::size_t i) {
      auto const& r = raw_reads[i];
      int e = 0;
      for_each_run(file_shape, r.start, r.count, sizeof(T), [&](std::uint64_t file, std::size_t mem, std::size_t bytes) {
        if (!e) e = raw_read(c.fd.get(), raw_base + file, r.data + mem, bytes);
      });
      if (e)
        errors[i] = where_text(op, path, leaf) + "reading the block [" + r.text + "] failed: " +
                    (e < 0 ? std::string("the file ends before it (truncated)") : std::string(std::strerror(e)));
    };
    std::size_t const threads =
        std::min<std::size_t>(raw_reads.size(), std::max(1u, std::thread::hardware_concurrency()));
    if (threads <= 1) {
      for (std::size_t i = 0; i < raw_reads.size(); ++i) read_one(i);
    } else {
      std::vector<std::thread> pool_threads;
      for (std::size_t t = 0; t < threads; ++t)
        pool_threads.emplace_back([&, t] {
          for (std::size_t i = t; i < raw_reads.size(); i += threads) read_one(i);
        });
      for (auto& th : pool_threads) th.join();
    }
    for (auto const& e : errors)
      if (!e.empty() && error.empty()) error = e;
  }
  for (auto const& [to, from, n] : replicas)
    if (error.empty()) std::copy(buffers[from].data(), buffers[from].data() + n, buffers[to].data());
  if (!all_ok(c.group, error.empty()))
    throw checkpoint_error(error.empty() ? where_text(op, path, leaf) + "another process failed to read its blocks" : error);
  return array<T, N, S>(std::make_shared<array_storage<T, N, S>>(array_storage<T, N, S>{s, shape, pool, std::move(buffers)}));
}

/// Node U rebuilt from loaded children: as tree_map rebuilds, except that a plain struct that is
/// a class template (`template <class W, class B> struct params { W w; B b; };`) is made over the
/// loaded arrays' types, so a struct of shape_dtype_structs gives the struct of arrays.
template <class U>
struct plain_template : std::false_type {};
template <template <class...> class S, class... F>
struct plain_template<S<F...>> : std::true_type {
  template <class... G>
  using with = S<G...>;
};

template <class U, class... C>
auto rebuild_loaded(std::tuple<C...>&& c) {
  if constexpr (!hana_node<U>::value && !is_tuple_like<U>::value && !is_std_array<U>::value &&
                plain_template<U>::value) {
    using V = typename plain_template<U>::template with<C...>;
    if constexpr (std::is_same_v<V, U> || !std::is_aggregate_v<V>) return rebuild<U>(std::move(c));
    else return tessera::detail::apply([](auto&&... r) { return V{std::move(r)...}; }, std::move(c));
  } else {
    return rebuild<U>(std::move(c));
  }
}

template <class T>
auto load_node(open_checkpoint& c, T const& target, std::string const& prefix) {
  using U = std::remove_cvref_t<T>;
  if constexpr (!tree_node<U>) {
    using L = load_target<U>;
    return load_leaf<typename L::value_type, L::rank, typename L::sharding_type>(
        c, prefix.empty() ? std::string("array") : prefix, L::sharding(target), L::shape(target));
  } else {
    auto ct = children_of(target);
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      // Braces: the leaves are read in order on every process (the collective metadata reads match).
      using R = std::tuple<decltype(load_node(c, std::get<K>(ct), std::string()))...>;
      return rebuild_loaded<U>(
          R{load_node(c, std::get<K>(ct), prefix.empty() ? child_name<U, K>() : prefix + "/" + child_name<U, K>())...});
    }(std::make_index_sequence<std::tuple_size_v<decltype(ct)>>{});
  }
}

template <class L>
inline constexpr bool is_load_target = requires { load_target<std::remove_cvref_t<L>>::rank; };

template <class T>
constexpr bool all_leaves_are_targets() {
  using Leaves = decltype(tree_leaves(std::declval<T const&>()));
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (is_load_target<std::tuple_element_t<I, Leaves>> && ...);
  }(std::make_index_sequence<std::tuple_size_v<Leaves>>{});
}

}  // namespace detail

/// orbax.checkpoint.StandardCheckpointer().restore(path, target): the tree `target` describes,
/// read from the checkpoint at `path`. Each leaf of target is an array (restored with its type,
/// sharding and shape: `load(path, params)`) or a shape_dtype_struct (its sharding, and its shape
/// or the file's); the result has target's structure with arrays for leaves. The shardings may
/// differ from the saved ones in spec, mesh shape, device count and number of processes. Every
/// process of a distributed runtime calls it. A dataset in the file that target lacks, one
/// target asks for that the file lacks, another element type or shape, a file that is missing,
/// not HDF5, truncated or corrupted: checkpoint_error naming the file, the leaf and the values.
template <class Target>
auto load(std::string const& path, Target const& target) {
  static_assert(detail::all_leaves_are_targets<Target>(),
                "tessera::load(path, target): every leaf of target must be a tessera::array (restored like it) "
                "or a tessera::shape_dtype_struct (shape_dtype<float, 2>(sharding)), as Orbax's restore target "
                "holds jax.ShapeDtypeStructs");
  detail::hdf5_guard guard;
  auto const mpi_lock = detail::current_checkpoint_group().lock();
  auto c = detail::open_for_load(path, "load");
  auto const paths = tree_leaf_paths<Target>();
  std::set<std::string> wanted;
  for (auto const& p : paths) wanted.insert(p.empty() ? std::string("array") : p);
  std::set<std::string> extra;
  for (auto const& d : c.datasets)
    if (!wanted.count(d)) extra.insert(d);
  if (!extra.empty())
    throw checkpoint_error(detail::where_text("load", path, *extra.begin()) + "the file has dataset" +
                           (extra.size() > 1 ? "s " : " ") + detail::names_text(extra) +
                           " that the target tree does not (it asks for " + detail::names_text(wanted) +
                           "); read single leaves with load<T, N>(path, leaf, sharding)");
  return detail::load_node(c, target, std::string());
}

/// One leaf: the dataset `leaf` ("layers/0/w") as array<T, N, S> laid out by `s` (other
/// datasets in the file are not read).
template <element_type T, std::size_t N, sharding S>
array<T, N, S> load(std::string const& path, std::string const& leaf, S const& s) {
  detail::hdf5_guard guard;
  auto const mpi_lock = detail::current_checkpoint_group().lock();
  auto c = detail::open_for_load(path, "load");
  return detail::load_leaf<T, N, S>(c, leaf, s, std::nullopt);
}

}  // namespace tessera
