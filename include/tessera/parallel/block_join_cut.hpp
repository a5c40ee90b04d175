#pragma once
// Joining and cutting on a device's blocks inside shard_map (jnp on the per-device values):
// concatenate, stack, split, lax::slice, slice_in_dim, dynamic_slice, dynamic_update_slice,
// pad, flip and roll of blocks, with the global view's names (expr/join_cut.hpp). A result
// owns its values and varies where its operands vary (joins: where any of them does).

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/expr/join_cut.hpp"
#include "tessera/parallel/block_functions.hpp"

namespace tessera {

namespace detail::bjc {

template <std::size_t N>
void check_axis(int axis, std::size_t rank, char const* name) {
  if (axis < -static_cast<int>(rank) || axis >= static_cast<int>(rank))
    throw std::invalid_argument(std::string("tessera::") + name + " in a shard_map body: axis " + std::to_string(axis) +
                                " is out of range for rank " + std::to_string(rank));
}

/// out[g] = in[source(g)] (or fill where source returns false), over out's shape.
template <class T, std::size_t NO, std::size_t NI, class Source>
local_value<T, NO> mapped(local_value<T, NI> const& in, shape_t<NO> const& out_shape, Source source, T fill = T(0)) {
  auto out = make_value<T>(out_shape);
  std::array<tessera::slice, NO> whole{};
  for (std::size_t d = 0; d < NO; ++d) whole[d] = {0, out_shape[d]};
  std::array<std::size_t, NI> gi{};
  for_each_in_block(whole, [&](std::array<std::size_t, NO> const& g, std::size_t k) {
    out.v[k] = source(g, gi) ? in.v[flat_index(gi, in.shape)] : fill;
  });
  return out;
}

template <class T, std::size_t N>
local_value<T, N> box(local_value<T, N> const& in, shape_t<N> const& start, shape_t<N> const& size,
                      shape_t<N> const& step) {
  return mapped<T, N, N>(in, size, [&](auto const& g, auto& gi) {
    for (std::size_t d = 0; d < N; ++d) gi[d] = start[d] + g[d] * step[d];
    return true;
  });
}

template <class T, std::size_t N>
local_value<T, N> join_values(std::vector<local_value<T, N>> const& xs, std::size_t axis, char const* name) {
  shape_t<N> shape = xs.at(0).shape;
  shape[axis] = 0;
  for (auto const& x : xs) {
    for (std::size_t d = 0; d < N; ++d)
      if (d != axis && x.shape[d] != xs[0].shape[d])
        throw std::invalid_argument(std::string("tessera::") + name + " in a shard_map body: blocks " +
                                    shape_string(xs[0].shape) + " and " + shape_string(x.shape) +
                                    " differ outside the joined axis");
    shape[axis] += x.shape[axis];
  }
  auto out = make_value<T>(shape);
  std::array<tessera::slice, N> whole{};
  for (std::size_t d = 0; d < N; ++d) whole[d] = {0, shape[d]};
  for_each_in_block(whole, [&](std::array<std::size_t, N> const& g, std::size_t k) {
    std::array<std::size_t, N> gi = g;
    std::size_t i = 0;
    while (gi[axis] >= xs[i].shape[axis]) gi[axis] -= xs[i++].shape[axis];
    out.v[k] = xs[i].v[flat_index(gi, xs[i].shape)];
  });
  return out;
}

/// Where a join of blocks varies: where any of them does.
template <class X, class... Xs>
constexpr vma_state joined_state() {
  vma_state s = vma_of<std::remove_cvref_t<X>>::value;
  ((s = join(s, vma_of<std::remove_cvref_t<Xs>>::value)), ...);
  return s;
}
template <class... Xs>
using joined_vma = vma_type_t<joined_state<Xs...>()>;

}  // namespace detail::bjc

/// jnp.concatenate of a device's blocks along Axis.
template <int Axis = 0, plain_block X, plain_block... Xs>
auto concatenate(X const& x, Xs const&... xs) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(((static_rank_v<Xs> == N) && ...), "tessera::concatenate in a shard_map body: the blocks' ranks differ");
  static_assert(Axis < static_cast<int>(N) && Axis >= -static_cast<int>(N),
                "tessera::concatenate in a shard_map body: the axis is out of range for the blocks' rank");
  auto v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  std::vector<detail::local_value<T, N>> all{std::move(v), detail::values_of(xs)...};
  using V = detail::bjc::joined_vma<X, Xs...>;
  return detail::plain_result<V>(detail::bjc::join_values(all, detail::normalize_axis(Axis, N), "concatenate"));
}

