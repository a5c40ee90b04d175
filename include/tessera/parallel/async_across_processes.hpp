#pragma once
// Asynchronous collectives between processes (parallel/async_collectives.hpp). Where each
// process holds one device of the collective's group and the groups are whole processes (the
// layout MPI's own calls take, parallel/across_processes.hpp), the start posts one nonblocking
// MPI call through the distributed runtime's engine (runtime/mpi_async.hpp) and wait()
// completes it:
//   all_gather       MPI_Iallgather (straight into the result when its blocks are contiguous)
//   psum, pmean      MPI_Iallreduce between two processes; with more, MPI_Iallgather and the sum
//                    in rank order, so the bits are those of the blocking call's gathered path
//   pmax, pmin       MPI_Iallreduce
//   psum_scatter     MPI_Ireduce_scatter_block between two processes, else as psum
//   ppermute         MPI_Isend to the destination and MPI_Irecv from the source
//   all_to_all       MPI_Ialltoall (from the input and into the result where the pieces lie
//                    contiguous there, else packed by destination and unpacked at wait())
// Each function gives an empty optional elsewhere (several devices per process, other
// layouts, more bytes than one MPI call takes); the caller then takes the gathered path
// (parallel/async_gathered.hpp), or past one MPI call's bytes runs the blocking collective at
// the start. In checked mode the start first compares signatures between the
// processes (a blocking exchange, as before every collective), so a start waits for the other
// processes to start; the transfer itself still overlaps.

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/parallel/across_processes.hpp"
#include "tessera/parallel/collective_future.hpp"
#include "tessera/parallel/collectives.hpp"
#include "tessera/runtime/async_process.hpp"
#include "tessera/runtime/trace.hpp"

namespace tessera::detail {

/// The process group of a collective over A, if it can be one nonblocking MPI call of `bytes`
/// (the most any process sends or receives) from this device: nullptr otherwise.
template <axis_name... A>
process_group const* mpi_async_group(spmd_frame& f, std::size_t bytes, char const* what) {
  process_run const& r = *f.xp;
  if (r.mine.size() != 1 || async_engine.load() == nullptr) return nullptr;
  if (bytes > async_engine.load()->max_bytes()) return nullptr;
  std::uint64_t mask = 0;
  for (std::size_t a : resolve_axes(f, std::array<axis_name, sizeof...(A)>{A...}, what)) mask |= std::uint64_t{1} << a;
  process_group const& pg = mask < r.groups().size() ? r.groups()[mask] : r.groups()[0];
  return pg.per_process == 1 ? &pg : nullptr;
}

/// What a wait needs of a collective posted between processes: the request, the memory it
/// reads and writes (kept until the request is done), and the trace's record of it.
template <class T, std::size_t R>
struct mpi_inflight {
  spmd_frame* f = nullptr;
  held_input<T> in;
  result_buffer<T, R> out;
  std::shared_ptr<T[]> scratch;  // what MPI writes when it is not the result itself
  std::unique_ptr<process_request> req;
  char const* trace_name = "";
  std::uint64_t trace_bytes = 0;
  std::int64_t started_ns = 0;
  std::string trace_detail;

  mpi_inflight() = default;
  mpi_inflight(mpi_inflight&&) noexcept = default;
  mpi_inflight& operator=(mpi_inflight&&) = delete;
  ~mpi_inflight() { req.reset(); }  // completed first: MPI may still write `out` or `scratch`

