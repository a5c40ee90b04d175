#pragma once
// Partial results (JAX's `unreduced`, DTensor's `Partial`): every device holds
// a block of values that still have to be summed over some mesh axes. This is
// where they are summed, straight into the layout asked for: each destination
// device combines the matching regions of its peers' partial blocks in place
// (shared memory), so a replicated destination is an all-reduce and one sharded
// over the partial axes a reduce-scatter, with no staging copy. Where every
// contribution covers the destination block whole (the usual case), all of them
// are folded in one pass (runtime/reduce_sources.hpp: each read once, the block
// written once), and the devices of one process that hold the same block split it:
// each sums a 1/m slice, then copies the other slices from its peers (a
// reduce-scatter and an all-gather in shared memory). Every element is still
// combined in device order, so the bits are those of the pairwise loop before.

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/runtime/call_once.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/fnv1a.hpp"
#include "tessera/runtime/reduce_sources.hpp"

namespace tessera::detail {

/// A sum of partial results as plain values (the layouts, which devices sum together, this
/// process's partial blocks), so that its code is compiled once per element type and rank
/// rather than once per pair of shardings (issue 14). Made before the new array: across
/// processes, the regions of partial blocks another process holds are received first, in one
/// exchange (every process computes the same list, so all take part or none does); a region
/// several devices of one process need is sent once. fill() then sums one target block.
template <class T, std::size_t N>
struct partial_sum {
  struct piece {
    int receiver;
    std::size_t q;
    std::array<slice, N> region;
    std::size_t offset;  // in the staging row, on the receiver
    int sender;
  };
  /// The pool's exchange rows, given back when the sum is done (or fails).
  struct kept_rows {
    device_pool& pool;
    std::unique_ptr<exchange_rows> rows;
    ~kept_rows() { pool.give_back_exchange_rows(std::move(rows)); }
  };

  device_pool& pool;
  shape_t<N> shape;
  block_layout<N> from, to;
  std::vector<std::size_t> row;  // mesh position -> its row of the axes neither sharding nor summed over
  std::vector<T const*> data;    // this process's partial blocks by position
  reduce_op op;
  std::vector<piece> pieces;     // after the exchange: the regions this process received
  kept_rows kept;

  /// An all-reduce between processes, as a reduce-scatter and an all-gather (see split()): one
  /// row of devices that sum together, all with the same block.
  struct split_row {
    std::vector<std::size_t> qs;     // its positions, in order
    std::vector<int> procs;          // their processes, sorted, distinct; chunk i is procs[i]'s
    std::size_t count = 0;           // elements of the block
    std::size_t lo = 0, hi = 0;      // this process's chunk, if it is in procs
    std::vector<std::size_t> staged; // by index in qs: where its part of our chunk was received
    // Chunk i starts here: equal shares, the first count % k one element longer (no product
    // that could wrap, whatever the count).
    std::size_t chunk_lo(std::size_t i) const {
      std::size_t const k = procs.size();
      return count / k * i + std::min(i, count % k);
    }
  };
  std::vector<split_row> split_rows;  // by row; empty unless split

  /// A block several devices of this process hold in the result (a replicated result): each of
  /// them sums a slice of it (`members[r]` the r-th of m), share() copies the others' slices.
  struct shared_block {
    std::vector<std::size_t> members;  // target positions, in order
    std::vector<T const*> srcs;        // the contributions, each the block whole and contiguous
    std::size_t count = 0;
  };
  /// Below this many bytes a block is summed whole by each holder (splitting it costs more).
  static constexpr std::size_t shared_min_bytes = 32 * 1024;
  static constexpr std::size_t not_shared = static_cast<std::size_t>(-1);
  std::vector<shared_block> shared;   // empty unless some block is shared
  std::vector<std::size_t> shared_of; // by target position: its index in shared, or not_shared