/// jnp.stack of a device's blocks: a new axis at Axis.
template <int Axis = 0, plain_block X, plain_block... Xs>
auto stack(X const& x, Xs const&... xs) {
  constexpr std::size_t N = static_rank_v<X>;
  static_assert(Axis <= static_cast<int>(N) && Axis >= -static_cast<int>(N) - 1,
                "tessera::stack in a shard_map body: the axis is out of range");
  constexpr std::size_t axis = detail::normalize_axis(Axis, N + 1);
  auto one = [](auto const& b) {
    auto v = detail::values_of(b);
    using T = typename decltype(v)::value_type;
    shape_t<N + 1> s{};
    for (std::size_t i = 0, k = 0; i <= N; ++i) s[i] = i == axis ? 1 : v.shape[k++];
    return detail::local_value<T, N + 1>{std::move(v.v), s};
  };
  auto first = one(x);
  using T = typename decltype(first)::value_type;
  std::vector<detail::local_value<T, N + 1>> all{std::move(first), one(xs)...};
  using V = detail::bjc::joined_vma<X, Xs...>;
  return detail::plain_result<V>(detail::bjc::join_values(all, axis, "stack"));
}

/// jnp.split of a device's block at indices along Axis (Python's slice bounds).
template <int Axis = 0, plain_block X>
auto split(X const& x, std::vector<long long> const& indices) {
  constexpr std::size_t N = static_rank_v<X>;
  constexpr std::size_t axis = detail::normalize_axis(Axis, N);
  auto const v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  using R = decltype(detail::plain_result<detail::plain_vma<X>>(std::declval<detail::local_value<T, N>>()));
  std::vector<R> out;
  std::size_t prev = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    std::size_t const stop = i < indices.size() ? detail::jc::python_bound(indices[i], v.shape[axis]) : v.shape[axis];
    shape_t<N> st{}, sz = v.shape, step{};
    step.fill(1);
    st[axis] = std::min(prev, v.shape[axis]);
    sz[axis] = stop > st[axis] ? stop - st[axis] : 0;
    out.push_back(detail::plain_result<detail::plain_vma<X>>(detail::bjc::box(v, st, sz, step)));
    prev = stop;
  }
  return out;
}
/// jnp.split of a device's block into n equal pieces.
template <int Axis = 0, plain_block X>
auto split(X const& x, std::size_t sections) {
  constexpr std::size_t N = static_rank_v<X>;
  std::size_t const n = static_cast<std::size_t>(x.shape()[detail::normalize_axis(Axis, N)]);
  if (sections == 0 || n % sections != 0)
    throw std::invalid_argument("tessera::split in a shard_map body: array split does not result in an equal division");
  std::vector<long long> idx;
  for (std::size_t i = 1; i < sections; ++i) idx.push_back(static_cast<long long>(i * (n / sections)));
  return split<Axis>(x, idx);
}

namespace lax {
/// jax.lax.slice of a device's block with strides.
template <plain_block X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N], I const (&step)[N]) {
  static_assert(N == static_rank_v<X>, "tessera::lax::slice in a shard_map body: one bound per dimension");
  auto const v = detail::values_of(x);
  shape_t<N> st{}, sz{}, sp{};
  for (std::size_t d = 0; d < N; ++d) {
    if (start[d] < 0 || stop[d] < start[d] || static_cast<std::size_t>(stop[d]) > v.shape[d] || step[d] < 1)
      throw std::invalid_argument("tessera::lax::slice in a shard_map body: dimension " + std::to_string(d) +
                                  " of the block " + detail::shape_string(v.shape) + " cannot be sliced from " +
                                  std::to_string(start[d]) + " to " + std::to_string(stop[d]));
    st[d] = static_cast<std::size_t>(start[d]);
    sp[d] = static_cast<std::size_t>(step[d]);
    sz[d] = (static_cast<std::size_t>(stop[d] - start[d]) + sp[d] - 1) / sp[d];
  }
  return detail::plain_result<detail::plain_vma<X>>(detail::bjc::box(v, st, sz, sp));
}
/// jax.lax.slice of a device's block (unit strides; defined after the strided form, which it
/// calls by its qualified name).
template <plain_block X, std::integral I, std::size_t N>
auto slice(X const& x, I const (&start)[N], I const (&stop)[N]) {
  I step[N];
  std::fill(step, step + N, I(1));
  return lax::slice(x, start, stop, step);
}
}  // namespace lax

