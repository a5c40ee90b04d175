#pragma once
// Indexing operations with JAX's sharding rules: jax.lax.broadcasted_iota and jnp.arange laid out
// by a sharding, jnp.tril / jnp.triu, jax.nn.one_hot, jnp.take (the embedding lookup) and
// jnp.take_along_axis.
//
// iota, arange, the masks of tril/triu and one_hot are lazy nodes whose value is a function of
// the element's global index: each device computes its block from the block's offsets, so
// `where(iota(...) < n, x, 0)`, `tril(x)` or `one_hot(ids, C) * w` are one fused pass with no
// memory of their own and no communication.
//
// take: a table whose taken axis is whole on every device gathers locally (the result's index
// dimensions take the indices' sharding, its other dimensions the table's). A table sharded
// over its taken axis (vocab-sharded, P("model", None)) is what Megatron's VocabParallelEmbedding
// and DTensor's `_MaskPartial` do: each device looks up the indices that fall in its own rows,
// writes 0 for the others, and the result is a partial sum over the table's axis (JAX's
// `unreduced`), summed once where it is used (one all-reduce; a reduce-scatter under a sharded
// constraint); the table is never gathered. JAX refuses that program without an out_sharding;
// tessera runs it (docs/differences-from-jax.md).
//
// Out-of-range indices follow jnp.take's default ("fill" mode): the result is NaN for floating
// tables, the lowest value for signed integers, the highest for unsigned ones; indices in
// [-n, 0) count from the end as in NumPy. Nothing outside the table is ever read.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/sum_partials.hpp"
#include "tessera/core/dtype.hpp"
#include "tessera/core/indexing_diagnostics.hpp"
#include "tessera/core/mesh.hpp"
#include "tessera/core/shape_diagnostics.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/expr/computed.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/partial_sum_node.hpp"
#include "tessera/expr/shape_ops.hpp"  // normalize_axis, axis_in_range
#include "tessera/runtime/call_once.hpp"

namespace tessera {

namespace detail {

// ---- nodes whose values are a function of the global index -------------------------------------

/// The cursor of an index function: the operand's dimension i is the result's i + Q - N; a
/// dimension of size 1 that the result broadcasts reads index 0.
template <class T, std::size_t Q, std::size_t N, class F>
struct index_cursor {
  using value_type = T;
  template <class U>
  static constexpr bool simd_ok = false;
  F const* f = nullptr;
  std::array<std::size_t, N> start{};
  std::array<bool, N> bcast{};
  std::array<std::size_t, N> g{};

  void set_row(shape_t<Q> const& idx) {
    for (std::size_t i = 0; i + 1 < N; ++i) g[i] = bcast[i] ? 0 : start[i] + idx[i + Q - N];
  }
  T at(std::size_t k) const {
    std::array<std::size_t, N> h = g;
    h[N - 1] = bcast[N - 1] ? 0 : start[N - 1] + k;
    return (*f)(h);
  }
  bool simd_row() const { return false; }
  template <class B>
  B load(std::size_t) const {
    return B(T{});  // never called: simd_ok is false
  }
};

/// A lazy node of rank N laid out by Spec on Mesh whose element at global index g is f(g).
template <class T, std::size_t N, class Mesh, auto Spec, class F>
class indexed : public expression_tag {
 public:
  using value_type = T;
  using mesh_type = Mesh;
  static constexpr std::size_t rank = N;
  static constexpr std::array<dim_spec, N> spec = canonical_spec(Spec);
  using sharding_type = named_sharding<Mesh, spec_type_t<spec>>;
  using array_type = array<T, N, sharding_type>;

  indexed(Mesh const& m, shape_t<N> const& shape, F f)
      : s_(m), shape_(shape), f_(std::make_shared<F const>(std::move(f))) {
    if (std::string const e = size_error(shape_, sizeof(T)); !e.empty())
      throw std::length_error("tessera: an index array of shape " + shape_string(shape_) + ", which " + e);
  }
  shape_t<N> const& shape() const { return shape_; }
  Mesh const& mesh() const { return s_.mesh(); }
  auto evaluate() const { return detail::evaluate(*this); }
  void prepare() const {}
  /// Nothing to run: each device computes its block.
  void plan(std::vector<collective_event>&) const {}
  template <std::size_t Q>
  auto cursor(std::size_t, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    static_assert(N <= Q, "tessera: internal: an index node has a higher rank than its expression");
    index_cursor<T, Q, N, F> c;
    c.f = f_.get();
    for (std::size_t i = 0; i < N; ++i) {
      std::size_t const d = i + Q - N;
      c.bcast[i] = shape_[i] == 1 && rs[d] != 1;
      c.start[i] = rb[d].start;
    }
    return c;
  }

 private:
  sharding_type s_;
  shape_t<N> shape_;
  std::shared_ptr<F const> f_;
};

/// start + step * g[Dim], wrapping for integers as XLA does (no signed-overflow UB).
template <class T, std::size_t Dim>
struct iota_fn {
  T start{}, step{1};
  template <std::size_t N>
  T operator()(std::array<std::size_t, N> const& g) const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(start) + static_cast<U>(step) * static_cast<U>(g[Dim])));
    } else {
      return static_cast<T>(start + step * static_cast<T>(g[Dim]));
    }
  }
};

/// jnp.tri's mask on the last two dimensions: j <= i + k (Lower) or j >= i + k (upper).
template <bool Lower>
struct tri_fn {
  long long k = 0;
  bool operator()(std::array<std::size_t, 2> const& g) const {
    long long const d = static_cast<long long>(g[1]) - static_cast<long long>(g[0]);
    return Lower ? d <= k : d >= k;
  }
};