  /// Completes the request, then `after()` (the local part: a sum, a rearrangement).
  template <class After>
  void finish(char const* what, After&& after) {
    if (current_frame != f)
      throw std::logic_error(std::string("tessera::collective_future::wait (") + what +
                             "): wait on the device that started the collective, inside the same shard_map body");
    std::int64_t const t0 = started_ns != 0 ? trace_clock_ns() : 0;
    req->wait();
    std::int64_t const waited = started_ns != 0 ? trace_clock_ns() - t0 : 0;
    after();
    if (started_ns != 0 && tracing()) {
      trace_event e;
      e.name = trace_name;
      e.category = "collective";
      e.process = this_trace_track.process;
      e.device = this_trace_track.device;
      e.duration_ns = trace_clock_ns() - started_ns;
      e.wait_ns = waited;
      e.bytes = trace_bytes;
      e.detail = "async, between processes: " + trace_detail;
      record_trace_event(std::move(e), started_ns);
    }
  }
};

/// Posts `op` for the collective of `c` (its signature complete) with input `h`, after checked
/// mode's comparison between the processes.
template <class T, std::size_t R, axis_name... A>
void mpi_post(collective_call<A...>& c, process_group const& pg, mpi_inflight<T, R>& s, process_async_op op,
              char const* trace_name, std::uint64_t bytes) {
  process_run& r = *c.f.xp;
  r.mine[0] = process_contribution{published_hash(r, c.sig), s.in.data, bytes, nullptr};
  r.mismatch = false;
  if (r.checked) compare_signatures(r, c.sig);
  s.f = &c.f;
  s.trace_name = trace_name;
  s.trace_bytes = bytes;
  if (tracing()) {
    s.started_ns = trace_clock_ns();
    s.trace_detail = describe_collective(c.sig);
  }
  op.group = pg.handle;
  s.req = async_engine.load()->start(op);
  if (!s.req) throw std::logic_error("tessera: an asynchronous collective between processes could not be posted");
}

template <bool Tiled, axis_name... A, class V>
auto mpi_gather_async(V const& v, std::size_t axis) {
  using Blocking = std::conditional_t<Tiled, decltype(tessera::all_gather<A...>(v, axis, tiled)), decltype(tessera::all_gather<A...>(v, axis))>;
  using result = std::optional<collective_future<Blocking>>;
  constexpr std::size_t N = value_traits<V>::rank;
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  using Vma = result_vma<V, true, A...>;
  spmd_frame& f = frame_for("all_gather_async");
  std::size_t count = 1;
  if constexpr (N != 0)
    for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  process_group const* pg = mpi_async_group<A...>(f, count * sizeof(T) * group_size<A...>("all_gather_async"), "all_gather_async");
  if (pg == nullptr) return result{};
  check_gather_axis<Tiled, N>(axis, "all_gather_async");
  auto in = make_input(v);
  collective_call<A...> c("all_gather_async", op_kind::all_gather);
  constexpr std::size_t R = Tiled ? N : N + 1;
  auto const lay = begin_all_gather<Tiled, T>(c, in, axis, "all_gather_async");
  std::size_t const outer = lay.outer, inner = lay.inner;
  std::size_t const k = c.k();
  mpi_inflight<T, R> s;
  s.in = hold_input(v, std::move(in));
  s.out = make_result<T>(lay.out_shape);
  if (outer != 1) s.scratch = std::shared_ptr<T[]>(new T[k * count]);
  process_async_op op;
  op.what = process_async_op::kind::all_gather;
  op.send = s.in.data;
  op.recv = outer == 1 ? static_cast<void*>(s.out.data()) : static_cast<void*>(s.scratch.get());
  op.count = count * sizeof(T);
  mpi_post(c, *pg, s, op, "all-gather", count * k * sizeof(T));
  return result(make_future([s = std::move(s), outer, inner, count, k]() mutable {
    s.finish("all_gather_async", [&] {
      if (outer != 1)
        gather_inputs<T>([&](std::size_t j) { return static_cast<T const*>(s.scratch.get() + j * count); }, k,
                         s.out.data(), outer, inner);
    });
    return as_result<Vma>(std::move(s.out));
  }));
}

template <class Vma, axis_name... A, class V>
auto mpi_reduce_async(V const& v, op_kind kind, reduce_op rop, bool mean) {
  using result = std::optional<collective_future<decltype(tessera::pmax<A...>(v))>>;
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  constexpr std::size_t N = value_traits<V>::rank;
  spmd_frame& f = frame_for("psum_async");
  std::size_t const k = group_size<A...>("psum_async");
  std::size_t count = 1;
  if constexpr (N != 0)
    for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  // Sums of more than two in rank order (MPI's order would change the bits); element types MPI
  // cannot add go as bytes.
  bool const gathered = !mpi_reducible<T> || (rop == reduce_op::sum && k > 2);
  process_group const* pg = mpi_async_group<A...>(f, count * sizeof(T) * (gathered ? k : 1), "psum_async");
  if (pg == nullptr) return result{};
  auto in = make_input(v);
  collective_call<A...> c("psum_async", kind);
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape);
  c.record("all-reduce", in.count() * sizeof(T));
  mpi_inflight<T, N> s;
  auto const shape = in.shape;
  s.in = hold_input(v, std::move(in));
  s.out = make_result<T>(shape);
  process_async_op op;
  op.send = s.in.data;
  if (gathered) {
    s.scratch = std::shared_ptr<T[]>(new T[k * count]);
    op.what = process_async_op::kind::all_gather;
    op.recv = s.scratch.get();
    op.count = count * sizeof(T);
  } else {
    op.what = process_async_op::kind::all_reduce;
    op.op = static_cast<std::uint8_t>(rop == reduce_op::sum ? 0 : rop == reduce_op::max ? 1 : 2);
    op.dtype = dtype_code<T>();
    op.recv = s.out.data();
    op.count = count;
  }
  mpi_post(c, *pg, s, op, "all-reduce", count * sizeof(T));
  return result(make_future([s = std::move(s), gathered, count, k, rop, mean]() mutable {
    s.finish("psum_async", [&] {
      if (gathered)
        reduce_inputs<T>([&](std::size_t j) { return static_cast<T const*>(s.scratch.get() + j * count); }, k, rop,
                         s.out.data(), 0, count);
      if constexpr (std::is_floating_point_v<T>)
        if (mean)
          for (T* p = s.out.data(), *e = p + count; p != e; ++p) *p /= static_cast<T>(k);
    });
    return as_result<Vma>(std::move(s.out));
  }));
}

