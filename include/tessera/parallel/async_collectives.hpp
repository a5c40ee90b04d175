#pragma once
// Asynchronous collectives for shard_map bodies (XLA's all-gather-start / all-gather-done pairs;
// seed 003's `future = all_gather_async(x, 'x') ... future.wait()`): each *_async call starts
// the collective and returns a tessera::collective_future at once; the device goes on computing,
// and future.wait() gives the value the blocking call would have given, with the same type and
// the same varying axes.
//
// Within a process, a start leaves the device's input (kept alive by the exchange, so the caller
// may drop or reuse its own) in the team's rendezvous and returns; the peers read it when they
// wait, and a wait blocks only until every member of the group has started the collective
// (runtime/team.hpp). Several collectives may be in flight on a device, waited on in any order;
// a future dropped without wait() costs its peers nothing (they already have what they need);
// a device that throws with collectives in flight releases its peers as the blocking ones do.
//
// Between processes (tessera/distributed.hpp), where a collective maps onto one MPI call per
// process and each process has one device of the group, the start posts the nonblocking call
// (MPI_Iallgather, MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Ialltoall, MPI_Isend/Irecv for
// ppermute) and wait() completes it (runtime/mpi_async.hpp, which also says who makes the
// progress). With several devices per process, or other layouts, the last local device to start
// posts one MPI_Iallgatherv of the process's inputs (parallel/async_gathered.hpp). Only a
// collective larger than one MPI call takes runs when started, the future holding its result
// (docs/async.md).

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/debug/trace_annotation.hpp"
#include "tessera/parallel/async_across_processes.hpp"
#include "tessera/parallel/async_gathered.hpp"
#include "tessera/parallel/collective_future.hpp"
#include "tessera/parallel/collectives.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/team.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera {
namespace detail {

/// A started collective on this process's team: what its wait needs.
struct team_start {
  spmd_frame* f = nullptr;
  team* t = nullptr;
  group g;
  op_signature sig;
  std::shared_ptr<async_rendezvous> rv;
  char const* trace_name = "";
  std::uint64_t trace_bytes = 0;
  std::int64_t started_ns = 0;  // the trace clock at the start, when tracing
  bool between_processes = false;  // the mesh spans processes: the exchange of parallel/async_gathered.hpp