template <class S, std::size_t N>
constexpr std::array<dim_spec, N> spec_of_sharding() {
  return canonical_spec(padded_spec<typename S::spec_type>(std::make_index_sequence<N>{}));
}

template <class T, std::size_t Dim, std::size_t N, class M, class S>
auto make_iota(shape_t<N> const& shape, named_sharding<M, S> const& s, T start, T step) {
  static_assert(diagnostic::spec_must_not_be_longer_than_rank<S::size, N, (S::size <= N)>::value);
  if constexpr (S::size <= N) {
    constexpr auto spec = spec_of_sharding<named_sharding<M, S>, N>();
    return indexed<T, N, M, spec, iota_fn<T, Dim>>(s.mesh(), shape, iota_fn<T, Dim>{start, step});
  } else {
    return failed_expression<T, N, M>{};
  }
}

template <class I, std::size_t N>
shape_t<N> shape_from(I const (&shape)[N], char const* what) {
  shape_t<N> s{};
  for (std::size_t i = 0; i < N; ++i) {
    if (shape[i] < 0)
      throw std::invalid_argument(std::string("tessera::") + what + ": size " + std::to_string(shape[i]) +
                                  " of dimension " + std::to_string(i) + " is negative");
    s[i] = static_cast<std::size_t>(shape[i]);
  }
  return s;
}

}  // namespace detail

/// jax.lax.broadcasted_iota(T, shape, Dim, out_sharding=s): element g is g[Dim]; each device
/// computes its block (nothing is stored until it is used). Dim may be negative.
template <element_type T, int Dim, std::size_t N, class M, class S>
auto iota(shape_t<N> const& shape, named_sharding<M, S> const& s) {
  constexpr bool ok = detail::axis_in_range(Dim, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Dim, Dim, N, ok>::value);
  if constexpr (ok) return detail::make_iota<T, detail::normalize_axis(Dim, N)>(shape, s, T(0), T(1));
  else return detail::failed_expression<T, N, M>{};
}
/// jax.lax.broadcasted_iota(T, shape, Dim, out_sharding=s), the shape written `{8, 4}`.
template <element_type T, int Dim, std::integral I, std::size_t N, class M, class S>
auto iota(I const (&shape)[N], named_sharding<M, S> const& s) {
  return iota<T, Dim>(detail::shape_from(shape, "iota"), s);
}
/// jax.lax.broadcasted_iota(T, shape, Dim) on a mesh: replicated (JAX's default, all None).
template <element_type T, int Dim, std::size_t N, mesh_axis... A>
auto iota(shape_t<N> const& shape, mesh<A...> const& m) {
  return iota<T, Dim>(shape, named_sharding(m, P<>{}));
}
/// jax.lax.broadcasted_iota(T, shape, Dim) on a mesh, the shape written `{8, 4}`.
template <element_type T, int Dim, std::integral I, std::size_t N, mesh_axis... A>
auto iota(I const (&shape)[N], mesh<A...> const& m) {
  return iota<T, Dim>(detail::shape_from(shape, "iota"), named_sharding(m, P<>{}));
}

