#pragma once
// jnp.expand_dims and jnp.squeeze: views that add or drop size-1 dimensions. A size-1
// dimension does not change how a block is laid out in memory, so neither copies anything:
// the node's cursor forwards to its operand's cursor with the dimension dropped or put back,
// and the view fuses with the element-wise operations around it (a reduction with keepdims is
// one of these over the reduction).

#include <array>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/core/diagnostics.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"

namespace tessera {

namespace detail {

/// A dimension named as NumPy names it (-1 the last) as an index below `rank`; `rank` when it
/// is out of range, which valid_axes then rejects.
constexpr std::size_t normalise_axis(int axis, std::size_t rank) {
  long const r = static_cast<long>(rank);
  long const a = axis < 0 ? axis + r : axis;
  return a < 0 || a >= r ? rank : static_cast<std::size_t>(a);
}

/// Axes (NumPy style) normalised against `rank`.
template <int... Axes>
constexpr std::array<std::size_t, sizeof...(Axes)> normalised_axes(std::size_t rank) {
  return {normalise_axis(Axes, rank)...};
}

/// The same axes sorted (the positions a keepdims result puts back).
template <std::size_t K>
constexpr std::array<std::size_t, K> sorted_axes(std::array<std::size_t, K> a) {
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t j = i + 1; j < K; ++j)
      if (a[j] < a[i]) std::swap(a[i], a[j]);
  return a;
}

/// The cursor of a unit view: the view's Q result dimensions mapped onto the operand's QI
/// (`to[i]` the operand dimension of result dimension i, -1 for an inserted one; operand
/// dimensions nothing maps to are dropped size-1 ones, read at 0). When the row dimensions
/// match, rows go straight through; when the view's row dimension is inserted, a row is one
/// value; otherwise (a dropped last dimension) each element sets the operand's row.
template <class Inner, std::size_t Q, std::size_t QI>
struct unit_view_cursor {
  using value_type = typename Inner::value_type;
  template <class U>
  static constexpr bool simd_ok = Inner::template simd_ok<U>;
  enum class row_kind { same, constant, remapped };

  mutable Inner inner;
  std::array<int, Q> to{};
  row_kind kind = row_kind::same;
  mutable shape_t<QI> idx{};
  value_type constant{};

  void set_row(shape_t<Q> const& o) {
    for (std::size_t i = 0; i + 1 < Q; ++i)
      if (to[i] >= 0) idx[static_cast<std::size_t>(to[i])] = o[i];
    if (kind != row_kind::remapped) inner.set_row(idx);
    if (kind == row_kind::constant) constant = inner.at(idx[QI - 1]);
  }
  value_type at(std::size_t k) const {
    if (kind == row_kind::same) return inner.at(k);
    if (kind == row_kind::constant) return constant;
    idx[static_cast<std::size_t>(to[Q - 1])] = k;
    inner.set_row(idx);
    return inner.at(idx[QI - 1]);
  }
  bool simd_row() const {
    if (kind == row_kind::same) return inner.simd_row();
    return kind == row_kind::constant;
  }
  template <class B>
  B load(std::size_t k) const {
    if (kind == row_kind::same) return inner.template load<B>(k);
    if (kind == row_kind::constant) return B(static_cast<typename B::value_type>(constant));
    alignas(64) typename B::value_type lanes[B::size];
    for (std::size_t i = 0; i < B::size; ++i) lanes[i] = static_cast<typename B::value_type>(at(k + i));
    return B::load_unaligned(lanes);
  }
};

/// Checks that the dimensions of an operand of shape `s` that a unit view drops (`kept` false)
/// have size 1 (plain values: compiled once, not once per view type).
inline void check_squeezed(std::span<std::size_t const> s, std::span<bool const> kept, char const* what) {
  for (std::size_t j = 0; j < s.size(); ++j)
    if (!kept[j] && s[j] != 1)
      throw std::invalid_argument(std::string("tessera::") + what + ": dimension " + std::to_string(j) +
                                  " of the operand of shape " + shape_string(s) + " has size " + std::to_string(s[j]) +
                                  ", and only a dimension of size 1 can be squeezed");
}

/// The spec of a unit view: an inserted dimension is None, the others keep their operand's entry.
template <auto Map, std::size_t N>
constexpr std::array<dim_spec, Map.size()> unit_view_spec(std::array<dim_spec, N> const& in) {
  std::array<dim_spec, Map.size()> out{};
  for (std::size_t j = 0; j < Map.size(); ++j)
    if (Map[j] >= 0) out[j] = in[static_cast<std::size_t>(Map[j])];
  return canonical_spec(out);
}

}  // namespace detail