  partial_sum(device_pool& pool_, shape_t<N> const& shape_, block_layout<N> from_, block_layout<N> to_,
              std::vector<std::size_t> row_, std::vector<T const*> data_, dim_spec const& unreduced, reduce_op op_)
      : pool(pool_), shape(shape_), from(std::move(from_)), to(std::move(to_)), row(std::move(row_)),
        data(std::move(data_)), op(op_), kept{pool_, nullptr} {
    auto const& ids = from.ids;
    std::size_t const n = ids.size();
    if (!pool.spans_processes(std::span<int const>(ids))) return;
    int const me = pool.process_of(pool.first_id());
    kept.rows = pool.take_exchange_rows();
    if (split(me, unreduced)) return;
    std::size_t staged_bytes = 0;
    for (std::size_t t = 0; t < to.ids.size(); ++t) {
      int const receiver = pool.process_of(to.ids[t]);
      auto const& tb = to.blocks[t];
      for (std::size_t q = 0; q < n; ++q) {
        int const sender = pool.process_of(ids[q]);
        if (sender == receiver || row[q] != row[t]) continue;
        auto const& sb = from.blocks[q];
        std::array<slice, N> region{};
        if (!intersect(sb, tb, region)) continue;
        bool seen = false;
        for (auto const& pc : pieces) seen = seen || (pc.receiver == receiver && pc.q == q && pc.region == region);
        if (seen) continue;
        std::size_t const bytes = element_count(block_shape(region)) * sizeof(T);
        std::size_t offset = 0;
        if (receiver == me) {
          offset = staged_bytes;
          staged_bytes += bytes;
        }
        pieces.push_back({receiver, q, region, offset, sender});
      }
    }
    if (pieces.empty()) return;
    if (!pool.exchange_in_place)
      throw std::logic_error("tessera: a sum of partial results between processes needs tessera::distributed::runtime");
    // Received regions land in one staging row (they are summed with the local ones in fill);
    // a region contiguous in its partial block is sent from it, the others packed first.
    byte_row& staged = kept.rows->staged;
    byte_row& packed = kept.rows->packed;
    staged.resize(staged_bytes);
    std::vector<std::size_t> pack_at(pieces.size(), 0);
    std::size_t pack_bytes = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].sender == me && !contiguous_offset(pieces[i].region, from.blocks[pieces[i].q])) {
        pack_at[i] = pack_bytes;
        pack_bytes += element_count(block_shape(pieces[i].region)) * sizeof(T);
      }
    packed.resize(pack_bytes);
    std::vector<device_pool::exchange_message> messages;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto const& pc = pieces[i];
      std::size_t const bytes = element_count(block_shape(pc.region)) * sizeof(T);
      if (pc.sender == me)
        messages.push_back(
            {pc.receiver, false, region_to_send(data[pc.q], from.blocks[pc.q], pc.region, packed.data() + pack_at[i]), bytes});
      if (pc.receiver == me) messages.push_back({pc.sender, true, staged.data() + pc.offset, bytes});
    }
    exchange(messages, unreduced, 2);
    std::erase_if(pieces, [&](piece const& pc) { return pc.receiver != me; });
  }

  /// The exchange of `messages` (`kind`: 2 one round, 3 and 4 the two of a split sum); the
  /// signature and its description only where they are compared (checked mode).
  void exchange(std::vector<device_pool::exchange_message> const& messages, dim_spec const& unreduced,
                std::uint64_t kind) const {
    bool const checked = pool.checked_collectives.load();
    std::uint64_t sig = 0;
    if (checked) {
      sig = fnv1a_value(fnv1a_value(fnv1a_value(14695981039346656037ull, kind), sizeof(T)), N);
      sig = fnv1a_value(sig, static_cast<int>(op));
      for (auto d : shape) sig = fnv1a_value(sig, d);
      for (std::size_t i = 0; i < unreduced.count(); ++i) {
        // The name held here: axis() returns it by value, and a view of that temporary would
        // dangle before fnv1a read it (AddressSanitizer, stack-use-after-scope).
        axis_name const name = unreduced.axis(i);
        sig = fnv1a(name.view().data(), name.view().size(), sig);
      }
      for (int d : from.ids) sig = fnv1a_value(sig, d);
      for (int d : to.ids) sig = fnv1a_value(sig, d);
    }
    pool.exchange_in_place(messages, sig,
                           checked ? "a sum of partial results of shape " + shape_string(shape)
                                   : std::string("a sum of partial results between processes"));
  }

  /// Where every row's devices hold the same block in the partial and in the result (an
  /// all-reduce: the result replicated over the summed axes) and the block is large, the
  /// processes of a row split it in chunks, one each: each receives the others' parts of its
  /// chunk and sums it (a reduce-scatter), then sends the sum to the others (an all-gather,
  /// finish()), as MPI's large all-reduces do. Per process that moves 2(k-1)/k blocks instead of
  /// k-1 and sums a k-th of the block. Each element is still summed in device order, by one
  /// process. False (nothing done) where the layout is not so; every process decides alike.
  bool split(int me, dim_spec const& unreduced) {
    constexpr std::size_t min_bytes = std::size_t{256} << 10;  // below it, one round is faster
    std::size_t const n = from.ids.size();
    if (to.ids != from.ids) return false;
    std::size_t rows = 0;
    for (std::size_t q = 0; q < n; ++q) rows = std::max(rows, row[q] + 1);
    std::vector<split_row> sr(rows);
    std::vector<std::array<slice, N> const*> block_of(rows, nullptr);
    bool any = false;
    for (std::size_t q = 0; q < n; ++q) {
      auto& r = sr[row[q]];
      if (!(from.blocks[q] == to.blocks[q])) return false;
      if (block_of[row[q]] == nullptr) block_of[row[q]] = &from.blocks[q];
      else if (!(*block_of[row[q]] == from.blocks[q])) return false;
      r.qs.push_back(q);
      int const p = pool.process_of(from.ids[q]);
      if (std::find(r.procs.begin(), r.procs.end(), p) == r.procs.end()) r.procs.push_back(p);
    }
    for (std::size_t i = 0; i < rows; ++i) {
      auto& r = sr[i];
      if (block_of[i] == nullptr) continue;
      r.count = element_count(block_shape(*block_of[i]));
      if (r.procs.size() < 2) continue;
      if (r.count * sizeof(T) < min_bytes) return false;
      std::sort(r.procs.begin(), r.procs.end());
      any = true;
    }
    if (!any) return false;
    if (!pool.exchange_in_place)
      throw std::logic_error("tessera: a sum of partial results between processes needs tessera::distributed::runtime");
    // The reduce-scatter: each position's part of every other process's chunk, sent from its
    // partial block (contiguous: the block is the row's) into the chunk owner's staging row.
    std::vector<device_pool::exchange_message> messages;
    std::size_t staged_bytes = 0;
    for (auto& r : sr) {
      if (r.procs.size() < 2) continue;
      r.staged.assign(r.qs.size(), 0);
      for (std::size_t i = 0; i < r.procs.size(); ++i) {
        std::size_t const lo = r.chunk_lo(i), hi = r.chunk_lo(i + 1);
        if (r.procs[i] == me) {
          r.lo = lo;
          r.hi = hi;
        }
        for (std::size_t j = 0; j < r.qs.size(); ++j) {
          int const sender = pool.process_of(from.ids[r.qs[j]]);
          if (sender == r.procs[i]) continue;
          if (r.procs[i] == me) {
            r.staged[j] = staged_bytes;
            staged_bytes += (hi - lo) * sizeof(T);
          }
        }
      }
    }
    byte_row& staged = kept.rows->staged;
    staged.resize(staged_bytes);
    for (auto& r : sr) {
      if (r.procs.size() < 2) continue;
      for (std::size_t i = 0; i < r.procs.size(); ++i) {
        std::size_t const lo = r.chunk_lo(i), bytes = (r.chunk_lo(i + 1) - lo) * sizeof(T);
        for (std::size_t j = 0; j < r.qs.size(); ++j) {
          int const sender = pool.process_of(from.ids[r.qs[j]]);
          if (sender == r.procs[i]) continue;
          if (sender == me)
            messages.push_back({r.procs[i], false,
                                reinterpret_cast<std::byte*>(const_cast<T*>(data[r.qs[j]] + lo)), bytes});
          if (r.procs[i] == me) messages.push_back({sender, true, staged.data() + r.staged[j], bytes});
        }
      }
    }
    exchange(messages, unreduced, 3);
    split_rows = std::move(sr);
    return true;
  }

  /// After every device filled its block (`dst_data[t]`, this process's): the all-gather of a
  /// split sum, each chunk sent by its owner from its first device's block of the row into
  /// the other processes' first device's, then copied to their other devices of the row.
  void finish(std::vector<T*> const& dst_data, dim_spec const& unreduced) const {
    if (split_rows.empty()) return;
    int const me = pool.process_of(pool.first_id());
    auto first_local = [&](split_row const& r) -> std::size_t {
      for (std::size_t q : r.qs)
        if (pool.is_local(to.ids[q])) return q;
      return static_cast<std::size_t>(-1);
    };
    std::vector<device_pool::exchange_message> messages;
    for (auto const& r : split_rows) {
      if (r.procs.size() < 2) continue;
      std::size_t const mine = first_local(r);
      bool const in_row = mine != static_cast<std::size_t>(-1);
      for (std::size_t i = 0; i < r.procs.size(); ++i) {
        std::size_t const lo = r.chunk_lo(i), bytes = (r.chunk_lo(i + 1) - lo) * sizeof(T);
        for (int p : r.procs) {
          if (p == r.procs[i]) continue;
          if (r.procs[i] == me && in_row)
            messages.push_back({p, false, reinterpret_cast<std::byte*>(dst_data[mine] + lo), bytes});
          if (p == me && in_row) messages.push_back({r.procs[i], true, reinterpret_cast<std::byte*>(dst_data[mine] + lo), bytes});
        }
      }
    }
    exchange(messages, unreduced, 4);
    // This process's other devices of a row: the chunks received (each computed its own).
    for (auto const& r : split_rows) {
      if (r.procs.size() < 2) continue;
      std::size_t const mine = first_local(r);
      if (mine == static_cast<std::size_t>(-1)) continue;
      for (std::size_t q : r.qs) {
        if (q == mine || !pool.is_local(to.ids[q])) continue;
        for (std::size_t i = 0; i < r.procs.size(); ++i) {
          if (r.procs[i] == me) continue;
          std::size_t const lo = r.chunk_lo(i), hi = r.chunk_lo(i + 1);
          std::copy(dst_data[mine] + lo, dst_data[mine] + hi, dst_data[q] + lo);
        }
      }
    }
  }

  /// In one process: the blocks of at least `min_bytes` that several target positions hold
  /// (same block, same row: they sum the same contributions), each to be summed in slices.
  void plan_shared(std::size_t min_bytes = shared_min_bytes) {
    // Another process's mesh (devices[:4] of 2 processes x 4, seen from process 1) has nothing
    // for this one to sum: only where every device is this process's.
    auto const local = [this](std::vector<int> const& ids) {
      return std::all_of(ids.begin(), ids.end(), [this](int d) { return pool.is_local(d); });
    };
    if (!local(from.ids) || !local(to.ids)) return;
    std::size_t const n = to.ids.size();
    std::vector<shared_block> found;
    std::vector<std::size_t> of(n, not_shared);
    std::vector<T const*> srcs;
    for (std::size_t t = 0; t < n; ++t) {
      auto const& tb = to.blocks[t];
      std::size_t const count = element_count(block_shape(tb));
      if (count * sizeof(T) < min_bytes) continue;
      for (std::size_t i = 0; i < found.size() && of[t] == not_shared; ++i) {
        std::size_t const u = found[i].members.front();
        if (row[u] == row[t] && to.blocks[u] == tb) {
          found[i].members.push_back(t);
          of[t] = i;
        }
      }
      if (of[t] != not_shared || !whole_sources(t, tb, srcs)) continue;
      of[t] = found.size();
      found.push_back({{t}, srcs, count});
    }
    // A block held once is summed whole by fill; the indices of the others renumbered.
    std::vector<std::size_t> renumber(found.size(), not_shared);
    for (std::size_t i = 0; i < found.size(); ++i)
      if (found[i].members.size() >= 2) {
        renumber[i] = shared.size();
        shared.push_back(std::move(found[i]));
      }
    if (shared.empty()) return;
    for (auto& i : of)
      if (i != not_shared) i = renumber[i];
    shared_of = std::move(of);
  }

  /// After fill: each device of a shared block copies the slices its peers summed (`dst_data[t]`
  /// the result's block at target position t), on its own thread.
  void share(std::vector<T*> const& dst_data) const {
    if (shared.empty()) return;
    std::vector<int> ids;
    std::vector<std::size_t> pos_of(static_cast<std::size_t>(pool.global_size()), not_shared);
    for (auto const& b : shared)
      for (std::size_t t : b.members) {
        ids.push_back(to.ids[t]);
        pos_of[static_cast<std::size_t>(to.ids[t])] = t;
      }
    pool.run(std::span<int const>(ids), [&](int d) {
      std::size_t const t = pos_of[static_cast<std::size_t>(d)];
      shared_block const& b = shared[shared_of[t]];
      std::size_t const m = b.members.size();
      for (std::size_t r = 0; r < m; ++r) {
        std::size_t const u = b.members[r];
        if (u == t) continue;
        slice const theirs = block_range(b.count, m, r);
        std::copy(dst_data[u] + theirs.start, dst_data[u] + theirs.stop, dst_data[t] + theirs.start);
      }
    });
  }

  /// Target position pos's block (`tb`, at `out`): its contributions combined.
  void fill(std::size_t pos, std::array<slice, N> const& tb, T* out) const {
    // Every device combines its contributions in the same order (device position), so every
    // copy of a replicated element has the same bits, as the runtime's all-reduce guarantees.
    if (!split_rows.empty() && split_rows[row[pos]].procs.size() >= 2) return fill_chunk(split_rows[row[pos]], out);
    std::size_t const count = element_count(block_shape(tb));
    if (!shared_of.empty() && shared_of[pos] != not_shared) {
      shared_block const& b = shared[shared_of[pos]];
      std::size_t const r = static_cast<std::size_t>(std::find(b.members.begin(), b.members.end(), pos) - b.members.begin());
      slice const mine = block_range(b.count, b.members.size(), r);
      return reduce_sources(op, out + mine.start, b.srcs.data(), b.srcs.size(), mine.start, mine.size());
    }
    {
      std::vector<T const*> srcs;
      if (whole_sources(pos, tb, srcs)) return reduce_sources(op, out, srcs.data(), srcs.size(), 0, count);
    }
    // Contributions that cover part of the block, or lie strided in their partial blocks:
    // combined region by region (in device order too).
    std::size_t q = 0;
    std::array<slice, N> region{}, sb{};
    T const* src = nullptr;
    bool started = false;
    while (next(pos, tb, q, region, sb, src)) {
      if (!started && region == tb) {
        std::array<slice, N> region2{}, sb2{};
        T const* src2 = nullptr;
        std::size_t q2 = q;
        if (sb == tb && next(pos, tb, q2, region2, sb2, src2) && region2 == tb && sb2 == tb) {
          // The first two cover the block and are contiguous: combined in one pass.
          combine_into(op, out, src, src2, count);
          q = q2;
        } else {
          copy_region(src, sb, out, tb, tb);
        }
      } else {
        if (!started) std::fill(out, out + count, identity_of<T>(op));
        visit_region(src, sb, out, tb, region, [this](T const* s, T* d, std::size_t len) { combine_into(op, d, s, len); });
      }
      started = true;
    }
    if (!started) std::fill(out, out + count, identity_of<T>(op));
  }

 private:
  /// A split sum's block: this process's chunk of it summed (finish() brings the others').
  void fill_chunk(split_row const& r, T* out) const {
    auto part = [&](std::size_t j) {
      std::size_t const q = r.qs[j];
      return pool.is_local(from.ids[q]) ? data[q] + r.lo
                                         : reinterpret_cast<T const*>(kept.rows->staged.data() + r.staged[j]);
    };
    reduce_inputs<T>(part, r.qs.size(), op, out + r.lo, 0, r.hi - r.lo);  // in device order, as the runtime's all-reduce
  }

  /// Target position pos's contributions, when each covers its block `tb` whole as one
  /// contiguous run (a partial block summed into the same block, or a reduce-scatter's rows of
  /// it): their data, in device order, into `srcs`. False otherwise.
  bool whole_sources(std::size_t pos, std::array<slice, N> const& tb, std::vector<T const*>& srcs) const {
    srcs.clear();
    std::size_t q = 0;
    std::array<slice, N> region{}, sb{};
    T const* src = nullptr;
    while (next(pos, tb, q, region, sb, src)) {
      if (!(region == tb)) return false;
      auto const at = contiguous_offset(region, sb);
      if (!at) return false;
      srcs.push_back(src + *at);
    }
    return !srcs.empty();
  }

  /// The next contribution to target position pos's block from position q on: its region, the
  /// block its data is laid out in (`sb`) and the data; q moves past it. False when none is left.
  bool next(std::size_t pos, std::array<slice, N> const& tb, std::size_t& q, std::array<slice, N>& region,
            std::array<slice, N>& sb, T const*& src) const {
    for (; q < from.ids.size(); ++q) {
      if (row[q] != row[pos]) continue;
      sb = from.blocks[q];
      if (!intersect(sb, tb, region)) continue;
      if (pool.is_local(from.ids[q])) {
        src = data[q];
      } else {  // received: the region alone, row-major
        src = nullptr;
        for (auto const& pc : pieces)
          if (pc.q == q && pc.region == region) src = reinterpret_cast<T const*>(kept.rows->staged.data() + pc.offset);
        if (src == nullptr) throw std::logic_error("tessera: internal: a partial block's region was not received");
        sb = region;
      }
      ++q;
      return true;
    }
    return false;
  }
};

