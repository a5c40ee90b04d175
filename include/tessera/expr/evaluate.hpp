#pragma once
// Evaluation: one pass per device over its block of the result, on the
// device's own thread, into memory from the device's cache. The whole
// element-wise tree is fused into that pass (no temporaries); reductions,
// transposes of expressions and resharded operands were materialised first
// (prepare), because they need their own pass or a collective. With
// asynchronous dispatch (runtime/dispatch_queue.hpp) the pass is queued on the
// devices and evaluation returns a future at once; the queued task owns a copy
// of the expression, so the operands it reads live until it has run.

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/array/to_host.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/runtime/call_once.hpp"

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

/// Work each device does at the start of a pass, before its own block: the blocks of values
/// the pass reads that nothing has computed yet and that can be computed block by block
/// (autodiff's deferred forward values, autodiff/tracer.hpp), so that they cost no dispatch of
/// their own. Each step writes the block at the device's position; steps run in order.
struct pass_prelude {
  std::vector<detail::unique_function<void(std::size_t pos)>> steps;
  /// Undoes what the steps were to compute when the pass does not run to its end.
  std::vector<detail::unique_function<void()>> on_failure;
};

/// Runs the prelude's undo steps unless the pass it belongs to completed (dismiss()).
class prelude_guard {
 public:
  explicit prelude_guard(pass_prelude const& p) : p_(p) {}
  prelude_guard(prelude_guard const&) = delete;
  prelude_guard& operator=(prelude_guard const&) = delete;
  ~prelude_guard() {
    if (!done_)
      for (auto const& undo : p_.on_failure) undo();
  }
  void dismiss() { done_ = true; }

 private:
  pass_prelude const& p_;
  bool done_ = false;
};

/// Offers the values an element-wise tree reads directly (not through a reduction, a product or
/// a move, which are computed before the pass) to the prelude of its pass: a leaf with
/// `schedule_into(prelude)` adds its steps there if it can.
template <class E>
void schedule_leaves(E const& e, pass_prelude& prelude) {
  if constexpr (requires { e.schedule_into(prelude); }) {
    e.schedule_into(prelude);
  } else if constexpr (requires { e.operands(); }) {
    if constexpr (operand_traits<E>::unreduced.is_none())
      tessera::detail::apply([&](auto const&... a) { (schedule_leaves(a, prelude), ...); }, e.operands());
  }
}

/// Whether an element-wise tree reads a value that schedule_leaves could offer to a prelude
/// (only autodiff's deferred values can be: other expressions keep the plain pass).
template <class E>
constexpr bool reads_prelude_values() {
  if constexpr (requires(E const& e, pass_prelude& p) { e.schedule_into(p); }) {
    return true;
  } else if constexpr (requires(E const& e) { e.operands(); }) {
    using operands = std::remove_cvref_t<decltype(std::declval<E const&>().operands())>;
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (reads_prelude_values<std::tuple_element_t<I, operands>>() || ...);
    }(std::make_index_sequence<std::tuple_size_v<operands>>{});
  } else {
    return false;
  }
}

/// A queued pass's fill: one device's block of E's result (`rs` its shape, made rank 1 or more).
template <class E, class T, std::size_t N>
struct expression_fill {
  static constexpr std::size_t Q = N == 0 ? 1 : N;
  E e;
  shape_t<Q> rs;
  void operator()(std::size_t pos, std::array<slice, N> const& block, T* out) const {
    auto const rb = eval_block<Q>(block);
    auto cur = cursor_of<Q>(e, pos, rb, rs);
    fill_block<T, Q>(cur, out, block_shape(rb));
  }
};

