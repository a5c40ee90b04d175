#pragma once
// Reductions beyond the five nodes of expr/reduction.hpp, written over them: `keepdims` for
// every reduction (the reduction seen through an expand_dims view), jnp.var and jnp.std,
// jax.nn.logsumexp, jnp.argmax and jnp.argmin, jax.nn.softmax and jax.nn.log_softmax. Each is
// lazy where its parts are: the reductions materialise (with their all-reduce when a reduced
// dimension is sharded), the element-wise parts fuse around them.

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

#include "tessera/array/device_put.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"
#include "tessera/expr/expand_dims.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/reduction.hpp"

namespace tessera {

/// The type of `tessera::keepdims`.
struct keepdims_t {
  explicit constexpr keepdims_t() = default;
};
/// keepdims=True: `tessera::sum<-1>(x, tessera::keepdims)` keeps each reduced dimension with size
/// 1 (spec None there), so the result broadcasts against x.
inline constexpr keepdims_t keepdims{};

namespace detail {

/// The dimensions a reduction over Axes (every one when none is given) of a rank-N operand
/// removes, sorted: where keepdims puts size-1 dimensions back.
template <std::size_t N, int... Axes>
constexpr std::array<std::size_t, sizeof...(Axes) == 0 ? N : sizeof...(Axes)> kept_positions() {
  if constexpr (sizeof...(Axes) == 0) {
    std::array<std::size_t, N> a{};
    for (std::size_t i = 0; i < N; ++i) a[i] = i;
    return a;
  } else {
    return sorted_axes(normalised_axes<Axes...>(N));
  }
}

/// A reduction's result r with size-1 dimensions put back where a rank-N operand was reduced.
template <std::size_t N, int... Axes, class R>
auto keep_reduced(R r) {
  if constexpr (is_failed_expression<R>::value) {
    return failed_expression<typename R::value_type, N, typename R::mesh_type>{};
  } else {
    constexpr auto at = kept_positions<N, Axes...>();
    if constexpr (at.size() == 0) return r;
    else return insert_unit_dims<at>(std::move(r));
  }
}

/// The number of elements a reduction over Axes of a value of shape s combines per result.
template <int... Axes, std::size_t N>
std::size_t reduced_size(shape_t<N> const& s) {
  std::size_t n = 1;
  for (std::size_t a : kept_positions<N, Axes...>())
    if (a < N) n *= s[a];
  return n;
}

/// The operand of a floating reduction (var, logsumexp, softmax): integers convert, as in jnp.
template <class X>
auto as_floating(X&& x) {
  using T = value_t<X>;
  if constexpr (std::is_floating_point_v<T>) return store(std::forward<X>(x));
  else return tessera::astype<float_of_t<T>>(std::forward<X>(x));
}

/// 0, 1, ..., n - 1 along dimension Axis of a rank-N view (size 1 elsewhere), replicated:
/// the indices argmax and argmin pick from.
template <std::size_t Axis, std::size_t N, class M>
auto iota_along(M const& mesh, std::size_t n) {
  xt::xtensor<std::int32_t, 1> h = xt::xtensor<std::int32_t, 1>::from_shape({n});
  for (std::size_t i = 0; i < n; ++i) h(i) = static_cast<std::int32_t>(i);
  auto a = tessera::device_put(h, named_sharding(mesh, P<>{}));
  constexpr auto map = [] {
    std::array<int, N> m{};
    for (std::size_t j = 0; j < N; ++j) m[j] = j == Axis ? 0 : -1;
    return m;
  }();
  return unit_view<decltype(a), map>(std::move(a), "argmax");
}

/// jnp.argmax (Max) or jnp.argmin over the normalised dimension Axis: the first index of the
/// extreme value, or of the first NaN (jnp's rule), as the smallest index among the hits. Over a
/// sharded axis both reductions all-reduce (the pair (value, index) in two steps).
template <bool Max, std::size_t Axis, class S>
auto arg_extreme(S const& x) {
  constexpr std::size_t N = operand_traits<S>::rank;
  constexpr int A = static_cast<int>(Axis);
  auto const n = shape_of(x)[Axis];
  if (n > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw std::invalid_argument("tessera::" + std::string(Max ? "argmax" : "argmin") + ": dimension " +
                                std::to_string(Axis) + " of the operand of shape " + shape_string(shape_of(x)) +
                                " is too long for int32 indices");
  auto const best = [&] {
    if constexpr (Max) return keep_reduced<N, A>(tessera::max<A>(x));
    else return keep_reduced<N, A>(tessera::min<A>(x));
  }();
  auto const idx = iota_along<Axis, N>(*mesh_of(x), n);
  auto const big = static_cast<std::int32_t>(n);
  return tessera::min<A>(tessera::where(x != x, idx, tessera::where(x == best, idx, big)));
}

}  // namespace detail

#define TESSERA_KEEPDIMS(NAME)                                                                \
  /** jnp.NAME(x, axis=(Axes...), keepdims=True) */                                          \
  template <int... Axes, sharded_expression X>                                                \
  auto NAME(X&& x, keepdims_t) {                                                              \
    constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;             \
    return detail::keep_reduced<N, Axes...>(tessera::NAME<Axes...>(std::forward<X>(x)));     \
  }
TESSERA_KEEPDIMS(sum)
TESSERA_KEEPDIMS(mean)
TESSERA_KEEPDIMS(max)
TESSERA_KEEPDIMS(min)
TESSERA_KEEPDIMS(prod)
#undef TESSERA_KEEPDIMS

/// jnp.var(x, axis=(Axes...), ddof=ddof): mean(|x - mean(x)|^2) with N - ddof as the divisor;
/// floating, as in JAX. Two reductions (the mean, then the sum of squares).
template <int... Axes, sharded_expression X>
auto var(X&& x, double ddof = 0) {
  auto const xf = detail::as_floating(std::forward<X>(x));
  using F = detail::value_t<decltype(xf)>;
  auto const n = detail::reduced_size<Axes...>(detail::shape_of(xf));
  auto const c = xf - tessera::mean<Axes...>(xf, keepdims);
  return tessera::sum<Axes...>(c * c) / static_cast<F>(static_cast<double>(n) - ddof);
}
/// jnp.var(x, axis=(Axes...), ddof=ddof, keepdims=True)
template <int... Axes, sharded_expression X>
auto var(X&& x, keepdims_t, double ddof = 0) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  return detail::keep_reduced<N, Axes...>(tessera::var<Axes...>(std::forward<X>(x), ddof));
}
/// jnp.std(x, axis=(Axes...), ddof=ddof): sqrt of var.
template <int... Axes, sharded_expression X>
auto std(X&& x, double ddof = 0) {
  return tessera::sqrt(tessera::var<Axes...>(std::forward<X>(x), ddof));
}
/// jnp.std(x, axis=(Axes...), ddof=ddof, keepdims=True)
template <int... Axes, sharded_expression X>
auto std(X&& x, keepdims_t, double ddof = 0) {
  return tessera::sqrt(tessera::var<Axes...>(std::forward<X>(x), keepdims, ddof));
}

/// jax.nn.logsumexp(x, axis=(Axes...), keepdims=True): log(sum(exp(x - m))) + m, m the max with
/// its non-finite values replaced by 0 (so all -inf gives -inf, not NaN).
template <int... Axes, sharded_expression X>
auto logsumexp(X&& x, keepdims_t) {
  auto const xf = detail::as_floating(std::forward<X>(x));
  using F = detail::value_t<decltype(xf)>;
  auto const m = tessera::max<Axes...>(xf, keepdims);
  auto const finite = tessera::abs(m) < std::numeric_limits<F>::infinity();
  auto const shift = tessera::where(finite, m, F(0));
  return tessera::log(tessera::sum<Axes...>(tessera::exp(xf - shift), keepdims)) + shift;
}
/// jax.nn.logsumexp(x, axis=(Axes...)); every axis when none is given.
template <int... Axes, sharded_expression X>
auto logsumexp(X&& x) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  constexpr auto at = detail::kept_positions<N, Axes...>();
  auto kept = tessera::logsumexp<Axes...>(std::forward<X>(x), keepdims);
  if constexpr (detail::is_failed_expression<decltype(kept)>::value || at.size() == 0) {
    return kept;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return tessera::squeeze<static_cast<int>(at[I])...>(kept);
    }(std::make_index_sequence<at.size()>{});
  }
}