/// A sum of partial results queued on the devices (asynchronous dispatch), for the small sums
/// whose every target block is under plan_shared's threshold (so each device sums its block
/// whole, as the synchronous path does for them, with the same bits): the many small
/// all-reduces of a training step, where the host's round trip costs more than the sum.
template <class T, std::size_t N>
class queued_sum {
 public:
  /// Whether a sum into `to` may be queued here: the calling thread queues on `pool` (one
  /// process, asynchronous dispatch on) and no target block reaches plan_shared's 32 KiB.
  static bool fits(device_pool& pool, block_layout<N> const& to) {
    if (!pool.queues_here()) return false;
    for (auto const& b : to.blocks)
      if (element_count(block_shape(b)) * sizeof(T) >= partial_sum<T, N>::shared_min_bytes) return false;
    return true;
  }
  /// `data` gives the partial blocks' addresses (and owns the partial array). Not a template
  /// over it: the constructor, and partial_sum's inlined into it, is then compiled once per
  /// (T, N) rather than once per sum_partials instantiation (issue 31's compile time).
  queued_sum(device_pool& pool, shape_t<N> const& shape, block_layout<N> from, block_layout<N> to,
             std::vector<std::size_t> row, dim_spec const& unreduced, reduce_op op,
             detail::unique_function<std::vector<T const*>()> data)
      : sum_(pool, shape, std::move(from), std::move(to), std::move(row), {}, unreduced, op), data_(std::move(data)) {}
  /// Target position pos's block, on its device: the partial blocks' addresses are taken once,
  /// by the first device (reading them waits for the queued work that writes them).
  void fill(std::size_t pos, std::array<slice, N> const& tb, T* out) {
    call_once(once_, [this] { sum_.data = data_(); });
    sum_.fill(pos, tb, out);
  }
 private:
  partial_sum<T, N> sum_;
  detail::unique_function<std::vector<T const*>()> data_;  // owns the partial array until the sum has run
  std::once_flag once_;
};

