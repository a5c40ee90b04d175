#pragma once
// The indexing operations on local tracers (a shard_map body under grad), with the names of
// parallel/block_indexing.hpp: take, vocab_parallel_take (Megatron's embedding body) and
// take_along_axis, whose transposes scatter-add g at the rows the indices picked (nothing for
// an index out of range, which took the fill value), and tril/triu, whose transposes mask g
// alike. The indices are a local tracer of integers (an argument of the shard_map); they get
// no cotangent. Nothing here communicates.

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/parallel/block_indexing.hpp"

namespace tessera {

namespace detail::ad {

template <class Ids>
concept local_indices = local_traced<Ids> && std::is_integral_v<typename Ids::value_type>;

/// take along A with `pick(id, row, fill)` (as detail::take_values), recorded: g scatter-added
/// into zeros of the table's shape at the picked rows.
template <std::size_t A, class T, std::size_t NT, class I, std::size_t NI, class Pick>
auto recorded_take(local_tracer<T, NT> const& table, local_tracer<I, NI> const& ids, Pick pick, char const* what) {
  constexpr std::size_t NO = NT - 1 + NI;
  auto y = take_values<A>(table.node()->value, ids.node()->value, pick);
  return local_record(std::move(y), table.node()->vma | ids.node()->vma,
                      [table, ids, pick](local_value<T, NO> g, axis_mask m) {
                        auto const& iv = ids.node()->value;
                        auto gt = make_value<T>(table.shape());
                        for_each_index(g.shape, [&](std::array<std::size_t, NO> const& o, std::size_t k) {
                          std::size_t r = 0;
                          T fill{};
                          if (pick(iv.v[flat_of(index_part<A, NT, NI>(o), iv.shape)], r, fill))
                            gt.v[flat_of(table_index<A, NT, NI>(o, r), gt.shape)] += g.v[k];
                        });
                        table.node()->add(m, std::move(gt));
                      },
                      what);
}

template <bool Lower, class T, std::size_t N>
void triangle_mask(local_value<T, N>& v, long long k) {
  std::size_t const R = v.shape[N - 2], C = v.shape[N - 1];
  for (std::size_t f = 0; f < v.v.size(); ++f) {
    long long const d = static_cast<long long>(f % C) - static_cast<long long>(f / C % R);
    if (Lower ? d > k : d < k) v.v[f] = T(0);
  }
}

template <bool Lower, class T, std::size_t N>
local_tracer<T, N> triangle(local_tracer<T, N> const& x, long long k) {
  static_assert(diagnostic::tril_triu_need_rank_at_least_2<N, (N >= 2)>::value);
  auto y = x.node()->value;
  if constexpr (N >= 2) triangle_mask<Lower>(y, k);
  return local_record(std::move(y), x.node()->vma, [x, k](local_value<T, N> g, axis_mask m) {
    if constexpr (N >= 2) triangle_mask<Lower>(g, k);
    x.node()->add(m, std::move(g));
  }, Lower ? "tril" : "triu");
}

}  // namespace detail::ad

/// jnp.take(table, ids, axis=Axis) of local tracers (fill mode: NaN for an index out of range):
/// the table's cotangent is g scatter-added at the rows taken.
template <int Axis = 0, local_traced Table, local_traced Ids>
auto take(Table const& table, Ids const& ids) {
  constexpr std::size_t NT = Table::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, NT, detail::axis_in_range(Axis, NT)>::value);
  static_assert(diagnostic::indices_must_be_integers<typename Ids::value_type,
                                                     std::is_integral_v<typename Ids::value_type>>::value);
  using T = typename Table::value_type;
  constexpr std::size_t A = detail::normalize_axis(Axis, NT);
  std::size_t const n = table.shape()[A];
  return detail::ad::recorded_take<A>(table, ids, [n](auto id, std::size_t& r, T& fill) {
    r = detail::normalized_index(id, n);
    fill = detail::take_fill<T>();
    return r < n;
  }, "take");
}

