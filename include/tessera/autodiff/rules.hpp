#pragma once
// The operations on tracers, each with its transpose rule (JAX's `ad.deflinear`, `defjvp`
// and transpose rules, jax/_src/lax/lax.py): the forward value is the same tessera expression
// on the primals; the backward step adds each traced operand's contribution, an expression on
// the result's cotangent g, summed over broadcast dimensions and laid out like the operand.
// Comparisons give plain (untraced) boolean expressions, as their derivatives are zero.

#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "tessera/autodiff/tracer.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/matmul.hpp"

namespace tessera {

namespace op {
/// The first operand, broadcast to the shape of the second (jnp.broadcast_to(g, x.shape)):
/// how a reduction's cotangent is spread back over the reduced dimensions.
struct broadcast_first {
  template <class T> static constexpr bool simd = tessera::detail::simd::vectorised<T>;
  template <class X> static X apply(X a, X) { return a; }
};
}  // namespace op

namespace detail::ad {

/// An operand of an operation on tracers: a tracer, a sharded expression or a number.
template <class X>
concept operand = traced_value<X> || expression_operand<X>;

/// A binary operation with a tracer on at least one side.
template <class A, class B>
concept binary = (traced_value<A> || traced_value<B>) && operand<A> && operand<B>;

/// Axes of a reduction over `Axes...` of a rank-N operand (every axis when none is given).
template <std::size_t N, int... Axes>
constexpr std::array<std::size_t, sizeof...(Axes) == 0 ? N : sizeof...(Axes)> reduced_axes() {
  if constexpr (sizeof...(Axes) == 0) {
    std::array<std::size_t, N> a{};
    for (std::size_t i = 0; i < N; ++i) a[i] = i;
    return a;
  } else {
    // -1 is the last dimension (the forward reduction has checked the axes).
    std::array<std::size_t, sizeof...(Axes)> a{static_cast<std::size_t>(Axes < 0 ? Axes + static_cast<int>(N) : Axes)...};
    std::sort(a.begin(), a.end());
    return a;
  }
}

/// Whether the reduced axes are the leading ones (NumPy broadcasting then restores them).
template <std::size_t K>
constexpr bool leading(std::array<std::size_t, K> const& a) {
  for (std::size_t i = 0; i < K; ++i)
    if (a[i] != i) return false;
  return true;
}

/// g (an array, the cotangent of a reduction over Axes of p) with size-1 dimensions put back
/// where p was reduced, then broadcast to p's shape.
template <int... Axes, class G, class P>
auto spread(G const& g, P const& p) {
  constexpr std::size_t N = operand_traits<stored_t<P>>::rank;
  constexpr auto axes = reduced_axes<N, Axes...>();
  using T = typename G::value_type;
  auto expanded = [&] {
    if constexpr (leading(axes)) {
      return g;
    } else {
      return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return expand_each<axes[I]...>(g);
      }(std::make_index_sequence<axes.size()>{});
    }
  }();
  return make_elementwise<op::broadcast_first, T, T>(store(std::move(expanded)), store(p));
}

/// Product of p's dimensions reduced over Axes (the count a mean divides by).
template <int... Axes, class P>
double reduced_count(P const& p) {
  constexpr auto axes = reduced_axes<operand_traits<stored_t<P>>::rank, Axes...>();
  auto const s = shape_of(p);
  double n = 1;
  for (std::size_t a : axes) n *= static_cast<double>(s[a]);
  return n;
}

/// The inverse of a permutation, as a pack for transpose<...>.
template <std::size_t... Perm>
constexpr std::array<std::size_t, sizeof...(Perm)> inverse_permutation() {
  std::array<std::size_t, sizeof...(Perm)> p{Perm...}, inv{};
  for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = i;
  return inv;
}

/// x with its last two dimensions swapped (the transpose in matmul's rules).
template <class X>
auto swap_last(X const& x) {
  constexpr std::size_t N = operand_traits<stored_t<X>>::rank;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return tessera::transpose<(I < N - 2 ? I : (I == N - 2 ? N - 1 : N - 2))...>(x);
  }(std::make_index_sequence<N>{});
}

