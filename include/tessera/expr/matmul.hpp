#pragma once
// The contraction and constraint functions users call (jnp.matmul, jnp.dot,
// jax.lax.with_sharding_constraint): the sharding of the product is decided
// here, at compile time, by the contraction rule (core/sharding_rules.hpp).

#include <array>
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "tessera/core/diagnostics.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/expr/contraction.hpp"
#include "tessera/expr/functions.hpp"

namespace tessera {

namespace detail {

/// The operand with spec `Target`: as it is, or resharded.
template <auto Target, class X>
auto move_to(X x) {
  if constexpr (operand_traits<X>::spec == Target) return x;
  else return resharded<X, canonical_spec(Target)>(std::move(x));
}

/// The operand in element type T: as it is, or converted (jnp.matmul promotes first).
template <class T, class X>
auto as_type(X x) {
  if constexpr (std::is_same_v<typename operand_traits<X>::value_type, T>) return x;
  else return make_elementwise<op::convert, T, T>(std::move(x));
}

/// The mesh's axes with every type Auto: the contraction rule then settles every clash.
template <std::size_t M>
constexpr std::array<mesh_axis, M> as_auto_axes(std::array<mesh_axis, M> axes) {
  for (auto& a : axes) a.type = axis_type::auto_;
  return axes;
}

/// matmul's body; OutGiven: an out_sharding follows, so no conflict is an error.
template <bool OutGiven, sharded_expression A, sharded_expression B>
auto matmul_product(A&& a, B&& b) {
  using SA = stored_t<A>;
  using SB = stored_t<B>;
  using ta = operand_traits<SA>;
  using tb = operand_traits<SB>;
  using Mesh = typename ta::mesh_type;
  using T = promote_t<typename ta::value_type, typename tb::value_type>;
  constexpr bool ranks_ok = ta::rank >= 1 && tb::rank >= 1 && !std::is_same_v<T, bool>;
  constexpr bool same_mesh = std::is_same_v<Mesh, typename tb::mesh_type>;
  // What a failed check returns (jnp.matmul's result rank), so that our error is the only one.
  constexpr std::size_t ra = ta::rank, rb = tb::rank;
  using failed = failed_expression<
      T, (ra == 0 || rb == 0) ? 0 : ra == 1 ? rb - 1 : rb == 1 ? ra - 1 : (ra > rb ? ra : rb), Mesh>;
  if constexpr (is_failed_expression<SA>::value || is_failed_expression<SB>::value) {
    return failed{};  // an operand's check has failed already: no second error
  } else if constexpr (!ranks_ok) {
    static_assert(diagnostic::matmul_operands_must_be_numeric_arrays_of_rank_at_least_1<ta::rank, tb::rank,
                                                                                         ranks_ok>::value);
    return failed{};
  } else if constexpr (!same_mesh) {
    static_assert(diagnostic::operands_must_be_on_the_same_mesh<Mesh, typename tb::mesh_type, same_mesh>::value);
    return failed{};
  } else {
    // With an out_sharding, JAX checks nothing (the result is that sharding): conflicts are
    // settled as on Auto axes, the right operand giving way.
    constexpr auto rule = contract_rule(ta::spec, tb::spec, OutGiven ? as_auto_axes(Mesh::axes) : Mesh::axes);
    if constexpr (rule.explicit_error && rule.error == contract_error::contracting_conflict) {
      static_assert(diagnostic::matmul_contracting_dimension_sharded_on_different_axes<rule.left.axis(0),
                                                                                        rule.right.axis(0), false>::value);
      return failed{};
    } else if constexpr (rule.explicit_error && rule.error == contract_error::batch_conflict) {
      static_assert(diagnostic::matmul_batch_dimension_sharded_on_different_axes<rule.dim, rule.left.axis(0),
                                                                                  rule.right.axis(0), false>::value);
      return failed{};
    } else if constexpr (rule.explicit_error && rule.error == contract_error::repeated_axis) {
      static_assert(
          diagnostic::matmul_result_would_use_a_mesh_axis_twice<rule.dim, rule.right.axis(0), false>::value);
      return failed{};
    } else {
      auto xa = move_to<rule.a>(as_type<T>(store(std::forward<A>(a))));
      auto xb = move_to<rule.b>(as_type<T>(store(std::forward<B>(b))));
      return tessera::contraction<decltype(xa), decltype(xb)>(std::move(xa), std::move(xb));
    }
  }
}

}  // namespace detail

/// jnp.matmul(a, b) (a @ b): vector-vector, matrix-vector, vector-matrix, matrix-matrix and
/// batched products. Batch dimensions must be sharded alike; the rows of a and the columns of
/// b keep their sharding; a contracting dimension sharded on one side, or alike on both, makes
/// the local products partial sums over its axes, summed when the result is used (an
/// all-reduce into the replicated default, a reduce-scatter under a sharded constraint).
/// On Explicit axes a conflict fails to compile; on Auto axes the right operand is resharded.
template <sharded_expression A, sharded_expression B>
auto matmul(A&& a, B&& b) {
  return detail::matmul_product<false>(std::forward<A>(a), std::forward<B>(b));
}

/// jnp.matmul(a, b, out_sharding=P(...)): the product laid out by `out`, on any axes. As in
/// JAX, nothing is refused: operands that clash are resharded (the right one gives way), and
/// partial sums go straight to `out` (a reduce-scatter where it splits their axes).
template <sharded_expression A, sharded_expression B, dim_spec... D>
auto matmul(A&& a, B&& b, P<D...> out) {
  auto product = detail::matmul_product<true>(std::forward<A>(a), std::forward<B>(b));
  if constexpr (detail::is_failed_expression<decltype(product)>::value) return product;
  else return reshard(std::move(product), out);
}

/// jnp.dot(a, b): matmul for operands of rank 1 and 2 (jnp.dot's N-d outer batching is not
/// provided; use matmul for batched products).
template <sharded_expression A, sharded_expression B>
auto dot(A&& a, B&& b) {
  constexpr std::size_t ra = detail::operand_traits<detail::stored_t<A>>::rank;
  constexpr std::size_t rb = detail::operand_traits<detail::stored_t<B>>::rank;
  static_assert(ra <= 2 && rb <= 2,
                "tessera::dot: operands of rank 3 or more; jnp.dot's N-d product (an outer product over the batch "
                "dimensions) is not provided, use tessera::matmul for batched products");
  return matmul(std::forward<A>(a), std::forward<B>(b));
}

/// jnp.dot(a, b, out_sharding=P(...)): as matmul(a, b, out) for operands of rank 1 and 2.
template <sharded_expression A, sharded_expression B, dim_spec... D>
auto dot(A&& a, B&& b, P<D...> out) {
  constexpr std::size_t ra = detail::operand_traits<detail::stored_t<A>>::rank;
  constexpr std::size_t rb = detail::operand_traits<detail::stored_t<B>>::rank;
  static_assert(ra <= 2 && rb <= 2,
                "tessera::dot: operands of rank 3 or more; jnp.dot's N-d product (an outer product over the batch "
                "dimensions) is not provided, use tessera::matmul for batched products");
  return matmul(std::forward<A>(a), std::forward<B>(b), out);
}

/// jax.lax.with_sharding_constraint(x, sharding): x (an array or an expression) laid out by
/// `sharding` on its own mesh. Partial sums go there directly: a reduce-scatter where the
/// sharding splits their axes, an all-reduce where it replicates them.
template <sharded_expression X, class M, dim_spec... D>
auto with_sharding_constraint(X&& x, named_sharding<M, P<D...>> const& s) {
  using S = detail::stored_t<X>;
  static_assert(diagnostic::operands_must_be_on_the_same_mesh<typename detail::operand_traits<S>::mesh_type, M,
                                                              std::is_same_v<typename detail::operand_traits<S>::mesh_type, M>>::value);
  auto const& m = *detail::mesh_of(x);
  if (!(m == s.mesh())) {
    std::ostringstream os;
    os << "tessera::with_sharding_constraint: the value is on mesh " << m << " and the sharding on mesh " << s.mesh()
       << "; device_put it onto the sharding's mesh";
    throw std::invalid_argument(os.str());
  }
  return reshard(std::forward<X>(x), P<D...>{});
}

}  // namespace tessera
