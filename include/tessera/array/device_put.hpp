#pragma once
// jax.device_put: host data, or another array, onto a sharding.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/detail/xtensor/xexpression.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/block_layout.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/fnv1a.hpp"

namespace tessera {

/// Marks "take the rank from the expression's type" in device_put<Rank>.
inline constexpr std::size_t deduce_rank = static_cast<std::size_t>(-1);

namespace detail {

template <class E>
concept row_major_contiguous = xt::has_data_interface<std::decay_t<E>>::value && requires {
  std::decay_t<E>::contiguous_layout;
  std::decay_t<E>::static_layout;
} && std::decay_t<E>::contiguous_layout && (std::decay_t<E>::static_layout == xt::layout_type::row_major);


template <class T, std::size_t N, class S>
array<T, N, S> put_host(T const* data, shape_t<N> const& shape, S const& s) {
  auto const whole = full_block(shape);
#ifndef NDEBUG
  // Across processes each fills its own blocks from its own copy of the data, which must be the
  // same everywhere (JAX asserts it too); debug builds compare a hash of it first.
  if (auto const pool = pool_for(s, "device_put");
      pool->agree && pool->spans_processes(std::span<int const>(s.device_ids()))) {
    std::uint64_t h = fnv1a(shape.data(), sizeof(shape));
    pool->agree(fnv1a(data, element_count(shape) * sizeof(T), h), "the host data given to device_put");
  }
#endif
  return build_array<T, N, S>(s, shape, "device_put", [&](std::size_t, std::array<slice, N> const& block, T* out) {
    copy_region(data, whole, out, block, block);
  });
}

}  // namespace detail

/// jax.device_put(x, sharding): copies an xtensor expression into a sharded array.
/// The rank comes from the expression's type; for xt::xarray, give it: device_put<2>(x, s).
template <std::size_t Rank = deduce_rank, class E, sharding S>
  requires xt::is_xexpression<std::decay_t<E>>::value
auto device_put(E&& e, S const& s) {
  if constexpr (Rank == deduce_rank && !has_static_rank_v<E>) {
    static_assert(diagnostic::always_false<E>,
                  "tessera::device_put(x, sharding): the rank of x is only known at run time (an xt::xarray or a "
                  "view of one); name it, as in device_put<2>(x, sharding), or use xt::xtensor<T, N>");
  } else {
    constexpr std::size_t N = Rank != deduce_rank ? Rank : static_rank_v<E>;
    using T = std::remove_cv_t<typename std::decay_t<E>::value_type>;
    if (e.dimension() != N)
      throw std::invalid_argument("tessera::device_put<" + std::to_string(N) + ">: the host array has rank " +
                                  std::to_string(e.dimension()) + " (shape " + detail::shape_string(e.shape()) + ")");
    shape_t<N> shape{};
    for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(e.shape()[i]);
    detail::checked_element_count<T>(shape, "device_put");  // before a lazy expression is evaluated into that shape
    if constexpr (detail::row_major_contiguous<E>) {
      return detail::put_host<T, N, S>(e.data(), shape, s);
    } else {
      xt::xtensor<T, N> host = std::forward<E>(e);  // one evaluation pass for lazy expressions and views
      return detail::put_host<T, N, S>(host.data(), shape, s);
    }
  }
}

/// jax.device_put(x): the whole array on device 0.
template <std::size_t Rank = deduce_rank, class E>
  requires xt::is_xexpression<std::decay_t<E>>::value
auto device_put(E&& e) {
  return device_put<Rank>(std::forward<E>(e), single_device_sharding(0));
}

/// jax.device_put(x, jax.devices()[d]): the whole array on device d.
template <std::size_t Rank = deduce_rank, class E>
  requires xt::is_xexpression<std::decay_t<E>>::value
auto device_put(E&& e, int device) {
  return device_put<Rank>(std::forward<E>(e), single_device_sharding(device));
}

/// device_put from a row-major buffer whose length is checked against the shape.
template <class T, std::size_t N, sharding S>
  requires element_type<std::remove_const_t<T>>
array<std::remove_const_t<T>, N, S> device_put(std::span<T> data, shape_t<N> const& shape, S const& s) {
  std::size_t const n = detail::checked_element_count<std::remove_const_t<T>>(shape, "device_put");
  if (data.size() != n)
    throw std::invalid_argument("tessera::device_put: the host buffer has " + std::to_string(data.size()) +
                                " elements but shape " + detail::shape_string(shape) + " needs " + std::to_string(n));
  return detail::put_host<std::remove_const_t<T>, N, S>(data.data(), shape, s);
}

/// device_put from a row-major buffer of prod(shape) elements (a pointer cannot be length-checked).
template <element_type T, std::size_t N, sharding S>
array<T, N, S> device_put(T const* data, shape_t<N> const& shape, S const& s) {
  if (detail::checked_element_count<T>(shape, "device_put") != 0 && data == nullptr)
    throw std::invalid_argument("tessera::device_put: null data pointer for shape " + detail::shape_string(shape));
  return detail::put_host<T, N, S>(data, shape, s);
}

/// device_put(data, {4, 8}, s): the shape as a braced list; negative sizes throw.
template <class T, std::integral I, std::size_t N, sharding S>
  requires element_type<std::remove_const_t<T>>
auto device_put(std::span<T> data, I const (&shape)[N], S const& s) {
  return device_put(data, detail::checked_shape<I, N>(shape, "device_put"), s);
}
/// device_put(ptr, {4, 8}, s): the shape as a braced list; negative sizes throw.
template <element_type T, std::integral I, std::size_t N, sharding S>
auto device_put(T const* data, I const (&shape)[N], S const& s) {
  return device_put(data, detail::checked_shape<I, N>(shape, "device_put"), s);
}

namespace detail {

/// What every process taking part in an exchange must agree on: the kind of operation, the
/// element type, the shape and both layouts (device ids and blocks).
template <class T, std::size_t N>
std::uint64_t exchange_signature(std::uint64_t kind, shape_t<N> const& shape, block_layout<N> const& from,
                                 block_layout<N> const& to) {
  std::uint64_t h = fnv1a_value(fnv1a_value(fnv1a_value(14695981039346656037ull, kind), sizeof(T)), N);
  for (auto d : shape) h = fnv1a_value(h, d);
  for (auto const* l : {&from, &to})
    for (std::size_t p = 0; p < l->ids.size(); ++p) {
      h = fnv1a_value(h, l->ids[p]);
      for (auto const& sl : l->blocks[p]) h = fnv1a_value(fnv1a_value(h, sl.start), sl.stop);
    }
  return h;
}

/// The pieces of a reshard that cross processes: for target position q and distinct source
/// block p (replica 0), the region the process holding p sends when the target's process holds
/// no copy of that block. Every process computes the same list in the same order, so all of them
/// know whether an exchange happens and which messages it is (matched in that order). A region
/// contiguous in its source block is sent from it, one contiguous in its target block received
/// into it; the others go through the pool's exchange rows (packed, or unpacked after).
template <class T, std::size_t N>
struct reshard_pieces {
  struct piece {
    std::size_t q, p;  // target position, source position
    int sender, receiver;
    std::array<slice, N> region;
  };
  std::vector<piece> pieces;
  std::vector<char> remote;  // [q * sources + p]: filled by the exchange, not by a local copy
  std::size_t sources = 0;