/// jnp.arange(n, dtype=T, out_sharding=s): 0, 1, ..., n - 1, laid out by s.
template <element_type T, class M, class S>
auto arange(std::size_t n, named_sharding<M, S> const& s) {
  return detail::make_iota<T, 0>(shape_t<1>{n}, s, T(0), T(1));
}
/// jnp.arange(start, stop, step, dtype=T, out_sharding=s): ceil((stop - start) / step) values.
template <element_type T, class M, class S>
auto arange(T start, T stop, T step, named_sharding<M, S> const& s) {
  if (step == T(0)) throw std::invalid_argument("tessera::arange: step is 0");
  double const count = (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
  double const c = count > 0 ? std::ceil(count) : 0.0;
  if (!(c < 1e18)) throw std::invalid_argument("tessera::arange: too many values (" + std::to_string(c) + ")");
  return detail::make_iota<T, 0>(shape_t<1>{static_cast<std::size_t>(c)}, s, start, step);
}
/// jnp.arange(n, dtype=T) on a mesh: replicated.
template <element_type T, mesh_axis... A>
auto arange(std::size_t n, mesh<A...> const& m) {
  return arange<T>(n, named_sharding(m, P<>{}));
}

// ---- tril / triu ---------------------------------------------------------------------------------

namespace detail {
template <bool Lower, class X>
auto triangle(X x, long long k) {
  using in = operand_traits<X>;
  constexpr std::size_t N = in::rank;
  using T = typename in::value_type;
  using Mesh = typename in::mesh_type;
  static_assert(diagnostic::tril_triu_need_rank_at_least_2<N, (N >= 2)>::value);
  if constexpr (N < 2 || is_failed_expression<X>::value) {
    return failed_expression<T, N, Mesh>{};
  } else {
    // The mask has x's layout on the last two dimensions, so it fits x and moves nothing.
    static constexpr std::array<dim_spec, 2> mask_spec{in::spec[N - 2], in::spec[N - 1]};
    auto const s = shape_of(x);
    indexed<bool, 2, Mesh, canonical_spec(mask_spec), tri_fn<Lower>> mask(*mesh_of(x), {s[N - 2], s[N - 1]},
                                                                          tri_fn<Lower>{k});
    return make_elementwise<op::where, T, T>(std::move(mask), std::move(x), store(T(0)));
  }
}
}  // namespace detail

/// jnp.tril(x, k): x where column <= row + k on the last two dimensions, else 0. Keeps x's
/// sharding; no communication (each device masks its block by its global indices).
template <sharded_expression X>
auto tril(X&& x, long long k = 0) {
  return detail::triangle<true>(detail::store(std::forward<X>(x)), k);
}
/// jnp.triu(x, k): x where column >= row + k on the last two dimensions, else 0.
template <sharded_expression X>
auto triu(X&& x, long long k = 0) {
  return detail::triangle<false>(detail::store(std::forward<X>(x)), k);
}

// ---- one_hot -------------------------------------------------------------------------------------

namespace detail {

/// x == class, for the class index c.
template <class V>
bool equals_class(V v, std::size_t c) {
  if constexpr (std::is_same_v<V, bool>) return static_cast<std::size_t>(v) == c;
  else if constexpr (std::is_integral_v<V>) return v >= V(0) && static_cast<unsigned long long>(v) == c;
  else return static_cast<double>(v) == static_cast<double>(c);
}

template <class T, std::size_t Q, class Inner>
struct one_hot_cursor {
  using value_type = T;
  template <class U>
  static constexpr bool simd_ok = false;
  Inner inner;
  std::size_t start = 0;
  bool bcast = false;
  typename Inner::value_type v{};

  void set_row(shape_t<Q> const& idx) {
    shape_t<Q - 1> sub{};
    for (std::size_t d = 0; d + 1 < Q; ++d) sub[d] = idx[d];
    inner.set_row(sub);
    v = inner.at(idx[Q - 2]);
  }
  T at(std::size_t k) const { return equals_class(v, bcast ? 0 : start + k) ? T(1) : T(0); }
  bool simd_row() const { return false; }
  template <class B>
  B load(std::size_t) const {
    return B(T{});
  }
};

/// jax.nn.one_hot(x, classes): x's dimensions, then the class dimension (spec Out).
template <class T, class X, auto Out>
class one_hot_node : public expression_tag {
  using in = operand_traits<X>;

 public:
  using value_type = T;
  using mesh_type = typename in::mesh_type;
  static constexpr std::size_t rank = in::rank + 1;
  static constexpr std::array<dim_spec, rank> spec = canonical_spec(Out);
  using sharding_type = named_sharding<mesh_type, spec_type_t<spec>>;

  one_hot_node(X x, std::size_t classes) : x_(std::move(x)), classes_(classes) {
    auto const xs = shape_of(x_);
    for (std::size_t i = 0; i < in::rank; ++i) shape_[i] = xs[i];
    shape_[rank - 1] = classes;
    if (std::string const e = size_error(shape_, sizeof(T)); !e.empty())
      throw std::length_error("tessera::one_hot: a result of shape " + shape_string(shape_) + ", which " + e);
  }
  shape_t<rank> const& shape() const { return shape_; }
  mesh_type const& mesh() const { return *mesh_of(x_); }
  auto evaluate() const { return detail::evaluate(*this); }
  void prepare() const { detail::prepare(x_); }
  void plan(std::vector<collective_event>& out) const { plan_of(x_, out); }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    std::array<slice, Q - 1> rb_in{};
    shape_t<Q - 1> rs_in{};
    for (std::size_t d = 0; d + 1 < Q; ++d) {
      rb_in[d] = rb[d];
      rs_in[d] = rs[d];
    }
    auto inner = cursor_of<Q - 1>(x_, pos, rb_in, rs_in);
    one_hot_cursor<T, Q, decltype(inner)> c{inner, rb[Q - 1].start, classes_ == 1 && rs[Q - 1] != 1, {}};
    return c;
  }

 private:
  X x_;
  std::size_t classes_;
  shape_t<rank> shape_{};
};

template <class T, auto Out, class X>
auto make_one_hot(X x, std::size_t classes) {
  using in = operand_traits<X>;
  constexpr std::size_t N = in::rank;
  // x read in the layout of the out spec's input part (its own, unless an Auto out_sharding moves it).
  constexpr auto x_spec = [] {
    std::array<dim_spec, N> s{};
    for (std::size_t i = 0; i < N; ++i) s[i] = Out[i];
    return canonical_spec(s);
  }();
  if constexpr (same_layout(in::spec, x_spec) && !is_partial<X>) {
    return one_hot_node<T, X, Out>(std::move(x), classes);
  } else {
    using R = resharded<X, x_spec>;
    return one_hot_node<T, R, Out>(R(std::move(x)), classes);
  }
}

/// The first dimension where one_hot's out spec and x's spec differ on Explicit axes (N if none).
template <std::size_t N, std::size_t M, std::size_t K>
constexpr std::size_t one_hot_mismatch(std::array<dim_spec, N> const& x, std::array<dim_spec, K> const& out,
                                       std::array<mesh_axis, M> const& axes) {
  for (std::size_t i = 0; i < N; ++i)
    if (!(x[i] == out[i]) && (has_explicit_axis(x[i], axes) || has_explicit_axis(out[i], axes))) return i;
  return N;
}

}  // namespace detail

