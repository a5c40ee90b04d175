#pragma once
// Collectives over shared memory, on raw row-major buffers: after the entry
// barrier every device reads (and for a large all-reduce, writes) its peers'
// buffers in place, with no staging copies, and the exit barrier keeps those
// buffers alive until every member is done. Two barrier phases per collective,
// among the collective's group only.
//
// Invariant that keeps aborts safe: between `team::enter` and `team::leave`
// nothing throws, so every member that entered reaches the exit (see team.hpp).
// Everything that can fail (argument checks, allocation) happens before `enter`.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "tessera/core/slice.hpp"
#include "tessera/runtime/copy_box.hpp"
#include "tessera/runtime/simd.hpp"
#include "tessera/runtime/team.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera::detail {

enum class reduce_op { sum, max, min, prod };

/// The value that leaves x unchanged under `op` (what an empty reduction gives).
template <class T>
T identity_of(reduce_op op) {
  if (op == reduce_op::sum) return T(0);
  if (op == reduce_op::prod) return T(1);
  if constexpr (std::numeric_limits<T>::has_infinity)
    return op == reduce_op::max ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
  else return op == reduce_op::max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
}

/// out[i] = a[i] op b[i] for i < n (out may be a).
template <class T>
void combine_into(reduce_op op, T* out, T const* a, T const* b, std::size_t n) {
  if constexpr (std::is_same_v<T, bool>) {
    if (op == reduce_op::min || op == reduce_op::prod)
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] && b[i];
    else
      for (std::size_t i = 0; i < n; ++i) out[i] = a[i] || b[i];
  } else if (op == reduce_op::sum) {
    simd::add_into(out, a, b, n);
  } else if (op == reduce_op::prod) {
    simd::mul_into(out, a, b, n);
  } else if (op == reduce_op::max) {
    simd::max_into(out, a, b, n);
  } else {
    simd::min_into(out, a, b, n);
  }
}
/// out[i] = out[i] op src[i].
template <class T>
void combine_into(reduce_op op, T* out, T const* src, std::size_t n) {
  combine_into(op, out, out, src, n);
}

/// dst[0, n) = the members' `in` at [offset, offset + n), combined in rank order, so every
/// device that computes an element gets the same bits.
template <class T, class In>
void reduce_inputs(In const& in_of, std::size_t k, reduce_op op, T* dst, std::size_t offset, std::size_t n) {
  T const* first = in_of(0) + offset;
  if (k == 1) {
    std::copy(first, first + n, dst);
    return;
  }
  // The first two in one pass (rather than a copy, then a combine: one pass over dst fewer).
  combine_into(op, dst, first, in_of(1) + offset, n);
  for (std::size_t j = 2; j < k; ++j) combine_into(op, dst, in_of(j) + offset, n);
}
template <class T>
void reduce_members(team const& t, group const& g, reduce_op op, T* dst, std::size_t offset, std::size_t n) {
  reduce_inputs<T>([&](std::size_t j) { return static_cast<T const*>(t.box(g.members[j]).in); }, g.size(), op, dst,
                   offset, n);
}
// The loops below read the members' inputs through `in_of(j)` (rank j): the devices' own
// buffers (t.box) here, or for a group that spans processes the copies every process received
// (parallel/across_processes.hpp), so a result has the same bits either way.

/// Bytes per step of the reductions: `dst` stays in L2 while the members' inputs stream past
/// it. Measured with 8 devices on 2 cores (4 MiB psum): 8 KiB tiles 1.8 ms, 32 KiB 1.6 ms,
/// 128-512 KiB 1.1-1.4 ms, 2 MiB no better; longer runs per stream suit the prefetchers.
inline constexpr std::size_t reduce_tile_bytes = 256 * 1024;

/// Bytes per device above which an all-reduce is split: each device then reduces 1/k of the
/// elements and writes them into every member's output (a reduce-scatter and an all-gather in
/// one pass), so the inputs are read once in all instead of once per device.
inline constexpr std::size_t all_reduce_split_bytes = 32 * 1024;

/// psum / pmax / pmin: out = the reduction of every member's `in` (count elements each).
/// Two barrier phases whatever the size: the entry, and the exit that keeps the buffers alive.
template <class T>
void all_reduce(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::size_t count, reduce_op op) {
  trace_span span("collective", "all-reduce", count * sizeof(T));
  if (span.active() && sig.describe) span.detail(sig.describe(sig));
  t.enter(pos, g, sig, in, out);
  std::size_t const k = g.size();
  constexpr std::size_t tile = std::max<std::size_t>(1, reduce_tile_bytes / sizeof(T));
  if (k == 1) {
    if (in != out) std::copy(in, in + count, out);
  } else if (count * sizeof(T) < all_reduce_split_bytes) {
    // Small: every device reduces everything, and writes only its own output.
    for (std::size_t a = 0; a < count; a += tile) reduce_members(t, g, op, out + a, a, std::min(tile, count - a));
  } else {
    slice const mine = block_range(count, k, g.rank);
    for (std::size_t a = mine.start; a < mine.stop; a += tile) {
      std::size_t const n = std::min(tile, mine.stop - a);
      reduce_members(t, g, op, out + a, a, n);
      for (std::size_t j = 0; j < k; ++j) {
        if (j == g.rank) continue;
        T* peer = static_cast<T*>(t.box(g.members[j]).out);
        std::copy(out + a, out + a + n, peer + a);
      }
    }
  }
  t.leave(pos, g);
}

