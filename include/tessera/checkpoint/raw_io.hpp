#pragma once
// The bytes of contiguous datasets, written and read with POSIX calls at the file offsets HDF5
// allocated for them (H5Dget_offset), instead of through H5Dwrite/H5Dread. HDF5 still writes and
// reads everything else (the superblock, groups, object headers, attributes; collectively over
// MPI-IO across processes), so the file is an ordinary HDF5 file. Why (docs/checkpoints.md,
// "Speed"): H5Dwrite copies a block into the page cache (a 1 GiB save spent most of its time in the
// kernel's copy, 5 s on the 2-core test machine, where dd conv=fsync took 1 s), and across
// processes MPI-IO's two-phase collective writes move every byte between the processes first.
// Here the aligned middle of each run goes to the disk with O_DIRECT (no page-cache copy; one
// fsync at the end, as dd conv=fsync does), and only the unaligned edges, a few KiB, are buffered.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace tessera::detail {

/// The unit of the O_DIRECT writes, the page size (4 KiB at least): file offsets, lengths and
/// memory addresses of direct writes are multiples of it, and no page takes both a direct and a
/// buffered write (raw_writer). Datasets start on it in the file (H5Pset_alignment, file_access).
inline std::size_t raw_align() {
  static std::size_t const unit = [] {
    long const page = ::sysconf(_SC_PAGESIZE);
    return page > 4096 ? static_cast<std::size_t>(page) : std::size_t{4096};
  }();
  return unit;
}
/// Blocks of several runs shorter than this go through HDF5 (its sieve buffer merges them): a
/// pwrite per 512-byte row of a column-sharded matrix would cost more than it saves.
inline constexpr std::size_t raw_min_run = 64 * 1024;

/// The bytes of one contiguous run of a block of a row-major array of `shape` (element size es):
/// the trailing dimensions the block spans whole, times its extent in the last one it does not.
inline std::size_t run_bytes(std::vector<unsigned long long> const& shape, std::vector<unsigned long long> const& count,
                             std::size_t es) {
  std::size_t inner = shape.size();
  std::size_t bytes = es;
  while (inner > 0 && count[inner - 1] == shape[inner - 1]) bytes *= static_cast<std::size_t>(shape[--inner]);
  if (inner > 0) bytes *= static_cast<std::size_t>(count[inner - 1]);
  return bytes;
}

/// Whether a block's runs are worth one pwrite or pread each: one run (a block of whole rows), or
/// runs of raw_min_run bytes or more.
inline bool raw_worthwhile(std::vector<unsigned long long> const& shape, std::vector<unsigned long long> const& count,
                           std::size_t es) {
  if (run_bytes(shape, count, es) >= raw_min_run) return true;
  std::size_t inner = shape.size();
  while (inner > 0 && count[inner - 1] == shape[inner - 1]) --inner;
  for (std::size_t i = 0; i + 1 < inner; ++i)
    if (count[i] != 1) return false;
  return true;
}

/// Calls f(file_byte_offset_in_dataset, memory_byte_offset_in_block, bytes) for each contiguous
/// run of the block (start, count) of a row-major array of `shape`, in row-major order.
template <class F>
void for_each_run(std::vector<unsigned long long> const& shape, std::vector<unsigned long long> const& start,
                  std::vector<unsigned long long> const& count, std::size_t es, F&& f) {
  std::size_t const n = shape.size();
  for (auto c : count)
    if (c == 0) return;
  std::size_t inner = n;
  while (inner > 0 && count[inner - 1] == shape[inner - 1]) --inner;
  std::size_t const run = run_bytes(shape, count, es);
  if (inner == 0) {  // the whole array
    f(std::uint64_t{0}, std::size_t{0}, run);
    return;
  }
  // Row-major strides in bytes; the runs are indexed by the dimensions before inner - 1.
  std::vector<std::uint64_t> stride(n, es);
  for (std::size_t i = n; i-- > 1;) stride[i - 1] = stride[i] * shape[i];
  std::size_t const outer = inner - 1;
  std::vector<unsigned long long> idx(outer, 0);
  std::size_t mem = 0;
  for (;;) {
    std::uint64_t off = start[outer] * stride[outer];
    for (std::size_t i = 0; i < outer; ++i) off += (start[i] + idx[i]) * stride[i];
    f(off, mem, run);
    mem += run;
    std::size_t d = outer;
    while (d > 0) {
      if (++idx[d - 1] < count[d - 1]) break;
      idx[--d] = 0;
    }
    if (d == 0) return;
  }
}