/// jax.nn.one_hot(x, classes, dtype=T): float32 by default; x's dimensions keep x's sharding
/// and the class dimension is None (each device compares its block with its class indices).
template <element_type T = float, sharded_expression X>
auto one_hot(X&& x, std::size_t classes) {
  using S = detail::stored_t<X>;
  constexpr std::size_t N = detail::operand_traits<S>::rank;
  static_assert(N >= 1, "tessera::one_hot: x is a number; give it at least one dimension");
  constexpr auto out = [] {
    std::array<dim_spec, N + 1> s{};
    for (std::size_t i = 0; i < N; ++i) s[i] = detail::operand_traits<S>::spec[i];
    return detail::canonical_spec(s);
  }();
  return detail::make_one_hot<T, out>(detail::store(std::forward<X>(x)), classes);
}

/// jax.nn.one_hot(x, classes, dtype=T, out_sharding=P(...)): the class dimension may be sharded;
/// the other entries must be x's (JAX's rule) on Explicit axes, and move x on Auto axes.
template <element_type T = float, sharded_expression X, dim_spec... D>
auto one_hot(X&& x, std::size_t classes, P<D...>) {
  using S = detail::stored_t<X>;
  using in = detail::operand_traits<S>;
  using Mesh = typename in::mesh_type;
  constexpr std::size_t N = in::rank;
  static_assert(N >= 1, "tessera::one_hot: x is a number; give it at least one dimension");
  static_assert(diagnostic::spec_must_not_be_longer_than_rank<sizeof...(D), N + 1, (sizeof...(D) <= N + 1)>::value);
  if constexpr (sizeof...(D) > N + 1) {
    return detail::failed_expression<T, N + 1, Mesh>{};
  } else {
    static_assert(sizeof(named_sharding<Mesh, P<D...>>) > 0);  // the spec's axes are checked against the mesh
    constexpr auto out = detail::canonical_spec(detail::padded_spec<P<D...>>(std::make_index_sequence<N + 1>{}));
    constexpr std::size_t bad = detail::one_hot_mismatch(in::spec, out, Mesh::axes);
    if constexpr (bad < N) {
      static_assert(diagnostic::one_hot_out_sharding_must_keep_the_spec_of_x<bad, detail::canonical(in::spec[bad]),
                                                                             detail::canonical(out[bad]), false>::value);
      return detail::failed_expression<T, N + 1, Mesh>{};
    } else {
      return detail::make_one_hot<T, out>(detail::store(std::forward<X>(x)), classes);
    }
  }
}

// ---- a node computed as partial sums -------------------------------------------------------------

/// A structural result computed as partial sums over the mesh axes U (JAX's `unreduced`): each
/// device's block of A is its share, and the sum is taken once, where the value is used (an
/// all-reduce into A's layout, a reduce-scatter under a sharded reshard). A linear operation on
/// it stays partial, as on matmul's partial products.
template <class A, dim_spec U>
class computed_partial : public detail::partial_sum_node<computed_partial<A, U>> {
 public:
  using array_type = A;
  using value_type = typename A::value_type;
  using sharding_type = typename A::sharding_type;
  using mesh_type = typename sharding_type::mesh_type;
  static constexpr std::size_t rank = A::rank;
  static constexpr std::array<dim_spec, rank> spec = detail::operand_traits<A>::spec;
  static constexpr dim_spec unreduced = detail::canonical(U);

  /// `make` computes every device's partial block; `plan` lists the collectives that needs.
  computed_partial(sharding_type s, shape_t<rank> shape, detail::unique_function<A()> make,
                   detail::unique_function<void(std::vector<collective_event>&)> plan)
      : st_(std::make_shared<state>(std::move(s), shape, std::move(make), std::move(plan))) {}

  shape_t<rank> shape() const { return st_->shape; }
  mesh_type const& mesh() const { return st_->sharding.mesh(); }

 private:
  friend class detail::partial_sum_node<computed_partial>;
  sharding_type const& result_sharding() const { return st_->sharding; }
  void prepare_operands() const {}
  void plan_operands(std::vector<collective_event>& out) const {
    if (st_->plan) st_->plan(out);
  }
  A compute_partial() const { return st_->make(); }

  struct state {
    state(sharding_type s, shape_t<rank> sh, detail::unique_function<A()> m, detail::unique_function<void(std::vector<collective_event>&)> p)
        : sharding(std::move(s)), shape(sh), make(std::move(m)), plan(std::move(p)) {}
    sharding_type sharding;
    shape_t<rank> shape;
    detail::unique_function<A()> make;
    detail::unique_function<void(std::vector<collective_event>&)> plan;
  };
  std::shared_ptr<state> st_;
};

// ---- take / take_along_axis ----------------------------------------------------------------------

namespace detail {

/// An index normalised as jnp.take does: [-n, 0) counts from the end; n when out of range.
template <class I>
std::size_t normalized_index(I v, std::size_t n) {
  if constexpr (std::is_signed_v<I>) {
    if (v < 0) {
      auto const back = static_cast<unsigned long long>(-(v + 1)) + 1;  // |v|, without overflow at the minimum
      return back > n ? n : n - static_cast<std::size_t>(back);
    }
  }
  auto const u = static_cast<unsigned long long>(v);
  return u >= n ? n : static_cast<std::size_t>(u);
}

/// What jnp.take's "fill" mode gives for an out-of-range index.
template <class T>
constexpr T take_fill() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::quiet_NaN();
  else if constexpr (std::is_same_v<T, bool>) return true;
  else if constexpr (std::is_signed_v<T>) return std::numeric_limits<T>::min();
  else return std::numeric_limits<T>::max();
}