/// A's spec as a P<...> type (the out_sharding of a matmul contribution laid out like A).
template <class A>
using spec_of = typename A::sharding_type::spec_type;

template <class X>
using array_t = std::remove_cvref_t<decltype(std::declval<X const&>().primal())>;

}  // namespace detail::ad

// ---- arithmetic ------------------------------------------------------------------------------

/// jnp.add of tracers: both cotangents are g.
template <class A, class B>
  requires detail::ad::binary<A, B>
auto operator+(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), primal_of(a) + primal_of(b), [a, b](auto const& g, auto const&) {
    contribute(a, [&] { return g; });
    contribute(b, [&] { return g; });
  });
}

/// jnp.subtract of tracers: g and -g.
template <class A, class B>
  requires detail::ad::binary<A, B>
auto operator-(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), primal_of(a) - primal_of(b), [a, b](auto const& g, auto const&) {
    contribute(a, [&] { return g; });
    contribute(b, [&] { return -g; });
  });
}

/// jnp.multiply of tracers: g * b and a * g (computed as g * a: the same bits, as float
/// multiplication commutes, and one expression type where a and b have one type, not two).
template <class A, class B>
  requires detail::ad::binary<A, B>
auto operator*(A const& a, B const& b) {
  using namespace detail::ad;
  auto y = record(tape_of(a, b), primal_of(a) * primal_of(b), [a, b](auto const& g, auto const&) {
    if constexpr (std::is_same_v<A, B> && traced_value<A>) {
      if (a.node() == b.node()) {
        // x * x (the square in a squared error): one contribution 2 g x, one pass where the two
        // contributions and their sum took three; bitwise the same (g x + x g == 2 (g x)).
        contribute(a, [&] { return g * primal_of(a) * typename A::value_type(2); });
        return;
      }
    }
    contribute(a, [&] { return g * primal_of(b); });
    contribute(b, [&] { return g * primal_of(a); });
  });
  if constexpr (std::is_same_v<A, B> && traced_value<A>) {
    if constexpr (std::is_same_v<decltype(y), A>)
      if (a.node() == b.node()) y.node()->square_of = a.node();
  }
  return y;
}

/// jnp.true_divide of tracers: g / b and -g * (a / b) / b.
template <class A, class B>
  requires detail::ad::binary<A, B>
auto operator/(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), primal_of(a) / primal_of(b), [a, b](auto const& g, auto const& y) {
    contribute(a, [&] { return g / primal_of(b); });
    contribute(b, [&] { return -(g * y()) / primal_of(b); });
  });
}

/// jnp.negative of a tracer: -g.
template <traced_value X>
auto operator-(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), -primal_of(x), [x](auto const& g, auto const&) { contribute(x, [&] { return -g; }); });
}

// Comparisons: plain boolean expressions on the primals (no derivative).
#define TESSERA_AD_COMPARISON(OP)                                                          \
  /** A comparison involving a tracer: the primals compared, untraced. */                 \
  template <class A, class B>                                                              \
    requires detail::ad::binary<A, B>                                                      \
  auto operator OP(A const& a, B const& b) {                                               \
    return detail::ad::primal_of(a) OP detail::ad::primal_of(b);                           \
  }
TESSERA_AD_COMPARISON(==)
TESSERA_AD_COMPARISON(!=)
TESSERA_AD_COMPARISON(<)
TESSERA_AD_COMPARISON(<=)
TESSERA_AD_COMPARISON(>)
TESSERA_AD_COMPARISON(>=)
#undef TESSERA_AD_COMPARISON

