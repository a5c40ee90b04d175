#pragma once
// Evaluation: one pass per device over its block of the result, on the
// device's own thread, into memory from the device's cache. The whole
// element-wise tree is fused into that pass (no temporaries); reductions,
// transposes of expressions and resharded operands were materialised first
// (prepare), because they need their own pass or a collective.

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>

#include "tessera/array/array.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/expression.hpp"

namespace tessera {

namespace detail {

/// The block of dimension Q = max(N, 1) a device evaluates (a rank-0 result is one element).
template <std::size_t Q, std::size_t N>
std::array<slice, Q> eval_block(std::array<slice, N> const& block) {
  if constexpr (N == 0) return {slice{0, 1}};
  else return block;
}
template <std::size_t Q, std::size_t N>
shape_t<Q> eval_shape(shape_t<N> const& shape) {
  if constexpr (N == 0) return {1};
  else return shape;
}

/// One fused pass per device over its block of E's result, reading the cursor `Partial` picks
/// (the node's partial values, or its summed ones).
template <bool Partial, class E>
auto fill_pass(E const& e) {
  using A = array_of_t<E>;
  using T = typename A::value_type;
  using S = typename A::sharding_type;
  constexpr std::size_t N = A::rank;
  constexpr std::size_t Q = N == 0 ? 1 : N;
  S const s(e.mesh());
  shape_t<N> const shape = e.shape();
  shape_t<Q> const rs = eval_shape<Q>(shape);
  return build_array<T, N, S>(s, shape, "evaluate", [&](std::size_t pos, std::array<slice, N> const& block, T* out) {
    auto const rb = eval_block<Q>(block);
    auto cur = [&] {
      if constexpr (Partial) return e.template partial_cursor<Q>(pos, rb, rs);
      else return cursor_of<Q>(e, pos, rb, rs);
    }();
    fill_block<T, Q>(cur, out, block_shape(rb));
  });
}

template <class E>
auto evaluate(E const& e) {
  if constexpr (is_named_array<E>::value) {
    return e;
  } else if constexpr (requires { e.result(); }) {
    return e.result();  // a node that materialises itself (a reduction, a product, a move, a partial sum)
  } else {
    e.prepare();
    return fill_pass<false>(e);
  }
}

template <class E>
auto evaluate_partial(E const& e) {
  return fill_pass<true>(e);
}

/// The array an operand holds or evaluates to (a materialised node's own result, not a copy).
template <class E>
auto materialised(E const& e) {
  return evaluate(e);
}

}  // namespace detail

template <class A, auto Target>
void resharded<A, Target>::prepare() const {
  if constexpr (!detail::is_partial<A>) detail::prepare(a_);  // partial sums are not summed first
  std::call_once(cache_->once, [&] {
    if constexpr (detail::is_partial<A>) {
      // Partial sums go straight to the target: a reduce-scatter where it shards their axes.
      cache_->value.emplace(detail::sum_partials(a_.partial(), detail::operand_traits<A>::unreduced,
                                                 sharding_type(mesh()), detail::reduce_op::sum));
    } else if constexpr (same_layout(detail::operand_traits<A>::spec, Target)) {
      cache_->value.emplace(detail::materialised(a_));
    } else {
      auto src = detail::materialised(a_);
      cache_->value.emplace(device_put(src, sharding_type(src.sharding().mesh())));
    }
  });
}

/// Evaluates a sharded expression (one fused pass per device) into an array with the
/// propagated sharding; an array is returned as it is. JAX evaluates eagerly; here
/// `a + b` is an expression until it is evaluated or assigned to an array.
template <sharded_expression E>
auto eval(E const& e) {
  return detail::evaluate(e);
}

/// `tessera::array r = a + b;` gives the expression's element type, rank and sharding.
template <expression_node E>
array(E const&) -> array<typename E::value_type, E::rank, typename E::sharding_type>;

}  // namespace tessera