/// Writes byte ranges of one file: the whole pages inside each range with O_DIRECT (straight
/// from the caller's memory where it is aligned, else through a small aligned buffer), the
/// partial pages at its edges with ordinary pwrites, then one fsync. A page is either inside one
/// range, written only directly, or holds a range's edge, written only through the page cache by
/// every process whose range touches it: no page takes both kinds of write, so processes need no
/// barrier between them (mixing them on one page can lose the direct write). Where the file
/// system refuses O_DIRECT (tmpfs, some FUSE mounts), everything is buffered.
class raw_writer {
 public:
  explicit raw_writer(std::string const& path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) {
      error_ = errno;
      return;
    }
#ifdef O_DIRECT
    direct_fd_ = ::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC);
#endif
  }
  raw_writer(raw_writer const&) = delete;
  raw_writer& operator=(raw_writer const&) = delete;
  ~raw_writer() {
    if (direct_fd_ >= 0) ::close(direct_fd_);
    if (fd_ >= 0) ::close(fd_);
  }
  /// errno of opening the file (0: open).
  int open_error() const { return error_; }

  /// Writes bytes [data, data + n) at file offset `off`; returns errno (0: written).
  int write(std::uint64_t off, void const* data, std::size_t n) {
    auto const* p = static_cast<std::byte const*>(data);
    std::size_t const unit = raw_align();
    std::uint64_t const a = (off + unit - 1) / unit * unit;
    std::uint64_t const b = (off + n) / unit * unit;
    if (direct_fd_ < 0 || b <= a) return buffered(off, p, n);
    if (a > off)
      if (int const e = buffered(off, p, static_cast<std::size_t>(a - off))) return e;
    if (off + n > b)
      if (int const e = buffered(b, p + (b - off), static_cast<std::size_t>(off + n - b))) return e;
    std::byte const* mid = p + (a - off);
    std::size_t const len = static_cast<std::size_t>(b - a);
    if (reinterpret_cast<std::uintptr_t>(mid) % unit == 0) {
      int const e = direct(a, mid, len);
      if (e == EINVAL) return refuse_direct(), buffered(a, mid, len);
      return e;
    }
    if (!bounce_) bounce_.reset(static_cast<std::byte*>(std::aligned_alloc(unit, bounce_bytes)));
    if (!bounce_) return buffered(a, mid, len);
    for (std::size_t done = 0; done < len; done += bounce_bytes) {
      std::size_t const k = std::min(bounce_bytes, len - done);
      std::memcpy(bounce_.get(), mid + done, k);
      int const e = direct(a + done, bounce_.get(), k);
      if (e == EINVAL) return refuse_direct(), buffered(a + done, mid + done, len - done);
      if (e) return e;
    }
    return 0;
  }

  /// fsync (one, at the end, as dd conv=fsync). Returns errno (0: durable).
  int finish() { return ::fsync(fd_) != 0 ? errno : 0; }

 private:
  static constexpr std::size_t bounce_bytes = std::size_t{8} << 20;
  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };

  /// The file system took the O_DIRECT open but not the write (alignment): buffered from now on.
  void refuse_direct() {
    ::close(direct_fd_);
    direct_fd_ = -1;
  }
  static int write_all(int fd, std::uint64_t off, std::byte const* p, std::size_t n) {
    while (n > 0) {
      ssize_t const w = ::pwrite(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30), static_cast<off_t>(off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      if (w == 0) return EIO;
      p += w;
      off += static_cast<std::uint64_t>(w);
      n -= static_cast<std::size_t>(w);
    }
    return 0;
  }
  int buffered(std::uint64_t off, std::byte const* p, std::size_t n) { return write_all(fd_, off, p, n); }
  int direct(std::uint64_t off, std::byte const* p, std::size_t n) {
    // A short direct write (a full disk part-way) leaves an unaligned remainder: buffered.
    while (n > 0) {
      ssize_t const w = ::pwrite(direct_fd_, p, std::min<std::size_t>(n, std::size_t{1} << 30), static_cast<off_t>(off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return errno;
      }
      if (w == 0) return EIO;
      p += w;
      off += static_cast<std::uint64_t>(w);
      n -= static_cast<std::size_t>(w);
      if (n > 0 && static_cast<std::size_t>(w) % raw_align() != 0) return buffered(off, p, n);
    }
    return 0;
  }

  int fd_ = -1;
  int direct_fd_ = -1;
  int error_ = 0;
  std::unique_ptr<std::byte, free_deleter> bounce_;
};

/// Reads file bytes [off, off + n) into data; returns errno, or -1 for a file that ends first
/// (truncated).
inline int raw_read(int fd, std::uint64_t off, void* data, std::size_t n) {
  auto* p = static_cast<std::byte*>(data);
  while (n > 0) {
    ssize_t const r = ::pread(fd, p, std::min<std::size_t>(n, std::size_t{1} << 30), static_cast<off_t>(off));
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (r == 0) return -1;
    p += r;
    off += static_cast<std::uint64_t>(r);
    n -= static_cast<std::size_t>(r);
  }
  return 0;
}

}  // namespace tessera::detail