  reshard_pieces(device_pool const& pool, block_layout<N> const& src, block_layout<N> const& dst) {
    std::size_t const ns = src.ids.size(), nt = dst.ids.size();
    sources = ns;
    remote.assign(nt * ns, 0);
    int const me = pool.process_of(pool.first_id());
    for (std::size_t q = 0; q < nt; ++q) {
      int const to = pool.process_of(dst.ids[q]);
      auto const& block = dst.blocks[q];
      for (std::size_t p = 0; p < ns; ++p) {
        if (src.replica[p] != 0) continue;
        auto const& sb = src.blocks[p];
        std::array<slice, N> region{};
        if (!intersect(sb, block, region)) continue;
        bool held = false;  // does the target's process hold a copy of the block?
        for (std::size_t k = 0; k < ns && !held; ++k) held = pool.process_of(src.ids[k]) == to && src.blocks[k] == sb;
        if (held) continue;
        pieces.push_back({q, p, pool.process_of(src.ids[p]), to, region});
        if (to == me) remote[q * ns + p] = 1;
      }
    }
  }

  /// Moves the pieces (every process together): from the source blocks (`src_data[p]`, this
  /// process's) into the new ones (`dst_data[q]`), which a build_array made with every other
  /// region already copied.
  void exchange(device_pool& pool, shape_t<N> const& shape, block_layout<N> const& src,
                std::vector<T const*> const& src_data, block_layout<N> const& dst, std::vector<T*> const& dst_data) const {
    if (!pool.exchange_in_place)
      throw std::logic_error("tessera::device_put: a reshard between processes needs tessera::distributed::runtime");
    int const me = pool.process_of(pool.first_id());
    struct kept_rows {
      device_pool& pool;
      std::unique_ptr<exchange_rows> rows;
      ~kept_rows() { pool.give_back_exchange_rows(std::move(rows)); }
    } kept{pool, pool.take_exchange_rows()};
    byte_row& packed = kept.rows->packed;
    byte_row& staged = kept.rows->staged;
    // Offsets into the staging rows first (their data must not move once messages point in).
    std::vector<std::size_t> pack_at(pieces.size(), 0), stage_at(pieces.size(), static_cast<std::size_t>(-1));
    std::size_t pack_bytes = 0, stage_bytes = 0;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto const& pc = pieces[i];
      std::size_t const bytes = element_count(block_shape(pc.region)) * sizeof(T);
      if (pc.sender == me && !contiguous_offset(pc.region, src.blocks[pc.p])) {
        pack_at[i] = pack_bytes;
        pack_bytes += bytes;
      } else if (pc.receiver == me && !contiguous_offset(pc.region, dst.blocks[pc.q])) {
        stage_at[i] = stage_bytes;
        stage_bytes += bytes;
      }
    }
    packed.resize(pack_bytes);
    staged.resize(stage_bytes);
    std::vector<device_pool::exchange_message> messages;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto const& pc = pieces[i];
      std::size_t const bytes = element_count(block_shape(pc.region)) * sizeof(T);
      if (pc.sender == me)
        messages.push_back(
            {pc.receiver, false, region_to_send(src_data[pc.p], src.blocks[pc.p], pc.region, packed.data() + pack_at[i]), bytes});
      if (pc.receiver == me) {
        auto at = contiguous_offset(pc.region, dst.blocks[pc.q]);
        std::byte* data = at ? reinterpret_cast<std::byte*>(dst_data[pc.q] + *at) : staged.data() + stage_at[i];
        messages.push_back({pc.sender, true, data, bytes});
      }
    }
    // The signature and its description only where they are compared (checked mode).
    bool const checked = pool.checked_collectives.load();
    pool.exchange_in_place(messages, checked ? exchange_signature<T>(1, shape, src, dst) : 0,
                           checked ? "a reshard of " + std::string(dtype_name<T>()) + shape_string(shape)
                                   : std::string("a reshard between processes"));
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      auto const& pc = pieces[i];
      if (pc.receiver != me || stage_at[i] == static_cast<std::size_t>(-1)) continue;
      copy_region(reinterpret_cast<T const*>(staged.data() + stage_at[i]), pc.region, dst_data[pc.q], dst.blocks[pc.q],
                  pc.region);
    }
  }
};

