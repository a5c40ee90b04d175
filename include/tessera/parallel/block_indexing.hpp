#pragma once
// The indexing operations on a device's blocks inside shard_map (jax.lax.broadcasted_iota,
// jnp.tril/triu, jax.nn.one_hot, jnp.take, jnp.take_along_axis on the per-device values of a
// shard_map'd body): the same names as the global view, computing on the block alone with the
// block's own indices, as JAX's do inside shard_map. Each result owns its values and keeps its
// operands' vma (an iota is the same on every device). Out-of-range indices follow jnp.take's
// "fill" mode, as in the global view.
//
// vocab_parallel_take is the body of Megatron's VocabParallelEmbedding: each device looks up
// the ids that fall in its rows [first_row, first_row + rows) and writes 0 for the others; a
// psum over the table's axis then gives the lookup (the global take does this by itself).

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/expr/indexing.hpp"
#include "tessera/parallel/block_functions.hpp"
#include "tessera/parallel/block_math.hpp"

namespace tessera {
namespace detail {

/// Calls f(index, k) for every element of shape s in row-major order.
template <std::size_t N, class F>
void for_each_index(shape_t<N> const& s, F&& f) {
  std::array<slice, N> b{};
  for (std::size_t d = 0; d < N; ++d) b[d] = slice{0, s[d]};
  for_each_in_block(b, std::forward<F>(f));
}

template <std::size_t N>
std::size_t flat_of(std::array<std::size_t, N> const& g, shape_t<N> const& s) {
  std::size_t f = 0;
  for (std::size_t d = 0; d < N; ++d) f = f * s[d] + g[d];
  return f;
}

template <bool Lower, class X>
auto triangle_block(X const& x, long long k) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(diagnostic::tril_triu_need_rank_at_least_2<N, (N >= 2)>::value);
  auto v = values_of(x);
  using T = typename decltype(v)::value_type;
  if constexpr (N >= 2) {
    std::size_t const R = v.shape[N - 2], C = v.shape[N - 1];
    for (std::size_t f = 0; f < v.v.size(); ++f) {
      long long const d = static_cast<long long>(f % C) - static_cast<long long>(f / C % R);
      if (Lower ? d > k : d < k) v.v[f] = T(0);
    }
  }
  return plain_result<plain_vma<X>>(std::move(v));
}

/// A take from `t` (table values) at `ids`, along A; `fill(r)` gives the value for a row r
/// outside [lo, hi) (n when out of range), `row(r)` maps an accepted index to the block's row.
template <std::size_t A, class T, std::size_t NT, class I, std::size_t NI, class Pick>
local_value<T, NT - 1 + NI> take_values(local_value<T, NT> const& t, local_value<I, NI> const& ids, Pick pick) {
  constexpr std::size_t NO = NT - 1 + NI;
  auto const out_shape = take_shape<A, NT, NI>(t.shape, ids.shape);
  auto out = make_value<T>(out_shape);
  // The table's dimensions after A are the result's last ones: one contiguous run per index.
  constexpr std::size_t lead = A + NI;
  std::size_t run = 1;
  for (std::size_t d = A + 1; d < NT; ++d) run *= t.shape[d];
  if (run == 0) return out;
  shape_t<lead> head{};
  for (std::size_t d = 0; d < lead; ++d) head[d] = out_shape[d];
  for_each_index(head, [&](std::array<std::size_t, lead> const& h, std::size_t k) {
    std::array<std::size_t, NO> g{};
    for (std::size_t d = 0; d < lead; ++d) g[d] = h[d];
    std::size_t r = 0;
    T fill{};
    T* o = out.v.data() + k * run;
    if (pick(ids.v[flat_of(index_part<A, NT, NI>(g), ids.shape)], r, fill))
      std::copy_n(t.v.data() + flat_of(table_index<A, NT, NI>(g, r), t.shape), run, o);
    else
      std::fill(o, o + run, fill);
  });
  return out;
}

template <class X, class I>
using plain_vma_of2 = vma_type_t<join(vma_of<std::remove_cvref_t<X>>::value, vma_of<std::remove_cvref_t<I>>::value)>;

}  // namespace detail

/// jnp.tril(blk, k) in a shard_map body: the block's own rows and columns.
template <plain_block X>
auto tril(X const& x, long long k = 0) {
  return detail::triangle_block<true>(x, k);
}
/// jnp.triu(blk, k) in a shard_map body.
template <plain_block X>
auto triu(X const& x, long long k = 0) {
  return detail::triangle_block<false>(x, k);
}

