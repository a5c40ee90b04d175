#pragma once
// The joining and cutting operations (expr/join_cut.hpp) on tracers, with their transposes:
// concatenate's cotangent is sliced back into its operands, stack's indexed, split's pieces
// padded back into place, a slice's padded with zeros (a strided one scattered), a
// dynamic_slice's written into zeros, dynamic_update_slice's split between the operand (the
// window zeroed) and the update (the window), pad's sliced, flip's flipped, roll's rolled back.
// Each cotangent keeps its primal's layout (contribute reshards); the cuts of a cotangent skip
// JAX's divisibility check, since they only undo a forward operation that passed it.

#include <array>
#include <cstddef>
#include <utility>
#include <vector>

#include "tessera/autodiff/rules.hpp"
#include "tessera/expr/join_cut.hpp"

namespace tessera {

namespace detail::ad {
template <class X>
auto shape_of_value(X const& x) {
  return x.shape();
}
/// A box [start, start + shape) of g, with g's layout and no divisibility check.
template <class G, std::size_t N>
auto box_of(G const& g, shape_t<N> const& start, shape_t<N> const& shape) {
  std::array<long long, N> a{}, b{}, one{};
  for (std::size_t d = 0; d < N; ++d) {
    a[d] = static_cast<long long>(start[d]);
    b[d] = static_cast<long long>(start[d] + shape[d]);
    one[d] = 1;
  }
  return jc::static_slice(g, a, b, one, "grad", "slicing", false);
}
/// g padded with zeros into `whole`, starting at `start`.
template <class G, std::size_t N>
auto zero_padded(G const& g, shape_t<N> const& start, shape_t<N> const& whole) {
  auto const gs = g.shape();
  std::array<std::array<long long, 2>, N> w{};
  for (std::size_t d = 0; d < N; ++d)
    w[d] = {static_cast<long long>(start[d]), static_cast<long long>(whole[d] - start[d] - gs[d])};
  return jc::make_pad(g, w, typename G::value_type(0), false);
}
template <class... X>
concept any_traced = (traced_value<X> || ...);
}  // namespace detail::ad

/// jnp.concatenate of tracers: each operand's cotangent is its slice of g.
template <int Axis = 0, class X, class... Xs>
  requires detail::ad::any_traced<X, Xs...>
auto concatenate(X const& x, Xs const&... xs) {
  using namespace detail::ad;
  constexpr std::size_t N = std::remove_cvref_t<decltype(shape_of_value(x))>().size();
  constexpr std::size_t axis = detail::normalize_axis(Axis, N);
  return record(tape_of(x, xs...), tessera::concatenate<Axis>(primal_of(x), primal_of(xs)...),
                [x, xs...](auto const& g, auto const&) {
                  std::size_t off = 0;
                  auto one = [&](auto const& v) {
                    auto const sh = shape_of_value(v);
                    shape_t<N> st{};
                    st[axis] = off;
                    contribute(v, [&] { return box_of(g, st, sh); });
                    off += sh[axis];
                  };
                  one(x);
                  (one(xs), ...);
                });
}

/// jnp.stack of tracers: each operand's cotangent is g's element at its index along Axis.
template <int Axis = 0, class X, class... Xs>
  requires detail::ad::any_traced<X, Xs...>
auto stack(X const& x, Xs const&... xs) {
  using namespace detail::ad;
  constexpr std::size_t N = std::remove_cvref_t<decltype(shape_of_value(x))>().size();
  constexpr std::size_t axis = detail::normalize_axis(Axis, N + 1);
  return record(tape_of(x, xs...), tessera::stack<Axis>(primal_of(x), primal_of(xs)...),
                [x, xs...](auto const& g, auto const&) {
                  std::size_t k = 0;
                  auto one = [&](auto const& v) {
                    contribute(v, [&] { return detail::jc::take_index<axis>(g, k); });
                    ++k;
                  };
                  one(x);
                  (one(xs), ...);
                });
}

namespace detail::ad {
/// Each piece of a split, recorded with its cotangent padded back into x's shape (the pieces'
/// contributions add up to the concatenation of their cotangents, zeros where none is used).
template <std::size_t Axis, class X, class Parts>
auto record_split(X const& x, Parts parts) {
  // record gives the tracer of the piece's array (named here, not through a lambda in decltype,
  // which crashes clang 14 when the headers come from a precompiled header).
  using R = tracer<decltype(tessera::eval(parts[0]))>;
  std::vector<R> out;
  auto const whole = x.shape();
  std::size_t off = 0;
  for (auto& p : parts) {
    std::remove_cv_t<decltype(whole)> st{};
    st[Axis] = off;
    off += p.shape()[Axis];
    out.push_back(record(tape_of(x), std::move(p), [x, st, whole](auto const& g, auto const&) {
      contribute(x, [&] { return zero_padded(g, st, whole); });
    }));
  }
  return out;
}
}  // namespace detail::ad

/// jnp.split of a tracer into n equal pieces.
template <int Axis = 0, traced_value X>
auto split(X const& x, std::size_t sections) {
  constexpr std::size_t axis = detail::normalize_axis(Axis, X::rank);
  return detail::ad::record_split<axis>(x, tessera::split<Axis>(detail::ad::primal_of(x), sections));
}
/// jnp.split of a tracer at indices.
template <int Axis = 0, traced_value X>
auto split(X const& x, std::vector<long long> const& indices) {
  constexpr std::size_t axis = detail::normalize_axis(Axis, X::rank);
  return detail::ad::record_split<axis>(x, tessera::split<Axis>(detail::ad::primal_of(x), indices));
}
/// jnp.split of a tracer at indices.
template <int Axis = 0, traced_value X, std::integral I, std::size_t K>
auto split(X const& x, I const (&indices)[K]) {
  auto const a = detail::jc::longs(indices);
  return split<Axis>(x, std::vector<long long>(a.begin(), a.end()));
}

namespace detail::ad {
/// A static slice of a tracer: g padded with zeros (scattered with a stride).
template <class X, std::size_t N>
auto traced_slice(X const& x, std::array<long long, N> const& start, std::array<long long, N> const& stop,
                  std::array<long long, N> const& step, char const* name) {
  auto fwd = jc::static_slice(primal_of(x), start, stop, step, name, "slicing");
  return record(tape_of(x), std::move(fwd), [x, start, step](auto const& g, auto const&) {
    shape_t<N> st{};
    bool strided = false;
    for (std::size_t d = 0; d < N; ++d) {
      st[d] = static_cast<std::size_t>(start[d]);
      strided = strided || step[d] > 1;
    }
    if (strided) contribute(x, [&] { return jc::strided_scatter(g, x.shape(), st, step); });
    else contribute(x, [&] { return zero_padded(g, st, x.shape()); });
  });
}
}  // namespace detail::ad

namespace lax {
/// jax.lax.slice of a tracer: g padded with zeros.
template <traced_value X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N]) {
  std::array<long long, N> step{};
  step.fill(1);
  return detail::ad::traced_slice(x, detail::jc::longs(start), detail::jc::longs(stop), step, "lax::slice");
}
/// jax.lax.slice of a tracer with strides: g scattered into zeros.
template <traced_value X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N], I const (&step)[N]) {
  return detail::ad::traced_slice(x, detail::jc::longs(start), detail::jc::longs(stop), detail::jc::longs(step),
                                  "lax::slice");
}
}  // namespace lax

