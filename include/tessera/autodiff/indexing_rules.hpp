#pragma once
// The indexing operations on tracers (expr/indexing.hpp), with their transposes: take's and
// take_along_axis's cotangents are scatter-adds of g into zeros of the operand's shape, each
// device adding the rows (elements) it owns from its own block of g, so nothing moves but the
// one sum over the mesh axes the indices were sharded on (the partial sums their devices hold);
// tril's and triu's are the same mask on g. iota, arange and one_hot take no traced input
// (one_hot's is an integer), as their JAX derivatives are zero.

#include <cstddef>
#include <type_traits>

#include "tessera/autodiff/rules.hpp"
#include "tessera/expr/indexing.hpp"

namespace tessera {

/// jnp.take of a traced table: the table's cotangent is g scatter-added at the indexed rows, in
/// the table's layout (a vocab-sharded table's devices each add their own rows).
template <int Axis = 0, traced_value Table, sharded_expression Ids>
auto take(Table const& table, Ids const& indices) {
  using namespace detail::ad;
  using A = typename Table::array_type;
  auto const ids = detail::store(indices);
  return record(tape_of(table), tessera::take<Axis>(primal_of(table), ids), [table, ids](auto const& g, auto const&) {
    constexpr std::size_t Ax = detail::normalize_axis(Axis, A::rank);
    contribute(table, [&] { return detail::take_transpose<Ax, A>(g, ids, table.sharding(), table.shape()); });
  });
}

/// jnp.take_along_axis of a traced x: g scatter-added at the indexed positions.
template <int Axis, traced_value X, sharded_expression Ids>
auto take_along_axis(X const& x, Ids const& indices) {
  using namespace detail::ad;
  using A = typename X::array_type;
  auto const ids = detail::store(indices);
  return record(tape_of(x), tessera::take_along_axis<Axis>(primal_of(x), ids), [x, ids](auto const& g, auto const&) {
    constexpr std::size_t Ax = detail::normalize_axis(Axis, A::rank);
    contribute(x, [&] { return detail::take_along_axis_transpose<Ax, A>(g, ids, x.sharding(), x.shape()); });
  });
}

/// jnp.tril of a tracer: the same mask on g.
template <traced_value X>
auto tril(X const& x, long long k = 0) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::tril(primal_of(x), k), [x, k](auto const& g, auto const&) {
    contribute(x, [&] { return tessera::tril(g, k); });
  });
}
/// jnp.triu of a tracer: the same mask on g.
template <traced_value X>
auto triu(X const& x, long long k = 0) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::triu(primal_of(x), k), [x, k](auto const& g, auto const&) {
    contribute(x, [&] { return tessera::triu(g, k); });
  });
}

}  // namespace tessera