/// jnp.argmax(x, axis=Axis): int32 indices of the first maximum (of the first NaN where there is
/// one). The reduced dimension's spec is deleted and a sharded one is no error (JAX's rule):
/// its devices all-reduce.
template <int Axis, sharded_expression X>
auto argmax(X&& x) {
  using S = detail::stored_t<X>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  constexpr std::size_t a = detail::normalise_axis(Axis, N);
  static_assert(diagnostic::reduction_axes_must_be_distinct_dimensions_of_the_operand<op::max, N, (a < N)>::value);
  if constexpr (a < N) return detail::arg_extreme<true, a>(S(detail::store(std::forward<X>(x))));
  else return detail::failed_expression<std::int32_t, 0, typename detail::operand_traits<S>::mesh_type>{};
}
/// jnp.argmin(x, axis=Axis): int32 indices of the first minimum (of the first NaN where there is one).
template <int Axis, sharded_expression X>
auto argmin(X&& x) {
  using S = detail::stored_t<X>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  constexpr std::size_t a = detail::normalise_axis(Axis, N);
  static_assert(diagnostic::reduction_axes_must_be_distinct_dimensions_of_the_operand<op::min, N, (a < N)>::value);
  if constexpr (a < N) return detail::arg_extreme<false, a>(S(detail::store(std::forward<X>(x))));
  else return detail::failed_expression<std::int32_t, 0, typename detail::operand_traits<S>::mesh_type>{};
}
/// jnp.argmax(x, axis=Axis, keepdims=True)
template <int Axis, sharded_expression X>
auto argmax(X&& x, keepdims_t) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  return detail::keep_reduced<N, Axis>(tessera::argmax<Axis>(std::forward<X>(x)));
}
/// jnp.argmin(x, axis=Axis, keepdims=True)
template <int Axis, sharded_expression X>
auto argmin(X&& x, keepdims_t) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  return detail::keep_reduced<N, Axis>(tessera::argmin<Axis>(std::forward<X>(x)));
}

/// jax.nn.softmax(x, axis=(Axis, More...)): exp(x - max) / sum(exp(x - max)), the max and the
/// sum kept as size-1 dimensions. Over a sharded axis both all-reduce and the result keeps x's spec.
template <int Axis = -1, int... More, sharded_expression X>
auto softmax(X&& x) {
  auto const xf = detail::as_floating(std::forward<X>(x));
  auto const unnormalised = tessera::exp(xf - tessera::max<Axis, More...>(xf, keepdims));
  return unnormalised / tessera::sum<Axis, More...>(unnormalised, keepdims);
}
/// jax.nn.log_softmax(x, axis=(Axis, More...)): shifted - log(sum(exp(shifted))), shifted = x - max.
template <int Axis = -1, int... More, sharded_expression X>
auto log_softmax(X&& x) {
  auto const xf = detail::as_floating(std::forward<X>(x));
  auto const shifted = xf - tessera::max<Axis, More...>(xf, keepdims);
  return shifted - tessera::log(tessera::sum<Axis, More...>(tessera::exp(shifted), keepdims));
}

}  // namespace tessera
