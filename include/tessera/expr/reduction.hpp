#pragma once
// Reductions (jnp.sum, mean, max, min, prod over compile-time axes): each
// device reduces its block in one pass over the operand expression, then the
// devices that hold parts of the same result all-reduce over the mesh axes of
// the reduced dimensions. The result is replicated over those axes (JAX's
// "partially replicated" sum over a sharded dimension).

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/array/placement.hpp"
#include "tessera/detail/erased_call.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/ops.hpp"
#include "tessera/expr/promote.hpp"
#include "tessera/runtime/call_once.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera {

namespace detail {

/// The element type of a reduction of T, as jnp gives it: sums and products of small
/// integers and bools widen to 32 bits, means are floating, max and min keep T.
template <class Op, class T>
struct reduction_type {
  static auto pick() {
    if constexpr (std::is_same_v<Op, op::mean>) return float_of_t<T>{};
    else if constexpr (std::is_same_v<Op, op::max> || std::is_same_v<Op, op::min>) return T{};
    else if constexpr (std::is_same_v<T, bool> || (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) < 4))
      return std::int32_t{};
    else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T> && sizeof(T) < 4) return std::uint32_t{};
    else return T{};
  }
  using type = decltype(pick());
};

template <class Op>
constexpr reduce_op runtime_op() {
  if constexpr (std::is_same_v<Op, op::max>) return reduce_op::max;
  else if constexpr (std::is_same_v<Op, op::min>) return reduce_op::min;
  else if constexpr (std::is_same_v<Op, op::prod>) return reduce_op::prod;
  else return reduce_op::sum;
}

inline std::string describe_reduction(op_signature const& s) {
  return "the all-reduce of a reduction over " + std::to_string(s.count) + " elements per device";
}

/// A reduction's synchronous pass as plain values (reduction::compute), so that its body is
/// compiled once per element type and rank rather than once per reduction node type.
template <class V, std::size_t Q>
struct reduction_pass {
  std::vector<std::array<slice, Q>> in_blocks;  // by position: the operand's block (eval_block)
  std::vector<std::size_t> out_counts;          // by position: the result block's elements
  std::vector<int> pos_of;                      // by device id: its position, -1 where none
  std::vector<std::size_t> sizes, red_axes;     // the mesh's axis sizes; the all-reduce's axes
  reduce_op op = reduce_op::sum;
  bool is_mean = false;                         // divide by reduced_count after the all-reduce
  std::size_t reduced_count = 1;
  /// Device pos's reduction of its operand block into out (operand-typed: call_erased).
  void (*local)(void* ctx, std::size_t pos, std::array<slice, Q> const& rb, V* out) = nullptr;
  void* ctx = nullptr;
};

/// A reduction_pass's layout part, from the operand's layout `in` (shape `in_shape`, `n` its
/// rank) and the result's `out` (shape `out_shape`): compiled once per (V, Q), not per node.
template <class V, std::size_t Q>
void describe_reduction_pass(reduction_pass<V, Q>& rp, sharding_layout_view const& in, std::size_t const* in_shape,
                             std::size_t n, sharding_layout_view const& out, std::span<std::size_t const> out_shape,
                             int global_size) {
  std::vector<int> const& ids = *in.ids;
  std::size_t const count = ids.size();
  rp.in_blocks.assign(count, {});
  rp.out_counts.reserve(count);
  std::vector<slice> ob(out_shape.size());
  for (std::size_t p = 0; p < count; ++p) {
    // eval_block: a rank-0 operand is one element, the slice {0, 1}.
    if (n == 0) rp.in_blocks[p][0] = slice{0, 1};
    else view_block(in, p, in_shape, n, rp.in_blocks[p].data());  // Q == n
    view_block(out, p, out_shape.data(), out_shape.size(), ob.data());
    std::size_t c = 1;
    for (auto const& sl : ob) c *= sl.size();
    rp.out_counts.push_back(c);
  }
  rp.pos_of = positions_by_device(ids, global_size);
  rp.sizes.assign(in.mesh_sizes.begin(), in.mesh_sizes.end());
}

