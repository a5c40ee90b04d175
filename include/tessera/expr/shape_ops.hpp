#pragma once
// Shape operations (jnp.reshape, swapaxes, moveaxis, broadcast_to) with JAX's sharding rules.
//
// reshape: tessera knows an array's sizes only at run time, and JAX's rule for which sharded
// dimensions survive a split or a merge depends on them (core/reshape_rule.hpp). So a reshape
// of a replicated operand gives a replicated result, as in JAX, and a reshape of a sharded one
// takes the result's sharding as JAX's `out_sharding=` does, in the type: `reshape(x, {4, 8},
// P<"x">{})`. At run time it compares that sharding with the one JAX's rule gives for the
// sizes: where each device's block of the result is made of its own block of the operand, the
// reshape moves nothing; otherwise the operand is gathered first (and explain() says so).

#include <array>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/core/diagnostics.hpp"
#include "tessera/core/dtype.hpp"
#include "tessera/core/reshape_rule.hpp"
#include "tessera/core/shape_diagnostics.hpp"
#include "tessera/expr/computed.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"

namespace tessera {

namespace detail {

/// An axis argument as JAX takes it: negative counts from the end. Checked where it is used.
constexpr std::size_t normalize_axis(int axis, std::size_t rank) {
  return axis < 0 ? static_cast<std::size_t>(axis + static_cast<int>(rank)) : static_cast<std::size_t>(axis);
}
constexpr bool axis_in_range(int axis, std::size_t rank) {
  return axis < static_cast<int>(rank) && axis >= -static_cast<int>(rank);
}

/// `float32[8@x,4]`: an operand's type as JAX's errors print it (debug/typeof.hpp comes later).
template <class T, std::size_t N>
std::string operand_text(shape_t<N> const& shape, std::array<dim_spec, N> const& spec) {
  std::string s(dtype_name<T>());
  s += '[';
  for (std::size_t i = 0; i < N; ++i) {
    s += (i ? "," : "") + std::to_string(shape[i]);
    for (std::size_t a = 0; a < spec[i].count(); ++a) (s += a ? "," : "@") += spec[i].axis(a).view();
  }
  return s + ']';
}

/// The new shape, with JAX's one -1 resolved; throws, as numpy does, when the sizes disagree.
template <std::size_t M, std::size_t N>
shape_t<M> resolve_shape(std::array<long long, M> const& want, shape_t<N> const& have) {
  std::size_t const total = element_count(have);
  std::size_t known = 1;
  int unknown = -1;
  shape_t<M> out{};
  auto describe = [&] {
    std::string s = "(";
    for (std::size_t i = 0; i < M; ++i) s += (i ? ", " : "") + std::to_string(want[i]);
    return s + (M == 1 ? ",)" : ")");
  };
  for (std::size_t i = 0; i < M; ++i) {
    if (want[i] == -1 && unknown < 0) {
      unknown = static_cast<int>(i);
    } else if (want[i] < 0) {
      throw std::invalid_argument("tessera::reshape: the new shape " + describe() +
                                  " may have one -1 and no other negative size");
    } else {
      out[i] = static_cast<std::size_t>(want[i]);
      known *= out[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || total % known != 0)
      throw std::invalid_argument("tessera::reshape: cannot reshape an array of size " + std::to_string(total) +
                                  " into shape " + describe());
    out[static_cast<std::size_t>(unknown)] = total / known;
  } else if (known != total) {
    throw std::invalid_argument("tessera::reshape: cannot reshape an array of size " + std::to_string(total) +
                                " into shape " + describe());
  }
  return out;
}

/// Row-major flat index of `g` in `shape`, and back.
template <std::size_t N>
std::size_t flat_index(std::array<std::size_t, N> const& g, shape_t<N> const& shape) {
  std::size_t f = 0;
  for (std::size_t d = 0; d < N; ++d) f = f * shape[d] + g[d];
  return f;
}
template <std::size_t N>
void unflatten(std::size_t f, shape_t<N> const& shape, std::array<std::size_t, N>& g) {
  for (std::size_t d = N; d-- > 0;) {
    g[d] = shape[d] == 0 ? 0 : f % shape[d];
    f = shape[d] == 0 ? 0 : f / shape[d];
  }
}

/// How a reshape's result blocks relate to the operand's (sharding `si` in, `so` out).
enum class reshape_locality : unsigned char {
  moves,     // some device's block needs elements other devices hold: gathered first
  local,     // every device's block is made of its own block of the operand
  same_order // and in the same row-major order: each block is a copy of the operand's
};

/// Which reshape_locality the reshape has. Checked element by element once per shapes and
/// mesh, and remembered. same_order is the common case (splitting d_model into heads, merging
/// them back): a block copy there, where the per-element index kernel cost a sixth of the
/// transformer's step (bench/RESULTS.md).
template <std::size_t N, std::size_t M>
reshape_locality reshape_kind(sharding_layout_view const& si, sharding_layout_view const& so, shape_t<N> const& in,
                              shape_t<M> const& out) {
  // The layouts as plain values (compiled once per pair of ranks, not per pair of shardings):
  // the key is every number they are made of, with the shapes.
  std::vector<long long> key;
  auto put_layout = [&key](sharding_layout_view const& v) {
    for (int s : v.mesh_sizes) key.push_back(s);
    key.push_back(-1);
    for (int d : *v.ids) key.push_back(d);
    key.push_back(-1);
    for (auto const& e : v.entries) {
      key.push_back(static_cast<long long>(e.count));
      for (std::size_t a = 0; a < e.count; ++a) key.push_back(static_cast<long long>(e.axis[a]));
    }
    key.push_back(-1);
  };
  put_layout(si);
  put_layout(so);
  for (std::size_t d : in) key.push_back(static_cast<long long>(d));
  key.push_back(-1);
  for (std::size_t d : out) key.push_back(static_cast<long long>(d));
  static std::mutex mu;
  static std::map<std::vector<long long>, reshape_locality> known;
  {
    std::lock_guard lock(mu);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  bool local = true;
  bool same_order = true;
  for (std::size_t p = 0; p < si.ids->size() && local; ++p) {
    std::array<slice, N> ib{};
    std::array<slice, M> ob{};
    view_block(si, p, in.data(), N, ib.data());
    view_block(so, p, out.data(), M, ob.data());
    std::array<std::size_t, N> gi{};
    for_each_in_block(ob, [&](std::array<std::size_t, M> const& g, std::size_t k) {
      if (!local) return;
      unflatten(flat_index(g, out), in, gi);
      std::size_t off = 0;
      for (std::size_t d = 0; d < N; ++d) {
        if (gi[d] < ib[d].start || gi[d] >= ib[d].stop) local = false;
        off = off * ib[d].size() + (gi[d] - ib[d].start);
      }
      if (off != k) same_order = false;
    });
  }
  auto const kind = !local ? reshape_locality::moves : same_order ? reshape_locality::same_order : reshape_locality::local;
  std::lock_guard lock(mu);
  known.emplace(std::move(key), kind);
  return kind;
}

/// A reshape's kernel: a copy of the device's block where it keeps its row-major order
/// (reshape_locality::same_order), else the per-element gather.
template <class Gather>
struct reshape_kernel {
  Gather gather;
  bool same_order = false;
  template <class Src, std::size_t NO, class T>
  void operator()(Src const& src, std::size_t pos, std::array<slice, NO> const& block, T* out) const {
    if (!same_order) return gather(src, pos, block, out);
    std::size_t count = 1;
    for (auto const& b : block) count *= b.size();
    if (count != 0) std::memcpy(out, src.block_data(pos), count * sizeof(T));
  }
};

/// The reshape of x to `shape` laid out by spec Out (a compile-time array of M entries), for an
/// operand that is no value leaf (a computed node, an expression).
template <auto Out, class X, std::size_t M>
auto make_reshape_of(X x, std::array<long long, M> const& want) {
  using in = operand_traits<X>;
  using T = typename in::value_type;
  using Mesh = typename in::mesh_type;
  constexpr std::size_t N = in::rank;
  using A = array_with_spec<T, M, Mesh, Out>;
  using SO = typename A::sharding_type;
  using SI = named_sharding<Mesh, spec_type_t<canonical_spec(in::spec)>>;
  static constexpr auto in_spec = canonical_spec(in::spec);
  shape_t<N> const in_shape = shape_of(x);
  shape_t<M> const out_shape = resolve_shape(want, in_shape);
  Mesh const& mesh = *mesh_of(x);
  SO const so(mesh);
  // Which of the two plans runs is known only with the sizes; both are types known now.
  auto const kind = reshape_kind<N, M>(SI::layout_view_on(mesh), so.layout_view(), in_shape, out_shape);
  bool const local = kind != reshape_locality::moves;
  auto gather = gathering<N>(
      [in_shape, out_shape](std::array<std::size_t, M> const& g, std::array<std::size_t, N>& gi, T&) {
        unflatten(flat_index(g, out_shape), in_shape, gi);
        return true;
      },
      "reshape");
  reshape_kernel<decltype(gather)> const kernel{gather, kind == reshape_locality::same_order};
  // One node, its two plans chosen inside (not a node per plan wrapped in a third): each
  // closure here is code compiled per reshape (issue 31's compile time).
  auto make = [x, so, out_shape, local, kernel]() -> A {
    if (local) {
      auto const src = evaluated_as<in_spec>(x);
      return build_array_queued_on<T, M, SO>(so.mesh(), out_shape, "reshape",
                                             [src, kernel](std::size_t pos, std::array<slice, M> const& block, T* out) {
                                               kernel(src, pos, block, out);
                                             });
    }
    auto const src = evaluated_as<replicated_spec<N>>(x);
    return build_array_queued_on<T, M, SO>(so.mesh(), out_shape, "reshape",
                                           [src, gather = kernel.gather](std::size_t pos, std::array<slice, M> const& block,
                                                                         T* out) { gather(src, pos, block, out); });
  };
  auto plan = [x, local](std::vector<collective_event>& out) {
    if (local) plan_as<in_spec>(x, out);
    else plan_as<replicated_spec<N>>(x, out);
  };
  return computed<A>(so, out_shape, std::move(make), std::move(plan));
}

/// The reshape of x to `shape` laid out by spec Out. An array and autodiff's value of the same
/// type are one operand type here (the forward and the backward reshape of a program share it).
template <auto Out, class X, std::size_t M>
auto make_reshape(X x, std::array<long long, M> const& want) {
  if constexpr (!std::is_void_v<typename held_array<X>::type>) return make_reshape_of<Out>(as_computed(std::move(x)), want);
  else return make_reshape_of<Out>(std::move(x), want);
}

template <class I, std::size_t M>
std::array<long long, M> shape_argument(I const (&s)[M]) {
  std::array<long long, M> a{};
  for (std::size_t i = 0; i < M; ++i) a[i] = static_cast<long long>(s[i]);
  return a;
}
template <std::size_t M>
std::array<long long, M> shape_argument(shape_t<M> const& s) {
  std::array<long long, M> a{};
  for (std::size_t i = 0; i < M; ++i) a[i] = static_cast<long long>(s[i]);
  return a;
}

/// Whether every entry of a spec is None.
template <std::size_t N>
constexpr bool all_none(std::array<dim_spec, N> const& s) {
  for (auto const& d : s)
    if (!d.is_none()) return false;
  return true;
}

template <class X, std::size_t M>
auto reshape_replicated(X x, std::array<long long, M> const& want) {
  constexpr bool ok = all_none(operand_traits<X>::spec);
  static_assert(diagnostic::reshape_of_a_sharded_operand_needs_its_out_sharding<operand_traits<X>::rank, M, ok>::value);
  if constexpr (ok) return make_reshape<replicated_spec<M>>(std::move(x), want);
  else return failed_expression<typename operand_traits<X>::value_type, M, typename operand_traits<X>::mesh_type>{};
}

template <class X, std::size_t M, dim_spec... D>
auto reshape_to(X x, std::array<long long, M> const& want) {
  static_assert(diagnostic::spec_must_not_be_longer_than_rank<sizeof...(D), M, (sizeof...(D) <= M)>::value);
  using Mesh = typename operand_traits<X>::mesh_type;
  if constexpr (sizeof...(D) <= M) {
    static_assert(sizeof(named_sharding<Mesh, P<D...>>) > 0);  // the spec's axes are checked against the mesh
    constexpr auto out = canonical_spec(padded_spec<P<D...>>(std::make_index_sequence<M>{}));
    return make_reshape<out>(std::move(x), want);
  } else {
    return failed_expression<typename operand_traits<X>::value_type, M, Mesh>{};
  }
}

}  // namespace detail

/// jnp.reshape(x, shape) of a replicated operand (the result is replicated; one size may be -1).
template <sharded_expression X, std::integral I, std::size_t M>
auto reshape(X&& x, I const (&shape)[M]) {
  return detail::reshape_replicated(detail::store(std::forward<X>(x)), detail::shape_argument(shape));
}
/// jnp.reshape(x, shape) of a replicated operand.
template <sharded_expression X, std::size_t M>
auto reshape(X&& x, shape_t<M> const& shape) {
  return detail::reshape_replicated(detail::store(std::forward<X>(x)), detail::shape_argument(shape));
}
/// jax.lax.reshape(x, shape, out_sharding=P(...)): the result laid out by the spec given.
template <sharded_expression X, std::integral I, std::size_t M, dim_spec... D>
auto reshape(X&& x, I const (&shape)[M], P<D...>) {
  return detail::reshape_to<detail::stored_t<X>, M, D...>(detail::store(std::forward<X>(x)), detail::shape_argument(shape));
}
/// jax.lax.reshape(x, shape, out_sharding=P(...)).
template <sharded_expression X, std::size_t M, dim_spec... D>
auto reshape(X&& x, shape_t<M> const& shape, P<D...>) {
  return detail::reshape_to<detail::stored_t<X>, M, D...>(detail::store(std::forward<X>(x)), detail::shape_argument(shape));
}

/// jnp.swapaxes(x, A1, A2) (negative axes count from the end): a transpose.
template <int A1, int A2, sharded_expression X>
auto swapaxes(X&& x) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  constexpr bool ok = detail::axis_in_range(A1, N) && detail::axis_in_range(A2, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<A1, A2, N, ok>::value);
  if constexpr (ok) {
    constexpr std::size_t a = detail::normalize_axis(A1, N), b = detail::normalize_axis(A2, N);
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return transpose<(I == a ? b : I == b ? a : I)...>(std::forward<X>(x));
    }(std::make_index_sequence<N>{});
  } else {
    return detail::failed_expression<detail::value_t<X>, N, typename detail::operand_traits<detail::stored_t<X>>::mesh_type>{};
  }
}

namespace detail {
/// The permutation jnp.moveaxis(x, from, to) applies.
template <std::size_t N>
constexpr std::array<std::size_t, N> moveaxis_perm(std::size_t from, std::size_t to) {
  std::array<std::size_t, N> rest{}, perm{};
  std::size_t k = 0;
  for (std::size_t i = 0; i < N; ++i)
    if (i != from) rest[k++] = i;
  for (std::size_t i = 0, r = 0; i < N; ++i) perm[i] = i == to ? from : rest[r++];
  return perm;
}
}  // namespace detail

/// jnp.moveaxis(x, From, To) (negative axes count from the end): a transpose.
template <int From, int To, sharded_expression X>
auto moveaxis(X&& x) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  constexpr bool ok = detail::axis_in_range(From, N) && detail::axis_in_range(To, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<From, To, N, ok>::value);
  if constexpr (ok) {
    constexpr auto perm = detail::moveaxis_perm<N>(detail::normalize_axis(From, N), detail::normalize_axis(To, N));
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return transpose<perm[I]...>(std::forward<X>(x));
    }(std::make_index_sequence<N>{});
  } else {
    return detail::failed_expression<detail::value_t<X>, N, typename detail::operand_traits<detail::stored_t<X>>::mesh_type>{};
  }
}