// ---- element-wise functions --------------------------------------------------------------------
// In each rule: p is the operand's primal, y() the result, g the result's cotangent.
#define TESSERA_AD_UNARY(NAME, JNP, CONTRIBUTION)                                                  \
  /** JNP of a tracer */                                                                           \
  template <traced_value X>                                                                        \
  auto NAME(X const& x) {                                                                          \
    using namespace detail::ad;                                                                    \
    return record(tape_of(x), tessera::NAME(primal_of(x)), [x](auto const& g, auto const& y) {       \
      auto const p = primal_of(x);                                                                 \
      (void)p;                                                                                     \
      (void)y;                                                                                     \
      contribute(x, [&] { return CONTRIBUTION; });                                                 \
    });                                                                                            \
  }
TESSERA_AD_UNARY(sin, jnp.sin, g * tessera::cos(p))
TESSERA_AD_UNARY(cos, jnp.cos, -(g * tessera::sin(p)))
TESSERA_AD_UNARY(tan, jnp.tan, g * (1 + y() * y()))
TESSERA_AD_UNARY(exp, jnp.exp, g * y())
TESSERA_AD_UNARY(log, jnp.log, g / p)
TESSERA_AD_UNARY(log1p, jnp.log1p, g / (1 + p))
TESSERA_AD_UNARY(sqrt, jnp.sqrt, g * 0.5 / y())
TESSERA_AD_UNARY(rsqrt, jax.lax.rsqrt, g * -0.5 * y() / p)
TESSERA_AD_UNARY(tanh, jnp.tanh, g * (1 - y() * y()))
TESSERA_AD_UNARY(sigmoid, jax.nn.sigmoid, g * y() * (1 - y()))
// JAX: abs' is 1 at 0 (select(x >= 0, g, -g)); relu' is 0 there (jax.nn.relu's custom_jvp).
TESSERA_AD_UNARY(abs, jnp.abs, tessera::where(p >= 0, g, -g))
TESSERA_AD_UNARY(relu, jax.nn.relu, tessera::where(p > 0, g, 0))
#undef TESSERA_AD_UNARY

namespace detail::ad {
/// The transpose of maximum and minimum: g to the operand equal to the result, half to each at
/// a tie (JAX's _balanced_eq).
template <class A, class B, class G, class Y>
void balanced_choice(A const& a, B const& b, G const& g, Y const& y) {
    contribute(a, [&] { return tessera::where(primal_of(a) == y(), tessera::where(primal_of(b) == y(), 0.5 * g, g), 0); });
    contribute(b, [&] { return tessera::where(primal_of(b) == y(), tessera::where(primal_of(a) == y(), 0.5 * g, g), 0); });
}
}  // namespace detail::ad

/// jnp.maximum with a tracer: g goes to the larger operand, half to each at a tie (JAX's _balanced_eq).
template <class A, class B>
  requires detail::ad::binary<A, B>
auto maximum(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::maximum(primal_of(a), primal_of(b)), [a, b](auto const& g, auto const& y) {
    balanced_choice(a, b, g, y);
  });
}

/// jnp.minimum with a tracer: as maximum.
template <class A, class B>
  requires detail::ad::binary<A, B>
auto minimum(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::minimum(primal_of(a), primal_of(b)), [a, b](auto const& g, auto const& y) {
    balanced_choice(a, b, g, y);
  });
}

/// jnp.clip(x, lo, hi) with a tracer: minimum(maximum(x, lo), hi), so ties share as there.
template <class X, class L, class H>
  requires(traced_value<X> || traced_value<L> || traced_value<H>) && detail::ad::operand<X> &&
          detail::ad::operand<L> && detail::ad::operand<H>
auto clip(X const& x, L const& lo, H const& hi) {
  return minimum(maximum(x, lo), hi);
}

/// jnp.power with a tracer: b * a^(b-1) (0 where b is 0) for a, log(a) * a^b (a = 0 read as 1) for b.
template <class A, class B>
  requires detail::ad::binary<A, B>