/// f(), which computes partial results on mesh m's devices and sums them: where m spans
/// processes, a failure on this process (computing its partial blocks, say) ends the job, as
/// the other processes wait for it in the sum's exchange (ending_job_on_failure).
template <class Mesh, class F>
void summing_partials(Mesh const& m, F&& f) {
  auto const pool = pool_for_devices(m.runtime_id(), m.device_ids(), "sum of partial results");
  ending_job_on_failure(*pool, pool->spans_processes(std::span<int const>(m.device_ids())), "sum of partial results",
                        std::forward<F>(f));
}

/// Refuses a sum of partial results onto another mesh (one function per mesh type, cold).
template <class Mesh>
void check_sum_mesh(Mesh const& from, Mesh const& to) {
  if (from == to) return;
  std::ostringstream os;
  os << "tessera: a partial result on mesh " << from << " cannot be summed onto mesh " << to;
  throw std::invalid_argument(os.str());
}

/// The rows of devices that sum together: devices agree on every mesh axis that neither
/// shards the partial blocks (`dims`, the partial sharding's spec) nor is summed over
/// (`unreduced`). Compiled once per mesh type.
template <class Mesh>
std::vector<std::size_t> summing_rows(Mesh const& m, std::span<dim_spec const> dims, dim_spec const& unreduced) {
  std::size_t const n = m.num_devices();
  std::vector<std::size_t> row(n, 0);
  for (std::size_t a = 0; a < Mesh::rank; ++a) {
    bool used = unreduced.uses(Mesh::axes[a].name);
    for (auto const& d : dims) used = used || d.uses(Mesh::axes[a].name);
    if (used) continue;
    for (std::size_t q = 0; q < n; ++q)
      row[q] = row[q] * static_cast<std::size_t>(m.size(a)) + static_cast<std::size_t>(m.coordinate(q, a));
  }
  return row;
}