/// A view of A with size-1 dimensions inserted (jnp.expand_dims) or dropped (jnp.squeeze):
/// result dimension j is the operand's Map[j], or a new size-1 dimension where Map[j] is -1;
/// the operand's dimensions Map does not name have size 1 and are dropped. Nothing is copied.
template <class A, auto Map>
class unit_view : public expression_tag {
  using in = detail::operand_traits<A>;

 public:
  using value_type = typename in::value_type;
  using mesh_type = typename in::mesh_type;
  static constexpr std::size_t rank = Map.size();
  static constexpr std::array<dim_spec, rank> spec = detail::unit_view_spec<Map>(in::spec);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;

  /// `what` names the operation in the error for a dropped dimension whose size is not 1.
  unit_view(A a, char const* what) : args_(std::move(a)) {
    static constexpr auto kept = [] {
      std::array<bool, in::rank> k{};
      for (std::size_t j = 0; j < in::rank; ++j) k[j] = named(j);
      return k;
    }();
    detail::check_squeezed(detail::shape_of(operand()), kept, what);
  }

  shape_t<rank> shape() const {
    auto const s = detail::shape_of(operand());
    shape_t<rank> out{};
    for (std::size_t j = 0; j < rank; ++j) out[j] = Map[j] < 0 ? 1 : s[static_cast<std::size_t>(Map[j])];
    return out;
  }
  mesh_type const& mesh() const { return *detail::mesh_of(operand()); }
  /// The viewed operand.
  A const& operand() const { return std::get<0>(args_); }
  /// As an element-wise node's: lets a pass schedule the values the operand reads.
  std::tuple<A> const& operands() const { return args_; }
  /// Evaluates the node into an array (one fused pass per device).
  auto evaluate() const { return detail::evaluate(*this); }
  /// The operand's collectives (the view itself is free).
  void plan(std::vector<collective_event>& out) const { detail::plan_of(operand(), out); }
  void prepare() const { detail::prepare(operand()); }

  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    constexpr std::size_t R = rank, RI = in::rank;
    constexpr std::size_t QI = Q - R + RI == 0 ? 1 : Q - R + RI;
    constexpr std::size_t lead = QI - RI - (Q - R);  // extra leading operand dimensions (a rank-0 operand)
    std::array<slice, QI> rbi{};
    shape_t<QI> rsi{};
    for (std::size_t i = 0; i < QI; ++i) {
      rbi[i] = slice{0, 1};
      rsi[i] = 1;
    }
    std::array<int, Q> to{};
    for (std::size_t i = 0; i < Q; ++i) {
      int t = -1;
      if (i < Q - R) t = static_cast<int>(i + lead);
      else if (Map[i - (Q - R)] >= 0) t = static_cast<int>(QI - RI) + Map[i - (Q - R)];
      to[i] = t;
      if (t >= 0) {
        rbi[static_cast<std::size_t>(t)] = rb[i];
        rsi[static_cast<std::size_t>(t)] = rs[i];
      }
    }
    using inner_t = decltype(detail::cursor_of<QI>(operand(), pos, rbi, rsi));
    detail::unit_view_cursor<inner_t, Q, QI> c{detail::cursor_of<QI>(operand(), pos, rbi, rsi), to};
    using kind = typename detail::unit_view_cursor<inner_t, Q, QI>::row_kind;
    c.kind = to[Q - 1] < 0                                  ? kind::constant
             : static_cast<std::size_t>(to[Q - 1]) == QI - 1 ? kind::same
                                                             : kind::remapped;
    return c;
  }

 private:
  static constexpr bool named(std::size_t j) {
    for (int m : Map)
      if (m == static_cast<int>(j)) return true;
    return false;
  }
  std::tuple<A> args_;
};