/// Entry `e` without the axes `used` has (dropped into `dropped`).
constexpr dim_spec without_axes(dim_spec const& e, dim_spec const& used, dim_spec& dropped) {
  dim_spec kept{};
  for (std::size_t a = 0; a < e.count(); ++a) {
    if (used.uses(e.axis(a))) dropped.push(e.axis(a));
    else kept.push(e.axis(a));
  }
  return kept;
}

/// jnp.take's layouts for a table of rank NT (spec ts) taken along A with indices of rank NI (spec is).
template <std::size_t NT, std::size_t NI>
struct take_layout {
  std::array<dim_spec, NI> indices{};      // the layout the indices are read in
  std::array<dim_spec, NT - 1 + NI> out{}; // the result's
  dim_spec unreduced{};                    // the table's axes on A: the partial-sum axes
  bool explicit_error = false;
  std::size_t dim = 0;                     // the indices' dimension of the first conflict
  dim_spec axis{};                         // its axis
};

template <std::size_t A, std::size_t NT, std::size_t NI, std::size_t M>
constexpr take_layout<NT, NI> take_rule(std::array<dim_spec, NT> const& ts, std::array<dim_spec, NI> const& is,
                                        std::array<mesh_axis, M> const& axes) {
  take_layout<NT, NI> r;
  dim_spec table_axes{};
  for (auto const& d : ts)
    for (std::size_t a = 0; a < d.count(); ++a) table_axes.push(d.axis(a));
  for (std::size_t j = 0; j < NI; ++j) {
    dim_spec dropped{};
    r.indices[j] = canonical(without_axes(is[j], table_axes, dropped));
    if (!dropped.is_none() && !r.explicit_error && has_explicit_axis(dropped, axes)) {
      r.explicit_error = true;
      r.dim = j;
      r.axis = canonical(dim_spec(dropped.axis(0)));
    }
  }
  for (std::size_t d = 0; d < A; ++d) r.out[d] = ts[d];
  for (std::size_t j = 0; j < NI; ++j) r.out[A + j] = r.indices[j];
  for (std::size_t d = A + 1; d < NT; ++d) r.out[d - 1 + NI] = ts[d];
  r.unreduced = canonical(ts[A]);
  return r;
}

/// Operands x and y evaluated in layouts SX and SY, then each device writes its block of the
/// result with kernel(x, y, pos, block, out) reading only their blocks at pos. The kernel owns
/// what it reads (captured by value), so the writing is queued (asynchronous dispatch).
template <class A, auto SX, auto SY, class X, class Y, class Kernel>
std::pair<detail::unique_function<A()>, detail::unique_function<void(std::vector<collective_event>&)>> relayout2(
    X x, Y y, typename A::sharding_type s, shape_t<A::rank> shape, char const* what, Kernel kernel) {
  using T = typename A::value_type;
  auto make = [x, y, s, shape, what, kernel]() -> A {
    auto const xs = evaluated_as<SX>(x);
    auto const ys = evaluated_as<SY>(y);
    return build_array_queued<T, A::rank, typename A::sharding_type>(
        s, shape, what, [xs, ys, kernel](std::size_t pos, std::array<slice, A::rank> const& block, T* out) {
          kernel(xs, ys, pos, block, out);
        });
  };
  auto plan = [x, y](std::vector<collective_event>& out) {
    plan_as<SX>(x, out);
    plan_as<SY>(y, out);
  };
  return {std::move(make), std::move(plan)};
}

/// A node of array type A from make/plan: partial over U, or a plain computed node when U is none.
template <class A, dim_spec U, class MP>
auto node_from(typename A::sharding_type s, shape_t<A::rank> shape, MP mp) {
  if constexpr (U.is_none()) return computed<A>(std::move(s), shape, std::move(mp.first), std::move(mp.second));
  else return computed_partial<A, U>(std::move(s), shape, std::move(mp.first), std::move(mp.second));
}

/// The result's shape: the table's dims before A, the indices' dims, the table's dims after A.
template <std::size_t A, std::size_t NT, std::size_t NI>
shape_t<NT - 1 + NI> take_shape(shape_t<NT> const& ts, shape_t<NI> const& is) {
  shape_t<NT - 1 + NI> out{};
  for (std::size_t d = 0; d < A; ++d) out[d] = ts[d];
  for (std::size_t j = 0; j < NI; ++j) out[A + j] = is[j];
  for (std::size_t d = A + 1; d < NT; ++d) out[d - 1 + NI] = ts[d];
  return out;
}

/// The table's global index of result index g, whose row along A is r.
template <std::size_t A, std::size_t NT, std::size_t NI>
std::array<std::size_t, NT> table_index(std::array<std::size_t, NT - 1 + NI> const& g, std::size_t r) {
  std::array<std::size_t, NT> t{};
  for (std::size_t d = 0; d < A; ++d) t[d] = g[d];
  t[A] = r;
  for (std::size_t d = A + 1; d < NT; ++d) t[d] = g[d - 1 + NI];
  return t;
}
template <std::size_t A, std::size_t NT, std::size_t NI>
std::array<std::size_t, NI> index_part(std::array<std::size_t, NT - 1 + NI> const& g) {
  std::array<std::size_t, NI> i{};
  for (std::size_t j = 0; j < NI; ++j) i[j] = g[A + j];
  return i;
}

