#pragma once
// The result of a structural operation (reshape, concatenate, take, a scan...): a node whose
// array is computed once, when something first needs it, by a function of the operands that
// runs its own per-device pass (and its own communication, where the operation moves data).
// Element-wise code around it fuses as around any materialised node: a reduction's, a
// reshard's. The function is type-erased so that the node's type names only the result
// (`computed<array<float, 2, ...>>`), whatever operation made it.
//
// `relayout` is how most structural operations are written: the operand is first moved to a
// sharding in which each device holds everything its block of the result is made of (for most
// operations the operand's own sharding, so nothing moves), then each device writes its block
// from its own block of the moved operand, on its own thread. Across processes the move is a
// reshard, which already exchanges what it must; the per-device part never reads another
// device's memory.

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/core/communication_plan.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera {

/// A structural operation's result, computed once when first needed (the array A's values).
template <class A>
class computed : public expression_tag {
 public:
  using array_type = A;
  using value_type = typename A::value_type;
  using sharding_type = typename A::sharding_type;
  using mesh_type = typename sharding_type::mesh_type;
  static constexpr std::size_t rank = A::rank;
  static constexpr std::array<dim_spec, rank> spec = detail::operand_traits<A>::spec;

  /// `make` computes the array; `plan` appends the collectives it will run (for explain()).
  computed(sharding_type s, shape_t<rank> shape, detail::unique_function<A()> make,
           detail::unique_function<void(std::vector<collective_event>&)> plan)
      : st_(std::make_shared<state>(std::move(s), shape, std::move(make), std::move(plan))) {}
  /// The node of an array already computed (nothing to run, nothing to plan).
  explicit computed(A value) : st_(std::make_shared<state>(value.sharding(), value.shape(), nullptr, nullptr)) {
    st_->cache.value.emplace(std::move(value));
  }

  shape_t<rank> shape() const { return st_->shape; }
  mesh_type const& mesh() const { return st_->sharding.mesh(); }
  sharding_type const& sharding() const { return st_->sharding; }
  /// The array (computed once; copies of the node share it).
  A const& result() const {
    prepare();
    return *st_->cache.value;
  }
  auto evaluate() const { return result(); }
  void prepare() const {
    detail::call_once(st_->cache.once, [&] {
      if (!st_->cache.value) st_->cache.value.emplace(st_->make());
    });
  }
  /// The collectives computing it runs (none once computed).
  void plan(std::vector<collective_event>& out) const {
    if (!st_->cache.value && st_->plan) st_->plan(out);
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(*st_->cache.value, pos, rb, rs);
  }

 private:
  struct state {
    state(sharding_type s, shape_t<rank> sh, detail::unique_function<A()> m, detail::unique_function<void(std::vector<collective_event>&)> p)
        : sharding(std::move(s)), shape(sh), make(std::move(m)), plan(std::move(p)) {}
    sharding_type sharding;
    shape_t<rank> shape;
    detail::unique_function<A()> make;
    detail::unique_function<void(std::vector<collective_event>&)> plan;
    detail::result_cache<A> cache;
  };
  std::shared_ptr<state> st_;
};

namespace detail {

template <class T>
struct is_computed : std::false_type {};
template <class A>
struct is_computed<computed<A>> : std::true_type {};

/// The array type a value leaf holds: an array of its own propagated type, or a node that
/// holds one (autodiff's deferred values: `result()` gives it); void for anything else.
template <class X>
struct held_array {
  using type = void;
};
template <class T, std::size_t N, class S>
  requires std::is_same_v<array<T, N, S>, array_of_t<array<T, N, S>>>
struct held_array<array<T, N, S>> {
  using type = array<T, N, S>;
};
template <class X>
  requires(!is_array<X>::value && !is_computed<X>::value && !is_partial<X> &&
           requires(X const& x) {
             { x.result() } -> std::same_as<typename X::array_type const&>;
           })
struct held_array<X> {
  using type = typename X::array_type;
};

/// x as the node computed<A>, for a value leaf x of array type A: an operation written over
/// its operand's type then serves arrays and autodiff's values alike, compiled once for both
/// (issue 31's compile time); x's value is still read only when the node's is.
template <class X, class A = typename held_array<X>::type>
computed<A> as_computed(X x) {
  if constexpr (is_array<X>::value)
    return computed<A>(std::move(x));
  else
    return computed<A>(
        typename A::sharding_type(*mesh_of(x)), shape_of(x), [x] { return x.result(); },
        [x](std::vector<collective_event>& out) { x.plan(out); });
}

/// x as computed<A> where it is a value leaf of array type A (as_computed), else x itself.
template <class X>
auto as_value_node(X x) {
  if constexpr (std::is_void_v<typename held_array<X>::type>) return x;
  else return as_computed(std::move(x));
}

/// The array of element type T, rank N and spec Spec on Mesh.
template <class T, std::size_t N, class Mesh, auto Spec>
using array_with_spec = array<T, N, named_sharding<Mesh, spec_type_t<canonical_spec(Spec)>>>;

/// The replicated spec of rank N, every entry built as P<none> builds it (GCC 12 refuses a
/// value-initialised array read inside another constant evaluation).
template <std::size_t N>
inline constexpr std::array<dim_spec, N> replicated_spec = []<std::size_t... I>(std::index_sequence<I...>) {
  return std::array<dim_spec, N>{((void)I, dim_spec(none))...};
}(std::make_index_sequence<N>{});

/// Operand x evaluated in the layout Src (a canonical spec): its own array when it is one already, else the
/// evaluated expression, moved (resharded) where Src differs from its spec.
template <auto Src, class X>
auto evaluated_as(X const& x) {
  using A = typename resharded<X, Src>::array_type;
  if constexpr (std::is_same_v<X, A>) return x;
  else if constexpr (!is_partial<X> && same_layout(operand_traits<X>::spec, Src)) return A(evaluate(x));
  else return resharded<X, Src>(x).result();
}

/// The collectives of evaluating x in the layout Src (the operand's own, then the move).
template <auto Src, class X>
void plan_as(X const& x, std::vector<collective_event>& out) {
  if constexpr (!is_partial<X> && same_layout(operand_traits<X>::spec, Src)) plan_of(x, out);
  else plan_of(resharded<X, Src>(x), out);
}

/// Where global index `g` (one per dimension) lies in a block: its offset in the block's
/// row-major memory. Throws if it lies outside: a structural kernel asked a device for what it
/// does not hold (a bug in an operation's choice of source layout, never silent).
template <std::size_t N>
std::size_t offset_in_block(std::array<slice, N> const& block, std::array<std::size_t, N> const& g, char const* what) {
  std::size_t off = 0;
  for (std::size_t d = 0; d < N; ++d) {
    if (g[d] < block[d].start || g[d] >= block[d].stop)
      throw std::logic_error(std::string("tessera: internal: ") + what + " read outside a device's block");
    off = off * block[d].size() + (g[d] - block[d].start);
  }
  return off;
}

/// Calls f(global index, k) for every element of `block` in row-major order (k counts from 0).
template <std::size_t N, class F>
void for_each_in_block(std::array<slice, N> const& block, F&& f) {
  std::size_t count = 1;
  for (std::size_t d = 0; d < N; ++d) count *= block[d].size();
  if (count == 0) return;
  std::array<std::size_t, N> g{};
  for (std::size_t d = 0; d < N; ++d) g[d] = block[d].start;
  for (std::size_t k = 0; k < count; ++k) {
    f(static_cast<std::array<std::size_t, N> const&>(g), k);
    for (std::size_t d = N; d-- > 0;) {
      if (++g[d] < block[d].stop) break;
      g[d] = block[d].start;
    }
  }
}

/// The result of an operation that moves nothing once its operand is in layout Src: operand x
/// evaluated in Src (moved if it is not), then each device writes its block of the result
/// (sharding `s`, shape `shape`) with `kernel(src, pos, out_block, out)`, where src is the
/// moved operand and pos the device's position, reading only src's block at pos.
/// `extra` are the collectives the kernel itself runs (listed by explain()). The kernel owns
/// what it reads (captured by value) and runs no collective, so the writing is queued
/// (asynchronous dispatch; build_array_queued).
template <class A, auto Src, class X, class Kernel>
computed<A> relayout(X x, typename A::sharding_type s, shape_t<A::rank> shape, char const* what, Kernel kernel,
                     std::vector<collective_event> extra = {}) {
  using T = typename A::value_type;
  auto make = [x, s, shape, what, kernel]() -> A {
    auto const src = evaluated_as<Src>(x);
    return build_array_queued<T, A::rank, typename A::sharding_type>(
        s, shape, what, [src, kernel](std::size_t pos, std::array<slice, A::rank> const& block, T* out) {
          kernel(src, pos, block, out);
        });
  };
  auto plan = [x, extra](std::vector<collective_event>& out) {
    plan_as<Src>(x, out);
    out.insert(out.end(), extra.begin(), extra.end());
  };
  return computed<A>(std::move(s), shape, std::move(make), std::move(plan));
}

/// A kernel that maps every element of the result to one element of the operand
/// (`source(g, s)` writes into s the operand's global index of the result's global index g):
/// reshape, slice, flip, roll, swapaxes... `fill(g)` gives values of elements that come from
/// no operand element (pad's padding), when `source` returns false for them.
template <std::size_t NI, class Source>
struct gather_kernel {
  Source source;
  char const* what;
  template <class Src, std::size_t NO, class T>
  void operator()(Src const& src, std::size_t pos, std::array<slice, NO> const& block, T* out) const {
    auto const sb = src.sharding().block(pos, src.shape());
    T const* in = src.block_data(pos);
    std::array<std::size_t, NI> gi{};
    for_each_in_block(block, [&](std::array<std::size_t, NO> const& g, std::size_t k) {
      T v{};
      if (source(g, gi, v)) v = in[offset_in_block(sb, gi, what)];
      out[k] = v;
    });
  }
};
template <std::size_t NI, class Source>
gather_kernel<NI, Source> gathering(Source s, char const* what) {
  return gather_kernel<NI, Source>{std::move(s), what};
}

}  // namespace detail

}  // namespace tessera
