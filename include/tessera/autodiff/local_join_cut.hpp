#pragma once
// Joining and cutting on local tracers (a shard_map body under grad), with the names of
// parallel/block_join_cut.hpp: concatenate, stack, split, lax::slice, slice_in_dim,
// dynamic_slice, dynamic_update_slice, pad, flip, roll. Each cut's transpose writes g into zeros
// where the piece came from (JAX's slice/pad transposes); a join's gives each operand its piece
// of g. Nothing here communicates: the block is the device's own.

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/parallel/block_join_cut.hpp"

namespace tessera {

namespace detail::ad {

/// g written into zeros of shape `whole` at start + i * step (the transpose of bjc::box).
template <class T, std::size_t N>
local_value<T, N> embedded(local_value<T, N> const& g, shape_t<N> const& whole, shape_t<N> const& start,
                           shape_t<N> const& step) {
  auto out = make_value<T>(whole);
  std::array<tessera::slice, N> b{};
  for (std::size_t d = 0; d < N; ++d) b[d] = {0, g.shape[d]};
  for_each_in_block(b, [&](std::array<std::size_t, N> const& i, std::size_t k) {
    std::array<std::size_t, N> o{};
    for (std::size_t d = 0; d < N; ++d) o[d] = start[d] + i[d] * step[d];
    out.v[flat_index(o, whole)] += g.v[k];
  });
  return out;
}

template <std::size_t N>
shape_t<N> unit_steps() {
  shape_t<N> s{};
  s.fill(1);
  return s;
}

/// The box [start, start + size * step) of x, recorded: its cotangent embedded back.
template <class T, std::size_t N>
local_tracer<T, N> boxed(local_tracer<T, N> const& x, shape_t<N> const& start, shape_t<N> const& size,
                         shape_t<N> const& step, char const* what) {
  return local_record(bjc::box(x.node()->value, start, size, step), x.node()->vma,
                      [x, start, step](local_value<T, N> g, axis_mask m) {
                        x.node()->add(m, embedded(g, x.shape(), start, step));
                      },
                      what);
}

/// The same element-to-element map forwards and (inverted by the caller) backwards.
template <class T, std::size_t N, class Fwd, class Bwd>
local_tracer<T, N> permuted_elements(local_tracer<T, N> const& x, Fwd fwd, Bwd bwd, char const* what) {
  auto const& v = x.node()->value;
  return local_record(bjc::mapped<T, N, N>(v, v.shape, fwd), x.node()->vma,
                      [x, bwd](local_value<T, N> g, axis_mask m) {
                        x.node()->add(m, bjc::mapped<T, N, N>(g, g.shape, bwd));
                      },
                      what);
}

template <class X, class... Xs>
concept same_local_tracers = local_traced<X> && (std::is_same_v<std::remove_cvref_t<X>, std::remove_cvref_t<Xs>> && ...);

/// Joins xs (equal types) along axis, recorded: each operand's cotangent is its box of g.
template <class T, std::size_t N>
local_tracer<T, N> joined(std::vector<local_tracer<T, N>> xs, std::size_t axis, char const* what) {
  std::vector<local_value<T, N>> vs;
  axis_mask vma = 0;
  for (auto const& x : xs) {
    vs.push_back(x.node()->value);
    vma |= x.node()->vma;
  }
  return local_record(bjc::join_values(vs, axis, what), vma, [xs = std::move(xs), axis](local_value<T, N> g, axis_mask m) {
    shape_t<N> start{};
    for (auto const& x : xs) {
      x.node()->add(m, bjc::box(g, start, x.shape(), unit_steps<N>()));
      start[axis] += x.shape()[axis];
    }
  }, what);
}

/// x with a dimension of size 1 inserted at axis (a reshape; its transpose drops it again).
template <class T, std::size_t N>
local_tracer<T, N + 1> with_unit_axis(local_tracer<T, N> const& x, std::size_t axis) {
  shape_t<N + 1> s{};
  for (std::size_t i = 0, k = 0; i <= N; ++i) s[i] = i == axis ? 1 : x.shape()[k++];
  return local_record(local_value<T, N + 1>{x.node()->value.v, s}, x.node()->vma,
                      [x](local_value<T, N + 1> g, axis_mask m) {
                        x.node()->add(m, local_value<T, N>{std::move(g.v), x.shape()});
                      },
                      "stack");
}

}  // namespace detail::ad

/// jnp.concatenate of local tracers along Axis (a differentiated shard_map body): each operand's
/// cotangent is its piece of g.
template <int Axis = 0, local_traced X, local_traced... Xs>
auto concatenate(X const& x, Xs const&... xs) {
  constexpr std::size_t N = X::rank;
  static_assert(detail::ad::same_local_tracers<X, Xs...>,
                "tessera::concatenate in a differentiated shard_map body: the blocks' element types or ranks differ");
  static_assert(Axis < static_cast<int>(N) && Axis >= -static_cast<int>(N),
                "tessera::concatenate in a shard_map body: the axis is out of range for the blocks' rank");
  return detail::ad::joined<typename X::value_type, N>({x, xs...}, detail::normalize_axis(Axis, N), "concatenate");
}

/// jnp.stack of local tracers: a new axis at Axis; each operand's cotangent is its slice of g.
template <int Axis = 0, local_traced X, local_traced... Xs>
auto stack(X const& x, Xs const&... xs) {
  constexpr std::size_t N = X::rank;
  static_assert(detail::ad::same_local_tracers<X, Xs...>,
                "tessera::stack in a differentiated shard_map body: the blocks' element types or ranks differ");
  static_assert(Axis <= static_cast<int>(N) && Axis >= -static_cast<int>(N) - 1,
                "tessera::stack in a shard_map body: the axis is out of range");
  constexpr std::size_t axis = detail::normalize_axis(Axis, N + 1);
  using T = typename X::value_type;
  return detail::ad::joined<T, N + 1>({detail::ad::with_unit_axis(x, axis), detail::ad::with_unit_axis(xs, axis)...}, axis,
                                      "stack");
}

/// jnp.split of a local tracer at indices along Axis (Python's slice bounds): each piece's
/// cotangent is written back where the piece was.
template <int Axis = 0, local_traced X>
auto split(X const& x, std::vector<long long> const& indices) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  constexpr std::size_t axis = detail::normalize_axis(Axis, N);
  auto const in = x.shape();
  std::vector<X> out;
  std::size_t prev = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    std::size_t const stop = i < indices.size() ? detail::jc::python_bound(indices[i], in[axis]) : in[axis];
    shape_t<N> st{}, sz = in;
    st[axis] = std::min(prev, in[axis]);
    sz[axis] = stop > st[axis] ? stop - st[axis] : 0;
    out.push_back(detail::ad::boxed(x, st, sz, detail::ad::unit_steps<N>(), "split"));
    prev = stop;
  }
  return out;
}
/// jnp.split of a local tracer into n equal pieces.
template <int Axis = 0, local_traced X>
auto split(X const& x, std::size_t sections) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  std::size_t const n = x.shape()[detail::normalize_axis(Axis, N)];
  if (sections == 0 || n % sections != 0)
    throw std::invalid_argument("tessera::split in a shard_map body: array split does not result in an equal division (" +
                                std::to_string(n) + " elements in " + std::to_string(sections) + " sections)");
  std::vector<long long> idx;
  for (std::size_t i = 1; i < sections; ++i) idx.push_back(static_cast<long long>(i * (n / sections)));
  return split<Axis>(x, idx);
}
/// jnp.split(x, {i, j}, axis=Axis) of a local tracer.
template <int Axis = 0, local_traced X, std::integral I, std::size_t K>
auto split(X const& x, I const (&indices)[K]) {
  auto const a = detail::jc::longs(indices);
  return split<Axis>(x, std::vector<long long>(a.begin(), a.end()));
}