template <std::size_t A, class Tab, class Ids>
auto make_take(Tab table, Ids ids) {
  using tt = operand_traits<Tab>;
  using it = operand_traits<Ids>;
  using T = typename tt::value_type;
  using I = typename it::value_type;
  using Mesh = typename tt::mesh_type;
  constexpr std::size_t NT = tt::rank, NI = it::rank, NO = NT - 1 + NI;
  static constexpr auto rule = take_rule<A>(tt::spec, it::spec, Mesh::axes);
  static constexpr auto table_spec = canonical_spec(tt::spec);
  static constexpr auto ids_spec = canonical_spec(rule.indices);
  static constexpr auto out_spec = canonical_spec(rule.out);
  static constexpr dim_spec U = rule.unreduced;
  using R = array_with_spec<T, NO, Mesh, out_spec>;
  check_same_mesh(*mesh_of(table), *mesh_of(ids), "take");
  shape_t<NT> const tshape = shape_of(table);
  shape_t<NO> const oshape = take_shape<A, NT, NI>(tshape, shape_of(ids));
  if (std::string const e = size_error(oshape, sizeof(T)); !e.empty())
    throw std::length_error("tessera::take: a result of shape " + shape_string(oshape) + ", which " + e);
  std::size_t const n = tshape[A];
  auto kernel = [n](auto const& tab, auto const& idx, std::size_t pos, std::array<slice, NO> const& ob, T* out) {
    auto const tb = tab.sharding().block(pos, tab.shape());
    auto const ib = idx.sharding().block(pos, idx.shape());
    T const* tv = tab.block_data(pos);
    I const* iv = idx.block_data(pos);
    // Out-of-range indices: the fill value from one device per sum (the first along A), 0 from the others.
    bool const fills = U.is_none() || tab.sharding().shard_index(pos, A) == 0;
    // The table's dimensions after A are the result's last ones, sharded alike, so each index
    // copies one contiguous run (a row of an embedding table) from the table's block.
    constexpr std::size_t lead = A + NI;
    std::size_t run = 1;
    for (std::size_t d = lead; d < NO; ++d) run *= ob[d].size();
    if (run == 0) return;
    std::array<slice, lead> head{};
    for (std::size_t d = 0; d < lead; ++d) head[d] = ob[d];
    for_each_in_block(head, [&](std::array<std::size_t, lead> const& h, std::size_t k) {
      std::array<std::size_t, NO> g{};
      for (std::size_t d = 0; d < NO; ++d) g[d] = d < lead ? h[d] : ob[d].start;
      T* o = out + k * run;
      std::size_t const r = normalized_index(iv[offset_in_block(ib, index_part<A, NT, NI>(g), "take")], n);
      if (r == n) std::fill(o, o + run, fills ? take_fill<T>() : T(0));
      else if (r < tb[A].start || r >= tb[A].stop) std::fill(o, o + run, T(0));  // another device's row
      else std::copy_n(tv + offset_in_block(tb, table_index<A, NT, NI>(g, r), "take"), run, o);
    });
  };
  typename R::sharding_type const s(*mesh_of(table));
  return node_from<R, U>(s, oshape,
                         relayout2<R, table_spec, ids_spec>(std::move(table), std::move(ids), s, oshape, "take", kernel));
}

/// take's transpose: g (of take's result layout) added into a zero table of the table's layout
/// and shape at the rows the indices name. Each device adds its own rows from its block of g; the
/// devices that saw different indices (those the indices are sharded over) hold partial sums.
template <std::size_t A, class TableArray, class G, class Ids>
auto take_transpose(G g, Ids ids, typename TableArray::sharding_type const& ts, shape_t<TableArray::rank> const& tshape) {
  using tt = operand_traits<TableArray>;
  using it = operand_traits<Ids>;
  using T = typename tt::value_type;
  using I = typename it::value_type;
  using Mesh = typename tt::mesh_type;
  constexpr std::size_t NT = tt::rank, NI = it::rank, NO = NT - 1 + NI;
  static constexpr auto rule = take_rule<A>(tt::spec, it::spec, Mesh::axes);
  static constexpr auto ids_spec = canonical_spec(rule.indices);
  static constexpr auto out_spec = canonical_spec(rule.out);
  static constexpr dim_spec U = [] {
    dim_spec u{};
    for (auto const& d : rule.indices)
      for (std::size_t a = 0; a < d.count(); ++a) u.push(d.axis(a));
    return canonical(u);
  }();
  std::size_t const n = tshape[A];
  auto kernel = [n](auto const& gs, auto const& idx, std::size_t pos, std::array<slice, NT> const& tb, T* out) {
    std::fill(out, out + element_count(block_shape(tb)), T(0));
    auto const gb = gs.sharding().block(pos, gs.shape());
    auto const ib = idx.sharding().block(pos, idx.shape());
    T const* gv = gs.block_data(pos);
    I const* iv = idx.block_data(pos);
    for_each_in_block(gb, [&](std::array<std::size_t, NO> const& go, std::size_t k) {
      std::size_t const r = normalized_index(iv[offset_in_block(ib, index_part<A, NT, NI>(go), "take's gradient")], n);
      if (r >= tb[A].start && r < tb[A].stop) out[offset_in_block(tb, table_index<A, NT, NI>(go, r), "take's gradient")] += gv[k];
    });
  };
  return node_from<TableArray, U>(ts, tshape,
                                  relayout2<TableArray, out_spec, ids_spec>(std::move(g), std::move(ids), ts, tshape,
                                                                            "take's gradient", kernel));
}

/// take_along_axis's layouts: x read whole along A, batch dimensions shared.
template <std::size_t N>
struct along_layout {
  std::array<dim_spec, N> x{}, out{};
  dim_spec unreduced{};  // the gradient's partial axes: the indices' axes on A
  int error = 0;         // 1: x sharded on A; 2: a batch dimension sharded differently
  std::size_t dim = 0;
  dim_spec left{}, right{};
};