template <bool Tiled, axis_name... A, class V>
auto mpi_scatter_async(V const& v, std::size_t dim) {
  using Blocking =
      std::conditional_t<Tiled, decltype(tessera::psum_scatter<A...>(v, dim, tiled)), decltype(tessera::psum_scatter<A...>(v, dim))>;
  using result = std::optional<collective_future<Blocking>>;
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  constexpr std::size_t N = value_traits<V>::rank;
  using Vma = result_vma<V, false, A...>;
  spmd_frame& f = frame_for("psum_scatter_async");
  std::size_t const k = group_size<A...>("psum_scatter_async");
  std::size_t count = 1;
  for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  bool const gathered = !mpi_reducible<T> || k > 2;
  process_group const* pg = mpi_async_group<A...>(f, count * sizeof(T) * (gathered ? k : 1), "psum_scatter_async");
  if (pg == nullptr || dim >= N) return result{};
  auto in = make_input(v);
  collective_call<A...> c("psum_scatter_async", op_kind::psum_scatter);
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
  std::size_t const rank = c.g.rank;
  mpi_inflight<T, R> s;
  s.in = hold_input(v, std::move(in));
  s.out = make_result<T>(out_shape);
  process_async_op op;
  if (gathered) {
    s.scratch = std::shared_ptr<T[]>(new T[k * count]);
    op.what = process_async_op::kind::all_gather;
    op.send = s.in.data;
    op.recv = s.scratch.get();
    op.count = count * sizeof(T);
  } else {
    op.what = process_async_op::kind::reduce_scatter;
    op.dtype = dtype_code<T>();
    op.send = s.in.data;
    if (outer != 1) {  // laid out by destination: [rank][outer][chunk]
      s.scratch = std::shared_ptr<T[]>(new T[count]);
      for (std::size_t d = 0; d < k; ++d)
        for (std::size_t o = 0; o < outer; ++o)
          std::copy(s.in.data + (o * k + d) * chunk, s.in.data + (o * k + d + 1) * chunk,
                    s.scratch.get() + (d * outer + o) * chunk);
      op.send = s.scratch.get();
    }
    op.recv = s.out.data();
    op.count = outer * chunk;
  }
  mpi_post(c, *pg, s, op, "reduce-scatter", count * sizeof(T));
  return result(make_future([s = std::move(s), gathered, count, k, rank, outer, chunk]() mutable {
    s.finish("psum_scatter_async", [&] {
      if (gathered)
        scatter_inputs<T>([&](std::size_t j) { return static_cast<T const*>(s.scratch.get() + j * count); }, k, rank,
                          s.out.data(), outer, chunk);
    });
    return as_result<Vma>(std::move(s.out));
  }));
}