/// jax.lax.slice_in_dim of a tracer.
template <int Axis = 0, traced_value X>
auto slice_in_dim(X const& x, long long start, long long stop, long long step = 1) {
  constexpr std::size_t N = X::rank;
  constexpr std::size_t a = detail::normalize_axis(Axis, N);
  auto const in = x.shape();
  std::array<long long, N> st{}, sp{}, stp{};
  for (std::size_t d = 0; d < N; ++d) {
    sp[d] = static_cast<long long>(in[d]);
    stp[d] = 1;
  }
  long long const n = static_cast<long long>(in[a]);
  st[a] = start < 0 ? start + n : start;
  sp[a] = stop < 0 ? stop + n : stop;
  stp[a] = step;
  return detail::ad::traced_slice(x, st, sp, stp, "slice_in_dim");
}

/// jax.lax.dynamic_slice of a tracer: g written into zeros at the (clamped) starts.
template <traced_value X, std::size_t N>
auto dynamic_slice(X const& x, std::array<long long, N> const& starts, std::array<long long, N> const& sizes) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::dynamic_slice(primal_of(x), starts, sizes), [x, starts](auto const& g, auto const&) {
    auto const in = x.shape(), gs = g.shape();
    shape_t<N> st{};
    for (std::size_t d = 0; d < N; ++d) st[d] = detail::jc::clamped_start(starts[d], in[d], gs[d]);
    contribute(x, [&] { return zero_padded(g, st, in); });
  });
}
/// jax.lax.dynamic_slice of a tracer.
template <traced_value X, std::integral I, std::integral J, std::size_t N>
auto dynamic_slice(X const& x, I const (&starts)[N], J const (&sizes)[N]) {
  return tessera::dynamic_slice(x, detail::jc::longs(starts), detail::jc::longs(sizes));
}