namespace lax {
/// jax.lax.slice of a local tracer with strides: g scattered back into zeros.
template <local_traced X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N], I const (&step)[N]) {
  static_assert(N == X::rank, "tessera::lax::slice in a shard_map body: one bound per dimension");
  auto const in = x.shape();
  shape_t<N> st{}, sz{}, sp{};
  for (std::size_t d = 0; d < N; ++d) {
    if (start[d] < 0 || stop[d] < start[d] || static_cast<std::size_t>(stop[d]) > in[d] || step[d] < 1)
      throw std::invalid_argument("tessera::lax::slice in a shard_map body: dimension " + std::to_string(d) +
                                  " of the block " + detail::shape_string(in) + " cannot be sliced from " +
                                  std::to_string(start[d]) + " to " + std::to_string(stop[d]) + " by " +
                                  std::to_string(step[d]));
    st[d] = static_cast<std::size_t>(start[d]);
    sp[d] = static_cast<std::size_t>(step[d]);
    sz[d] = (static_cast<std::size_t>(stop[d] - start[d]) + sp[d] - 1) / sp[d];
  }
  return detail::ad::boxed(x, st, sz, sp, "lax::slice");
}
/// jax.lax.slice of a local tracer: g padded back with zeros.
template <local_traced X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N]) {
  I step[N];
  std::fill(step, step + N, I(1));
  return lax::slice(x, start, stop, step);
}
}  // namespace lax