template <bool Tiled, axis_name... A, class V>
auto mpi_exchange_async(V const& v, std::size_t split_axis, std::size_t concat_axis) {
  using Blocking = std::conditional_t<Tiled, decltype(tessera::all_to_all<A...>(v, 0, 0, tiled)),
                                      decltype(tessera::all_to_all<A...>(v, 0, 0))>;
  using result = std::optional<collective_future<Blocking>>;
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  constexpr std::size_t N = value_traits<V>::rank;
  using Vma = result_vma<V, false, A...>;
  spmd_frame& f = frame_for("all_to_all_async");
  std::size_t count = 1;
  for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  process_group const* pg = mpi_async_group<A...>(f, count * sizeof(T), "all_to_all_async");
  if (pg == nullptr) return result{};
  auto in = make_input(v);
  collective_call<A...> c("all_to_all_async", op_kind::all_to_all);
  auto const lay = begin_all_to_all<Tiled, T>(c, in, split_axis, concat_axis, "all_to_all_async");
  std::size_t const k = c.k();
  std::size_t const rank = lay.rank, split = lay.split, concat = lay.concat;
  // The piece each device sends each member, and where pieces lie: contiguous in the input when
  // nothing comes before the split dimension, in the result when nothing comes before concat.
  std::array<std::size_t, N + 1> piece = lay.shape;
  piece[split] /= k;
  std::array<std::size_t, N + 1> full_out = piece;
  full_out[concat] *= k;
  std::size_t pc = 1, before_split = 1, before_concat = 1;
  for (std::size_t a = 0; a < rank; ++a) {
    pc *= piece[a];
    if (a < split) before_split *= lay.shape[a];
    if (a < concat) before_concat *= piece[a];
  }
  mpi_inflight<T, N> s;  // tiled or not, the result has the input's rank
  s.in = hold_input(v, std::move(in));
  s.out = make_result<T>(lay.out_shape);
  bool const pack = before_split != 1, unpack = before_concat != 1;
  if (pack || unpack) s.scratch = std::shared_ptr<T[]>(new T[(pack ? count : 0) + (unpack ? count : 0)]);
  T* const send = pack ? s.scratch.get() : nullptr;
  T* const recv = unpack ? s.scratch.get() + (pack ? count : 0) : nullptr;
  std::array<std::size_t, 3 * (N + 1)> scratch{};
  std::array<std::size_t, N + 1> zero{}, start{};
  auto span = [rank](auto const& a) { return std::span<std::size_t const>(a.data(), rank); };
  if (pack) {
    for (std::size_t d = 0; d < k; ++d) {
      start[split] = d * piece[split];
      copy_box(s.in.data, span(lay.shape), span(start), send + d * pc, span(piece), span(zero), span(piece),
               std::span<std::size_t>(scratch.data(), 3 * rank));
    }
  }
  process_async_op op;
  op.what = process_async_op::kind::all_to_all;
  op.send = pack ? static_cast<void const*>(send) : static_cast<void const*>(s.in.data);
  op.recv = unpack ? static_cast<void*>(recv) : static_cast<void*>(s.out.data());
  op.count = pc * sizeof(T);
  mpi_post(c, *pg, s, op, "all-to-all", count * sizeof(T));
  return result(make_future([s = std::move(s), lay, piece, full_out, pc, k, recv, unpack]() mutable {
    s.finish("all_to_all_async", [&] {
      if (!unpack) return;
      std::size_t const r = lay.rank;
      std::array<std::size_t, 3 * (N + 1)> scratch{};
      std::array<std::size_t, N + 1> zero{}, start{};
      auto span = [r](auto const& a) { return std::span<std::size_t const>(a.data(), r); };
      for (std::size_t q = 0; q < k; ++q) {  // source q's piece lands at q along concat
        start[lay.concat] = q * piece[lay.concat];
        copy_box(recv + q * pc, span(piece), span(zero), s.out.data(), span(full_out), span(start), span(piece),
                 std::span<std::size_t>(scratch.data(), 3 * r));
      }
    });
    return as_result<Vma>(std::move(s.out));
  }));
}

template <class Vma, axis_name... A, class V>
auto mpi_permute_async(V const& v, std::vector<std::pair<int, int>> const& perm) {
  using result = std::optional<collective_future<decltype(tessera::ppermute<A...>(v, perm))>>;
  using T = std::remove_cv_t<typename value_traits<V>::type>;
  constexpr std::size_t N = value_traits<V>::rank;
  spmd_frame& f = frame_for("ppermute_async");
  std::size_t count = 1;
  if constexpr (N != 0)
    for (std::size_t i = 0; i < N; ++i) count *= static_cast<std::size_t>(v.shape()[i]);
  process_group const* pg = mpi_async_group<A...>(f, count * sizeof(T), "ppermute_async");
  if (pg == nullptr) return result{};
  auto in = make_input(v);
  collective_call<A...> c("ppermute_async", op_kind::ppermute);
  auto const [source, h] = permutation_source(perm, c.k(), c.g.rank, hash_shape(in.shape), "tessera::ppermute_async");
  long dest = -1;
  for (auto const& [src, dst] : perm)
    if (static_cast<std::size_t>(src) == c.g.rank) dest = dst;
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = h;
  c.record("collective-permute", in.count() * sizeof(T));
  mpi_inflight<T, N> s;
  auto const shape = in.shape;
  s.in = hold_input(v, std::move(in));
  s.out = make_result<T>(shape);
  process_async_op op;
  op.what = process_async_op::kind::permute;
  op.send = s.in.data;
  op.recv = s.out.data();
  op.count = count * sizeof(T);
  op.send_to = static_cast<int>(dest);
  op.receive_from = static_cast<int>(source);
  mpi_post(c, *pg, s, op, "ppermute", count * sizeof(T));
  return result(make_future([s = std::move(s), count, source = source]() mutable {
    s.finish("ppermute_async", [&] {
      if (source < 0) std::fill(s.out.data(), s.out.data() + count, T{});
    });
    return as_result<Vma>(std::move(s.out));
  }));
}

}  // namespace tessera::detail