template <std::size_t A, std::size_t N, std::size_t M>
constexpr along_layout<N> along_rule(std::array<dim_spec, N> const& xs, std::array<dim_spec, N> const& is,
                                     std::array<mesh_axis, M> const& axes) {
  along_layout<N> r;
  if (!xs[A].is_none() && has_explicit_axis(xs[A], axes)) {
    r.error = 1;
    r.dim = A;
    r.left = canonical(dim_spec(xs[A].axis(0)));
  }
  dim_spec used{};
  for (std::size_t d = 0; d < N; ++d) {
    if (d == A) continue;
    r.out[d] = xs[d];
    if (!xs[d].is_none() && !is[d].is_none() && !(xs[d] == is[d]) && r.error == 0 &&
        (has_explicit_axis(xs[d], axes) || has_explicit_axis(is[d], axes))) {
      r.error = 2;
      r.dim = d;
      r.left = canonical(xs[d]);
      r.right = canonical(is[d]);
    }
    for (std::size_t a = 0; a < xs[d].count(); ++a) used.push(xs[d].axis(a));
  }
  // Where x is None the indices' sharding is kept (x is sliced to it, locally), less axes x uses.
  for (std::size_t d = 0; d < N; ++d) {
    if (d != A && !xs[d].is_none()) continue;
    dim_spec dropped{};
    r.out[d] = without_axes(is[d], used, dropped);
    for (std::size_t a = 0; a < r.out[d].count(); ++a) used.push(r.out[d].axis(a));
  }
  for (std::size_t d = 0; d < N; ++d) {
    r.out[d] = canonical(r.out[d]);
    r.x[d] = d == A ? dim_spec{} : r.out[d];
  }
  r.unreduced = canonical(r.out[A]);
  return r;
}

template <std::size_t A, class X, class Ids>
auto make_take_along_axis(X x, Ids ids) {
  using xt_ = operand_traits<X>;
  using it = operand_traits<Ids>;
  using T = typename xt_::value_type;
  using I = typename it::value_type;
  using Mesh = typename xt_::mesh_type;
  constexpr std::size_t N = xt_::rank;
  static constexpr auto rule = along_rule<A>(xt_::spec, it::spec, Mesh::axes);
  static constexpr auto x_spec = canonical_spec(rule.x);
  static constexpr auto out_spec = canonical_spec(rule.out);
  using R = array_with_spec<T, N, Mesh, out_spec>;
  check_same_mesh(*mesh_of(x), *mesh_of(ids), "take_along_axis");
  shape_t<N> const xs = shape_of(x);
  shape_t<N> const is = shape_of(ids);
  for (std::size_t d = 0; d < N; ++d)
    if (d != A && xs[d] != is[d])
      throw std::invalid_argument("tessera::take_along_axis: x of shape " + shape_string(xs) + " and indices of shape " +
                                  shape_string(is) + " differ in dimension " + std::to_string(d) +
                                  " (only the axis " + std::to_string(A) + " may differ)");
  std::size_t const n = xs[A];
  auto kernel = [n](auto const& xv, auto const& idx, std::size_t pos, std::array<slice, N> const& ob, T* out) {
    auto const xb = xv.sharding().block(pos, xv.shape());
    auto const ib = idx.sharding().block(pos, idx.shape());
    T const* xp = xv.block_data(pos);
    I const* ip = idx.block_data(pos);
    for_each_in_block(ob, [&](std::array<std::size_t, N> const& g, std::size_t k) {
      std::size_t const r = normalized_index(ip[offset_in_block(ib, g, "take_along_axis")], n);
      if (r == n) {
        out[k] = take_fill<T>();
      } else {
        auto gx = g;
        gx[A] = r;
        out[k] = xp[offset_in_block(xb, gx, "take_along_axis")];
      }
    });
  };
  typename R::sharding_type const s(*mesh_of(x));
  return node_from<R, dim_spec{}>(s, is,
                                  relayout2<R, x_spec, out_spec>(std::move(x), std::move(ids), s, is, "take_along_axis", kernel));
}

/// take_along_axis's transpose: g added into zeros of x's shape at the indexed positions, in the
/// layout x was read in (whole along A); partial over the indices' axes on A.
template <std::size_t A, class XArray, class G, class Ids>
auto take_along_axis_transpose(G g, Ids ids, typename XArray::sharding_type const& xsharding, shape_t<XArray::rank> const& xs) {
  using xt_ = operand_traits<XArray>;
  using it = operand_traits<Ids>;
  using T = typename xt_::value_type;
  using I = typename it::value_type;
  using Mesh = typename xt_::mesh_type;
  constexpr std::size_t N = xt_::rank;
  static constexpr auto rule = along_rule<A>(xt_::spec, it::spec, Mesh::axes);
  static constexpr auto x_spec = canonical_spec(rule.x);
  static constexpr auto out_spec = canonical_spec(rule.out);
  using R = array_with_spec<T, N, Mesh, x_spec>;
  std::size_t const n = xs[A];
  auto kernel = [n](auto const& gs, auto const& idx, std::size_t pos, std::array<slice, N> const& xb, T* out) {
    std::fill(out, out + element_count(block_shape(xb)), T(0));
    auto const gb = gs.sharding().block(pos, gs.shape());
    auto const ib = idx.sharding().block(pos, idx.shape());
    T const* gv = gs.block_data(pos);
    I const* ip = idx.block_data(pos);
    for_each_in_block(gb, [&](std::array<std::size_t, N> const& go, std::size_t k) {
      std::size_t const r = normalized_index(ip[offset_in_block(ib, go, "take_along_axis's gradient")], n);
      if (r == n) return;
      auto gx = go;
      gx[A] = r;
      out[offset_in_block(xb, gx, "take_along_axis's gradient")] += gv[k];
    });
  };
  typename R::sharding_type const s(xsharding.mesh());
  return node_from<R, rule.unreduced>(s, xs,
                                      relayout2<R, out_spec, out_spec>(std::move(g), std::move(ids), s, xs,
                                                                       "take_along_axis's gradient", kernel));
}