/// jax.lax.slice_in_dim of a local tracer (negative bounds count from the end).
template <int Axis = 0, local_traced X>
auto slice_in_dim(X const& x, long long start, long long stop, long long step = 1) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  constexpr std::size_t a = detail::normalize_axis(Axis, N);
  long long st[N], sp[N], stp[N];
  for (std::size_t d = 0; d < N; ++d) {
    st[d] = 0;
    sp[d] = static_cast<long long>(x.shape()[d]);
    stp[d] = 1;
  }
  st[a] = start < 0 ? start + sp[a] : start;
  sp[a] = stop < 0 ? stop + sp[a] : stop;
  stp[a] = step;
  return lax::slice(x, st, sp, stp);
}

/// jax.lax.dynamic_slice of a local tracer (starts read as JAX reads them: negative from the
/// end, then clamped): g written into zeros at the starts.
template <local_traced X, std::size_t N>
auto dynamic_slice(X const& x, std::array<long long, N> const& starts, std::array<long long, N> const& sizes) {
  static_assert(N == X::rank, "tessera::dynamic_slice in a shard_map body: one start and one size per dimension");
  auto const in = x.shape();
  shape_t<N> st{}, sz{};
  for (std::size_t d = 0; d < N; ++d) {
    if (sizes[d] < 0 || static_cast<std::size_t>(sizes[d]) > in[d])
      throw std::invalid_argument("tessera::dynamic_slice in a shard_map body: slice size " + std::to_string(sizes[d]) +
                                  " does not fit the block " + detail::shape_string(in));
    sz[d] = static_cast<std::size_t>(sizes[d]);
    st[d] = detail::jc::clamped_start(starts[d], in[d], sz[d]);
  }
  return detail::ad::boxed(x, st, sz, detail::ad::unit_steps<N>(), "dynamic_slice");
}
/// jax.lax.dynamic_slice of a local tracer.
template <local_traced X, std::integral I, std::integral J, std::size_t N>
auto dynamic_slice(X const& x, I const (&starts)[N], J const (&sizes)[N]) {
  return tessera::dynamic_slice(x, detail::jc::longs(starts), detail::jc::longs(sizes));
}

/// jax.lax.dynamic_update_slice of local tracers: the operand's cotangent is g with the window
/// zeroed, the update's is the window of g.
template <local_traced X, local_traced U, std::size_t N>
auto dynamic_update_slice(X const& x, U const& update, std::array<long long, N> const& starts) {
  using T = typename X::value_type;
  static_assert(std::is_same_v<T, typename U::value_type> && X::rank == U::rank && N == X::rank,
                "tessera::dynamic_update_slice in a differentiated shard_map body: the update must have the "
                "operand's element type and rank, and one start per dimension");
  auto v = x.node()->value;
  auto const& u = update.node()->value;
  shape_t<N> st{};
  for (std::size_t d = 0; d < N; ++d) {
    if (u.shape[d] > v.shape[d])
      throw std::invalid_argument("tessera::dynamic_update_slice in a shard_map body: the update " +
                                  detail::shape_string(u.shape) + " is larger than the block " +
                                  detail::shape_string(v.shape));
    st[d] = detail::jc::clamped_start(starts[d], v.shape[d], u.shape[d]);
  }
  std::array<tessera::slice, N> window{};
  for (std::size_t d = 0; d < N; ++d) window[d] = {0, u.shape[d]};
  auto at = [st, shape = v.shape](std::array<std::size_t, N> const& g) {
    std::array<std::size_t, N> o{};
    for (std::size_t d = 0; d < N; ++d) o[d] = g[d] + st[d];
    return detail::flat_index(o, shape);
  };
  detail::for_each_in_block(window, [&](std::array<std::size_t, N> const& g, std::size_t k) { v.v[at(g)] = u.v[k]; });
  return detail::ad::local_record(
      std::move(v), x.node()->vma | update.node()->vma,
      [x, update, st, window, at](detail::local_value<T, N> g, detail::ad::axis_mask m) {
        update.node()->add(m, detail::bjc::box(g, st, update.shape(), detail::ad::unit_steps<N>()));
        detail::for_each_in_block(window, [&](std::array<std::size_t, N> const& i, std::size_t) { g.v[at(i)] = T(0); });
        x.node()->add(m, std::move(g));
      },
      "dynamic_update_slice");
}
/// jax.lax.dynamic_update_slice of local tracers.
template <local_traced X, local_traced U, std::integral I, std::size_t N>
auto dynamic_update_slice(X const& x, U const& update, I const (&starts)[N]) {
  return tessera::dynamic_update_slice(x, update, detail::jc::longs(starts));
}