/// One fused pass per device over its block of E's result, reading the cursor `Partial` picks
/// (the node's partial values, or its summed ones), after the prelude's steps if there is one.
/// (The result type is named: deducing it would copy E, below, while array's constructor from
/// an expression is being checked, which asks for this very type.)
/// Queue: whether the pass may be queued (asynchronous dispatch); not for autodiff's deferred
/// values, whose blocks the first reader may write (they stay synchronous).
template <bool Partial, class E, bool Queue = !Partial && !reads_prelude_values<E>()>
auto fill_pass(E const& e, pass_prelude const* prelude = nullptr) -> array_of_t<E> {
  using A = array_of_t<E>;
  using T = typename A::value_type;
  using S = typename A::sharding_type;
  constexpr std::size_t N = A::rank;
  constexpr std::size_t Q = N == 0 ? 1 : N;
  shape_t<N> const shape = e.shape();
  shape_t<Q> const rs = eval_shape<Q>(shape);
  if constexpr (Queue) {
    // Queued when this thread may queue (asynchronous dispatch on, a pool of several devices
    // in one process, a host thread), else run at once. The task owns a copy of the
    // expression: its operands live until the pass has run. Only the synchronous branch below
    // is compiled otherwise: a tree that reads no prelude value is never given a prelude, and
    // compiling a pass that would never run costs every element-wise node (issue 31).
    // The queued fill holds the copy of the expression, made in place (not a lambda moved in
    // through build_array_queued: one function, and one copy of E's moves, less per node).
    (void)prelude;
    std::shared_ptr<queued_fill<T, N>> fill(
        static_cast<queued_fill<T, N>*>(new queued_fill_of<T, N, expression_fill<E, T, N>>(std::in_place, e, rs)));
    return build_array_queued_on<T, N, S>(e.mesh(), shape, "evaluate", false, std::move(fill));
  } else {
    auto fill = [&](std::size_t pos, std::array<slice, N> const& block, T* out) {
      if (prelude != nullptr) {
        for (auto const& step : prelude->steps) step(pos);
        if (out == nullptr) return;  // an empty block of the result: only the prelude's values to make
      }
      auto const rb = eval_block<Q>(block);
      auto cur = [&] {
        if constexpr (Partial) return e.template partial_cursor<Q>(pos, rb, rs);
        else return cursor_of<Q>(e, pos, rb, rs);
      }();
      fill_block<T, Q>(cur, out, block_shape(rb));
    };
    return build_array_erased_on<T, N, S>(e.mesh(), shape, "evaluate", prelude != nullptr,
                                          &call_erased<decltype(fill), std::size_t, std::array<slice, N> const&, T*>,
                                          erased_context(fill));
  }
}

template <class E>
auto evaluate(E const& e) {
  if constexpr (is_named_array<E>::value) {
    return e;
  } else if constexpr (requires { e.result(); }) {
    return e.result();  // a node that materialises itself (a reduction, a product, a move, a partial sum)
  } else if constexpr (!reads_prelude_values<E>()) {
    e.prepare();
    return fill_pass<false>(e);
  } else {
    pass_prelude prelude;
    prelude_guard guard(prelude);
    schedule_leaves(e, prelude);
    e.prepare();
    auto out = fill_pass<false>(e, prelude.steps.empty() ? nullptr : &prelude);
    guard.dismiss();
    return out;
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
  detail::call_once(cache_->once, [&] {
    if constexpr (detail::is_partial<A>) {
      // Partial sums go straight to the target: a reduce-scatter where it shards their axes.
      detail::summing_partials(mesh(), [&] {
        cache_->value.emplace(detail::sum_partials(a_.partial(), detail::operand_traits<A>::unreduced,
                                                   sharding_type(mesh()), detail::reduce_op::sum));
      });
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

/// jax.device_get(a + b): an expression's values in a new host array (evaluated first, as
/// JAX's arrays are computed before they are fetched).
template <expression_node E>
auto to_host(E const& e) {
  return to_host(detail::evaluate(e));
}

/// np.copyto(out, a + b): an expression's values written into an existing host array.
template <expression_node E>
void to_host(E const& e, xt::xtensor<typename E::value_type, E::rank>& out) {
  to_host(detail::evaluate(e), out);
}

/// `tessera::array r = a + b;` gives the expression's element type, rank and sharding.
template <expression_node E>
array(E const&) -> array<typename E::value_type, E::rank, typename E::sharding_type>;

}  // namespace tessera
