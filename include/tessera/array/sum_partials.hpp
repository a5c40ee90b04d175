#pragma once
// Partial results (JAX's `unreduced`, DTensor's `Partial`): every device holds
// a block of values that still have to be summed over some mesh axes. This is
// where they are summed, straight into the layout asked for: each destination
// device combines the matching regions of its peers' partial blocks in place
// (shared memory), so a replicated destination is an all-reduce and one sharded
// over the partial axes a reduce-scatter, in one pass, with no staging copy.

#include <algorithm>
#include <array>
#include <memory>
#include <cstddef>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/fnv1a.hpp"

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

  partial_sum(device_pool& pool_, shape_t<N> const& shape_, block_layout<N> from_, block_layout<N> to_,
              std::vector<std::size_t> row_, std::vector<T const*> data_, dim_spec const& unreduced, reduce_op op_)
      : pool(pool_), shape(shape_), from(std::move(from_)), to(std::move(to_)), row(std::move(row_)),
        data(std::move(data_)), op(op_), kept{pool_, nullptr} {
    auto const& ids = from.ids;
    std::size_t const n = ids.size();
    if (!pool.spans_processes(std::span<int const>(ids))) return;
    int const me = pool.process_of(pool.first_id());
    kept.rows = pool.take_exchange_rows();
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
    // The signature and its description only where they are compared (checked mode).
    bool const checked = pool.checked_collectives.load();
    std::uint64_t sig = 0;
    if (checked) {
      sig = fnv1a_value(fnv1a_value(fnv1a_value(14695981039346656037ull, std::uint64_t{2}), sizeof(T)), N);
      sig = fnv1a_value(sig, static_cast<int>(op));
      for (auto d : shape) sig = fnv1a_value(sig, d);
      for (std::size_t i = 0; i < unreduced.count(); ++i) {
        auto const name = unreduced.axis(i).view();
        sig = fnv1a(name.data(), name.size(), sig);
      }
      for (int d : ids) sig = fnv1a_value(sig, d);
      for (int d : to.ids) sig = fnv1a_value(sig, d);
    }
    pool.exchange_in_place(messages, sig,
                           checked ? "a sum of partial results of shape " + shape_string(shape)
                                   : std::string("a sum of partial results between processes"));
    std::erase_if(pieces, [&](piece const& pc) { return pc.receiver != me; });
  }

  /// Target position pos's block (`tb`, at `out`): its contributions combined.
  void fill(std::size_t pos, std::array<slice, N> const& tb, T* out) const {
    // Every device combines its contributions in the same order (device position), so every
    // copy of a replicated element has the same bits, as the runtime's all-reduce guarantees.
    bool started = false;
    std::array<slice, N> region{};
    for (std::size_t q = 0; q < from.ids.size(); ++q) {
      if (row[q] != row[pos]) continue;
      auto sb = from.blocks[q];
      if (!intersect(sb, tb, region)) continue;
      T const* src = nullptr;
      if (pool.is_local(from.ids[q])) {
        src = data[q];
      } else {  // received: the region alone, row-major
        for (auto const& pc : pieces)
          if (pc.q == q && pc.region == region) src = reinterpret_cast<T const*>(kept.rows->staged.data() + pc.offset);
        if (src == nullptr) throw std::logic_error("tessera: internal: a partial block's region was not received");
        sb = region;
      }
      if (!started && region == tb) {
        copy_region(src, sb, out, tb, tb);
      } else {
        if (!started) std::fill(out, out + element_count(block_shape(tb)), identity_of<T>(op));
        visit_region(src, sb, out, tb, region, [this](T const* s, T* d, std::size_t len) { combine_into(op, d, s, len); });
      }
      started = true;
    }
    if (!started) std::fill(out, out + element_count(block_shape(tb)), identity_of<T>(op));
  }
};

/// The array laid out by `to` whose values are those of `p`'s blocks combined by `op` over the
/// mesh axes `unreduced` (p's block on a device is that device's partial value of its block).
/// Both shardings are on one mesh.
template <class T, std::size_t N, class S1, class S2>
array<T, N, S2> sum_partials(array<T, N, S1> const& p, dim_spec const& unreduced, S2 const& to, reduce_op op) {
  using Mesh = typename S1::mesh_type;
  S1 const& from = p.sharding();
  Mesh const& m = from.mesh();
  if (!(m == to.mesh()))
    throw std::invalid_argument("tessera: a partial result on mesh " + [&] {
      std::ostringstream os;
      os << m << " cannot be summed onto mesh " << to.mesh();
      return os.str();
    }());
  auto const shape = p.shape();
  // The collectives it is, for a live collective_counter or trace only.
  std::vector<collective_event> events;
  if (counting() || tracing()) events = reshard_events<T, N>(shape, from, unreduced, to);
  record_collectives(events);
  trace_as const label = trace_collectives(events, "sum of partial results");
  // Devices sum together when they agree on every axis that neither shards the partial blocks
  // nor is summed over: number those rows.
  std::size_t const n = m.num_devices();
  std::vector<std::size_t> row(n, 0);
  for (std::size_t a = 0; a < Mesh::rank; ++a) {
    bool used = unreduced.uses(Mesh::axes[a].name);
    for (auto const& d : S1::spec_dims) used = used || d.uses(Mesh::axes[a].name);
    if (used) continue;
    for (std::size_t q = 0; q < n; ++q)
      row[q] = row[q] * static_cast<std::size_t>(m.size(a)) + static_cast<std::size_t>(m.coordinate(q, a));
  }
  partial_sum<T, N> const sum(*p.pool(), shape, layout_of(from, shape), layout_of(to, shape), std::move(row),
                              local_block_data(p), unreduced, op);
  return build_array<T, N, S2>(to, shape, "sum of partial results",
                               [&sum](std::size_t pos, std::array<slice, N> const& tb, T* out) { sum.fill(pos, tb, out); });
}

}  // namespace tessera::detail
