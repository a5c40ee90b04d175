#pragma once
// tessera's functions on a device's blocks inside shard_map (jnp on the per-device values of a
// shard_map'd function): `tessera::sum(blk)`, `tessera::matmul(x, w)`, `tessera::sigmoid(z)`...
// So one body serves both ways: called with blocks here, and with local tracers when grad
// differentiates through the shard_map (autodiff/local_tracer.hpp, the same names). Each result
// owns its values and keeps its operands' vma in its type, as a collective's result does.

#include <cmath>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/detail/xtensor/xexpression.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/shape.hpp"
#include "tessera/core/varying_axes.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/parallel/block_math.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/vma_of.hpp"

namespace tessera {
namespace detail {

/// A device's value in a shard_map body: an xtensor expression whose rank is in its type (a
/// block, a collective's result, an xt::xtensor), not a sharded tessera expression.
template <class X>
constexpr bool is_plain_block() {
  using D = std::remove_cvref_t<X>;
  if constexpr (!xt::is_xexpression<D>::value) return false;
  else if constexpr (sharded_expression<D>) return false;
  else return has_static_rank_v<D>;
}

/// The vma type of a value computed from X (and Y): where they vary.
template <class X>
using plain_vma = vma_type_t<vma_of<std::remove_cvref_t<X>>::value>;
template <class X, class Y>
using plain_vma2 = vma_type_t<join(vma_of<std::remove_cvref_t<X>>::value, vma_of<std::remove_cvref_t<Y>>::value)>;

/// x's values, row-major.
template <class X>
auto values_of(X const& x) {
  using T = std::remove_cv_t<typename std::remove_cvref_t<X>::value_type>;
  constexpr std::size_t N = static_rank_v<X>;
  shape_t<N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = static_cast<std::size_t>(x.shape()[i]);
  local_value<T, N> v{std::vector<T>(), s};
  v.v.reserve(element_count(s));
  for (auto const& e : x) v.v.push_back(static_cast<T>(e));
  return v;
}

/// A result as a body's value: a number (rank 0) or a block that owns its values.
template <class Vma, class T, std::size_t N>
auto plain_result(local_value<T, N>&& v) {
  if constexpr (N == 0) return local_scalar<T, Vma>(v.v.empty() ? T(0) : v.v[0]);
  else return own_as_block<Vma>(std::move(v));
}

template <class X, class F>
auto map_plain(X const& x, F f) {
  auto v = values_of(x);
  for (auto& e : v.v) e = f(e);
  return plain_result<plain_vma<X>>(std::move(v));
}

/// A block's axis as NumPy names it (-1 the last) as an index; one out of range stays out of
/// range (a huge index), for the static_asserts of the reductions below.
template <int Axis, class X>
inline constexpr std::size_t block_axis =
    static_cast<std::size_t>(Axis < 0 ? Axis + static_cast<long>(static_rank_v<X>) : Axis);

/// Sum (Mean: divided by the count) over Axes... (every axis when none).
template <bool Mean, std::size_t... Axes, class X>
auto reduce_plain(X const& x) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(((Axes < N) && ...), "tessera::sum in a shard_map body: an axis is out of range for the block's rank");
  auto const v = values_of(x);
  using T = typename decltype(v)::value_type;
  reduction_layout<N, Axes...> const r(v.shape);
  auto y = make_value<T>(r.shape);
  for_each_offset(v.shape, r.strides, [&](std::size_t i, auto const& off) { y.v[off[0]] += v.v[i]; });
  if constexpr (Mean)
    for (auto& e : y.v) e /= static_cast<T>(r.count);
  return plain_result<plain_vma<X>>(std::move(y));
}

}  // namespace detail

/// A device's value in a shard_map body (a block, a collective's result, an xt::xtensor).
template <class X>
concept plain_block = detail::is_plain_block<X>();

#define TESSERA_PLAIN_UNARY(NAME, EXPR)                                   \
  template <plain_block X>                                                \
  auto NAME(X const& x) {                                                 \
    using T = std::remove_cv_t<typename std::remove_cvref_t<X>::value_type>; \
    return detail::map_plain(x, [](T v) -> T { return EXPR; });          \
  }

/// jnp.exp of a device's block.
TESSERA_PLAIN_UNARY(exp, std::exp(v))
/// jnp.log of a device's block.
TESSERA_PLAIN_UNARY(log, std::log(v))
/// jnp.sin of a device's block.
TESSERA_PLAIN_UNARY(sin, std::sin(v))
/// jnp.cos of a device's block.
TESSERA_PLAIN_UNARY(cos, std::cos(v))
/// jnp.tanh of a device's block.
TESSERA_PLAIN_UNARY(tanh, std::tanh(v))
/// jax.nn.sigmoid of a device's block.
TESSERA_PLAIN_UNARY(sigmoid, T(1) / (T(1) + std::exp(-v)))
/// jax.nn.relu of a device's block.
TESSERA_PLAIN_UNARY(relu, v > T(0) ? v : T(0))
/// jnp.sqrt of a device's block.
TESSERA_PLAIN_UNARY(sqrt, std::sqrt(v))
/// jnp.abs of a device's block.
TESSERA_PLAIN_UNARY(abs, v < T(0) ? -v : v)
#undef TESSERA_PLAIN_UNARY