namespace detail {

/// Map of a view that inserts size-1 dimensions at `at` (positions in the result, distinct).
template <std::size_t R, std::size_t K>
constexpr std::array<int, R> inserting_map(std::array<std::size_t, K> const& at) {
  std::array<int, R> m{};
  int next = 0;
  for (std::size_t j = 0; j < R; ++j) {
    bool added = false;
    for (std::size_t a : at) added = added || a == j;
    m[j] = added ? -1 : next++;
  }
  return m;
}

/// Map of a view that drops the operand's dimensions `drop` (distinct, below N).
template <std::size_t N, std::size_t K>
constexpr std::array<int, N - K> dropping_map(std::array<std::size_t, K> const& drop) {
  std::array<int, N - K> m{};
  for (std::size_t i = 0, j = 0; i < N; ++i) {
    bool dropped = false;
    for (std::size_t d : drop) dropped = dropped || d == i;
    if (!dropped) m[j++] = static_cast<int>(i);
  }
  return m;
}

/// x with size-1 dimensions inserted at the result positions `At` (sorted or not, distinct).
template <auto At, class S>
auto insert_unit_dims(S x) {
  constexpr std::size_t R = operand_traits<S>::rank + At.size();
  return unit_view<S, inserting_map<R>(At)>(std::move(x), "expand_dims");
}

}  // namespace detail

/// jnp.expand_dims(x, axis=(Axes...)): size-1 dimensions at the result positions Axes (-1 the
/// last), their spec None; the other dimensions keep theirs (JAX's broadcast_in_dim rule). A
/// view: nothing is copied, and it fuses with the operations around it.
template <int... Axes, sharded_expression X>
auto expand_dims(X const& x) {
  using S = detail::stored_t<X const&>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  constexpr std::size_t K = sizeof...(Axes);
  constexpr auto at = detail::normalised_axes<Axes...>(N + K);
  constexpr bool ok = K > 0 && detail::valid_axes(at, N + K);
  static_assert(diagnostic::expand_dims_axes_must_be_distinct_dimensions_of_the_result<N + K, ok>::value);
  if constexpr (ok) return detail::insert_unit_dims<at>(S(x));
  else return detail::failed_expression<typename detail::operand_traits<S>::value_type, N + K,
                                        typename detail::operand_traits<S>::mesh_type>{};
}

/// jnp.squeeze(x, axis=(Axes...)): the size-1 dimensions Axes (-1 the last) dropped with their
/// specs; a run-time error names the shape when one of them is not 1. A sharded size-1
/// dimension is made whole first (only one device holds its element). A view otherwise.
template <int... Axes, sharded_expression X>
auto squeeze(X const& x) {
  using S = detail::stored_t<X const&>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  constexpr std::size_t K = sizeof...(Axes);
  constexpr auto drop = detail::normalised_axes<Axes...>(N);
  constexpr bool ok = K > 0 && detail::valid_axes(drop, N);
  static_assert(diagnostic::squeeze_axes_must_be_distinct_dimensions_of_the_operand<N, ok>::value);
  if constexpr (ok) {
    constexpr auto map = detail::dropping_map<N>(drop);
    constexpr auto whole = detail::canonical_spec([&] {
      auto s = detail::operand_traits<S>::spec;
      for (std::size_t d : drop) s[d] = dim_spec{};
      return s;
    }());
    if constexpr (whole == detail::operand_traits<S>::spec) {
      return unit_view<S, map>(S(x), "squeeze");
    } else {
      using R = resharded<S, whole>;
      return unit_view<R, map>(R(S(x)), "squeeze");
    }
  } else {
    return detail::failed_expression<typename detail::operand_traits<S>::value_type, (K <= N ? N - K : 0),
                                     typename detail::operand_traits<S>::mesh_type>{};
  }
}

}  // namespace tessera