namespace detail {
/// jnp.broadcast_to's rule (broadcast_in_dim): operand dims keep their spec, aligned to the
/// right; new leading dims are None.
template <std::size_t M, std::size_t N>
constexpr std::array<dim_spec, M> broadcast_spec(std::array<dim_spec, N> const& in) {
  std::array<dim_spec, M> out{};
  for (std::size_t i = 0; i < N; ++i) out[M - N + i] = in[i];
  return out;
}

template <std::size_t M, class X>
auto make_broadcast(X x, shape_t<M> const& shape) {
  using in = operand_traits<X>;
  constexpr std::size_t N = in::rank;
  using T = typename in::value_type;
  using Mesh = typename in::mesh_type;
  constexpr auto out_spec = canonical_spec(broadcast_spec<M>(in::spec));
  using A = array_with_spec<T, M, Mesh, out_spec>;
  shape_t<N> const in_shape = shape_of(x);
  for (std::size_t i = 0; i < N; ++i) {
    std::size_t const o = shape[M - N + i];
    if (in_shape[i] != o && in_shape[i] != 1)
      throw std::invalid_argument("tessera::broadcast_to: cannot broadcast an array of shape " +
                                  shape_string(in_shape) + " to shape " + shape_string(shape) + " (dimension " +
                                  std::to_string(i) + " is " + std::to_string(in_shape[i]) + ", neither 1 nor " +
                                  std::to_string(o) + ")");
  }
  auto kernel = gathering<N>(
      [in_shape](std::array<std::size_t, M> const& g, std::array<std::size_t, N>& gi, T&) {
        for (std::size_t i = 0; i < N; ++i) gi[i] = in_shape[i] == 1 ? 0 : g[M - N + i];
        return true;
      },
      "broadcast_to");
  static constexpr auto in_spec = canonical_spec(in::spec);
  auto const s = typename A::sharding_type(*mesh_of(x));
  return relayout<A, in_spec>(std::move(x), s, shape, "broadcast_to", kernel);
}
}  // namespace detail

/// jnp.broadcast_to(x, shape): NumPy broadcasting to `shape`; the operand's sharded dims keep their axes.
template <sharded_expression X, std::size_t M>
auto broadcast_to(X&& x, shape_t<M> const& shape) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  static_assert(diagnostic::broadcast_to_a_lower_rank<N, M, (N <= M)>::value);
  if constexpr (N <= M) return detail::make_broadcast<M>(detail::store(std::forward<X>(x)), shape);
  else return detail::failed_expression<detail::value_t<X>, M, typename detail::operand_traits<detail::stored_t<X>>::mesh_type>{};
}
/// jnp.broadcast_to(x, shape).
template <sharded_expression X, std::integral I, std::size_t M>
auto broadcast_to(X&& x, I const (&shape)[M]) {
  shape_t<M> s{};
  for (std::size_t i = 0; i < M; ++i) {
    if (shape[i] < 0) throw std::invalid_argument("tessera::broadcast_to: a size of the shape is negative");
    s[i] = static_cast<std::size_t>(shape[i]);
  }
  return broadcast_to(std::forward<X>(x), s);
}

}  // namespace tessera