  /// Waits until the group has started the collective, then `pull(in_of)` (in_of(j): member j's
  /// input), and records the collective's span, from its start to now, on the device's track.
  template <class T, class Pull>
  void finish(char const* what, Pull&& pull) {
    if (current_frame != f)
      throw std::logic_error(std::string("tessera::collective_future::wait (") + what +
                             "): wait on the device that started the collective, inside the same shard_map body");
    std::int64_t const waited_before = this_trace_track.wait_ns;
    std::int64_t const t0 = between_processes && started_ns != 0 ? trace_clock_ns() : 0;
    if (between_processes) {
      gathered_exchange const& x = complete_gathered(*f, *rv, sig);
      pull([this, &x](std::size_t j) { return gathered_input<T>(*f->xp, *rv, x, g.members[j]); });
    } else {
      t->await_async(f->team_pos, g, *rv, sig);
      pull([this](std::size_t j) { return static_cast<T const*>(rv->entries[g.members[j]].in); });
    }
    std::int64_t const waited =
        between_processes && started_ns != 0 ? trace_clock_ns() - t0 : this_trace_track.wait_ns - waited_before;
    if (started_ns != 0 && tracing()) {
      trace_event e;
      e.name = trace_name;
      e.category = "collective";
      e.process = this_trace_track.process;
      e.device = this_trace_track.device;
      e.duration_ns = trace_clock_ns() - started_ns;
      e.wait_ns = waited;
      e.bytes = trace_bytes;
      e.detail = between_processes ? "async, between processes" : "async";
      if (sig.describe) e.detail += ": " + sig.describe(sig);
      record_trace_event(std::move(e), started_ns);
    }
  }
};

/// Starts collective `c` with input `h` on the team: from here the peers may read it. Between
/// processes, `plan` (if given) reduces instead of gathering (parallel/async_gathered.hpp).
template <axis_name... A, class T>
team_start start_on_team(collective_call<A...>& c, held_input<T>&& h, char const* trace_name, std::uint64_t bytes,
                         reduce_plan const* plan = nullptr) {
  team_start s;
  s.f = &c.f;
  s.t = c.f.t;
  s.g = c.g;
  s.sig = c.sig;
  s.trace_name = trace_name;
  s.trace_bytes = bytes;
  if (tracing()) s.started_ns = trace_clock_ns();
  if (c.f.xp != nullptr) {
    s.between_processes = true;
    s.rv = start_gathered(c.f, c.sig, h.data, std::move(h.keep), c.sig.count * (c.sig.dtype & 0xFFu), plan);
  } else {
    s.rv = c.f.t->async().start(c.f.t->size(), c.f.team_pos, c.sig, h.data, std::move(h.keep));
  }
  return s;
}

/// Elements per step of the reductions (as runtime/collectives.hpp's reduce_tile_bytes).
template <class T>
inline constexpr std::size_t async_tile = std::max<std::size_t>(1, reduce_tile_bytes / sizeof(T));

/// psum/pmax/pmin/pmean_async's common part: the reduction of `in` (already in the element
/// type of the result) over A, divided by the group's size when `mean`.
template <class Vma, axis_name... A, class V, class T, std::size_t N>
auto all_reduce_async(V const& v, collective_input<T, N>&& in, op_kind kind, reduce_op op, bool mean,
                      char const* what) {
  collective_call<A...> c(what, kind);
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape);
  c.record("all-reduce", in.count() * sizeof(T));
  shape_t<N> const shape = in.shape;
  std::size_t const count = in.count();
  // Between processes whose groups are whole processes: MPI_Iallreduce of the local reduction.
  reduce_plan plan;
  plan.op = static_cast<std::uint8_t>(op == reduce_op::sum ? 0 : op == reduce_op::max ? 1 : 2);
  plan.dtype = c.sig.dtype;
  plan.count = count;
  plan.local = &reduce_local_inputs<T>;
  bool const mapped = c.f.xp != nullptr && op != reduce_op::prod && reduce_plan_fits<T>(c.f, c.sig, plan.op, count, c.k());
  auto s = start_on_team(c, hold_input(v, std::move(in)), "all-reduce", count * sizeof(T), mapped ? &plan : nullptr);
  return make_future([s = std::move(s), shape, count, op, mean, what]() mutable {
    auto out = make_result<T>(shape);
    s.template finish<T>(what, [&](auto const& in_of) {
      std::size_t const k = s.g.size();
      if (T const* all = s.between_processes ? gathered_reduction<T>(*s.rv) : nullptr)
        std::copy(all, all + count, out.data());
      else
        for (std::size_t a = 0; a < count; a += async_tile<T>)
          reduce_inputs<T>(in_of, k, op, out.data() + a, a, std::min(async_tile<T>, count - a));
      if (mean) {
        T const n = static_cast<T>(k);
        for (T* p = out.data(), *e = p + count; p != e; ++p) *p /= n;
      }
    });
    return as_result<Vma>(std::move(out));
  });
}

/// Whether this device's collectives go between processes.
inline bool across_processes(char const* what) { return frame_for(what).xp != nullptr; }

/// Whether an asynchronous collective of v between processes can take the nonblocking gathered
/// path (parallel/async_gathered.hpp), for elements of `elem` bytes; else it runs at its start.
template <class V>
bool gathered_async_ok(V const& v, char const* what, std::size_t elem = sizeof(typename value_traits<V>::type)) {
  constexpr std::size_t N = value_traits<V>::rank;
  std::size_t count = 1;
  if constexpr (N != 0)
    for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  return gathered_async_possible(frame_for(what), count * elem);
}

template <bool Tiled, axis_name... A, class V>
auto gather_async(V&& v, std::size_t axis) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(!Tiled || N >= 1,
                "tessera::all_gather_async(x, axis, tiled): a scalar has no dimension to concatenate along");
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  using Vma = result_vma<V, true, A...>;
  auto in = make_input(v);
  check_gather_axis<Tiled, N>(axis, "all_gather_async");
  collective_call<A...> c("all_gather_async", op_kind::all_gather);
  auto const lay = begin_all_gather<Tiled, T>(c, in, axis, "all_gather_async");
  auto const out_shape = lay.out_shape;
  std::size_t const outer = lay.outer, inner = lay.inner;
  std::uint64_t const bytes = in.count() * c.k() * sizeof(T);
  auto s = start_on_team(c, hold_input(v, std::move(in)), "all-gather", bytes);
  return make_future([s = std::move(s), out_shape, outer, inner]() mutable {
    auto out = make_result<T>(out_shape);
    s.template finish<T>("all_gather_async", [&](auto const& in_of) {
      gather_inputs<T>(in_of, s.g.size(), out.data(), outer, inner);
    });
    return as_result<Vma>(std::move(out));
  });
}