auto pow(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::pow(primal_of(a), primal_of(b)), [a, b](auto const& g, auto const& y) {
    if constexpr (traced_value<A>) {
      contribute(a, [&] {
        auto const& pa = primal_of(a);
        auto const& pb = primal_of(b);
        return g * tessera::where(pb == 0, 0, pb * tessera::pow(pa, pb - 1));
      });
    }
    if constexpr (traced_value<B>) {
      contribute(b, [&] {
        if constexpr (std::is_arithmetic_v<A>) return g * std::log(a == 0 ? A(1) : a) * y();
        else return g * tessera::log(tessera::where(primal_of(a) == 0, 1, primal_of(a))) * y();
      });
    }
  });
}

/// jnp.where(c, a, b) with a tracer: g where c holds goes to a, the rest to b (c is not differentiated).
template <class C, class A, class B>
  requires(traced_value<A> || traced_value<B> || traced_value<C>) && detail::ad::operand<C> &&
          detail::ad::operand<A> && detail::ad::operand<B>
auto where(C const& c, A const& a, B const& b) {
  using namespace detail::ad;
  if constexpr (!traced_value<A> && !traced_value<B>) {
    return tessera::where(primal_of(c), a, b);
  } else {
    return record(tape_of(a, b), tessera::where(primal_of(c), primal_of(a), primal_of(b)),
                  [c, a, b](auto const& g, auto const&) {
                    contribute(a, [&] { return tessera::where(primal_of(c), g, 0); });
                    contribute(b, [&] { return tessera::where(primal_of(c), 0, g); });
                  });
  }
}

/// x.astype(T) of a tracer: floating types carry the cotangent back (converted); integer and
/// bool results are constants, as their cotangents are zero in JAX.
template <element_type T, traced_value X>
auto astype(X const& x) {
  using namespace detail::ad;
  if constexpr (std::is_floating_point_v<T>) {
    return record(tape_of(x), tessera::astype<T>(primal_of(x)), [x](auto const& g, auto const&) {
      contribute(x, [&] { return g; });
    });
  } else {
    return tessera::astype<T>(primal_of(x));
  }
}

// ---- reductions --------------------------------------------------------------------------------

/// jnp.sum of a tracer: g spread over the reduced dimensions.
template <int... Axes, traced_value X>
auto sum(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::sum<Axes...>(primal_of(x)), [x](auto const& g, auto const&) {
    if (auto const& base = x.node()->square_of) {  // sum(d * d): 2 d g, one pass (see node::square_of)
      X const d(base);
      contribute(d, [&] { return spread<Axes...>(g, layout_of(x)) * primal_of(d) * typename X::value_type(2); });
      return;
    }
    contribute(x, [&] { return spread<Axes...>(g, layout_of(x)); });
  });
}

/// jnp.mean of a tracer: g / n spread over the reduced dimensions (n elements each).
template <int... Axes, traced_value X>
auto mean(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::mean<Axes...>(primal_of(x)), [x](auto const& g, auto const&) {
    if (auto const& base = x.node()->square_of) {  // mean(d * d): 2 d g / n, one pass (see node::square_of)
      X const d(base);
      contribute(d, [&] {
        return spread<Axes...>(g, layout_of(x)) / reduced_count<Axes...>(layout_of(x)) * primal_of(d) *
               typename X::value_type(2);
      });
      return;
    }
    contribute(x, [&] { return spread<Axes...>(g, layout_of(x)) / reduced_count<Axes...>(layout_of(x)); });
  });
}

namespace detail::ad {
/// max and min: g goes to the elements equal to the result, shared equally among ties
/// (JAX's _reduce_chooser_jvp_rule).
template <int... Axes, class X, class G, class Y>
auto chooser_contribution(X const& x, G const& g, Y const& y) {
  using T = typename G::value_type;
  auto const& p = x.primal();
  auto const at = p == spread<Axes...>(y, p);
  auto const counts = materialize(g / tessera::sum<Axes...>(tessera::astype<T>(at)));
  return tessera::where(at, spread<Axes...>(counts, p), 0);
}
}  // namespace detail::ad

/// jnp.max of a tracer: g to the maximal elements, shared among ties.
template <int... Axes, traced_value X>
auto max(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::max<Axes...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] { return chooser_contribution<Axes...>(x, g, y()); });
  });
}