/// jnp.sum(x, axis=Axes) of a device's block (every axis when none: a number).
template <int... Axes, plain_block X>
auto sum(X const& x) {
  return detail::reduce_plain<false, detail::block_axis<Axes, X>...>(x);
}
/// jnp.mean(x, axis=Axes) of a device's block.
template <int... Axes, plain_block X>
auto mean(X const& x) {
  return detail::reduce_plain<true, detail::block_axis<Axes, X>...>(x);
}

/// jnp.max(x, axis=Axes) of a device's block (every axis when none: a number).
template <int... Axes, plain_block X>
auto max(X const& x) {
  return detail::plain_result<detail::plain_vma<X>>(detail::choose<true, detail::block_axis<Axes, X>...>(detail::values_of(x), "max"));
}
/// jnp.min(x, axis=Axes) of a device's block (every axis when none: a number).
template <int... Axes, plain_block X>
auto min(X const& x) {
  return detail::plain_result<detail::plain_vma<X>>(detail::choose<false, detail::block_axis<Axes, X>...>(detail::values_of(x), "min"));
}

namespace detail {
/// A block's values, or a number as a rank-0 value of the block's element type.
template <class T, class X>
auto values_or_number(X const& x) {
  if constexpr (std::is_arithmetic_v<X>) return local_value<T, 0>{std::vector<T>(1, static_cast<T>(x)), {}};
  else return values_of(x);
}
template <class A, class B>
using plain_element = std::remove_cv_t<typename std::conditional_t<is_plain_block<A>(), A, B>::value_type>;
/// Where a block varies, or a number's (the same everywhere).
template <class X>
constexpr vma_state plain_vma_state() {
  if constexpr (is_plain_block<X>()) return vma_of<std::remove_cvref_t<X>>::value;
  else return vma_state_of<invariant_vma>::value;
}
}  // namespace detail

/// A block and a block or a number (a body's element-wise binary operation).
template <class A, class B>
concept plain_pair = (plain_block<A> || plain_block<B>) && (plain_block<A> || std::is_arithmetic_v<A>) &&
                     (plain_block<B> || std::is_arithmetic_v<B>);

/// jnp.maximum of a device's blocks (NumPy broadcasting), or of a block and a number.
template <class A, class B>
  requires plain_pair<A, B>
auto maximum(A const& a, B const& b) {
  using T = detail::plain_element<A, B>;
  auto y = detail::zip(detail::values_or_number<T>(a), detail::values_or_number<T>(b), [](T x, T z) { return x > z ? x : z; },
                       "maximum");
  using V = detail::vma_type_t<detail::join(detail::plain_vma_state<A>(), detail::plain_vma_state<B>())>;
  return detail::plain_result<V>(std::move(y));
}
/// jnp.minimum of a device's blocks (NumPy broadcasting), or of a block and a number.
template <class A, class B>
  requires plain_pair<A, B>
auto minimum(A const& a, B const& b) {
  using T = detail::plain_element<A, B>;
  auto y = detail::zip(detail::values_or_number<T>(a), detail::values_or_number<T>(b), [](T x, T z) { return x < z ? x : z; },
                       "minimum");
  using V = detail::vma_type_t<detail::join(detail::plain_vma_state<A>(), detail::plain_vma_state<B>())>;
  return detail::plain_result<V>(std::move(y));
}

/// jnp.matmul of a device's blocks (vectors or matrices).
template <plain_block A, plain_block B>
auto matmul(A const& a, B const& b) {
  constexpr std::size_t NA = static_rank_v<A>, NB = static_rank_v<B>;
  static_assert(NA >= 1 && NA <= 2 && NB >= 1 && NB <= 2,
                "tessera::matmul in a shard_map body: the operands must be vectors or matrices");
  auto const av = detail::values_of(a);
  auto const bv = detail::values_of(b);
  using T = typename decltype(av)::value_type;
  static_assert(std::is_same_v<T, typename decltype(bv)::value_type>,
                "tessera::matmul in a shard_map body: the operands have different element types");
  auto const am = detail::as_matrix<true>(av);
  auto const bm = detail::as_matrix<false>(bv);
  if (am.shape[1] != bm.shape[0])
    throw std::invalid_argument("tessera::matmul in a shard_map body: shapes " + detail::shape_string(av.shape) +
                                " and " + detail::shape_string(bv.shape) + " do not contract");
  constexpr std::size_t R = NA + NB - 2;
  shape_t<R> s{};
  if constexpr (NA == 2 && NB == 2) s = {am.shape[0], bm.shape[1]};
  else if constexpr (NA == 2) s = {am.shape[0]};
  else if constexpr (NB == 2) s = {bm.shape[1]};
  auto c = detail::make_value<T>(shape_t<2>{am.shape[0], bm.shape[1]});
  detail::product(am.shape[0], bm.shape[1], am.shape[1], am.data(), bm.data(), c.data());
  return detail::plain_result<detail::plain_vma2<A, B>>(detail::from_matrix(std::move(c), s));
}
/// jnp.dot of a device's blocks (vectors or matrices): matmul.
template <plain_block A, plain_block B>
auto dot(A const& a, B const& b) {
  return matmul(a, b);
}
/// x.T of a device's matrix block.
template <plain_block X>
  requires(static_rank_v<X> == 2)
auto transpose(X const& x) {
  return detail::plain_result<detail::plain_vma<X>>(detail::transposed_matrix(detail::values_of(x)));
}

}  // namespace tessera