/// The copies of a reshard, as plain values: the source's layout and blocks, the target's layout, and
/// the pieces other processes send. Its code depends on the element type and rank only.
template <class T, std::size_t N>
struct reshard_copies {
  device_pool& pool;
  shape_t<N> shape;
  block_layout<N> src, dst;
  std::vector<T const*> src_data;  // this process's source blocks (null for the others)
  std::vector<int> src_pos_of;     // device id -> source position (-1: none)
  std::optional<reshard_pieces<T, N>> moved;

  reshard_copies(device_pool& pool_, shape_t<N> const& shape_, block_layout<N> src_, std::vector<T const*> src_data_,
               block_layout<N> dst_)
      : pool(pool_), shape(shape_), src(std::move(src_)), dst(std::move(dst_)), src_data(std::move(src_data_)) {
    for (std::size_t p = 0; p < src.ids.size(); ++p) {
      if (static_cast<std::size_t>(src.ids[p]) >= src_pos_of.size())
        src_pos_of.resize(static_cast<std::size_t>(src.ids[p]) + 1, -1);
      src_pos_of[static_cast<std::size_t>(src.ids[p])] = static_cast<int>(p);
    }
    if (pool.spans_processes(std::span<int const>(src.ids)) || pool.spans_processes(std::span<int const>(dst.ids)))
      moved.emplace(pool, src, dst);
  }

  /// Target position pos's block (`block`, at `out`) from the source blocks in this process.
  void fill(std::size_t pos, std::array<slice, N> const& block, T* out) const { fill_from(src_data, pos, block, out); }