/// jnp.min of a tracer: g to the minimal elements, shared among ties.
template <int... Axes, traced_value X>
auto min(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::min<Axes...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] { return chooser_contribution<Axes...>(x, g, y()); });
  });
}

/// jnp.prod of a tracer: g times the product of the other elements, exact where elements are 0.
template <int... Axes, traced_value X>
auto prod(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::prod<Axes...>(primal_of(x)), [x](auto const& g, auto const& y) {
    contribute(x, [&] {
      using T = typename std::remove_cvref_t<decltype(g)>::value_type;
      auto const& p = x.primal();
      // The product of the non-zero elements, and how many are zero, per reduced group.
      auto const nonzero = materialize(tessera::prod<Axes...>(tessera::where(p == 0, 1, p)));
      auto const zeros = materialize(tessera::sum<Axes...>(tessera::astype<T>(p == 0)));
      auto const z = spread<Axes...>(zeros, p);
      auto const others = tessera::where(z == 0, spread<Axes...>(y(), p) / p,
                                         tessera::where(z == 1, tessera::where(p == 0, spread<Axes...>(nonzero, p), 0), 0));
      return spread<Axes...>(g, p) * others;
    });
  });
}

// ---- layout and shape --------------------------------------------------------------------------

/// jnp.transpose of a tracer: g transposed back.
template <std::size_t... Perm, traced_value X>
auto transpose(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::transpose<Perm...>(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] {
      if constexpr (sizeof...(Perm) == 0) {
        return tessera::transpose(g);
      } else {
        constexpr auto inv = inverse_permutation<Perm...>();
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
          return tessera::transpose<inv[I]...>(g);
        }(std::make_index_sequence<sizeof...(Perm)>{});
      }
    });
  });
}

/// jax.sharding.reshard of a tracer: g goes back to the operand's layout (reshard's transpose).
template <traced_value X, dim_spec... D>
auto reshard(X const& x, P<D...> spec) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::reshard(primal_of(x), spec), [x](auto const& g, auto const&) {
    contribute(x, [&] { return g; });
  });
}

/// jax.lax.with_sharding_constraint of a tracer: as reshard.
template <traced_value X, class M, dim_spec... D>
auto with_sharding_constraint(X const& x, named_sharding<M, P<D...>> const& s) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::with_sharding_constraint(primal_of(x), s), [x](auto const& g, auto const&) {
    contribute(x, [&] { return g; });
  });
}

namespace detail::ad {
/// b laid out by sharding s (device_put), or only its plan and a placeholder while explain() plans.
template <class A, class B, class S>
A moved_to(B const& b, S const& s) {
  if (planning != nullptr) {
    auto const e = reshard_events<typename A::value_type, A::rank>(b.shape(), b.sharding(), dim_spec{}, s);
    planning->insert(planning->end(), e.begin(), e.end());
    return placeholder<A>(s, b.shape());
  }
  return tessera::device_put(b, s);
}
}  // namespace detail::ad

/// jax.device_put(x, sharding) of a tracer: the value laid out by the sharding, on its mesh's
/// devices; the cotangent goes back to x's devices and layout (device_put's transpose).
template <traced_value X, class M, dim_spec... D>
auto device_put(X const& x, named_sharding<M, P<D...>> const& s) {
  using namespace detail::ad;
  using A = typename X::array_type;
  using moved = array<typename A::value_type, A::rank, named_sharding<M, P<D...>>>;
  return record(tape_of(x), moved_to<moved>(x.primal(), s), [x](auto const& g, auto const&) {
    contribute(x, [&] { return moved_to<A>(g, x.sharding()); });
  });
}

// ---- products ----------------------------------------------------------------------------------