/// jnp.pad (constant mode) of a local tracer: g's middle is x's cotangent.
template <local_traced X, std::size_t N>
auto pad(X const& x, std::array<std::array<long long, 2>, N> const& widths, typename X::value_type value = 0) {
  using T = typename X::value_type;
  static_assert(N == X::rank, "tessera::pad in a shard_map body: one (low, high) pair per dimension");
  auto const& v = x.node()->value;
  shape_t<N> out{}, lo{};
  for (std::size_t d = 0; d < N; ++d) {
    if (widths[d][0] < 0 || widths[d][1] < 0)
      throw std::invalid_argument("tessera::pad in a shard_map body: negative pad widths (" +
                                  std::to_string(widths[d][0]) + ", " + std::to_string(widths[d][1]) +
                                  ") in dimension " + std::to_string(d));
    lo[d] = static_cast<std::size_t>(widths[d][0]);
    out[d] = v.shape[d] + lo[d] + static_cast<std::size_t>(widths[d][1]);
  }
  auto y = detail::bjc::mapped<T, N, N>(
      v, out,
      [&](auto const& g, auto& gi) {
        for (std::size_t d = 0; d < N; ++d) {
          if (g[d] < lo[d] || g[d] >= lo[d] + v.shape[d]) return false;
          gi[d] = g[d] - lo[d];
        }
        return true;
      },
      value);
  return detail::ad::local_record(std::move(y), x.node()->vma, [x, lo](detail::local_value<T, N> g, detail::ad::axis_mask m) {
    x.node()->add(m, detail::bjc::box(g, lo, x.shape(), detail::ad::unit_steps<N>()));
  }, "pad");
}
/// jnp.pad of a local tracer, widths as {{lo, hi}, ...}.
template <local_traced X, std::integral I, std::size_t N>
auto pad(X const& x, I const (&widths)[N][2], typename X::value_type value = 0) {
  std::array<std::array<long long, 2>, N> w{};
  for (std::size_t d = 0; d < N; ++d) w[d] = {static_cast<long long>(widths[d][0]), static_cast<long long>(widths[d][1])};
  return tessera::pad(x, w, value);
}

/// jnp.flip of a local tracer (every axis when none): g flipped back.
template <int... Axes, local_traced X>
auto flip(X const& x) {
  constexpr std::size_t N = X::rank;
  static_assert(((Axes < static_cast<int>(N) && Axes >= -static_cast<int>(N)) && ...),
                "tessera::flip in a shard_map body: an axis is out of range for the block's rank");
  constexpr unsigned long long mask =
      sizeof...(Axes) == 0 ? ~0ull : ((1ull << detail::normalize_axis(Axes, N)) | ... | 0ull);
  auto const s = x.shape();
  auto f = [s](auto const& g, auto& gi) {
    for (std::size_t d = 0; d < N; ++d) gi[d] = (mask >> d & 1ull) ? s[d] - 1 - g[d] : g[d];
    return true;
  };
  return detail::ad::permuted_elements(x, f, f, "flip");
}

/// jnp.roll of a local tracer along Axis: g rolled back.
template <int Axis, local_traced X>
auto roll(X const& x, long long shift) {
  constexpr std::size_t N = X::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  constexpr std::size_t a = detail::normalize_axis(Axis, N);
  std::size_t const n = x.shape()[a];
  long long const nn = static_cast<long long>(n);
  std::size_t const s = n == 0 ? 0 : static_cast<std::size_t>(((shift % nn) + nn) % nn);
  auto by = [n](std::size_t k) {
    return [n, k](auto const& g, auto& gi) {
      gi = g;
      gi[a] = (g[a] + n - k) % n;
      return true;
    };
  };
  return detail::ad::permuted_elements(x, by(s), by(n == 0 ? 0 : (n - s) % n), "roll");
}

}  // namespace tessera