/// Megatron's VocabParallelEmbedding body on local tracers: this device's rows are
/// [first_row, first_row + rows) of the whole table; other ids give 0 and no cotangent. psum the
/// result over the table's axis (its transpose gives every device the whole g).
template <local_traced Table, detail::ad::local_indices Ids>
auto vocab_parallel_take(Table const& table, Ids const& ids, std::size_t first_row) {
  static_assert(Table::rank >= 1, "tessera::vocab_parallel_take: the table needs a row dimension");
  using T = typename Table::value_type;
  std::size_t const rows = table.shape()[0];
  return detail::ad::recorded_take<0>(table, ids, [rows, first_row](auto id, std::size_t& r, T& fill) {
    fill = T(0);
    if (id < decltype(id)(0) || static_cast<unsigned long long>(id) < first_row) return false;
    auto const local = static_cast<unsigned long long>(id) - first_row;
    if (local >= rows) return false;
    r = static_cast<std::size_t>(local);
    return true;
  }, "vocab_parallel_take");
}

/// jnp.take_along_axis(x, ids, axis=Axis) of local tracers: x's cotangent is g scatter-added at
/// the positions taken.
template <int Axis, local_traced X, local_traced Ids>
auto take_along_axis(X const& x, Ids const& ids) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::take_along_axis_ranks_must_match<N, Ids::rank, N == Ids::rank>::value);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  static_assert(diagnostic::indices_must_be_integers<typename Ids::value_type,
                                                     std::is_integral_v<typename Ids::value_type>>::value);
  using T = typename X::value_type;
  constexpr std::size_t A = detail::normalize_axis(Axis, N);
  auto const& xv = x.node()->value;
  auto const& iv = ids.node()->value;
  for (std::size_t d = 0; d < N; ++d)
    if (d != A && xv.shape[d] != iv.shape[d])
      throw std::invalid_argument("tessera::take_along_axis in a shard_map body: blocks of shapes " +
                                  detail::shape_string(xv.shape) + " and " + detail::shape_string(iv.shape) +
                                  " differ in dimension " + std::to_string(d));
  std::size_t const n = xv.shape[A];
  // The position in x of result element k, or nothing (n) where the index is out of range.
  auto source = [n](auto const& xs, auto const& is, std::array<std::size_t, N> g, std::size_t k) -> std::size_t {
    std::size_t const r = detail::normalized_index(is.v[k], n);
    if (r == n) return xs.v.size();
    g[A] = r;
    return detail::flat_of(g, xs.shape);
  };
  auto y = detail::make_value<T>(iv.shape);
  detail::for_each_index(iv.shape, [&](std::array<std::size_t, N> const& g, std::size_t k) {
    std::size_t const s = source(xv, iv, g, k);
    y.v[k] = s == xv.v.size() ? detail::take_fill<T>() : xv.v[s];
  });
  return detail::ad::local_record(
      std::move(y), x.node()->vma | ids.node()->vma,
      [x, ids, source](detail::local_value<T, N> g, detail::ad::axis_mask m) {
        auto const& xv2 = x.node()->value;
        auto const& iv2 = ids.node()->value;
        auto gx = detail::make_value<T>(xv2.shape);
        detail::for_each_index(g.shape, [&](std::array<std::size_t, N> const& o, std::size_t k) {
          std::size_t const s = source(xv2, iv2, o, k);
          if (s != gx.v.size()) gx.v[s] += g.v[k];
        });
        x.node()->add(m, std::move(gx));
      },
      "take_along_axis");
}

/// jnp.tril(x, k) of a local tracer: g masked alike.
template <local_traced X>
auto tril(X const& x, long long k = 0) {
  return detail::ad::triangle<true>(x, k);
}
/// jnp.triu(x, k) of a local tracer: g masked alike.
template <local_traced X>
auto triu(X const& x, long long k = 0) {
  return detail::ad::triangle<false>(x, k);
}

}  // namespace tessera