/// The addresses of a partial array's blocks in this process, taken when called (a named type:
/// one per partial array type, not one per sum_partials instantiation).
template <class T, std::size_t N, class S1>
struct partial_block_data {
  array<T, N, S1> p;
  std::vector<T const*> operator()() const { return local_block_data(p); }
};

/// A queued sum's fill of one target block (one type per (T, N)).
template <class T, std::size_t N>
struct queued_sum_fill {
  std::shared_ptr<queued_sum<T, N>> sum;
  void operator()(std::size_t pos, std::array<slice, N> const& tb, T* o) const { sum->fill(pos, tb, o); }
};

/// A synchronous sum's fill of one target block (one type per (T, N)).
template <class T, std::size_t N>
struct partial_sum_fill {
  partial_sum<T, N>* sum;
  void operator()(std::size_t pos, std::array<slice, N> const& tb, T* o) const { sum->fill(pos, tb, o); }
};

/// The synchronous sum of partial results into a new array's `buffers` (layout `to`), on its
/// devices: compiled once per (T, N).
template <class T, std::size_t N>
void sum_partials_now(device_pool& pool, shape_t<N> const& shape, block_layout<N> from, block_layout<N> to,
                      sharding_layout_view const& to_view, std::vector<std::size_t> row, std::vector<T const*> data,
                      dim_spec const& unreduced, reduce_op op, std::vector<device_buffer<T>>& buffers,
                      device_pool& out_pool) {
  partial_sum<T, N> sum(pool, shape, std::move(from), std::move(to), std::move(row), std::move(data), unreduced, op);
  sum.plan_shared();
  partial_sum_fill<T, N> fill{&sum};
  fill_blocks<T, N>(out_pool, to_view, shape, buffers, "sum of partial results", false,
                    &call_erased<partial_sum_fill<T, N>, std::size_t, std::array<slice, N> const&, T*>,
                    erased_context(fill));
  // The new array is this process's alone: its blocks are completed here, once.
  std::vector<int> const& ids = *to_view.ids;
  if (!sum.shared.empty()) {
    // Each device completes its block from its peers'.
    std::vector<T*> dst_data(ids.size(), nullptr);
    for (std::size_t q = 0; q < dst_data.size(); ++q) dst_data[q] = buffers[q].data();
    sum.share(dst_data);
  }
  if (!sum.split_rows.empty()) {
    std::vector<T*> dst_data(ids.size(), nullptr);
    for (std::size_t q = 0; q < dst_data.size(); ++q)
      if (out_pool.is_local(ids[q])) dst_data[q] = buffers[q].data();
    sum.finish(dst_data, unreduced);
  }
}

