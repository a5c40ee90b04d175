#pragma once
// Collectives over shared memory, on raw row-major buffers: after the first
// barrier every device reads its peers' buffers in place (no staging copies),
// and a last barrier keeps those buffers alive until every reader is done.
//
// Invariant that keeps aborts safe: between `team::enter` and the closing
// barrier nothing throws except the barrier itself, so a device can only be
// aborted while no peer is reading its buffers. Everything that can fail
// (argument checks, allocation) happens before `enter`.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "tessera/core/slice.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera::detail {

/// The devices taking part in one collective: team positions in rank order
/// (axis_index order over the collective's axes) and the caller's rank among them.
struct group {
  std::vector<std::size_t> members;
  std::size_t rank = 0;
  std::size_t size() const { return members.size(); }
};

enum class reduce_op { sum, max, min };

template <class T>
inline T combine(reduce_op op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return op == reduce_op::min ? (a && b) : (a || b);
  } else {
    switch (op) {
      case reduce_op::sum: return static_cast<T>(a + b);
      case reduce_op::max: return b > a ? b : a;
      default: return b < a ? b : a;
    }
  }
}

/// out[lo, hi) = in_0 op in_1 op ... over the members, in rank order, so every device that
/// computes an element gets the same bits.
template <class T>
void reduce_range(team const& t, group const& g, reduce_op op, T* out, std::size_t lo, std::size_t hi) {
  constexpr std::size_t tile = 2048;  // keeps `out` in L1 while the members stream past it
  for (std::size_t a = lo; a < hi; a += tile) {
    std::size_t const b = std::min(hi, a + tile);
    T const* first = static_cast<T const*>(t.box(g.members[0]).in);
    std::copy(first + a, first + b, out + a);
    for (std::size_t j = 1; j < g.size(); ++j) {
      T const* src = static_cast<T const*>(t.box(g.members[j]).in);
      if constexpr (std::is_same_v<T, bool>) {
        for (std::size_t i = a; i < b; ++i) out[i] = combine(op, out[i], src[i]);
      } else if (op == reduce_op::sum) {
        for (std::size_t i = a; i < b; ++i) out[i] = static_cast<T>(out[i] + src[i]);
      } else if (op == reduce_op::max) {
        for (std::size_t i = a; i < b; ++i) out[i] = src[i] > out[i] ? src[i] : out[i];
      } else {
        for (std::size_t i = a; i < b; ++i) out[i] = src[i] < out[i] ? src[i] : out[i];
      }
    }
  }
}

/// Bytes per device above which an all-reduce runs as reduce-scatter + all-gather:
/// each device then reads k slices of 1/k instead of k whole buffers.
inline constexpr std::size_t all_reduce_split_bytes = 32 * 1024;

/// psum / pmax / pmin: out = the reduction of every member's `in` (count elements each).
template <class T>
void all_reduce(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::size_t count, reduce_op op) {
  t.enter(pos, sig, in, out);
  std::size_t const k = g.size();
  if (k == 1 || count * sizeof(T) < all_reduce_split_bytes) {
    reduce_range(t, g, op, out, 0, count);
  } else {
    // Reduce-scatter: this device sums slice `rank`; then gather the other slices from the peers' outputs.
    slice const mine = block_range(count, k, g.rank);
    reduce_range(t, g, op, out, mine.start, mine.stop);
    t.arrive_and_wait();
    for (std::size_t j = 0; j < k; ++j) {
      if (j == g.rank) continue;
      slice const s = block_range(count, k, j);
      T const* peer = static_cast<T const*>(t.box(g.members[j]).out);
      std::copy(peer + s.start, peer + s.stop, out + s.start);
    }
  }
  t.arrive_and_wait();
}

/// all_gather: out[o][j][inner] = member j's in[o][inner], `outer` blocks of `inner` elements.
/// (Tiled and untiled all_gather have the same bytes; only the shape differs.)
template <class T>
void all_gather(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::size_t outer, std::size_t inner) {
  t.enter(pos, sig, in, out);
  std::size_t const k = g.size();
  for (std::size_t j = 0; j < k; ++j) {
    T const* src = static_cast<T const*>(t.box(g.members[j]).in);
    for (std::size_t o = 0; o < outer; ++o) std::copy(src + o * inner, src + (o + 1) * inner, out + (o * k + j) * inner);
  }
  t.arrive_and_wait();
}