/// Runs a reduction_pass on the devices `ids` (after each device's prelude steps): the result
/// blocks, by position. A device that fails aborts the all-reduce's team, releasing the others.
template <class V, std::size_t Q>
std::vector<device_buffer<V>> run_reduction_pass(device_pool& pool, std::span<int const> ids, reduction_pass<V, Q> const& rp,
                                                 pass_prelude const& prelude) {
  // The devices meet only for an all-reduce: a reduction that needs none makes no team.
  std::optional<team> t;
  if (!rp.red_axes.empty()) t.emplace(ids.size(), ids);  // the caller's mesh outlives the team
  std::vector<device_buffer<V>> buffers(ids.size());
  try {
    pool.run(ids, [&](int d) {
      std::size_t const pos = static_cast<std::size_t>(rp.pos_of[static_cast<std::size_t>(d)]);
      try {
        for (auto const& step : prelude.steps) step(pos);
        std::size_t const out_count = rp.out_counts[pos];
        auto& mem = pool.memory(d);
        device_buffer<V> partial(out_count, device_buffer<V>::uninitialized, &mem);
        rp.local(rp.ctx, pos, rp.in_blocks[pos], partial.data());
        device_buffer<V> out;
        if (rp.red_axes.empty()) {
          out = std::move(partial);
        } else {
          out = device_buffer<V>(out_count, device_buffer<V>::uninitialized, &mem);
          group const g = group_along(pos, rp.sizes, rp.red_axes);
          op_signature sig;
          sig.kind = 1;
          sign_axes(sig, rp.red_axes);
          sig.count = out_count;
          sig.dtype = dtype_code<V>();
          sig.describe = &describe_reduction;
          all_reduce(*t, pos, g, sig, partial.data(), out.data(), out_count, rp.op);
        }
        if (rp.is_mean) {
          V const c = static_cast<V>(rp.reduced_count);
          for (std::size_t i = 0; i < out_count; ++i) out.data()[i] /= c;
        }
        buffers[pos] = std::move(out);
      } catch (...) {
        if (t) t->abort();
        throw;
      }
    });
  } catch (device_error const& e) {
    throw without_abandoned(e);
  }
  return buffers;
}

/// row[k] op= the cursor's values on xsimd batches, or row[k] = identity op the values where
/// `first` (the row not written yet: no fill pass, and no read of it); returns the elements
/// done (flattened, the cursor a local: see fill_row_simd).
template <class Op, class V, class Cursor>
[[gnu::flatten]] std::size_t combine_row_simd(Cursor const& cur_in, V* row, std::size_t inner, bool first) {
  Cursor const cur = cur_in;
  using B = xsimd::batch<V>;
  std::size_t k = 0;
  if (first) {
    B const id(Op::template identity<V>());
    for (; k + B::size <= inner; k += B::size) Op::combine(id, cur.template load<B>(k)).store_unaligned(row + k);
  } else {
    for (; k + B::size <= inner; k += B::size)
      Op::combine(B::load_unaligned(row + k), cur.template load<B>(k)).store_unaligned(row + k);
  }
  return k;
}

/// Strides of a reduction's output block (row-major over the dimensions kept), indexed by
/// input dimension: 0 for the reduced ones.
template <std::size_t Q>
std::array<std::size_t, Q> reduction_out_strides(shape_t<Q> const& local, std::array<bool, Q> const& reduced) {
  std::array<std::size_t, Q> ostr{};
  std::size_t stride = 1;
  for (std::size_t d = Q; d-- > 0;) {
    if (reduced[d]) continue;
    ostr[d] = stride;
    stride *= local[d];
  }
  return ostr;
}