template <bool Tiled, axis_name... A, class V>
auto scatter_async(V&& v, std::size_t dim) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(N >= 1, "tessera::psum_scatter_async: a scalar has no dimension to scatter");
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  using Vma = result_vma<V, false, A...>;
  auto in = make_input(v);
  collective_call<A...> c("psum_scatter_async", op_kind::psum_scatter);
  std::size_t const k = c.k();
  check_scatter(in.shape, dim, k, Tiled);
  constexpr std::size_t R = Tiled ? N : N - 1;
  shape_t<R> out_shape{};
  for (std::size_t i = 0, j = 0; i < N; ++i) {
    if (i != dim) out_shape[j++] = in.shape[i];
    else if (Tiled) out_shape[j++] = in.shape[i] / k;
  }
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape, dim * 2 + (Tiled ? 1 : 0));
  c.record("reduce-scatter", in.count() * sizeof(T));
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < dim; ++i) outer *= in.shape[i];
  for (std::size_t i = dim + 1; i < N; ++i) inner *= in.shape[i];
  std::size_t const chunk = in.shape[dim] / k * inner;
  std::uint64_t const bytes = in.count() * sizeof(T);
  auto s = start_on_team(c, hold_input(v, std::move(in)), "reduce-scatter", bytes);
  return make_future([s = std::move(s), out_shape, outer, chunk]() mutable {
    auto out = make_result<T>(out_shape);
    s.template finish<T>("psum_scatter_async", [&](auto const& in_of) {
      scatter_inputs<T>(in_of, s.g.size(), s.g.rank, out.data(), outer, chunk);
    });
    return as_result<Vma>(std::move(out));
  });
}

template <bool Tiled, axis_name... A, class V>
auto exchange_async(V&& v, std::size_t split_axis, std::size_t concat_axis) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(N >= 1, "tessera::all_to_all_async: a scalar has no dimension to split");
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  using Vma = result_vma<V, false, A...>;
  auto in = make_input(v);
  collective_call<A...> c("all_to_all_async", op_kind::all_to_all);
  auto const lay = begin_all_to_all<Tiled, T>(c, in, split_axis, concat_axis, "all_to_all_async");
  std::uint64_t const bytes = in.count() * sizeof(T);
  auto s = start_on_team(c, hold_input(v, std::move(in)), "all-to-all", bytes);
  return make_future([s = std::move(s), lay]() mutable {
    auto out = make_result<T>(lay.out_shape);
    s.template finish<T>("all_to_all_async", [&](auto const& in_of) {
      exchange_inputs<T>(in_of, s.g.size(), s.g.rank, out.data(), std::span<std::size_t const>(lay.shape.data(), lay.rank),
                         lay.split, lay.concat);
    });
    return as_result<Vma>(std::move(out));
  });
}

}  // namespace detail

/// jax.lax.all_gather started asynchronously (XLA's all-gather-start; seed 003's
/// `jax.lax.all_gather_async(x, 'x')`): future.wait() gives all_gather<A...>(v, axis).
template <axis_name... A, class V>
auto all_gather_async(V&& v, collective_dim axis = 0) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const a = axis.resolve(N + 1, "tessera::all_gather_async", "axis");
  if (detail::across_processes("all_gather_async")) {
    if (auto f = detail::mpi_gather_async<false, A...>(v, a)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "all_gather_async"))
      return detail::ready_future(all_gather<A...>(std::forward<V>(v), axis));
  }
  return detail::gather_async<false, A...>(std::forward<V>(v), a);
}

/// all_gather_async(v, axis, tessera::tiled): future.wait() gives all_gather<A...>(v, axis, tiled).
template <axis_name... A, class V>
auto all_gather_async(V&& v, collective_dim axis, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const a = axis.resolve(N, "tessera::all_gather_async(tiled)", "axis");
  if (detail::across_processes("all_gather_async")) {
    if (auto f = detail::mpi_gather_async<true, A...>(v, a)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "all_gather_async"))
      return detail::ready_future(all_gather<A...>(std::forward<V>(v), axis, tiled));
  }
  return detail::gather_async<true, A...>(std::forward<V>(v), a);
}