/// jax.lax.dynamic_update_slice with a tracer: the operand's cotangent is g with the window
/// zeroed, the update's is the window of g.
template <class X, class U, std::size_t N>
  requires detail::ad::any_traced<X, U>
auto dynamic_update_slice(X const& x, U const& u, std::array<long long, N> const& starts) {
  using namespace detail::ad;
  return record(tape_of(x, u), tessera::dynamic_update_slice(primal_of(x), primal_of(u), starts),
                [x, u, starts](auto const& g, auto const&) {
                  auto const in = g.shape(), us = shape_of_value(u);
                  shape_t<N> st{};
                  for (std::size_t d = 0; d < N; ++d) st[d] = detail::jc::clamped_start(starts[d], in[d], us[d]);
                  contribute(x, [&] {
                    using G = std::remove_cvref_t<decltype(g)>;
                    auto const zeros = filled<G>(g.sharding(), us, typename G::value_type(0));
                    return detail::jc::update_slice(g, zeros, starts);
                  });
                  contribute(u, [&] { return box_of(g, st, us); });
                });
}
/// jax.lax.dynamic_update_slice with a tracer.
template <class X, class U, std::integral I, std::size_t N>
  requires detail::ad::any_traced<X, U>
auto dynamic_update_slice(X const& x, U const& u, I const (&starts)[N]) {
  return tessera::dynamic_update_slice(x, u, detail::jc::longs(starts));
}

/// jnp.pad of a tracer: g sliced back.
template <traced_value X, std::size_t N>
auto pad(X const& x, std::array<std::array<long long, 2>, N> const& widths, typename X::value_type value = 0) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::pad(primal_of(x), widths, value), [x, widths](auto const& g, auto const&) {
    shape_t<N> st{};
    for (std::size_t d = 0; d < N; ++d) st[d] = static_cast<std::size_t>(widths[d][0]);
    contribute(x, [&] { return box_of(g, st, x.shape()); });
  });
}
/// jnp.pad of a tracer.
template <traced_value X, std::integral I, std::size_t N>
auto pad(X const& x, I const (&widths)[N][2], typename X::value_type value = 0) {
  std::array<std::array<long long, 2>, N> w{};
  for (std::size_t d = 0; d < N; ++d) w[d] = {static_cast<long long>(widths[d][0]), static_cast<long long>(widths[d][1])};
  return tessera::pad(x, w, value);
}

/// jnp.flip of a tracer: g flipped back.
template <int... Axes, traced_value X>
auto flip(X const& x) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::flip<Axes...>(primal_of(x)), [x](auto const& g, auto const&) {
    contribute(x, [&] { return tessera::flip<Axes...>(g); });
  });
}

/// jnp.roll of a tracer: g rolled back by -shift.
template <int Axis, traced_value X>
auto roll(X const& x, long long shift) {
  using namespace detail::ad;
  return record(tape_of(x), tessera::roll<Axis>(primal_of(x), shift), [x, shift](auto const& g, auto const&) {
    contribute(x, [&] { return detail::jc::make_roll<detail::normalize_axis(Axis, X::rank)>(g, -shift); });
  });
}

}  // namespace tessera