  /// fill, reading the source blocks at `data` (by position; a queued reshard finds them on the device).
  void fill_from(std::vector<T const*> const& data, std::size_t pos, std::array<slice, N> const& block, T* out) const {
    std::size_t const ns = src.ids.size();
    int const d = dst.ids[pos];
    // The source position on this device, if any: its copy of a block is the cheapest to read.
    int const local = static_cast<std::size_t>(d) < src_pos_of.size() ? src_pos_of[static_cast<std::size_t>(d)] : -1;
    auto const local_block = local >= 0 ? src.blocks[static_cast<std::size_t>(local)] : std::array<slice, N>{};
    for (std::size_t p = 0; p < ns; ++p) {
      if (src.replica[p] != 0) continue;  // one copy of each distinct block
      if (moved && moved->remote[pos * ns + p]) continue;  // another process sends it (exchange)
      auto const& sb = src.blocks[p];
      std::array<slice, N> region{};
      if (!intersect(sb, block, region)) continue;
      std::size_t from = (local >= 0 && local_block == sb) ? static_cast<std::size_t>(local) : p;
      if (!pool.is_local(src.ids[from]))  // another process's copy: read one of ours
        for (std::size_t q = 0; q < ns; ++q)
          if (pool.is_local(src.ids[q]) && src.blocks[q] == sb) {
            from = q;
            break;
          }
      copy_region(data[from], sb, out, block, region);
    }
  }

  /// The pieces between processes, once every device has filled its block (`dst_data[q]`).
  void exchange(std::vector<T*> const& dst_data) const {
    if (moved && !moved->pieces.empty()) moved->exchange(pool, shape, src, src_data, dst, dst_data);
  }
};

}  // namespace detail

/// jax.device_put(array, sharding): the same values laid out by another sharding.
/// Each destination device copies the parts of its block from the source blocks in place
/// (shared memory), preferring a copy it already holds; across processes, the parts no copy on
/// the destination's process holds are sent by the process holding the block, from its block
/// into the destination's where the part is contiguous in both (one exchange, point to point,
/// every process taking part).
template <class T, std::size_t N, class S1, sharding S2>
array<T, N, S2> device_put(array<T, N, S1> const& x, S2 const& s) {
  auto const shape = x.shape();
  // The collectives it is, for a live collective_counter or trace only (planning them costs
  // more than a small reshard between processes moves).
  std::vector<collective_event> events;
  if (detail::counting() || detail::tracing()) events = detail::reshard_events<T, N>(shape, x.sharding(), dim_spec{}, s);
  detail::record_collectives(events);
  detail::trace_as const label = detail::trace_collectives(events, "reshard");
  detail::device_pool& pool = *x.pool();
  bool const across = pool.spans_processes(std::span<int const>(x.sharding().device_ids())) ||
                      pool.spans_processes(std::span<int const>(s.device_ids()));
  if (!across && pool.queues_here() && detail::pool_for(s, "device_put").get() == &pool) {
    // Queued (asynchronous dispatch): each device finds the source blocks when it runs, after
    // the work that writes them (queued before); the task holds the source, so its blocks live.
    auto plan = std::make_shared<detail::reshard_copies<T, N> const>(
        pool, shape, detail::layout_of(x.sharding(), shape), std::vector<T const*>{}, detail::layout_of(s, shape));
    return detail::build_array_queued<T, N, S2>(
        s, shape, "device_put", [plan, x](std::size_t pos, std::array<slice, N> const& block, T* o) {
          plan->fill_from(detail::local_block_data(x), pos, block, o);
        });
  }
  return detail::ending_job_on_failure(pool, across, "device_put", [&] {
    detail::reshard_copies<T, N> const plan(pool, shape, detail::layout_of(x.sharding(), shape),
                                            detail::local_block_data(x), detail::layout_of(s, shape));
    auto out = detail::build_array<T, N, S2>(s, shape, "device_put", [&plan](std::size_t pos, std::array<slice, N> const& block,
                                                                          T* o) { plan.fill(pos, block, o); });
    if (plan.moved && !plan.moved->pieces.empty()) {
      std::vector<T*> dst_data(s.device_ids().size(), nullptr);
      // out is new and this process's alone: its blocks are written here, once.
      for (std::size_t q = 0; q < dst_data.size(); ++q)
        if (out.pool()->is_local(s.device_ids()[q])) dst_data[q] = const_cast<T*>(out.block_data(q));
      plan.exchange(dst_data);
    }
    return out;
  });
}

}  // namespace tessera