/// jax.lax.psum started asynchronously (XLA's all-reduce-start): future.wait() gives psum<A...>(v).
template <axis_name... A, class V>
auto psum_async(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  static_assert(!std::is_same_v<typename detail::value_traits<V>::type, bool>,
                "tessera::psum_async of bool values: use pmax_async (any) or pmin_async (all)");
  using Vma = detail::result_vma<V, true, A...>;
  if (detail::across_processes("psum_async")) {
    if (auto f = detail::mpi_reduce_async<Vma, A...>(v, detail::op_kind::psum, detail::reduce_op::sum, false))
      return std::move(*f);
    if (!detail::gathered_async_ok(v, "psum_async")) return detail::ready_future(psum<A...>(std::forward<V>(v)));
  }
  return detail::all_reduce_async<Vma, A...>(v, detail::make_input(v), detail::op_kind::psum, detail::reduce_op::sum,
                                             false, "psum_async");
}

/// jax.lax.pmax started asynchronously: future.wait() gives pmax<A...>(v).
template <axis_name... A, class V>
auto pmax_async(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  using Vma = detail::result_vma<V, true, A...>;
  if (detail::across_processes("pmax_async")) {
    if (auto f = detail::mpi_reduce_async<Vma, A...>(v, detail::op_kind::pmax, detail::reduce_op::max, false))
      return std::move(*f);
    if (!detail::gathered_async_ok(v, "pmax_async")) return detail::ready_future(pmax<A...>(std::forward<V>(v)));
  }
  return detail::all_reduce_async<Vma, A...>(v, detail::make_input(v), detail::op_kind::pmax, detail::reduce_op::max,
                                             false, "pmax_async");
}

/// jax.lax.pmin started asynchronously: future.wait() gives pmin<A...>(v).
template <axis_name... A, class V>
auto pmin_async(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  using Vma = detail::result_vma<V, true, A...>;
  if (detail::across_processes("pmin_async")) {
    if (auto f = detail::mpi_reduce_async<Vma, A...>(v, detail::op_kind::pmin, detail::reduce_op::min, false))
      return std::move(*f);
    if (!detail::gathered_async_ok(v, "pmin_async")) return detail::ready_future(pmin<A...>(std::forward<V>(v)));
  }
  return detail::all_reduce_async<Vma, A...>(v, detail::make_input(v), detail::op_kind::pmin, detail::reduce_op::min,
                                             false, "pmin_async");
}

/// jax.lax.pmean started asynchronously: future.wait() gives pmean<A...>(v) (integers give
/// floating results, as there).
template <axis_name... A, class V>
auto pmean_async(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  using T = typename detail::value_traits<V>::type;
  static_assert(!std::is_same_v<T, bool>, "tessera::pmean_async of bool values: convert to a number first");
  using Vma = detail::result_vma<V, true, A...>;
  if constexpr (std::is_floating_point_v<T>) {
    if (detail::across_processes("pmean_async")) {
      if (auto f = detail::mpi_reduce_async<Vma, A...>(v, detail::op_kind::pmean, detail::reduce_op::sum, true))
        return std::move(*f);
      if (!detail::gathered_async_ok(v, "pmean_async")) return detail::ready_future(pmean<A...>(std::forward<V>(v)));
    }
    return detail::all_reduce_async<Vma, A...>(v, detail::make_input(v), detail::op_kind::pmean,
                                               detail::reduce_op::sum, true, "pmean_async");
  } else {
    // Converted before the sum, as pmean does, so the sum cannot wrap around in the integer type.
    using R = std::conditional_t<(sizeof(T) > 4), double, float>;
    if (detail::across_processes("pmean_async") && !detail::gathered_async_ok(v, "pmean_async", sizeof(R)))
      return detail::ready_future(pmean<A...>(std::forward<V>(v)));
    auto in = detail::make_input(v);
    constexpr std::size_t N = std::tuple_size_v<decltype(in.shape)>;
    detail::collective_input<R, N> wide;
    wide.shape = in.shape;
    wide.storage = detail::make_result<R>(in.shape);
    std::copy(in.data, in.data + in.count(), wide.storage.data());
    wide.data = wide.storage.data();
    return detail::all_reduce_async<Vma, A...>(wide.storage, std::move(wide), detail::op_kind::pmean,
                                               detail::reduce_op::sum, true, "pmean_async");
  }
}

/// jax.lax.psum_scatter started asynchronously (XLA's reduce-scatter, async): future.wait()
/// gives psum_scatter<A...>(v, dim).
template <axis_name... A, class V>
auto psum_scatter_async(V&& v, collective_dim dim = 0) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const d = dim.resolve(N, "tessera::psum_scatter_async", "scatter_dimension");
  if (detail::across_processes("psum_scatter_async")) {
    if (auto f = detail::mpi_scatter_async<false, A...>(v, d)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "psum_scatter_async"))
      return detail::ready_future(psum_scatter<A...>(std::forward<V>(v), dim));
  }
  return detail::scatter_async<false, A...>(std::forward<V>(v), d);
}

