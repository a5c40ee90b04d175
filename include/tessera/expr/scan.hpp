#pragma once
// Cumulative reductions: jnp.cumsum, jnp.cumprod, jax.lax.cummax and jax.lax.cummin along one
// axis (negative counts from the end), forward or, as jax.lax's `reverse=True`, from the end.
//
// Sharding (JAX's _cumred_sharding_rule): the result keeps the operand's sharding. Along an
// unsharded dimension each device scans its own block and nothing moves. Along a dimension
// sharded over Explicit axes JAX refuses ("Input should be unsharded over the axis being
// reduced"), and so does tessera, at compile time. Along one sharded over Auto axes JAX
// all-gathers the operand; tessera moves only the blocks' totals instead:
//   1. each device reduces its block along the scanned dimension (one total per line);
//   2. the totals are all-gathered over the mesh axes of that dimension (a reshard of a small
//      array, so it runs across processes too), which explain() lists;
//   3. each device folds the totals of the blocks before its own (an exclusive scan) and scans
//      its block from there.
// The operand is read twice and the result written once: 1.5 times the bytes of a copy.
//
// Element types as jnp gives them: booleans sum and multiply as int32; every other type keeps its
// own (jnp.cumsum of int8 is int8, and integers wrap around). cummax and cummin take numbers only.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/queued_build.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/core/scan_diagnostics.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/expr/computed.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/ops.hpp"
#include "tessera/expr/shape_ops.hpp"
#include "tessera/runtime/simd.hpp"