/// jax.lax.broadcasted_iota(T, shape, Dim) in a shard_map body: the same on every device.
template <element_type T, int Dim, std::size_t N>
auto iota(shape_t<N> const& shape) {
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Dim, Dim, N, detail::axis_in_range(Dim, N)>::value);
  constexpr std::size_t D = detail::normalize_axis(Dim, N);
  auto v = detail::make_value<T>(shape);
  detail::for_each_index(shape, [&](std::array<std::size_t, N> const& g, std::size_t k) { v.v[k] = static_cast<T>(g[D]); });
  return detail::plain_result<detail::invariant_vma>(std::move(v));
}

/// jax.nn.one_hot(blk, classes, dtype=T) in a shard_map body: float32 by default.
template <element_type T = float, plain_block X>
auto one_hot(X const& x, std::size_t classes) {
  constexpr std::size_t N = static_rank_v<X>;
  auto const v = detail::values_of(x);
  shape_t<N + 1> s{};
  for (std::size_t d = 0; d < N; ++d) s[d] = v.shape[d];
  s[N] = classes;
  auto out = detail::make_value<T>(s);
  for (std::size_t i = 0; i < v.v.size(); ++i)
    for (std::size_t c = 0; c < classes; ++c) out.v[i * classes + c] = detail::equals_class(v.v[i], c) ? T(1) : T(0);
  return detail::plain_result<detail::plain_vma<X>>(std::move(out));
}

/// jnp.take(table_blk, ids_blk, axis=Axis) in a shard_map body (fill mode: NaN for floats).
template <int Axis = 0, plain_block Table, plain_block Ids>
auto take(Table const& table, Ids const& ids) {
  constexpr std::size_t NT = static_rank_v<Table>;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, NT, detail::axis_in_range(Axis, NT)>::value);
  constexpr std::size_t A = detail::normalize_axis(Axis, NT);
  auto const t = detail::values_of(table);
  auto const i = detail::values_of(ids);
  using T = typename decltype(t)::value_type;
  static_assert(diagnostic::indices_must_be_integers<typename decltype(i)::value_type,
                                                     std::is_integral_v<typename decltype(i)::value_type>>::value);
  std::size_t const n = t.shape[A];
  auto out = detail::take_values<A>(t, i, [n](auto id, std::size_t& r, T& fill) {
    r = detail::normalized_index(id, n);
    fill = detail::take_fill<T>();
    return r < n;
  });
  return detail::plain_result<detail::plain_vma_of2<Table, Ids>>(std::move(out));
}

/// Megatron's VocabParallelEmbedding body: this device's rows are [first_row, first_row + rows)
/// of the whole table; ids outside them (or out of range) give 0. psum over the table's axis.
template <plain_block Table, plain_block Ids>
auto vocab_parallel_take(Table const& table, Ids const& ids, std::size_t first_row) {
  auto const t = detail::values_of(table);
  auto const i = detail::values_of(ids);
  using T = typename decltype(t)::value_type;
  std::size_t const rows = t.shape[0];
  auto out = detail::take_values<0>(t, i, [rows, first_row](auto id, std::size_t& r, T& fill) {
    fill = T(0);
    if (id < decltype(id)(0) || static_cast<unsigned long long>(id) < first_row) return false;
    auto const local = static_cast<unsigned long long>(id) - first_row;
    if (local >= rows) return false;
    r = static_cast<std::size_t>(local);
    return true;
  });
  return detail::plain_result<detail::plain_vma_of2<Table, Ids>>(std::move(out));
}

/// jnp.take_along_axis(blk, ids_blk, axis=Axis) in a shard_map body.
template <int Axis, plain_block X, plain_block Ids>
auto take_along_axis(X const& x, Ids const& ids) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(diagnostic::take_along_axis_ranks_must_match<N, static_rank_v<Ids>, N == static_rank_v<Ids>>::value);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  constexpr std::size_t A = detail::normalize_axis(Axis, N);
  auto const xv = detail::values_of(x);
  auto const iv = detail::values_of(ids);
  using T = typename decltype(xv)::value_type;
  for (std::size_t d = 0; d < N; ++d)
    if (d != A && xv.shape[d] != iv.shape[d])
      throw std::invalid_argument("tessera::take_along_axis in a shard_map body: blocks of shapes " +
                                  detail::shape_string(xv.shape) + " and " + detail::shape_string(iv.shape) +
                                  " differ in dimension " + std::to_string(d));
  std::size_t const n = xv.shape[A];
  auto out = detail::make_value<T>(iv.shape);
  detail::for_each_index(iv.shape, [&](std::array<std::size_t, N> const& g, std::size_t k) {
    std::size_t const r = detail::normalized_index(iv.v[k], n);
    if (r == n) {
      out.v[k] = detail::take_fill<T>();
    } else {
      auto gx = g;
      gx[A] = r;
      out.v[k] = xv.v[detail::flat_of(gx, xv.shape)];
    }
  });
  return detail::plain_result<detail::plain_vma_of2<X, Ids>>(std::move(out));
}

}  // namespace tessera