/// psum_scatter_async(v, dim, tessera::tiled): future.wait() gives psum_scatter<A...>(v, dim, tiled).
template <axis_name... A, class V>
auto psum_scatter_async(V&& v, collective_dim dim, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const d = dim.resolve(N, "tessera::psum_scatter_async", "scatter_dimension");
  if (detail::across_processes("psum_scatter_async")) {
    if (auto f = detail::mpi_scatter_async<true, A...>(v, d)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "psum_scatter_async"))
      return detail::ready_future(psum_scatter<A...>(std::forward<V>(v), dim, tiled));
  }
  return detail::scatter_async<true, A...>(std::forward<V>(v), d);
}

/// jax.lax.all_to_all started asynchronously: future.wait() gives all_to_all<A...>(v, split_axis,
/// concat_axis, tiled).
template <axis_name... A, class V>
auto all_to_all_async(V&& v, collective_dim split_axis, collective_dim concat_axis, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const s = split_axis.resolve(N, "tessera::all_to_all_async", "split_axis");
  std::size_t const c = concat_axis.resolve(N, "tessera::all_to_all_async", "concat_axis");
  if (detail::across_processes("all_to_all_async")) {
    if (auto f = detail::mpi_exchange_async<true, A...>(v, s, c)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "all_to_all_async"))
      return detail::ready_future(all_to_all<A...>(std::forward<V>(v), split_axis, concat_axis, tiled));
  }
  return detail::exchange_async<true, A...>(std::forward<V>(v), s, c);
}

/// jax.lax.all_to_all (untiled) started asynchronously: future.wait() gives
/// all_to_all<A...>(v, split_axis, concat_axis).
template <axis_name... A, class V>
auto all_to_all_async(V&& v, collective_dim split_axis, collective_dim concat_axis) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  std::size_t const s = split_axis.resolve(N, "tessera::all_to_all_async", "split_axis");
  std::size_t const c = concat_axis.resolve(N, "tessera::all_to_all_async", "concat_axis");
  if (detail::across_processes("all_to_all_async")) {
    if (auto f = detail::mpi_exchange_async<false, A...>(v, s, c)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "all_to_all_async"))
      return detail::ready_future(all_to_all<A...>(std::forward<V>(v), split_axis, concat_axis));
  }
  return detail::exchange_async<false, A...>(std::forward<V>(v), s, c);
}

/// jax.lax.ppermute started asynchronously (XLA's collective-permute-start): future.wait()
/// gives ppermute<A...>(v, perm). The collective matmul of JAX's shard_map tutorial overlaps
/// it with the product of the block in hand (examples/collective_matmul.cpp).
template <axis_name... A, class V>
auto ppermute_async(V&& v, std::vector<std::pair<int, int>> const& perm) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  using T = std::remove_cv_t<typename detail::value_traits<V>::type>;
  using Vma = detail::result_vma<V, false, A...>;
  if (detail::across_processes("ppermute_async")) {
    if (auto f = detail::mpi_permute_async<Vma, A...>(v, perm)) return std::move(*f);
    if (!detail::gathered_async_ok(v, "ppermute_async"))
      return detail::ready_future(ppermute<A...>(std::forward<V>(v), perm));
  }
  auto in = detail::make_input(v);
  detail::collective_call<A...> c("ppermute_async", detail::op_kind::ppermute);
  auto const [source, h] =
      detail::permutation_source(perm, c.k(), c.g.rank, detail::hash_shape(in.shape), "tessera::ppermute_async");
  c.sig.count = in.count();
  c.sig.dtype = detail::dtype_code<T>();
  c.sig.param = h;
  c.record("collective-permute", in.count() * sizeof(T));
  auto const shape = in.shape;
  std::size_t const count = in.count();
  auto s = detail::start_on_team(c, detail::hold_input(v, std::move(in)), "ppermute", count * sizeof(T));
  return detail::make_future([s = std::move(s), shape, count, source = source]() mutable {
    auto out = detail::make_result<T>(shape);
    s.template finish<T>("ppermute_async", [&](auto const& in_of) {
      if (source < 0) std::fill(out.data(), out.data() + count, T{});
      else std::copy(in_of(static_cast<std::size_t>(source)), in_of(static_cast<std::size_t>(source)) + count, out.data());
    });
    return detail::as_result<Vma>(std::move(out));
  });
}

}  // namespace tessera
