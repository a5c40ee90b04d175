#pragma once
// The operations users write on sharded arrays (jnp's names): operators,
// math functions, where, astype, reductions and transpose. Each builds an
// expression node; its sharding is decided here, at compile time, by the
// rules of core/sharding_rules.hpp.

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "tessera/core/diagnostics.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/ops.hpp"
#include "tessera/expr/promote.hpp"
#include "tessera/expr/reduction.hpp"

namespace tessera {

/// A sharded expression or a number: what the operations accept.
template <class X>
concept expression_operand = sharded_expression<X> || std::is_arithmetic_v<std::remove_cvref_t<X>>;

/// Types that bring their own operators for sharded operands (the tracers of grad, in
/// autodiff/tracer.hpp): mixing one with an array is not the "not an operand" error below.
template <class T>
inline constexpr bool has_own_operators = false;

namespace detail {

/// The combined rule over every operand, folded left to right; an Auto conflict keeps the
/// sharding of the operand of higher rank (the other one, broadcast, moves fewer bytes), the
/// left one when the ranks are equal.
template <std::size_t M, std::size_t RA>
constexpr auto combine_all(std::array<mesh_axis, M> const&, combine_result<RA> const& acc) {
  return acc;
}
template <std::size_t M, std::size_t RA, std::size_t RB, class... Rest>
constexpr auto combine_all(std::array<mesh_axis, M> const& axes, combine_result<RA> const& acc,
                           std::array<dim_spec, RB> const& b, Rest const&... rest) {
  auto r = combine_elementwise(acc.dims, b, axes, RA >= RB);
  constexpr std::size_t R = RA > RB ? RA : RB;
  if (acc.error != combine_error::none) {
    r.error = acc.error;
    r.dim = acc.dim + (R - RA);
    r.left = acc.left;
    r.right = acc.right;
  }
  r.explicit_error = r.explicit_error || acc.explicit_error;
  return combine_all(axes, r, rest...);
}

/// Whether operand X lives on Mesh (a number lives on any).
template <class Mesh, class X>
inline constexpr bool on_mesh = std::is_void_v<typename operand_traits<X>::mesh_type> ||
                                std::is_same_v<Mesh, typename operand_traits<X>::mesh_type>;

/// The operand as the node stores it: resharded when it does not fit the result's spec. Taken
/// by reference and moved once into the result (a parameter by value would be one more object
/// to destroy, per operand of every node type).
template <auto Result, class X>
auto fit(X&& x) {
  using V = std::remove_cvref_t<X>;
  constexpr auto s = operand_traits<V>::spec;
  if constexpr (is_scalar_operand<V>::value || fits(s, Result)) return V(std::forward<X>(x));
  else return resharded<V, canonical_spec(reshard_target(s, Result))>(std::forward<X>(x));
}

/// The element-wise node of Op over stored operands, computing in C and giving R.
template <class Op, class C, class R, class... X>
auto make_elementwise(X... x) {
  using Mesh = first_mesh_t<X...>;
  static_assert(!std::is_void_v<Mesh>, "tessera: internal: an expression needs one sharded operand");
  constexpr auto rule = combine_all(Mesh::axes, combine_result<0>{}, operand_traits<X>::spec...);
  using failed = failed_expression<R, std::max({std::size_t{0}, operand_traits<X>::rank...}), Mesh>;
  if constexpr ((is_failed_expression<X>::value || ...)) {
    return failed{};  // an operand's check has failed already: no second error
  } else if constexpr (!(on_mesh<Mesh, X> && ...)) {
    // Only this error: the sharding rule means nothing across meshes.
    static_assert((diagnostic::operands_must_be_on_the_same_mesh<Mesh, typename operand_traits<X>::mesh_type,
                                                                 on_mesh<Mesh, X>>::value &&
                   ...));
    return failed{};
  } else if constexpr (rule.error == combine_error::conflict && rule.explicit_error) {
    // The message is here, not in a class template, so clang prints one note fewer (issue 14).
    static_assert(diagnostic::operands_shard_a_dimension_on_different_axes<Op, rule.dim, rule.left.axis(0),
                                                                          rule.right.axis(0)>,
                  "tessera: an element-wise operation's operands shard the same dimension on different mesh axes "
                  "(the operation, the result dimension and the axes of the left and right operands are the "
                  "arguments of 'operands_shard_a_dimension_on_different_axes<op, dim, left, right>'); "
                  "reshard one of them: tessera::reshard(x, tessera::P<...>{})");
    return failed{};
  } else if constexpr (rule.error == combine_error::repeated_axis && rule.explicit_error) {
    static_assert(diagnostic::result_would_use_a_mesh_axis_twice<Op, rule.dim, rule.right.axis(0)>,
                  "tessera: an element-wise operation's result would shard two dimensions on the same mesh axis, "
                  "one from each operand (the operation, the dimension and the axis are the arguments of "
                  "'result_would_use_a_mesh_axis_twice<op, dim, axis>'); reshard one operand so the axis shards "
                  "one dimension: tessera::reshard(x, tessera::P<...>{})");
    return failed{};
  } else {
    constexpr auto dims = canonical_spec(rule.dims);
    return elementwise<Op, C, R, decltype(fit<dims>(std::move(x)))...>(fit<dims>(std::move(x))...);
  }
}

template <class X>
using value_t = typename operand_traits<stored_t<X>>::value_type;

/// The type two operands compute in: jnp.promote_types, numbers weakly typed.
template <class A, class B>
struct binary_type {
  using TA = value_t<A>;
  using TB = value_t<B>;
  static constexpr bool a_number = std::is_arithmetic_v<std::remove_cvref_t<A>>;
  static constexpr bool b_number = std::is_arithmetic_v<std::remove_cvref_t<B>>;
  using type = std::conditional_t<
      a_number, typename promote_weak<TB, TA>::type,
      std::conditional_t<b_number, typename promote_weak<TA, TB>::type, promote_t<TA, TB>>>;
};
template <class A, class B>
using binary_type_t = typename binary_type<A, B>::type;

template <class Op, class X>
auto floating_function(X&& x) {
  using C = float_of_t<value_t<X>>;
  return make_elementwise<Op, C, C>(store(std::forward<X>(x)));
}

/// A binary operation needs a sharded operand on one side and an operand on the other.
template <class A, class B>
concept binary_operands = (sharded_expression<A> || sharded_expression<B>) && expression_operand<A> &&
                          expression_operand<B>;

/// A sharded expression on one side and something that is neither an operand nor a number on the
/// other (an xtensor expression, a std::vector): an error in our words instead of "no match".
template <class A, class B>
concept mixes_in_a_non_operand =
    (sharded_expression<A> && !expression_operand<B> && !has_own_operators<std::remove_cvref_t<B>>) ||
    (sharded_expression<B> && !expression_operand<A> && !has_own_operators<std::remove_cvref_t<A>>);

/// The side of such an operation that is not an operand.
template <class A, class B>
using non_operand_t = std::conditional_t<sharded_expression<A>, std::remove_cvref_t<B>, std::remove_cvref_t<A>>;

}  // namespace detail

// The return type is deduced so that the body, and with it our message, is instantiated where
// the call is made, before anything that uses the call's type can fail; the diagnostic is named
// directly in the static_assert so clang does not add "not an integral constant expression".
#define TESSERA_REJECT_NON_OPERAND(OP)                                                           \
  /** An operand that is not a tessera array or a number: an error. */                           \
  template <class A, class B>                                                                    \
    requires detail::mixes_in_a_non_operand<A, B>                                                \
  auto operator OP(A&&, B&&) {                                                                   \
    using other = detail::non_operand_t<A, B>;                                                   \
    static_assert(diagnostic::operand_must_be_a_sharded_array_or_a_number<other, false>::value); \
    return 0;                                                                                    \
  }
TESSERA_REJECT_NON_OPERAND(+)
TESSERA_REJECT_NON_OPERAND(-)
TESSERA_REJECT_NON_OPERAND(*)
TESSERA_REJECT_NON_OPERAND(/)
#undef TESSERA_REJECT_NON_OPERAND

/// jnp.add
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator+(A&& a, B&& b) {
  return detail::make_elementwise<op::add, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.subtract
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator-(A&& a, B&& b) {
  return detail::make_elementwise<op::subtract, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.multiply
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator*(A&& a, B&& b) {
  return detail::make_elementwise<op::multiply, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.true_divide: always floating, as `/` is in JAX (int32 / int32 is float32).
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator/(A&& a, B&& b) {
  using C = detail::float_of_t<detail::binary_type_t<A, B>>;
  return detail::make_elementwise<op::divide, C, C>(detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.negative
template <sharded_expression X>
auto operator-(X&& x) {
  using T = detail::value_t<X>;
  return detail::make_elementwise<op::negate, T, T>(detail::store(std::forward<X>(x)));
}
/// jnp.equal
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator==(A&& a, B&& b) {
  return detail::make_elementwise<op::equal, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}
/// jnp.not_equal
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator!=(A&& a, B&& b) {
  return detail::make_elementwise<op::not_equal, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}
/// jnp.less
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator<(A&& a, B&& b) {
  return detail::make_elementwise<op::less, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}
/// jnp.less_equal
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator<=(A&& a, B&& b) {
  return detail::make_elementwise<op::less_equal, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}
/// jnp.greater
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator>(A&& a, B&& b) {
  return detail::make_elementwise<op::greater, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}
/// jnp.greater_equal
template <class A, class B>
  requires detail::binary_operands<A, B>
auto operator>=(A&& a, B&& b) {
  return detail::make_elementwise<op::greater_equal, detail::binary_type_t<A, B>, bool>(detail::store(std::forward<A>(a)),
                                                                   detail::store(std::forward<B>(b)));
}

/// jnp.maximum (NaN-propagating)
template <class A, class B>
  requires detail::binary_operands<A, B>
auto maximum(A&& a, B&& b) {
  return detail::make_elementwise<op::maximum, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.minimum (NaN-propagating)
template <class A, class B>
  requires detail::binary_operands<A, B>
auto minimum(A&& a, B&& b) {
  return detail::make_elementwise<op::minimum, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.power
template <class A, class B>
  requires detail::binary_operands<A, B>
auto pow(A&& a, B&& b) {
  return detail::make_elementwise<op::power, detail::binary_type_t<A, B>, detail::binary_type_t<A, B>>(
      detail::store(std::forward<A>(a)), detail::store(std::forward<B>(b)));
}
/// jnp.clip(x, lo, hi): minimum(maximum(x, lo), hi).
template <sharded_expression X, expression_operand L, expression_operand H>
auto clip(X&& x, L&& lo, H&& hi) {
  return minimum(maximum(std::forward<X>(x), std::forward<L>(lo)), std::forward<H>(hi));
}
/// jax.nn.relu: maximum(x, 0).
template <sharded_expression X>
auto relu(X&& x) {
  return maximum(std::forward<X>(x), 0);
}
/// jnp.abs
template <sharded_expression X>
auto abs(X&& x) {
  using T = detail::value_t<X>;
  return detail::make_elementwise<op::abs, T, T>(detail::store(std::forward<X>(x)));
}

#define TESSERA_FLOATING(NAME, JNP)                           \
  /** JNP (integers compute in floating point, as in JAX) */ \
  template <sharded_expression X>                             \
  auto NAME(X&& x) {                                          \
    return detail::floating_function<op::NAME>(std::forward<X>(x)); \
  }
TESSERA_FLOATING(sin, jnp.sin)
TESSERA_FLOATING(cos, jnp.cos)
TESSERA_FLOATING(tan, jnp.tan)
TESSERA_FLOATING(exp, jnp.exp)
TESSERA_FLOATING(log, jnp.log)
TESSERA_FLOATING(log1p, jnp.log1p)
TESSERA_FLOATING(sqrt, jnp.sqrt)
TESSERA_FLOATING(rsqrt, jax.lax.rsqrt)
TESSERA_FLOATING(tanh, jnp.tanh)
TESSERA_FLOATING(sigmoid, jax.nn.sigmoid)
#undef TESSERA_FLOATING

/// jnp.where(c, a, b): a where c is true, else b.
template <expression_operand Cond, expression_operand A, expression_operand B>
  requires(sharded_expression<Cond> || sharded_expression<A> || sharded_expression<B>)
auto where(Cond&& c, A&& a, B&& b) {
  using C = detail::binary_type_t<A, B>;
  // The condition is tested for truth first (0.5 is true), then the operation computes in C.
  auto cond = [&] {
    if constexpr (std::is_arithmetic_v<std::remove_cvref_t<Cond>>) return detail::store(static_cast<bool>(c));
    else if constexpr (std::is_same_v<detail::value_t<Cond>, bool>) return detail::store(std::forward<Cond>(c));
    else return detail::make_elementwise<op::convert, bool, bool>(detail::store(std::forward<Cond>(c)));
  }();
  return detail::make_elementwise<op::where, C, C>(std::move(cond), detail::store(std::forward<A>(a)),
                                                    detail::store(std::forward<B>(b)));
}

/// x.astype(T)
template <element_type T, sharded_expression X>
auto astype(X&& x) {
  return detail::make_elementwise<op::convert, T, T>(detail::store(std::forward<X>(x)));
}

namespace detail {
/// Axes as NumPy names them (-1 the last), normalised once here: the reduction node and
/// everything after it see dimensions 0 to rank - 1 (an out-of-range axis becomes `rank`,
/// which the diagnostic below rejects).
template <class Op, int... Axes, class X>
auto make_reduction(X x) {
  constexpr std::size_t N = operand_traits<X>::rank;
  if constexpr (sizeof...(Axes) == 0) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return reduction<Op, X, I...>(std::move(x));
    }(std::make_index_sequence<N>{});
  } else {
    constexpr std::array<std::size_t, sizeof...(Axes)> axes{
        (Axes < 0 ? (Axes + static_cast<long>(N) < 0 ? N : static_cast<std::size_t>(Axes + static_cast<long>(N)))
                  : static_cast<std::size_t>(Axes))...};
    constexpr bool ok = valid_axes(axes, N);
    static_assert(diagnostic::reduction_axes_must_be_distinct_dimensions_of_the_operand<Op, N, ok>::value);
    if constexpr (ok) {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return reduction<Op, X, axes[I]...>(std::move(x));
      }(std::make_index_sequence<sizeof...(Axes)>{});
    } else {
      return failed_expression<typename operand_traits<X>::value_type, 0, typename operand_traits<X>::mesh_type>{};
    }
  }
}
}  // namespace detail

/// jnp.sum(x, axis=(Axes...)) (-1 the last dimension); every axis when none is given. A sharded reduced dimension
/// is summed over its mesh axes (an all-reduce), so the result is replicated over them.
template <int... Axes, sharded_expression X>
auto sum(X&& x) {
  return detail::make_reduction<op::sum, Axes...>(detail::store(std::forward<X>(x)));
}
/// jnp.mean(x, axis=(Axes...)): floating, as in JAX.
template <int... Axes, sharded_expression X>
auto mean(X&& x) {
  return detail::make_reduction<op::mean, Axes...>(detail::store(std::forward<X>(x)));
}
/// jnp.max(x, axis=(Axes...))
template <int... Axes, sharded_expression X>
auto max(X&& x) {
  return detail::make_reduction<op::max, Axes...>(detail::store(std::forward<X>(x)));
}
/// jnp.min(x, axis=(Axes...))
template <int... Axes, sharded_expression X>
auto min(X&& x) {
  return detail::make_reduction<op::min, Axes...>(detail::store(std::forward<X>(x)));
}
/// jnp.prod(x, axis=(Axes...))
template <int... Axes, sharded_expression X>
auto prod(X&& x) {
  return detail::make_reduction<op::prod, Axes...>(detail::store(std::forward<X>(x)));
}

/// jax.sharding.reshard(x, spec): x (an array or an expression) moved to the sharding `spec` on its
/// mesh; lazy, like every expression, and the way to settle a conflict on Explicit axes.
template <sharded_expression X, dim_spec... D>
auto reshard(X&& x, P<D...>) {
  using S = detail::stored_t<X>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  static_assert(diagnostic::spec_must_not_be_longer_than_rank<sizeof...(D), N, (sizeof...(D) <= N)>::value);
  if constexpr (sizeof...(D) <= N) {
    using M = typename detail::operand_traits<S>::mesh_type;
    static_assert(sizeof(named_sharding<M, P<D...>>) > 0);  // the spec's axes are checked against the mesh
    constexpr auto target = detail::canonical_spec(detail::padded_spec<P<D...>>(std::make_index_sequence<N>{}));
    return resharded<S, target>(detail::store(std::forward<X>(x)));
  } else {
    return detail::failed_expression<typename detail::operand_traits<S>::value_type, N,
                                     typename detail::operand_traits<S>::mesh_type>{};
  }
}

/// jnp.transpose(x, axes=(Perm...)); reversed dimensions when none are given (x.T).
template <std::size_t... Perm, sharded_expression X>
auto transpose(X&& x) {
  using S = detail::stored_t<X>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  if constexpr (sizeof...(Perm) == 0) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return transposed<S, (N - 1 - I)...>(detail::store(std::forward<X>(x)));
    }(std::make_index_sequence<N>{});
  } else {
    constexpr bool ok = sizeof...(Perm) == N && detail::valid_axes(std::array<std::size_t, sizeof...(Perm)>{Perm...}, N);
    static_assert(diagnostic::transpose_axes_must_permute_the_dimensions<N, ok>::value);
    if constexpr (ok) return transposed<S, Perm...>(detail::store(std::forward<X>(x)));
    else return detail::failed_expression<typename detail::operand_traits<S>::value_type, N,
                                          typename detail::operand_traits<S>::mesh_type>{};
  }
}

}  // namespace tessera
