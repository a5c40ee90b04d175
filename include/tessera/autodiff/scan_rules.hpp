#pragma once
// Gradients of the scans, with JAX's rules, on global tracers and on local ones (a shard_map
// body under grad).
//
// cumsum is linear: its transpose is the cumsum of the cotangent the other way round (lax's
// _cumsum_transpose_rule), so along a sharded dimension it runs as the forward scan does,
// exchanging only block totals.
//
// cumprod, cummax and cummin: JAX differentiates them through the jvp of lax.associative_scan
// (loops.py, _cumulative_jvp_rule), a tree of pairwise products, maxima or minima. Here the
// transpose of that jvp is computed on the same tree, line by line, so the gradient is
// jax.grad's: exact at zeros (cumprod, no division by x), and at ties as lax.max's jvp makes
// them (a tie between the two operands of one max of the tree splits its cotangent in halves;
// e.g. cummax of five equal values takes the cotangent 1s to (2.125, 1.125, 0.875, 0.375, 0.5)).
// The tree needs whole lines on a device: along a sharded dimension the operand and the
// cotangent are all-gathered over its axes first (explain() lists it), and each device keeps
// its own block of the result.

#include <cstddef>
#include <utility>
#include <vector>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/autodiff/rules.hpp"
#include "tessera/autodiff/tracer.hpp"
#include "tessera/expr/scan.hpp"

namespace tessera {

namespace detail {

/// The partial derivatives of one combine of the tree, z = Op(a, b): JAX's jvp of lax.mul
/// (b, a) and of lax.max / lax.min (_balanced_eq: 1 for the operand equal to z, halved when
/// both are).
template <class Op, class R>
void combine_partials(R a, R b, R z, R& wa, R& wb) {
  if constexpr (std::is_same_v<Op, op::prod>) {
    wa = b;
    wb = a;
  } else {
    R const ea = a == z ? R(1) : R(0), eb = b == z ? R(1) : R(0);
    wa = ea / (eb != R(0) ? R(2) : R(1));
    wb = eb / (ea != R(0) ? R(2) : R(1));
  }
}

/// lax.associative_scan(Op, x) on a line (the odd elements from the scan of the pairs, the even
/// ones one combine further).
template <class Op, class R>
std::vector<R> tree_scan(std::vector<R> const& x) {
  std::size_t const n = x.size();
  if (n < 2) return x;
  std::size_t const m = n / 2;
  std::vector<R> r(m);
  for (std::size_t i = 0; i < m; ++i) r[i] = Op::combine(x[2 * i], x[2 * i + 1]);
  std::vector<R> const odd = tree_scan<Op>(r);
  std::vector<R> y(n);
  y[0] = x[0];
  for (std::size_t i = 0; i < m; ++i) y[2 * i + 1] = odd[i];
  for (std::size_t i = 0; i + 1 < (n + 1) / 2; ++i) y[2 * i + 2] = Op::combine(odd[i], x[2 * i + 2]);
  return y;
}

/// The transpose of the jvp of tree_scan at x, applied to the cotangent g of its result.
template <class Op, class R>
std::vector<R> tree_scan_vjp(std::vector<R> const& x, std::vector<R> const& g) {
  std::size_t const n = x.size();
  if (n < 2) return g;
  std::size_t const m = n / 2;
  std::vector<R> r(m), wa(m), wb(m);
  for (std::size_t i = 0; i < m; ++i) {
    r[i] = Op::combine(x[2 * i], x[2 * i + 1]);
    combine_partials<Op>(x[2 * i], x[2 * i + 1], r[i], wa[i], wb[i]);
  }
  std::vector<R> const odd = tree_scan<Op>(r);
  std::vector<R> gx(n, R(0)), go(m);
  gx[0] = g[0];
  for (std::size_t i = 0; i < m; ++i) go[i] = g[2 * i + 1];
  for (std::size_t i = 0; i + 1 < (n + 1) / 2; ++i) {
    R wo, we;
    combine_partials<Op>(odd[i], x[2 * i + 2], Op::combine(odd[i], x[2 * i + 2]), wo, we);
    go[i] += g[2 * i + 2] * wo;
    gx[2 * i + 2] += g[2 * i + 2] * we;
  }
  std::vector<R> const gr = tree_scan_vjp<Op>(r, go);
  for (std::size_t i = 0; i < m; ++i) {
    gx[2 * i] += gr[i] * wa[i];
    gx[2 * i + 1] += gr[i] * wb[i];
  }
  return gx;
}

/// The cotangent of the operand of a scan by Op (Reverse: from the end) of the whole lines `g`
/// of x (x and g: [outer, len, inner]); out gets elements [a0, a1) of each line, laid out
/// [outer, a1 - a0, inner].
template <class Op, bool Reverse, class R>
void scan_vjp_block(R const* x, R const* g, scan_lines const& lines, std::size_t a0, std::size_t a1, R* out) {
  std::size_t const len = lines.len, inner = lines.inner, w = a1 - a0;
  std::vector<R> xl(len), gl(len);
  for (std::size_t o = 0; o < lines.outer; ++o)
    for (std::size_t j = 0; j < inner; ++j) {
      for (std::size_t i = 0; i < len; ++i) {
        std::size_t const s = Reverse ? len - 1 - i : i;  // lax.associative_scan(reverse=True) scans the flipped line
        xl[i] = x[(o * len + s) * inner + j];
        gl[i] = g[(o * len + s) * inner + j];
      }
      std::vector<R> const gx = tree_scan_vjp<Op>(xl, gl);
      for (std::size_t s = a0; s < a1; ++s)
        out[(o * w + (s - a0)) * inner + j] = gx[Reverse ? len - 1 - s : s];
    }
}

/// The cotangent of the operand xp of a scan by Op along `axis` for the result's cotangent g
/// (both laid out as xp): whole lines on each device (gathered where `axis` is sharded), each
/// device's block written from them.
template <class Op, std::size_t axis, bool Reverse, class XP, class G>
auto scan_vjp(XP xp, G g) {
  using in = operand_traits<XP>;
  using R = typename in::value_type;
  using Mesh = typename in::mesh_type;
  constexpr std::size_t N = in::rank;
  static constexpr auto spec = canonical_spec(in::spec);
  static constexpr auto whole = canonical_spec(unsharded_at(in::spec, axis));
  using A = array_with_spec<R, N, Mesh, spec>;
  using S = typename A::sharding_type;
  auto const shape = shape_of(xp);
  S const s(*mesh_of(xp));
  auto make = [xp, g, s, shape]() -> A {
    auto const xs = evaluated_as<whole>(xp);
    auto const gs = evaluated_as<whole>(g);
    return build_array<R, N, S>(s, shape, scan_name<Op>(), [&](std::size_t pos, std::array<slice, N> const& block, R* out) {
      scan_lines const lines = lines_of(xs.sharding().block(pos, shape), axis);
      scan_vjp_block<Op, Reverse, R>(xs.block_data(pos), gs.block_data(pos), lines, block[axis].start, block[axis].stop,
                                     out);
    });
  };
  auto plan = [xp, g](std::vector<collective_event>& out) {
    plan_as<whole>(xp, out);
    plan_as<whole>(g, out);
  };
  return computed<A>(s, shape, std::move(make), std::move(plan));
}

namespace ad {
/// The traced scan by Op of x along Axis.
template <class Op, int Axis, bool Reverse, class X>
auto traced_scan(X const& x) {
  static_assert(std::is_floating_point_v<typename X::value_type>,
                "tessera::grad: cumsum, cumprod, cummax and cummin are differentiated for floating operands only");
  constexpr std::size_t axis = normalize_axis(Axis, X::rank);
  return record(tape_of(x), make_scan<Op, Axis, Reverse>(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] {
      if constexpr (std::is_same_v<Op, op::sum>) return make_scan<op::sum, Axis, !Reverse>(g);
      else return scan_vjp<Op, axis, Reverse>(x.primal(), g);
    });
  });
}

/// The scan by Op of a local tracer (a device's block in a differentiated shard_map body).
template <class Op, int Axis, bool Reverse, class T, std::size_t N>
auto local_scan_of(local_tracer<T, N> const& x) {
  static_assert(axis_in_range(Axis, N), "tessera: the scan's axis is out of range for the block's rank");
  constexpr std::size_t axis = normalize_axis(Axis, N);
  auto const& xv = x.node()->value;
  scan_lines const lines = lines_of(xv.shape, axis);
  auto y = make_value<T>(xv.shape);
  scan_block<Op, Reverse, T, T>(xv.data(), y.data(), lines, nullptr);
  return local_record(std::move(y), x.node()->vma, [x, lines](local_value<T, N> g, axis_mask v) {
    auto gx = make_value<T>(g.shape);
    if constexpr (std::is_same_v<Op, op::sum>)
      scan_block<op::sum, !Reverse, T, T>(g.data(), gx.data(), lines, nullptr);
    else
      scan_vjp_block<Op, Reverse, T>(x.node()->value.data(), g.data(), lines, 0, lines.len, gx.data());
    x.node()->add(v, std::move(gx));
  }, scan_name<Op>());
}
}  // namespace ad

}  // namespace detail