/// psum_scatter: in is [outer][k * chunk] per device; out[o][:] = sum over members of in[o][rank * chunk, +chunk).
template <class T>
void reduce_scatter(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                    std::size_t outer, std::size_t chunk) {
  t.enter(pos, sig, in, out);
  std::size_t const k = g.size();
  for (std::size_t o = 0; o < outer; ++o) {
    std::size_t const base = (o * k + g.rank) * chunk;
    T* dst = out + o * chunk;
    T const* first = static_cast<T const*>(t.box(g.members[0]).in) + base;
    std::copy(first, first + chunk, dst);
    for (std::size_t j = 1; j < k; ++j) {
      T const* src = static_cast<T const*>(t.box(g.members[j]).in) + base;
      for (std::size_t i = 0; i < chunk; ++i) dst[i] = static_cast<T>(dst[i] + src[i]);
    }
  }
  t.arrive_and_wait();
}

/// Copies a box of `extent` elements between two row-major buffers of any rank, given their
/// shapes and the box's start in each. Trailing dimensions whole in both merge into one run.
template <class T>
void copy_box(T const* src, std::span<std::size_t const> src_shape, std::span<std::size_t const> src_start, T* dst,
              std::span<std::size_t const> dst_shape, std::span<std::size_t const> dst_start,
              std::span<std::size_t const> extent) {
  std::size_t const n = extent.size();
  for (std::size_t i = 0; i < n; ++i)
    if (extent[i] == 0) return;
  std::vector<std::size_t> ss(n), ds(n);
  std::size_t s = 1, d = 1;
  for (std::size_t i = n; i-- > 0;) {
    ss[i] = s;
    ds[i] = d;
    s *= src_shape[i];
    d *= dst_shape[i];
  }
  std::size_t run = 1, k = n;
  while (k > 0) {
    run *= extent[k - 1];
    --k;
    if (extent[k] != src_shape[k] || extent[k] != dst_shape[k]) break;
  }
  std::size_t so = 0, dof = 0;
  for (std::size_t i = 0; i < n; ++i) {
    so += src_start[i] * ss[i];
    dof += dst_start[i] * ds[i];
  }
  std::vector<std::size_t> idx(n, 0);
  for (;;) {
    std::copy(src + so, src + so + run, dst + dof);
    std::size_t i = k;
    for (;;) {
      if (i == 0) return;
      --i;
      ++idx[i];
      so += ss[i];
      dof += ds[i];
      if (idx[i] < extent[i]) break;
      so -= idx[i] * ss[i];
      dof -= idx[i] * ds[i];
      idx[i] = 0;
    }
  }
}

/// Tiled all_to_all on a buffer of `shape`: dimension `split` is cut into k chunks, chunk j goes
/// to member j, and the chunks received are concatenated along `concat` in member order.
template <class T>
void all_to_all(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::span<std::size_t const> shape, std::size_t split, std::size_t concat) {
  t.enter(pos, sig, in, out);
  std::size_t const k = g.size();
  std::vector<std::size_t> piece(shape.begin(), shape.end());
  piece[split] /= k;
  std::vector<std::size_t> out_shape = piece;
  out_shape[concat] *= k;
  std::vector<std::size_t> src_start(shape.size(), 0), dst_start(shape.size(), 0);
  src_start[split] = g.rank * piece[split];
  for (std::size_t i = 0; i < k; ++i) {
    dst_start[concat] = i * piece[concat];
    copy_box(static_cast<T const*>(t.box(g.members[i]).in), shape, src_start, out, out_shape, dst_start, piece);
  }
  t.arrive_and_wait();
}

/// ppermute: out = the `in` of member `source` (a rank), or zeros when source is none (-1).
template <class T>
void permute(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
             std::size_t count, long source) {
  t.enter(pos, sig, in, out);
  if (source < 0) {
    std::fill(out, out + count, T{});
  } else {
    T const* src = static_cast<T const*>(t.box(g.members[static_cast<std::size_t>(source)]).in);
    std::copy(src, src + count, out);
  }
  t.arrive_and_wait();
}

}  // namespace tessera::detail