namespace detail::ad {
/// The cotangents of c = a @ b (jnp.matmul's transpose rule): a gets g @ b^T, b gets a^T @ g,
/// each product laid out directly in its operand's sharding (out_sharding), so a contracted
/// sharded dimension is summed there once: an all-reduce, or a reduce-scatter for a sharded operand.
template <class A, class B, class G>
void matmul_backward(A const& a, B const& b, G const& g) {
  constexpr std::size_t RA = operand_traits<stored_t<decltype(primal_of(a))>>::rank;
  constexpr std::size_t RB = operand_traits<stored_t<decltype(primal_of(b))>>::rank;
  auto const& pa = primal_of(a);
  auto const& pb = primal_of(b);
  using cotangent_type = std::remove_cvref_t<G>;
  using T = typename cotangent_type::value_type;
  if constexpr (RA == 1 && RB == 1) {  // a . b: a scalar
    contribute(a, [&] { return g * pb; });
    contribute(b, [&] { return g * pa; });
  } else if constexpr (RA == 1) {  // [K] @ [..., K, N] -> [..., N]
    contribute(a, [&] { return tessera::matmul(pb, g); });
    contribute(b, [&] {
      auto const col = expand_dims<1>(materialize(tessera::astype<T>(pa)));  // [K, 1]
      auto const row = expand_dims<RB - 2>(g);                                // [..., 1, N]
      return tessera::matmul(col, row);
    });
  } else if constexpr (RB == 1) {  // [..., M, K] @ [K] -> [..., M]
    contribute(a, [&] {
      auto const col = expand_dims<RA - 1>(g);                                // [..., M, 1]
      auto const row = expand_dims<0>(materialize(tessera::astype<T>(pb)));  // [1, K]
      return tessera::matmul(col, row);
    });
    contribute(b, [&] { return tessera::matmul(swap_last(pa), g); });
  } else if constexpr (RA == RB) {  // matrices, or batches of them alike
    if constexpr (traced_value<A>) contribute(a, [&] { return tessera::matmul(g, swap_last(pb), spec_of<array_t<A>>{}); });
    if constexpr (traced_value<B>) contribute(b, [&] { return tessera::matmul(swap_last(pa), g, spec_of<array_t<B>>{}); });
  } else {  // batches against a matrix: the batch dimensions are summed by add_broadcast
    contribute(a, [&] { return tessera::matmul(g, swap_last(pb)); });
    contribute(b, [&] { return tessera::matmul(swap_last(pa), g); });
  }
}
}  // namespace detail::ad

/// jnp.matmul with a tracer.
template <class A, class B>
  requires detail::ad::binary<A, B> && (!std::is_arithmetic_v<A>) && (!std::is_arithmetic_v<B>)
auto matmul(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::matmul(primal_of(a), primal_of(b)),
                [a, b](auto const& g, auto const&) { matmul_backward(a, b, g); });
}

/// jnp.matmul(a, b, out_sharding=P(...)) with a tracer.
template <class A, class B, dim_spec... D>
  requires detail::ad::binary<A, B> && (!std::is_arithmetic_v<A>) && (!std::is_arithmetic_v<B>)
auto matmul(A const& a, B const& b, P<D...> out) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::matmul(primal_of(a), primal_of(b), out),
                [a, b](auto const& g, auto const&) { matmul_backward(a, b, g); });
}

/// jnp.dot with a tracer (operands of rank 1 and 2).
template <class A, class B>
  requires detail::ad::binary<A, B> && (!std::is_arithmetic_v<A>) && (!std::is_arithmetic_v<B>)
auto dot(A const& a, B const& b) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::dot(primal_of(a), primal_of(b)),
                [a, b](auto const& g, auto const&) { matmul_backward(a, b, g); });
}

/// jnp.dot(a, b, out_sharding=P(...)) with a tracer.
template <class A, class B, dim_spec... D>
  requires detail::ad::binary<A, B> && (!std::is_arithmetic_v<A>) && (!std::is_arithmetic_v<B>)
auto dot(A const& a, B const& b, P<D...> out) {
  using namespace detail::ad;
  return record(tape_of(a, b), tessera::dot(primal_of(a), primal_of(b), out),
                [a, b](auto const& g, auto const&) { matmul_backward(a, b, g); });
}

}  // namespace tessera