/// jax.lax.slice_in_dim of a device's block.
template <int Axis = 0, plain_block X>
auto slice_in_dim(X const& x, long long start, long long stop, long long step = 1) {
  constexpr std::size_t N = static_rank_v<X>;
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

/// jax.lax.dynamic_slice of a device's block (starts clamped as JAX clamps them).
template <plain_block X, std::size_t N>
auto dynamic_slice(X const& x, std::array<long long, N> const& starts, std::array<long long, N> const& sizes) {
  auto const v = detail::values_of(x);
  shape_t<N> st{}, sz{}, step{};
  step.fill(1);
  for (std::size_t d = 0; d < N; ++d) {
    if (sizes[d] < 0 || static_cast<std::size_t>(sizes[d]) > v.shape[d])
      throw std::invalid_argument("tessera::dynamic_slice in a shard_map body: slice size " + std::to_string(sizes[d]) +
                                  " does not fit the block " + detail::shape_string(v.shape));
    sz[d] = static_cast<std::size_t>(sizes[d]);
    st[d] = detail::jc::clamped_start(starts[d], v.shape[d], sz[d]);
  }
  return detail::plain_result<detail::plain_vma<X>>(detail::bjc::box(v, st, sz, step));
}

/// jax.lax.dynamic_slice of a device's block, starts and sizes as {a, b, ...}.
template <plain_block X, std::integral I, std::integral J, std::size_t N>
auto dynamic_slice(X const& x, I const (&starts)[N], J const (&sizes)[N]) {
  return tessera::dynamic_slice(x, detail::jc::longs(starts), detail::jc::longs(sizes));
}

/// jax.lax.dynamic_update_slice of a device's blocks (starts clamped).
template <plain_block X, plain_block U, std::size_t N>
auto dynamic_update_slice(X const& x, U const& update, std::array<long long, N> const& starts) {
  auto v = detail::values_of(x);
  auto const u = detail::values_of(update);
  shape_t<N> st{};
  for (std::size_t d = 0; d < N; ++d) {
    if (u.shape[d] > v.shape[d])
      throw std::invalid_argument("tessera::dynamic_update_slice in a shard_map body: the update " +
                                  detail::shape_string(u.shape) + " is larger than the block " +
                                  detail::shape_string(v.shape));
    st[d] = detail::jc::clamped_start(starts[d], v.shape[d], u.shape[d]);
  }
  std::array<tessera::slice, N> whole{};
  for (std::size_t d = 0; d < N; ++d) whole[d] = {0, u.shape[d]};
  detail::for_each_in_block(whole, [&](std::array<std::size_t, N> const& g, std::size_t k) {
    std::array<std::size_t, N> o{};
    for (std::size_t d = 0; d < N; ++d) o[d] = g[d] + st[d];
    v.v[detail::flat_index(o, v.shape)] = u.v[k];
  });
  return detail::plain_result<detail::plain_vma2<X, U>>(std::move(v));
}

/// jax.lax.dynamic_update_slice of a device's blocks, starts as {a, b, ...}.
template <plain_block X, plain_block U, std::integral I, std::size_t N>
auto dynamic_update_slice(X const& x, U const& update, I const (&starts)[N]) {
  return tessera::dynamic_update_slice(x, update, detail::jc::longs(starts));
}

/// jnp.pad (constant mode) of a device's block.
template <plain_block X, std::size_t N>
auto pad(X const& x, std::array<std::array<long long, 2>, N> const& widths,
         std::remove_cv_t<typename X::value_type> value = 0) {
  auto const v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  shape_t<N> out{};
  for (std::size_t d = 0; d < N; ++d) {
    if (widths[d][0] < 0 || widths[d][1] < 0)
      throw std::invalid_argument("tessera::pad in a shard_map body: negative pad widths");
    out[d] = v.shape[d] + static_cast<std::size_t>(widths[d][0] + widths[d][1]);
  }
  return detail::plain_result<detail::plain_vma<X>>(detail::bjc::mapped<T, N, N>(
      v, out,
      [&](auto const& g, auto& gi) {
        for (std::size_t d = 0; d < N; ++d) {
          std::size_t const lo = static_cast<std::size_t>(widths[d][0]);
          if (g[d] < lo || g[d] >= lo + v.shape[d]) return false;
          gi[d] = g[d] - lo;
        }
        return true;
      },
      value));
}

/// jnp.pad of a device's block, widths as {{lo, hi}, ...}.
template <plain_block X, std::integral I, std::size_t N>
auto pad(X const& x, I const (&widths)[N][2], std::remove_cv_t<typename X::value_type> value = 0) {
  std::array<std::array<long long, 2>, N> w{};
  for (std::size_t d = 0; d < N; ++d) w[d] = {static_cast<long long>(widths[d][0]), static_cast<long long>(widths[d][1])};
  return tessera::pad(x, w, value);
}

/// jnp.flip of a device's block (every axis when none).
template <int... Axes, plain_block X>
auto flip(X const& x) {
  constexpr std::size_t N = static_rank_v<X>;
  constexpr unsigned long long mask =
      sizeof...(Axes) == 0 ? ~0ull : ((1ull << detail::normalize_axis(Axes, N)) | ... | 0ull);
  auto const v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  return detail::plain_result<detail::plain_vma<X>>(detail::bjc::mapped<T, N, N>(v, v.shape, [&](auto const& g, auto& gi) {
    for (std::size_t d = 0; d < N; ++d) gi[d] = (mask >> d & 1ull) ? v.shape[d] - 1 - g[d] : g[d];
    return true;
  }));
}

/// jnp.roll of a device's block along Axis.
template <int Axis, plain_block X>
auto roll(X const& x, long long shift) {
  constexpr std::size_t N = static_rank_v<X>;
  constexpr std::size_t a = detail::normalize_axis(Axis, N);
  auto const v = detail::values_of(x);
  using T = typename decltype(v)::value_type;
  long long const n = static_cast<long long>(v.shape[a]);
  std::size_t const s = n == 0 ? 0 : static_cast<std::size_t>(((shift % n) + n) % n);
  return detail::plain_result<detail::plain_vma<X>>(detail::bjc::mapped<T, N, N>(v, v.shape, [&](auto const& g, auto& gi) {
    gi = g;
    gi[a] = (g[a] + v.shape[a] - s) % v.shape[a];
    return true;
  }));
}

}  // namespace tessera