namespace tessera {

namespace detail {

/// The element type of a scan of T, as jnp gives it: booleans become int32, the rest stay.
template <class T>
using scan_type_t = std::conditional_t<std::is_same_v<T, bool>, std::int32_t, T>;

/// The JAX name of a scan by Op (for errors and traces).
template <class Op>
constexpr char const* scan_name() {
  if constexpr (std::is_same_v<Op, op::sum>) return "cumsum";
  else if constexpr (std::is_same_v<Op, op::prod>) return "cumprod";
  else if constexpr (std::is_same_v<Op, op::max>) return "cummax";
  else return "cummin";
}

/// A block as lines along the scanned dimension: [outer, len, inner], row-major.
struct scan_lines {
  std::size_t outer = 1, len = 0, inner = 1;
};
template <std::size_t N>
scan_lines lines_of(shape_t<N> const& shape, std::size_t axis) {
  scan_lines g;
  for (std::size_t d = 0; d < N; ++d) {
    std::size_t const n = shape[d];
    if (d < axis) g.outer *= n;
    else if (d == axis) g.len = n;
    else g.inner *= n;
  }
  return g;
}
template <std::size_t N>
scan_lines lines_of(std::array<slice, N> const& block, std::size_t axis) {
  return lines_of(block_shape(block), axis);
}

/// A contiguous line (inner == 1) is scanned in tiles of scan_lanes runs of scan_run elements:
/// the runs' totals first (the tile then sits in L1), then the runs side by side, each from the
/// fold of those before it. One chain of dependent additions runs at the adder's latency (about
/// 4 cycles an element); eight interleaved ones at its throughput. (Runs a cache line apart or
/// more, not far apart: chains 1 MiB apart would all map to one L1 set.)
inline constexpr std::size_t scan_lanes = 8;
inline constexpr std::size_t scan_run = 256;

/// out[j] = Op(a[j], b[j]) for j < n, on xsimd batches where R has them.
template <class Op, class R>
void combine_rows(R* out, R const* a, R const* b, std::size_t n) {
  std::size_t j = 0;
  if constexpr (simd::vectorised<R>) {
    using B = xsimd::batch<R>;
    for (; j + B::size <= n; j += B::size)
      Op::combine(B::load_unaligned(a + j), B::load_unaligned(b + j)).store_unaligned(out + j);
  }
  for (; j < n; ++j) out[j] = Op::combine(a[j], b[j]);
}

/// The element converted to the scan's type.
template <class R, class T>
R as_scan(T v) {
  return static_cast<R>(v);
}

/// A contiguous line of len elements scanned from `acc` in tiles (see scan_lanes), Reverse from the end.
template <class Op, bool Reverse, class R, class T>
void scan_tiled(T const* in, R* out, std::size_t len, R acc) {
  constexpr std::size_t tile = scan_lanes * scan_run;
  auto at = [len](std::size_t i) { return Reverse ? len - 1 - i : i; };  // scan order to memory
  std::size_t t0 = 0;
  for (; t0 + tile <= len; t0 += tile) {
    std::array<R, scan_lanes> run;
    run.fill(Op::template identity<R>());
    for (std::size_t s = 0; s < scan_run; ++s)
      for (std::size_t c = 0; c < scan_lanes; ++c)
        run[c] = Op::combine(run[c], as_scan<R>(in[at(t0 + c * scan_run + s)]));
    for (std::size_t c = 0; c < scan_lanes; ++c) {  // each run's start: the fold of those before it
      R const total = run[c];
      run[c] = acc;
      acc = Op::combine(acc, total);
    }
    for (std::size_t s = 0; s < scan_run; ++s)
      for (std::size_t c = 0; c < scan_lanes; ++c) {
        std::size_t const i = at(t0 + c * scan_run + s);
        out[i] = run[c] = Op::combine(run[c], as_scan<R>(in[i]));
      }
  }
  for (; t0 < len; ++t0) {
    std::size_t const i = at(t0);
    out[i] = acc = Op::combine(acc, as_scan<R>(in[i]));
  }
}

// ---- cumsum of a contiguous float or double line, a vector at a time --------------------------
//
// A prefix sum within a vector takes log2(W) shifted adds (Hillis-Steele), then the carry of the
// elements before it: out = v + carry, and the next carry is carry + (v's last lane), an add off
// the chain that the stores wait on. That is about a third of a cycle an element where the scalar
// tiles take two; the scan then runs at memory speed. The shifts are lane shuffles, which
// xsimd 8 does not spell (slide_left came in xsimd 9), so they use the compilers' generic vectors
// (GCC >= 12 and Clang have __builtin_shufflevector; each target gets its own permutes). The
// additions are grouped differently from a sequential loop, as XLA's own parallel scans are.
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define TESSERA_SCAN_SHUFFLE 1
#endif
#endif

#ifdef TESSERA_SCAN_SHUFFLE
namespace scan_vector {

// The target's own vector width: a wider generic vector passed between functions changes the
// ABI (GCC's -Wpsabi, an error under -Werror).
#if defined(__AVX512F__)
inline constexpr std::size_t bytes = 64;
#elif defined(__AVX__)
inline constexpr std::size_t bytes = 32;
#else
inline constexpr std::size_t bytes = 16;
#endif
typedef float f32v __attribute__((vector_size(bytes)));
typedef double f64v __attribute__((vector_size(bytes)));

template <class R>
struct of;
template <>
struct of<float> {
  using type = f32v;
};
template <>
struct of<double> {
  using type = f64v;
};

/// v shifted by K lanes towards the end (Reverse: towards the start), zeros shifted in.
template <int K, bool Reverse, class V, int... I>
inline V shifted(V v, std::integer_sequence<int, I...>) {
  constexpr int W = sizeof...(I);
  V const zero = -V{};  // -0.0: adding it changes nothing, not even a -0.0's sign
  if constexpr (Reverse) return __builtin_shufflevector(v, zero, (I + K < W ? I + K : W)...);
  else return __builtin_shufflevector(v, zero, (I >= K ? I - K : W)...);
}

/// Every lane set to lane L of v.
template <int L, class V, int... I>
inline V broadcast_lane(V v, std::integer_sequence<int, I...>) {
  return __builtin_shufflevector(v, v, (I * 0 + L)...);
}

/// The inclusive prefix sums of v's lanes (Reverse: suffix sums).
template <bool Reverse, class V, int... I>
inline V lane_scan(V v, std::integer_sequence<int, I...> seq) {
  constexpr int W = sizeof...(I);
  v += shifted<1, Reverse>(v, seq);
  if constexpr (W > 2) v += shifted<2, Reverse>(v, seq);
  if constexpr (W > 4) v += shifted<4, Reverse>(v, seq);
  if constexpr (W > 8) v += shifted<8, Reverse>(v, seq);
  return v;
}

}  // namespace scan_vector
#endif

/// Whether cumsum of R along contiguous lines takes the vector path.
template <class Op, class R, class T>
inline constexpr bool vector_cumsum =
#ifdef TESSERA_SCAN_SHUFFLE
    std::is_same_v<Op, op::sum> && std::is_same_v<R, T> && (std::is_same_v<R, float> || std::is_same_v<R, double>);
#else
    false;
#endif

/// A contiguous line of len elements summed cumulatively from `acc` (Reverse: from the end).
template <bool Reverse, class R>
void cumsum_line(R const* in, R* out, std::size_t len, R acc) {
#ifdef TESSERA_SCAN_SHUFFLE
  using V = typename scan_vector::of<R>::type;
  constexpr std::size_t W = sizeof(V) / sizeof(R);
  constexpr auto seq = std::make_integer_sequence<int, static_cast<int>(W)>{};
  V carry = -V{} + acc;  // -0.0 lanes: the identity of IEEE addition, so a -0.0 element keeps its sign
  std::size_t const full = len / W * W;
  // The vectors cover the first `full` elements in scan order: [0, full) forward, [len - full,
  // len) reverse; the rest is added one by one after them.
  for (std::size_t k = 0; k < full; k += W) {
    std::size_t const i = Reverse ? len - W - k : k;
    V v;
    std::memcpy(&v, in + i, sizeof v);
    v = scan_vector::lane_scan<Reverse>(v, seq);
    V const o = v + carry;
    carry += scan_vector::broadcast_lane<Reverse ? 0 : static_cast<int>(W) - 1>(v, seq);
    std::memcpy(out + i, &o, sizeof o);
  }
  acc = carry[0];
  if constexpr (Reverse) {
    for (std::size_t i = len - full; i-- > 0;) out[i] = acc = acc + in[i];
  } else {
    for (std::size_t i = full; i < len; ++i) out[i] = acc = acc + in[i];
  }
#else
  (void)in, (void)out, (void)len, (void)acc;
#endif
}

/// Scans a block of lines `g` (in: the operand's block; out: the result's, both row-major):
/// out[o, i, j] = Op over the elements of line (o, j) up to i (Reverse: from i to the end).
/// Line (o, j) starts from start[o * inner + j] (the fold of what comes before the block), or,
/// where start is null, from its first element.
template <class Op, bool Reverse, class R, class T>
void scan_block(T const* in, R* out, scan_lines const& g, R const* start) {
  std::size_t const len = g.len, inner = g.inner;
  if (len == 0 || inner == 0) return;
  for (std::size_t o = 0; o < g.outer; ++o) {
    T const* bi = in + o * len * inner;
    R* bo = out + o * len * inner;
    R const* so = start ? start + o * inner : nullptr;
    if constexpr (vector_cumsum<Op, R, T>) {
      if (inner == 1) {
        cumsum_line<Reverse, R>(bi, bo, len, so ? so[0] : R(-0.0));
        continue;
      }
    }
    if (inner == 1 && len >= scan_lanes * scan_run) {
      scan_tiled<Op, Reverse, R>(bi, bo, len, so ? so[0] : Op::template identity<R>());
    } else if (inner == 1) {
      std::size_t const first = Reverse ? len - 1 : 0;
      R acc = so ? Op::combine(so[0], as_scan<R>(bi[first])) : as_scan<R>(bi[first]);
      bo[first] = acc;
      if constexpr (Reverse) {
        for (std::size_t i = len - 1; i-- > 0;) bo[i] = acc = Op::combine(acc, as_scan<R>(bi[i]));
      } else {
        for (std::size_t i = 1; i < len; ++i) bo[i] = acc = Op::combine(acc, as_scan<R>(bi[i]));
      }
    } else {
      // Rows of `inner` elements: each one combined with the row before it, element-wise.
      auto row = [&](std::size_t s) { return Reverse ? len - 1 - s : s; };
      std::vector<R> conv;
      if constexpr (!std::is_same_v<R, T>) conv.resize(inner);
      auto input = [&](std::size_t r) -> R const* {
        if constexpr (std::is_same_v<R, T>) {
          return bi + r * inner;
        } else {
          for (std::size_t j = 0; j < inner; ++j) conv[j] = as_scan<R>(bi[r * inner + j]);
          return conv.data();
        }
      };
      std::size_t const r0 = row(0);
      R const* x0 = input(r0);
      if (so) combine_rows<Op>(bo + r0 * inner, so, x0, inner);
      else std::copy(x0, x0 + inner, bo + r0 * inner);
      for (std::size_t s = 1; s < len; ++s) {
        std::size_t const r = row(s), p = row(s - 1);
        combine_rows<Op>(bo + r * inner, bo + p * inner, input(r), inner);
      }
    }
  }
}

/// tot[o * inner + j] = Op over line (o, j) of the block (Op's identity for an empty line).
template <class Op, class R, class T>
void line_totals(T const* in, R* tot, scan_lines const& g) {
  std::size_t const len = g.len, inner = g.inner;
  R const id = Op::template identity<R>();
  std::vector<R> conv(std::is_same_v<R, T> ? 0 : inner);
  for (std::size_t o = 0; o < g.outer; ++o) {
    T const* bi = in + o * len * inner;
    R* t = tot + o * inner;
    if (inner == 1) {
      // Partial folds side by side (on xsimd batches where R has them): the adder's throughput.
      R a = id;
      std::size_t i = 0;
      if constexpr (std::is_same_v<R, T> && simd::vectorised<R>) {
        using B = xsimd::batch<R>;
        if (len >= 4 * B::size) {
          B acc[4] = {B(id), B(id), B(id), B(id)};
          for (; i + 4 * B::size <= len; i += 4 * B::size)
            for (std::size_t q = 0; q < 4; ++q) acc[q] = Op::combine(acc[q], B::load_unaligned(bi + i + q * B::size));
          alignas(64) R lanes[B::size];
          for (std::size_t q = 0; q < 4; ++q) {
            acc[q].store_unaligned(lanes);
            for (R v : lanes) a = Op::combine(a, v);
          }
        }
      }
      for (; i < len; ++i) a = Op::combine(a, as_scan<R>(bi[i]));
      t[0] = a;
    } else {
      std::fill(t, t + inner, id);
      for (std::size_t i = 0; i < len; ++i) {
        R const* x;
        if constexpr (std::is_same_v<R, T>) {
          x = bi + i * inner;
        } else {
          for (std::size_t j = 0; j < inner; ++j) conv[j] = as_scan<R>(bi[i * inner + j]);
          x = conv.data();
        }
        combine_rows<Op>(t, t, x, inner);
      }
    }
  }
}

/// start[o * inner + j] = the fold of the totals of line (o, j) on the devices before this one
/// (index b of the K along the scanned dimension) in scan order, Op's identity for the first:
/// `all` holds every device's totals, [outer, K, inner].
template <class Op, bool Reverse, class R>
void exclusive_fold(R const* all, R* start, std::size_t outer, std::size_t K, std::size_t inner, std::size_t b) {
  for (std::size_t o = 0; o < outer; ++o) {
    R const* a = all + o * K * inner;
    R* acc = start + o * inner;
    std::fill(acc, acc + inner, Op::template identity<R>());
    if constexpr (Reverse) {
      for (std::size_t t = K; t-- > b + 1;) combine_rows<Op>(acc, acc, a + t * inner, inner);
    } else {
      for (std::size_t t = 0; t < b; ++t) combine_rows<Op>(acc, acc, a + t * inner, inner);
    }
  }
}

/// The spec with dimension `axis` replicated.
template <std::size_t N>
constexpr std::array<dim_spec, N> unsharded_at(std::array<dim_spec, N> s, std::size_t axis) {
  s[axis] = dim_spec{};
  return s;
}

/// How many blocks dimension `axis` of spec is cut into on mesh m.
template <class Mesh, std::size_t N>
std::size_t parts_along(Mesh const& m, std::array<dim_spec, N> const& spec, std::size_t axis) {
  std::size_t k = 1;
  for (std::size_t a = 0; a < spec[axis].count(); ++a)
    k *= static_cast<std::size_t>(m.size(*Mesh::index_of(spec[axis].axis(a))));
  return k;
}

/// The scan of x along `axis`, which x's spec leaves unsharded: each device scans its block.
template <class Op, std::size_t axis, bool Reverse, class X>
auto local_scan(X x) {
  using in = operand_traits<X>;
  using T = typename in::value_type;
  using R = scan_type_t<T>;
  constexpr std::size_t N = in::rank;
  static constexpr auto in_spec = canonical_spec(in::spec);
  using A = array_with_spec<R, N, typename in::mesh_type, in_spec>;
  auto const shape = shape_of(x);
  typename A::sharding_type const s(*mesh_of(x));
  auto kernel = [](auto const& src, std::size_t pos, std::array<slice, N> const& block, R* out) {
    scan_block<Op, Reverse, R, T>(src.block_data(pos), out, lines_of(block, axis), nullptr);
  };
  return relayout<A, in_spec>(std::move(x), s, shape, scan_name<Op>(), kernel);
}

/// The scan of x along `axis`, sharded over Auto mesh axes: blocks scanned from the fold of the
/// totals of the blocks before them, the totals all-gathered (see the top of this file).
template <class Op, std::size_t axis, bool Reverse, class X>
auto sharded_scan(X x) {
  using in = operand_traits<X>;
  using T = typename in::value_type;
  using R = scan_type_t<T>;
  using Mesh = typename in::mesh_type;
  constexpr std::size_t N = in::rank;
  static constexpr auto in_spec = canonical_spec(in::spec);
  static constexpr auto gathered_spec = canonical_spec(unsharded_at(in::spec, axis));
  using A = array_with_spec<R, N, Mesh, in_spec>;
  using S = typename A::sharding_type;
  using SG = typename array_with_spec<R, N, Mesh, gathered_spec>::sharding_type;
  auto const shape = shape_of(x);
  Mesh const& mesh = *mesh_of(x);
  S const s(mesh);
  std::size_t const k = parts_along(mesh, in_spec, axis);
  // The totals: one per line and device, laid out as the operand.
  shape_t<N> tshape = shape;
  tshape[axis] = k;
  auto make = [x, s, shape, tshape]() -> A {
    constexpr char const* what = scan_name<Op>();
    auto const src = evaluated_as<in_spec>(x);
    // Each step is queued (asynchronous dispatch) and owns what it reads.
    A const totals = build_array_queued<R, N, S>(s, tshape, what, [src, shape](std::size_t pos, std::array<slice, N> const&, R* out) {
      line_totals<Op, R, T>(src.block_data(pos), out, lines_of(src.sharding().block(pos, shape), axis));
    });
    auto const all = resharded<A, gathered_spec>(totals).result();
    std::size_t const K = tshape[axis];
    return build_array_queued<R, N, S>(s, shape, what, [src, all, s, tshape, K](std::size_t pos, std::array<slice, N> const& block, R* out) {
      scan_lines const g = lines_of(block, axis);
      std::size_t const b = s.block(pos, tshape)[axis].start;
      std::vector<R> start(g.outer * g.inner);
      exclusive_fold<Op, Reverse, R>(all.block_data(pos), start.data(), g.outer, K, g.inner, b);
      scan_block<Op, Reverse, R, T>(src.block_data(pos), out, g, start.data());
    });
  };
  auto plan = [x, s, tshape](std::vector<collective_event>& out) {
    plan_as<in_spec>(x, out);
    auto const ev = reshard_events<R, N>(tshape, s, dim_spec{}, SG(s.mesh()));
    out.insert(out.end(), ev.begin(), ev.end());
  };
  return computed<A>(s, shape, std::move(make), std::move(plan));
}

/// A scan by Op along Axis (negative from the end), with JAX's checks.
template <class Op, int Axis, bool Reverse, class X>
auto make_scan(X x) {
  using in = operand_traits<X>;
  using T = typename in::value_type;
  using Mesh = typename in::mesh_type;
  constexpr std::size_t N = in::rank;
  constexpr bool numbers = !std::is_same_v<T, bool> || std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::prod>;
  static_assert(diagnostic::cummax_and_cummin_take_numbers<numbers>::value);
  constexpr bool in_range = axis_in_range(Axis, N);
  static_assert(diagnostic::scan_axis_out_of_range_for_the_operand<Axis, N, in_range>::value);
  if constexpr (!numbers || !in_range) {
    return failed_expression<scan_type_t<T>, N, Mesh>{};
  } else {
    constexpr std::size_t axis = normalize_axis(Axis, N);
    constexpr bool auto_axes = !has_explicit_axis(in::spec[axis], Mesh::axes);
    static_assert(diagnostic::scan_over_a_dimension_sharded_on_an_explicit_axis<axis, N, auto_axes>::value);
    if constexpr (!auto_axes) return failed_expression<scan_type_t<T>, N, Mesh>{};
    else if constexpr (in::spec[axis].is_none()) return local_scan<Op, axis, Reverse>(std::move(x));
    else return sharded_scan<Op, axis, Reverse>(std::move(x));
  }
}

}  // namespace detail

/// jnp.cumsum(x, axis=Axis); jax.lax.cumsum(x, Axis, reverse=Reverse). Booleans sum as int32.
template <int Axis, bool Reverse = false, sharded_expression X>
auto cumsum(X&& x) {
  return detail::make_scan<op::sum, Axis, Reverse>(detail::store(std::forward<X>(x)));
}
/// jnp.cumprod(x, axis=Axis); jax.lax.cumprod(x, Axis, reverse=Reverse). Booleans multiply as int32.
template <int Axis, bool Reverse = false, sharded_expression X>
auto cumprod(X&& x) {
  return detail::make_scan<op::prod, Axis, Reverse>(detail::store(std::forward<X>(x)));
}
/// jax.lax.cummax(x, Axis, reverse=Reverse) (a NaN propagates from where it appears).
template <int Axis, bool Reverse = false, sharded_expression X>
auto cummax(X&& x) {
  return detail::make_scan<op::max, Axis, Reverse>(detail::store(std::forward<X>(x)));
}
/// jax.lax.cummin(x, Axis, reverse=Reverse).
template <int Axis, bool Reverse = false, sharded_expression X>
auto cummin(X&& x) {
  return detail::make_scan<op::min, Axis, Reverse>(detail::store(std::forward<X>(x)));
}

}  // namespace tessera
