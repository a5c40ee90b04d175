#pragma once
// jax.jit for C++: there is no tracing to do (the expression is the program),
// so jit(f) calls f on its arguments and evaluates what it returns in one
// fused pass per device. Computation follows data: without out_shardings the
// result has the sharding propagated from the inputs. With in_shardings the
// inputs are put there first; with out_shardings the result is moved there.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/array/device_put.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/sharding.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/partial_array.hpp"

namespace tessera {

/// The in_shardings of jax.jit: one sharding per argument.
template <class... S>
struct in_shardings_t {
  std::tuple<S...> shardings;
};
/// jax.jit(..., in_shardings=(s0, s1, ...))
template <sharding... S>
in_shardings_t<S...> in_shardings(S const&... s) {
  return {std::tuple<S...>(s...)};
}
/// The out_shardings of jax.jit: one sharding per result.
template <class... S>
struct out_shardings_t {
  std::tuple<S...> shardings;
};
namespace detail {
template <class S>
struct is_partial_sharding : std::false_type {};
template <class S, dim_spec U>
struct is_partial_sharding<partial_sharding<S, U>> : std::true_type {};
}  // namespace detail

/// A sharding, or tessera::partial(sharding) for a result kept in the partial state.
template <class S>
concept out_sharding = sharding<S> || detail::is_partial_sharding<S>::value;

/// jax.jit(..., out_shardings=(s0, ...))
template <out_sharding... S>
out_shardings_t<S...> out_shardings(S const&... s) {
  return {std::tuple<S...>(s...)};
}

namespace detail {

/// A jit result as a value: expressions evaluated, tuples element by element, the rest as they are.
template <class R>
auto materialize(R&& r) {
  using D = std::remove_cvref_t<R>;
  if constexpr (expression_node<D>) return evaluate(r);
  else if constexpr (is_std_tuple<D>::value)
    return tessera::detail::apply([](auto&&... x) { return std::make_tuple(materialize(std::forward<decltype(x)>(x))...); },
                      std::forward<R>(r));
  else return D(std::forward<R>(r));
}

/// A result kept in the partial state asked for (each device's own partial block, unsummed).
template <class X, class S, dim_spec U>
auto put_as(X&& x, partial_sharding<S, U> const& ps) {
  using D = std::remove_cvref_t<X>;
  constexpr bool ok = [] {
    if constexpr (expression_node<D>) {
      return canonical(operand_traits<D>::unreduced) == canonical(U) &&
             same_layout(operand_traits<D>::spec, S::spec_dims);
    } else {
      return false;
    }
  }();
  static_assert(ok,
                "tessera::jit: out_shardings asks for the partial state (tessera::partial) of a result that is not "
                "partial over those mesh axes with that layout; return the partial expression itself (a matmul over "
                "a sharded contracting dimension, a sum over a sharded dimension) or ask for a plain sharding");
  if constexpr (ok) {
    check_same_mesh(x.mesh(), ps.sharding.mesh(), "jit out_shardings");
    return partial_array<typename D::value_type, D::rank, S, U>(x.partial());
  } else {
    return 0;
  }
}

/// `x` laid out by `s`: as it is when it already is, else evaluated and put there (jax.device_put).
template <class X, class S>
auto put_as(X&& x, S const& s, std::size_t index = 0, char const* where = "jit out_shardings") {
  using D = std::remove_cvref_t<X>;
  if constexpr (is_array<D>::value) {
    check_argument_runtime(x, s, where, index);
    if constexpr (std::is_same_v<typename D::sharding_type, S>) {
      if (x.sharding() == s) return D(x);
    }
    return device_put(x, s);
  } else if constexpr (expression_node<D> && requires { S::spec_dims; }) {
    // Through reshard, so partial sums go straight to s (a reduce-scatter where s shards their axes).
    check_same_mesh(x.mesh(), s.mesh(), "jit out_shardings");
    auto r = evaluate(reshard(x, typename S::spec_type{}));
    if constexpr (std::is_same_v<typename decltype(r)::sharding_type, S>) return r;
    else return device_put(r, s);  // the same layout, typed as the out_sharding was written (P() vs P(None, None))
  } else if constexpr (expression_node<D>) {
    return device_put(evaluate(x), s);
  } else {
    return device_put(std::forward<X>(x), s);
  }
}

}  // namespace detail

/// The callable jax.jit(f) returns.
template <class F>
class jitted {
 public:
  explicit jitted(F f) : f_(std::move(f)) {}
  /// Calls f and evaluates its result (one fused pass per device).
  template <class... A>
  auto operator()(A&&... a) const {
    return detail::materialize(f_(std::forward<A>(a)...));
  }

 private:
  F f_;
};

/// The callable jax.jit(f, in_shardings=..., out_shardings=...) returns.
template <class F, class In, class Out>
class jitted_with;
template <class F, class... In, class... Out>
class jitted_with<F, in_shardings_t<In...>, out_shardings_t<Out...>> {
 public:
  jitted_with(F f, in_shardings_t<In...> in, out_shardings_t<Out...> out)
      : f_(std::move(f)), in_(std::move(in)), out_(std::move(out)) {}

  /// Puts the arguments in their in_shardings, calls f, and evaluates its results into the out_shardings.
  template <class... A>
  auto operator()(A&&... a) const {
    static_assert(
        diagnostic::jit_shardings_must_match_in_number<sizeof...(In), sizeof...(A), sizeof...(In) == sizeof...(A)>::value);
    if constexpr (sizeof...(In) == sizeof...(A)) {
      return call(std::index_sequence_for<A...>{}, std::forward<A>(a)...);
    } else {
      return 0;  // after the diagnostic, a value so the caller's `auto y =` adds no error of its own
    }
  }

 private:
  template <std::size_t... I, class... A>
  auto call(std::index_sequence<I...>, A&&... a) const {
    auto r = f_(detail::put_as(std::forward<A>(a), std::get<I>(in_.shardings), I, "jit in_shardings")...);
    if constexpr (detail::is_std_tuple<std::remove_cvref_t<decltype(r)>>::value) {
      constexpr std::size_t n = std::tuple_size_v<std::remove_cvref_t<decltype(r)>>;
      static_assert(diagnostic::jit_shardings_must_match_in_number<sizeof...(Out), n, sizeof...(Out) == n>::value);
      if constexpr (sizeof...(Out) == n) {
        return [&]<std::size_t... J>(std::index_sequence<J...>) {
          return std::make_tuple(detail::put_as(std::get<J>(r), std::get<J>(out_.shardings))...);
        }(std::make_index_sequence<n>{});
      }
    } else {
      static_assert(diagnostic::jit_shardings_must_match_in_number<sizeof...(Out), 1, sizeof...(Out) == 1>::value);
      if constexpr (sizeof...(Out) == 1) return detail::put_as(r, std::get<0>(out_.shardings));
    }
  }

  F f_;
  in_shardings_t<In...> in_;
  out_shardings_t<Out...> out_;
};

/// jax.jit(f): f's result evaluated in one fused pass per device, with the propagated sharding.
template <class F>
auto jit(F&& f) {
  return jitted<std::decay_t<F>>(std::forward<F>(f));
}

/// jax.jit(f, in_shardings=..., out_shardings=...).
template <class F, class... In, class... Out>
auto jit(F&& f, in_shardings_t<In...> in, out_shardings_t<Out...> out) {
  return jitted_with<std::decay_t<F>, in_shardings_t<In...>, out_shardings_t<Out...>>(std::forward<F>(f), std::move(in),
                                                                                       std::move(out));
}

}  // namespace tessera