/// jnp.cumsum of a tracer: the cotangent is the cumsum of g the other way round.
template <int Axis, bool Reverse = false, traced_value X>
auto cumsum(X const& x) {
  return detail::ad::traced_scan<op::sum, Axis, Reverse>(x);
}
/// jnp.cumprod of a tracer: JAX's gradient (through lax.associative_scan's tree; exact at zeros).
template <int Axis, bool Reverse = false, traced_value X>
auto cumprod(X const& x) {
  return detail::ad::traced_scan<op::prod, Axis, Reverse>(x);
}
/// jax.lax.cummax of a tracer: g to the running maximum's position, ties split as in JAX.
template <int Axis, bool Reverse = false, traced_value X>
auto cummax(X const& x) {
  return detail::ad::traced_scan<op::max, Axis, Reverse>(x);
}
/// jax.lax.cummin of a tracer: g to the running minimum's position, ties split as in JAX.
template <int Axis, bool Reverse = false, traced_value X>
auto cummin(X const& x) {
  return detail::ad::traced_scan<op::min, Axis, Reverse>(x);
}

/// jnp.cumsum in a differentiated shard_map body.
template <int Axis, bool Reverse = false, local_traced X>
auto cumsum(X const& x) {
  return detail::ad::local_scan_of<op::sum, Axis, Reverse>(x);
}
/// jnp.cumprod in a differentiated shard_map body.
template <int Axis, bool Reverse = false, local_traced X>
auto cumprod(X const& x) {
  return detail::ad::local_scan_of<op::prod, Axis, Reverse>(x);
}
/// jax.lax.cummax in a differentiated shard_map body.
template <int Axis, bool Reverse = false, local_traced X>
auto cummax(X const& x) {
  return detail::ad::local_scan_of<op::max, Axis, Reverse>(x);
}
/// jax.lax.cummin in a differentiated shard_map body.
template <int Axis, bool Reverse = false, local_traced X>
auto cummin(X const& x) {
  return detail::ad::local_scan_of<op::min, Axis, Reverse>(x);
}

}  // namespace tessera