/// out[o][j][inner] = input j's [o][inner], `outer` blocks of `inner` elements.
template <class T, class In>
void gather_inputs(In const& in_of, std::size_t k, T* out, std::size_t outer, std::size_t inner) {
  for (std::size_t j = 0; j < k; ++j) {
    T const* src = in_of(j);
    for (std::size_t o = 0; o < outer; ++o) std::copy(src + o * inner, src + (o + 1) * inner, out + (o * k + j) * inner);
  }
}

/// all_gather: out[o][j][inner] = member j's in[o][inner], `outer` blocks of `inner` elements.
/// (Tiled and untiled all_gather have the same bytes; only the shape differs.)
template <class T>
void all_gather(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::size_t outer, std::size_t inner) {
  trace_span span("collective", "all-gather", outer * inner * sizeof(T));
  if (span.active() && sig.describe) span.detail(sig.describe(sig));
  t.enter(pos, g, sig, in, out);
  gather_inputs<T>([&](std::size_t j) { return static_cast<T const*>(t.box(g.members[j]).in); }, g.size(), out, outer,
                   inner);
  t.leave(pos, g);
}

/// out[o][:] = the sum over the k inputs of [o][rank * chunk, +chunk) (inputs [outer][k * chunk]).
template <class T, class In>
void scatter_inputs(In const& in_of, std::size_t k, std::size_t rank, T* out, std::size_t outer, std::size_t chunk) {
  constexpr std::size_t tile = std::max<std::size_t>(1, reduce_tile_bytes / sizeof(T));
  for (std::size_t o = 0; o < outer; ++o) {
    std::size_t const base = (o * k + rank) * chunk;
    for (std::size_t a = 0; a < chunk; a += tile)
      reduce_inputs<T>(in_of, k, reduce_op::sum, out + o * chunk + a, base + a, std::min(tile, chunk - a));
  }
}

/// psum_scatter: in is [outer][k * chunk] per device; out[o][:] = sum over members of in[o][rank * chunk, +chunk).
template <class T>
void reduce_scatter(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                    std::size_t outer, std::size_t chunk) {
  trace_span span("collective", "reduce-scatter", outer * chunk * sizeof(T));
  if (span.active() && sig.describe) span.detail(sig.describe(sig));
  t.enter(pos, g, sig, in, out);
  scatter_inputs<T>([&](std::size_t j) { return static_cast<T const*>(t.box(g.members[j]).in); }, g.size(), g.rank,
                    out, outer, chunk);
  t.leave(pos, g);
}

/// out = the chunks `rank` of the k inputs (of `shape`, cut into k along `split`), concatenated
/// along `concat` in input order.
template <class T, class In>
void exchange_inputs(In const& in_of, std::size_t k, std::size_t rank, T* out, std::span<std::size_t const> shape,
                     std::size_t split, std::size_t concat) {
  std::vector<std::size_t> piece(shape.begin(), shape.end());
  piece[split] /= k;
  std::vector<std::size_t> out_shape = piece;
  out_shape[concat] *= k;
  std::vector<std::size_t> src_start(shape.size(), 0), dst_start(shape.size(), 0), scratch(3 * shape.size());
  src_start[split] = rank * piece[split];
  for (std::size_t i = 0; i < k; ++i) {
    dst_start[concat] = i * piece[concat];
    copy_box(in_of(i), shape, src_start, out, out_shape, dst_start, piece, std::span<std::size_t>(scratch));
  }
}

/// Tiled all_to_all on a buffer of `shape`: dimension `split` is cut into k chunks, chunk j goes
/// to member j, and the chunks received are concatenated along `concat` in member order.
template <class T>
void all_to_all(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
                std::span<std::size_t const> shape, std::size_t split, std::size_t concat) {
  trace_span span("collective", "all-to-all");
  if (span.active()) {
    std::size_t n = sizeof(T);
    for (std::size_t e : shape) n *= e;
    span.bytes(n);
    if (sig.describe) span.detail(sig.describe(sig));
  }
  t.enter(pos, g, sig, in, out);
  exchange_inputs<T>([&](std::size_t j) { return static_cast<T const*>(t.box(g.members[j]).in); }, g.size(), g.rank,
                     out, shape, split, concat);
  t.leave(pos, g);
}

/// ppermute: out = the `in` of member `source` (a rank), or zeros when source is none (-1).
template <class T>
void permute(team& t, std::size_t pos, group const& g, op_signature const& sig, T const* in, T* out,
             std::size_t count, long source) {
  trace_span span("collective", "ppermute", count * sizeof(T));
  if (span.active() && sig.describe) span.detail(sig.describe(sig));
  t.enter(pos, g, sig, in, out);
  if (source < 0) {
    std::fill(out, out + count, T{});
  } else {
    T const* src = static_cast<T const*>(t.box(g.members[static_cast<std::size_t>(source)]).in);
    std::copy(src, src + count, out);
  }
  t.leave(pos, g);
}

}  // namespace tessera::detail