/// out (strides `out_strides`, by input dimension) = the cursor's values over the block `local`
/// combined by Op over each dimension d with reduced[d], starting from Op's identity. out need
/// not be initialised: an output row is first written by the input row whose reduced indices
/// are all 0, as identity op value (the same bits as a fill with the identity, then a combine).
template <class Op, class V, std::size_t Q, class Cursor>
void reduce_block(Cursor& cur, V* out, shape_t<Q> const& local, std::array<bool, Q> const& reduced,
                  std::array<std::size_t, Q> const& out_strides) {
  std::size_t const count = element_count(local);
  if (count == 0) {  // an empty reduced dimension: the identity everywhere
    std::size_t out_count = 1;
    for (std::size_t d = 0; d < Q; ++d)
      if (!reduced[d]) out_count *= local[d];
    std::fill(out, out + out_count, Op::template identity<V>());
    return;
  }
  std::size_t const inner = local[Q - 1];
  std::size_t const rows = count / inner;
  constexpr bool can_simd = Cursor::template simd_ok<V> && simd::vectorised<V>;
  [[maybe_unused]] bool const vec = can_simd && cur.simd_row();
  shape_t<Q> idx{};
  for (std::size_t r = 0; r < rows; ++r) {
    cur.set_row(idx);
    std::size_t o = 0;
    bool first = true;
    for (std::size_t d = 0; d + 1 < Q; ++d) {
      o += idx[d] * out_strides[d];
      first = first && !(reduced[d] && idx[d] != 0);
    }
    std::size_t k = 0;
    if (reduced[Q - 1]) {
      V acc = first ? Op::template identity<V>() : out[o];
      if constexpr (can_simd) {
        using B = xsimd::batch<V>;
        if (vec && inner >= 2 * B::size) {
          B a(Op::template identity<V>());
          for (; k + B::size <= inner; k += B::size) a = Op::combine(a, cur.template load<B>(k));
          alignas(64) V lanes[B::size];
          a.store_unaligned(lanes);
          for (V x : lanes) acc = Op::combine(acc, x);
        }
      }
      for (; k < inner; ++k) acc = Op::combine(acc, static_cast<V>(cur.at(k)));
      out[o] = acc;
    } else {
      V* row = out + o;
      if constexpr (can_simd) {
        if (vec) k = combine_row_simd<Op, V>(cur, row, inner, first);
      }
      if (first) {
        for (; k < inner; ++k) row[k] = Op::combine(Op::template identity<V>(), static_cast<V>(cur.at(k)));
      } else {
        for (; k < inner; ++k) row[k] = Op::combine(row[k], static_cast<V>(cur.at(k)));
      }
    }
    for (std::size_t d = Q - 1; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace detail

/// A reduction of A over dimensions Axes (jnp.sum(x, axis=Axes) and the others, per Op).
template <class Op, class A, std::size_t... Axes>
class reduction : public expression_tag {
  using in = detail::operand_traits<A>;
  static constexpr std::size_t K = sizeof...(Axes);
  static constexpr std::array<std::size_t, K> axes{Axes...};
  static_assert(detail::valid_axes(axes, in::rank), "tessera: internal: reduction axes are checked by sum<...>");

 public:
  using value_type = typename detail::reduction_type<Op, typename in::value_type>::type;
  using mesh_type = typename in::mesh_type;
  static constexpr std::size_t rank = in::rank - K;
  static constexpr std::array<dim_spec, rank> spec = detail::reduce_spec(in::spec, axes);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;
  using array_type = array<value_type, rank, sharding_type>;
  /// The mesh axes of the sharded reduced dimensions, in mesh order: a sum or mean over them
  /// is partial until summed (JAX's `unreduced`); max, min and prod all-reduce at once.
  static constexpr dim_spec reduced_axes = detail::canonical([] {
    dim_spec d;
    for (auto const& a : mesh_type::axes)
      for (std::size_t k : axes)
        if (in::spec[k].uses(a.name)) d.push(a.name);
    return d;
  }());
  static constexpr bool linear = std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::mean>;
  static constexpr dim_spec unreduced = linear ? reduced_axes : dim_spec{};

  explicit reduction(A a)
      : a_(std::move(a)),
        cache_(std::make_shared<detail::result_cache<array_type>>()),
        partial_(std::make_shared<detail::result_cache<array_type>>()) {
    if constexpr (std::is_same_v<Op, op::max> || std::is_same_v<Op, op::min>) {
      auto const s = detail::shape_of(a_);
      for (std::size_t k : axes)
        if (s[k] == 0)
          throw std::invalid_argument(std::string("tessera::") +
                                      (std::is_same_v<Op, op::max> ? "max" : "min") + ": dimension " +
                                      std::to_string(k) + " of the operand of shape " + detail::shape_string(s) +
                                      " is empty, and this reduction has no identity");
    }
  }

  shape_t<rank> shape() const {
    auto const s = detail::shape_of(a_);
    shape_t<rank> out{};
    std::size_t j = 0;
    for (std::size_t i = 0; i < in::rank; ++i)
      if (!is_reduced(i)) out[j++] = s[i];
    return out;
  }
  mesh_type const& mesh() const { return *detail::mesh_of(a_); }
  /// The reduced operand.
  A const& operand() const { return a_; }

  /// Evaluates the node into an array (its own pass, and an all-reduce where a reduced dimension is sharded).
  auto evaluate() const { return result(); }
  /// The reduced array (computed once; copies of the node share it).
  array_type const& result() const {
    prepare();
    return *cache_->value;
  }
  void prepare() const {
    detail::call_once(cache_->once, [&] { cache_->value.emplace(compute(true)); });
  }
  /// Every device's reduction of its own block, not yet summed over `unreduced`.
  array_type const& partial() const {
    detail::call_once(partial_->once, [&] { partial_->value.emplace(compute(false)); });
    return *partial_->value;
  }
  template <std::size_t Q>
  auto partial_cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(*partial_->value, pos, rb, rs);
  }
  /// The operand's collectives, then the all-reduce over the sharded reduced dimensions' axes.
  void plan(std::vector<collective_event>& out) const {
    if (cache_->value) return;  // already reduced: nothing left to run
    detail::plan_of(a_, out);
    if (!reduced_axes.is_none()) out.push_back(all_reduce_event());
  }
  /// The operand's collectives only.
  void partial_plan(std::vector<collective_event>& out) const {
    if (!partial_->value) detail::plan_of(a_, out);
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(*cache_->value, pos, rb, rs);
  }

 private:
  static constexpr bool is_reduced(std::size_t d) {
    for (std::size_t k : axes)
      if (k == d) return true;
    return false;
  }

  collective_event all_reduce_event() const {
    sharding_type const s(mesh());
    auto const shape = this->shape();
    auto const m = detail::plan_mesh_of(mesh());
    collective_event e{"all-reduce", {}, sizeof(value_type) * detail::largest_block(shape, spec, m)};
    for (std::size_t a = 0; a < reduced_axes.count(); ++a) e.axes.emplace_back(reduced_axes.axis(a).view());
    return e;
  }

  using in_sharding_type = named_sharding<mesh_type, detail::spec_type_t<in::spec>>;

  /// compute for an operand without deferred values: the local reductions, then (`sum`) their
  /// combination over `reduced_axes` by sum_partials, in device order as the all-reduce
  /// combines them; a mean divides after that sum, as compute_in_one_pass does, so both give
  /// the same bits. Each step is queued where the calling thread may queue, else run at once.
  array_type compute_queued(bool sum) const {
    using V = value_type;
    constexpr std::size_t N = in::rank;
    constexpr std::size_t Q = N == 0 ? 1 : N;
    constexpr bool is_mean = std::is_same_v<Op, op::mean>;
    detail::prepare(a_);
    shape_t<N> const in_shape = detail::shape_of(a_);
    std::size_t reduced_count = 1;
    for (std::size_t k : axes) reduced_count *= in_shape[k];
    V const divisor = is_mean && !sum ? static_cast<V>(reduced_count) : V{1};
    // The operand's blocks, found now (the task then holds no sharding, nor a copy of the mesh;
    // no sharding is made here at all: the steps below take the mesh or the array's own).
    auto in_blocks = detail::view_blocks<N>(in_sharding_type::layout_view_on(mesh()), in_shape);
    auto local = detail::build_array_queued_on<V, rank, sharding_type>(
        mesh(), shape(), "reduction",
        [a = a_, in_blocks = std::move(in_blocks), in_shape, divisor](std::size_t pos, std::array<slice, rank> const&, V* out) {
          auto const rb = detail::eval_block<Q>(in_blocks[pos]);
          std::size_t const out_count = reduce_local(a, pos, rb, in_shape, out);
          if constexpr (is_mean) {
            if (divisor != V{1})
              for (std::size_t i = 0; i < out_count; ++i) out[i] /= divisor;
          } else {
            (void)divisor;  // read by means only
            (void)out_count;
          }
        });
    if (!sum) return local;
    auto summed = detail::sum_partials(local, reduced_axes, local.sharding(), detail::runtime_op<Op>());
    if constexpr (!is_mean) {
      return summed;
    } else {
      V const c = static_cast<V>(reduced_count);
      auto const out_shape = shape();
      return detail::build_array_queued_on<V, rank, sharding_type>(
          mesh(), out_shape, "reduction", [summed, c, out_shape](std::size_t pos, std::array<slice, rank> const&, V* out) {
            V const* src = summed.block_data(pos);
            std::size_t const n = detail::element_count(detail::block_shape(summed.sharding().block(pos, out_shape)));
            for (std::size_t i = 0; i < n; ++i) out[i] = src[i] / c;
          });
    }
  }

  /// Device pos's reduction of its block `rb` of the operand into `out` (the output block,
  /// row-major); returns its element count.
  template <std::size_t Q, std::size_t N>
  static std::size_t reduce_local(A const& a, std::size_t pos, std::array<slice, Q> const& rb, shape_t<N> const& in_shape,
                                  value_type* out) {
    std::array<bool, Q> reduced{};
    for (std::size_t k : axes) reduced[k + Q - N] = true;
    shape_t<Q> const local = detail::block_shape(rb);
    // A rank-0 operand (Q = 1, its one dimension of size 1) reads no stride.
    std::array<std::size_t, Q> const ostr = detail::reduction_out_strides<Q>(local, reduced);
    std::size_t out_count = 1;
    for (std::size_t dd = 0; dd < Q; ++dd)
      if (!reduced[dd] && N != 0) out_count *= local[dd];
    auto cur = detail::cursor_of<Q>(a, pos, rb, detail::eval_shape<Q>(in_shape));
    detail::reduce_block<Op, value_type, Q>(cur, out, local, reduced, ostr);
    return out_count;
  }

  array_type compute(bool all_reduce) const {
    mesh_type const& m = mesh();
    sharding_type const s(m);
    // Mesh axes of the sharded reduced dimensions: the all-reduce runs over them.
    std::vector<std::size_t> red_axes;
    if (all_reduce)
      for (std::size_t k : axes)
        for (std::size_t a = 0; a < in::spec[k].count(); ++a) red_axes.push_back(*mesh_type::index_of(in::spec[k].axis(a)));
    auto pool = detail::pool_for(s, "reduction");
    if constexpr (!detail::reads_prelude_values<A>()) {
      // Each device's reduction of its block, then the sum over the reduced axes (sum_partials),
      // queued where this thread may queue (asynchronous dispatch; the small sums are queued
      // too), and otherwise run at once by the same code, so both modes give the same bits and
      // only this path is compiled (issue 31's compile time). Across processes a failure of this
      // process's part ends the job: the others would wait for it in the sum's exchange.
      bool const sum = !red_axes.empty();
      if (sum && pool->spans_processes(std::span<int const>(m.device_ids())))
        return detail::ending_job_on_failure(*pool, true, "reduction", [&] { return compute_queued(true); });
      return compute_queued(sum);
    } else {
      return compute_in_one_pass(std::move(red_axes), std::move(pool));
    }
  }

  /// compute's synchronous pass, for an operand that reads autodiff's deferred values (computed
  /// at the start of the pass): each device reduces its block, then the all-reduce over the
  /// sharded reduced dimensions' axes `red_axes` within the same pass.
  array_type compute_in_one_pass(std::vector<std::size_t> red_axes, std::shared_ptr<detail::device_pool> pool) const {
    using V = value_type;
    constexpr std::size_t N = in::rank;
    constexpr std::size_t Q = N == 0 ? 1 : N;
    mesh_type const& m = mesh();
    sharding_type const s(m);
    shape_t<N> const in_shape = detail::shape_of(a_);
    shape_t<rank> const out_shape = shape();
    if (!red_axes.empty() && pool->spans_processes(std::span<int const>(m.device_ids()))) {
      // Across processes: each device reduces its own block, then the partial results are
      // combined over the processes (an exchange of the regions each one needs). A failure of
      // this process's part ends the job: the others would wait for it in the exchange.
      return detail::ending_job_on_failure(*pool, true, "reduction", [&] {
        return detail::sum_partials(compute(false), reduced_axes, s, detail::runtime_op<Op>());
      });
    }
    // Values the operand reads that nothing has computed yet are computed at the start of this
    // pass (expr/evaluate.hpp's pass_prelude), the rest now.
    detail::pass_prelude prelude;
    detail::prelude_guard guard(prelude);
    if constexpr (detail::reads_prelude_values<A>()) detail::schedule_leaves(a_, prelude);
    detail::prepare(a_);
    if (!red_axes.empty()) detail::record_collective(all_reduce_event());
    // The pass as plain values, run by code compiled once per element type and rank: only the
    // device's reduction of its block (`local`) depends on the operand's type.
    auto const& ids = m.device_ids();
    detail::reduction_pass<V, Q> rp;
    detail::describe_reduction_pass<V, Q>(rp, in_sharding_type::layout_view_on(m), in_shape.data(), N, s.layout_view(),
                                          std::span<std::size_t const>(out_shape), pool->global_size());
    rp.red_axes = std::move(red_axes);
    rp.op = detail::runtime_op<Op>();
    rp.is_mean = std::is_same_v<Op, op::mean>;
    rp.reduced_count = 1;
    for (std::size_t k : axes) rp.reduced_count *= in_shape[k];
    auto local = [this, &in_shape](std::size_t pos, std::array<slice, Q> const& rb, V* out) {
      reduce_local(a_, pos, rb, in_shape, out);
    };
    rp.local = &detail::call_erased<decltype(local), std::size_t, std::array<slice, Q> const&, V*>;
    rp.ctx = detail::erased_context(local);
    std::vector<device_buffer<V>> buffers =
        detail::run_reduction_pass<V, Q>(*pool, std::span<int const>(ids), rp, prelude);
    guard.dismiss();
    return array_type(std::make_shared<detail::array_storage<V, rank, sharding_type>>(
        detail::array_storage<V, rank, sharding_type>{s, out_shape, pool, std::move(buffers)}));
  }

  A a_;
  std::shared_ptr<detail::result_cache<array_type>> cache_, partial_;
};

}  // namespace tessera