/// sum_partials' body: the partial blocks as plain values (`from` their layout, `row` each
/// position's row of devices that sum together, `data` their addresses, `across` whether their
/// devices span processes); only the new array's storage is made per target sharding S2.
template <class T, std::size_t N, class S2>
array<T, N, S2> sum_partials_into(device_pool& pool, shape_t<N> const& shape, block_layout<N> from,
                                  std::vector<std::size_t> row, bool across,
                                  detail::unique_function<std::vector<T const*>()> data, dim_spec const& unreduced,
                                  S2 const& to, reduce_op op) {
  auto to_layout = layout_of_view<N>(to.layout_view(), shape);
  if (queued_sum<T, N>::fits(pool, to_layout)) {
    // Queued (asynchronous dispatch): the devices read the partial blocks when they run, after
    // the work that writes them (queued before); the first one to run takes their addresses.
    auto st = std::make_shared<queued_sum<T, N>>(pool, shape, std::move(from), std::move(to_layout), std::move(row),
                                                 unreduced, op, std::move(data));
    std::shared_ptr<queued_fill<T, N>> fill(
        static_cast<queued_fill<T, N>*>(new queued_fill_of<T, N, queued_sum_fill<T, N>>(queued_sum_fill<T, N>{std::move(st)})));
    return build_array_queued_erased<T, N, S2>(to, shape, "sum of partial results", false, std::move(fill));
  }
  // Across processes a failure ends the job: the others would wait for this process in the exchange.
  return ending_job_on_failure(pool, across, "sum of partial results", [&] {
    auto st = new_storage<T, N, S2>(to, shape, "sum of partial results");
    sum_partials_now<T, N>(pool, shape, std::move(from), std::move(to_layout), to.layout_view(), std::move(row), data(),
                           unreduced, op, st->buffers, *st->pool);
    return array<T, N, S2>(std::move(st));
  });
}

/// The array laid out by `to` whose values are those of `p`'s blocks combined by `op` over the
/// mesh axes `unreduced` (p's block on a device is that device's partial value of its block).
/// Both shardings are on one mesh.
template <class T, std::size_t N, class S1, class S2>
array<T, N, S2> sum_partials(array<T, N, S1> const& p, dim_spec const& unreduced, S2 const& to, reduce_op op) {
  S1 const& from = p.sharding();
  check_sum_mesh(from.mesh(), to.mesh());
  auto const shape = p.shape();
  // The collectives it is, for a live collective_counter or trace only.
  std::vector<collective_event> events;
  if (counting() || tracing()) events = reshard_events<T, N>(shape, from, unreduced, to);
  record_collectives(events);
  trace_as const label = trace_collectives(events, "sum of partial results");
  device_pool& pool = *p.pool();
  return sum_partials_into<T, N, S2>(pool, shape, layout_of(from, shape),
                                     summing_rows(from.mesh(), std::span<dim_spec const>(S1::spec_dims), unreduced),
                                     pool.spans_processes(std::span<int const>(from.device_ids())),
                                     partial_block_data<T, N, S1>{p}, unreduced, to, op);
}

}  // namespace tessera::detail