template <class X>
inline constexpr bool integer_indices =
    std::is_integral_v<typename operand_traits<X>::value_type> && !std::is_same_v<typename operand_traits<X>::value_type, bool>;

}  // namespace detail

/// jnp.take(table, indices, axis=Axis) (the embedding lookup; Axis defaults to 0 and may be
/// negative; JAX's axis=None, a take from the flattened table, is reshape then take). The result
/// is table.shape[:Axis] + indices.shape + table.shape[Axis+1:]; its index dimensions keep the
/// indices' sharding and the others the table's. A table sharded along Axis gives partial sums
/// over that axis (each device looks up its own rows): one all-reduce where the result is used.
/// Out-of-range indices give JAX's fill value (NaN for floats).
template <int Axis = 0, sharded_expression Table, sharded_expression Ids>
auto take(Table&& table, Ids&& indices) {
  using TS = detail::stored_t<Table>;
  using IS = detail::stored_t<Ids>;
  using tt = detail::operand_traits<TS>;
  using Mesh = typename tt::mesh_type;
  using T = typename tt::value_type;
  constexpr std::size_t NT = tt::rank, NI = detail::operand_traits<IS>::rank;
  constexpr bool axis_ok = detail::axis_in_range(Axis, NT);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, NT, axis_ok>::value);
  static_assert(diagnostic::operands_must_be_on_the_same_mesh<Mesh, typename detail::operand_traits<IS>::mesh_type,
                                                              std::is_same_v<Mesh, typename detail::operand_traits<IS>::mesh_type>>::value);
  constexpr bool ints = detail::integer_indices<IS>;
  static_assert(diagnostic::indices_must_be_integers<typename detail::operand_traits<IS>::value_type, ints>::value);
  using failed = detail::failed_expression<T, (NT == 0 ? 0 : NT - 1) + NI, Mesh>;
  if constexpr (!axis_ok || !ints || !std::is_same_v<Mesh, typename detail::operand_traits<IS>::mesh_type>) {
    return failed{};
  } else {
    constexpr std::size_t A = detail::normalize_axis(Axis, NT);
    constexpr auto rule = detail::take_rule<A>(tt::spec, detail::operand_traits<IS>::spec, Mesh::axes);
    static_assert(diagnostic::take_indices_use_a_mesh_axis_of_the_table<rule.dim, rule.axis.axis(0), !rule.explicit_error>::value);
    if constexpr (rule.explicit_error) return failed{};
    else return detail::make_take<A>(detail::store(std::forward<Table>(table)), detail::store(std::forward<Ids>(indices)));
  }
}

/// jnp.take_along_axis(x, indices, axis=Axis): the result has the indices' shape; element g is
/// x at g with g[Axis] replaced by indices[g]. Dimensions other than Axis are batch dimensions:
/// sharded alike (or None on one side) they propagate; x's Axis must be whole on each device
/// (a compile error on Explicit axes, gathered on Auto ones). Out-of-range indices give JAX's
/// fill value.
template <int Axis, sharded_expression X, sharded_expression Ids>
auto take_along_axis(X&& x, Ids&& indices) {
  using XS = detail::stored_t<X>;
  using IS = detail::stored_t<Ids>;
  using xt_ = detail::operand_traits<XS>;
  using Mesh = typename xt_::mesh_type;
  using T = typename xt_::value_type;
  constexpr std::size_t N = xt_::rank, NI = detail::operand_traits<IS>::rank;
  constexpr bool ranks_ok = N == NI;
  static_assert(diagnostic::take_along_axis_ranks_must_match<N, NI, ranks_ok>::value);
  constexpr bool axis_ok = detail::axis_in_range(Axis, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, axis_ok>::value);
  constexpr bool ints = detail::integer_indices<IS>;
  static_assert(diagnostic::indices_must_be_integers<typename detail::operand_traits<IS>::value_type, ints>::value);
  using failed = detail::failed_expression<T, NI, Mesh>;
  if constexpr (!ranks_ok || !axis_ok || !ints) {
    return failed{};
  } else {
    constexpr std::size_t A = detail::normalize_axis(Axis, N);
    constexpr auto rule = detail::along_rule<A>(xt_::spec, detail::operand_traits<IS>::spec, Mesh::axes);
    if constexpr (rule.error == 1) {
      static_assert(diagnostic::take_along_axis_axis_must_be_unsharded<A, rule.left.axis(0), false>::value);
      return failed{};
    } else if constexpr (rule.error == 2) {
      static_assert(diagnostic::take_along_axis_batch_dimension_sharded_differently<rule.dim, rule.left, rule.right,
                                                                                     false>::value);
      return failed{};
    } else {
      return detail::make_take_along_axis<A>(detail::store(std::forward<X>(x)), detail::store(std::forward<Ids>(indices)));
    }
  }
}

}  // namespace tessera
