#pragma once
// The values grad, value_and_grad and vjp pass to the user's function: a tracer wraps an array
// and records every operation on it on a tape, an array-level tape (Stan's var_value<Matrix>
// with reverse_pass_callback is the model) whose backward steps are tessera expressions, so each
// cotangent is computed by the same sharded, fused, per-device passes as the forward values.
//
// Sharding (JAX's rule, sharding-ad.md): a cotangent has its primal's type. Contributions to one
// cotangent are added while they are still partial sums (a matmul contracting a sharded
// dimension, a sum over one), and summed once into the primal's layout when the backward pass
// reaches the primal: an all-reduce for a replicated value, a reduce-scatter for a sharded one.
//
// Forward values are computed when first needed: grad of `mean(d * d)` never evaluates the mean
// (nor runs its all-reduce), as XLA drops it from jax.grad's program.

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/sum_partials.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/expr/evaluate.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/partial_array.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera {

template <class A>
class tracer;

namespace detail::ad {

/// The backward pass of one grad or vjp call: the steps run in reverse order of recording,
/// which is a topological order of the program (an operation is recorded after its operands).
class tape {
 public:
  void record(detail::unique_function<void()> step) { steps_.push_back(std::move(step)); }
  void on_reset(detail::unique_function<void()> clear) { clears_.push_back(std::move(clear)); }
  /// Runs the backward pass once.
  void run() {
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) (*it)();
  }
  /// Forgets every cotangent, so a vjp function can be called again.
  void reset() {
    for (auto& c : clears_) c();
  }

 private:
  std::vector<detail::unique_function<void()>> steps_;
  std::vector<detail::unique_function<void()>> clears_;
};

/// Set while explain() plans a gradient: every evaluation appends its collectives here and
/// gives an array without blocks instead of running (autodiff/grad.hpp's explain).
inline thread_local std::vector<collective_event>* planning = nullptr;

/// An array of type A with the shape and layout of a value, holding no blocks: what the
/// backward pass computes with while it is only planned.
template <class A>
A placeholder(typename A::sharding_type const& s, shape_t<A::rank> const& shape) {
  using T = typename A::value_type;
  using S = typename A::sharding_type;
  // No buffers at all marks it (array::block_data then refuses to read it).
  return A(std::make_shared<array_storage<T, A::rank, S>>(array_storage<T, A::rank, S>{s, shape, pool_for(s, "explain"), {}}));
}

/// placeholder on the sharding of A's type over mesh m, made here (once per A, not in each caller).
template <class A>
A placeholder_on(typename A::sharding_type::mesh_type const& m, shape_t<A::rank> const& shape) {
  return placeholder<A>(typename A::sharding_type(m), shape);
}

/// The collectives of evaluating x, then its placeholder (planning).
template <class A, class X>
A planned(X const& x) {
  plan_of(x, *planning);
  return placeholder_on<A>(*mesh_of(x), shape_of(x));
}

/// tessera::eval, or its plan and a placeholder while planning.
template <class X>
auto materialize(X const& x) {
  using A = decltype(tessera::eval(x));
  if (planning != nullptr && !is_array<X>::value) return planned<A>(x);
  return A(tessera::eval(x));
}

/// The array an operand evaluates to, in type A (the same values; the layout of A's spec when
/// A's spec is written shorter than the rank, as P("X") for a matrix).
template <class A, class X>
A as_array(X const& x) {
  if (planning != nullptr) {
    if constexpr (std::is_same_v<X, A>) return x;
    else return planned<A>(x);
  }
  if constexpr (std::is_same_v<X, A>) {
    return x;
  } else if constexpr (is_array<X>::value) {
    return A(x);
  } else {
    auto v = tessera::eval(x);
    if constexpr (std::is_same_v<decltype(v), A>) return v;
    else return A(v);
  }
}

/// Expression X converted to A's element type and resharded to A's layout.
template <class A, class X>
A to_layout(X const& x) {
  using T = typename A::value_type;
  using Spec = typename A::sharding_type::spec_type;
  using XT = typename operand_traits<stored_t<X>>::value_type;
  if constexpr (std::is_same_v<X, A>) {
    return x;
  } else if constexpr (std::is_same_v<XT, T>) {
    if constexpr (same_layout(operand_traits<stored_t<X>>::spec, operand_traits<A>::spec) && !is_partial<stored_t<X>>)
      return as_array<A>(x);
    else
      return as_array<A>(tessera::reshard(x, Spec{}));
  } else {
    return as_array<A>(tessera::reshard(tessera::astype<T>(x), Spec{}));
  }
}

/// x with a size-1 dimension inserted at J (jnp.expand_dims), replicated; the blocks are
/// copied on the devices (a size-1 dimension does not change their layout).
template <std::size_t J, class U, std::size_t K, class M, class Spec>
auto expand_dims(array<U, K, named_sharding<M, Spec>> const& x) {
  constexpr auto out = [] {
    auto const in = padded_spec<Spec>(std::make_index_sequence<K>{});
    std::array<dim_spec, K + 1> s{};
    for (std::size_t i = 0, k = 0; i <= K; ++i) s[i] = i == J ? dim_spec{} : in[k++];
    return canonical_spec(s);
  }();
  using S2 = named_sharding<M, spec_type_t<out>>;
  S2 const s2(x.sharding().mesh());
  shape_t<K + 1> shape{};
  for (std::size_t i = 0, k = 0; i <= K; ++i) shape[i] = i == J ? 1 : x.shape()[k++];
  if (planning != nullptr) return placeholder<array<U, K + 1, S2>>(s2, shape);
  return build_array<U, K + 1, S2>(s2, shape, "expand_dims", [&](std::size_t pos, auto const& block, U* o) {
    std::size_t const n = element_count(block_shape(block));
    std::copy(x.block_data(pos), x.block_data(pos) + n, o);
  });
}

/// x with size-1 dimensions inserted at J... (ascending positions in the result).
template <std::size_t... J, class X>
auto expand_each(X const& x);
template <std::size_t J0, std::size_t... J, class X>
auto expand_first(X const& x) {
  return expand_each<J...>(expand_dims<J0>(x));
}
template <std::size_t... J, class X>
auto expand_each(X const& x) {
  if constexpr (sizeof...(J) == 0) return x;
  else return expand_first<J...>(x);
}

/// A move of partial sums to a layout (matmul with an out_sharding): the sums are taken there.
template <class E>
struct resharded_partial : std::false_type {};
template <class X, auto Target>
struct resharded_partial<resharded<X, Target>> : std::bool_constant<is_partial<X>> {};

/// Partial contributions waiting for their one sum, type-erased over their layout.
template <class A>
struct pending_sum {
  virtual ~pending_sum() = default;
  /// The sum over the mesh, into A's layout (the one collective).
  virtual A sum(typename A::sharding_type const& to) const = 0;
};

/// The partial blocks PA (summed over the mesh axes U when finished).
template <class A, class PA, dim_spec U>
struct pending_partial final : pending_sum<A> {
  explicit pending_partial(PA b) : blocks(std::move(b)) {}
  A sum(typename A::sharding_type const& to) const override {
    if (planning != nullptr) {
      auto const e = reshard_events<typename A::value_type, A::rank>(blocks.shape(), blocks.sharding(), U, to);
      planning->insert(planning->end(), e.begin(), e.end());
      return placeholder<A>(to, blocks.shape());
    }
    return A(sum_partials(blocks, U, to, reduce_op::sum));
  }
  PA blocks;
};

/// Array x summed over its dimension j, kept as size 1, where no device shards j: each device
/// sums its own block (the reduction kernel of a sum<j> node, so the same bits), compiled once
/// per array type whatever j is.
template <class X>
X sum_dim_kept(X const& x, std::size_t j) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  shape_t<N> const in_shape = x.shape();
  shape_t<N> shape = in_shape;
  shape[j] = 1;
  if (planning != nullptr) return placeholder<X>(x.sharding(), shape);
  return build_array_queued_on<T, N, typename X::sharding_type>(
      x.sharding().mesh(), shape, "grad", [x, j, in_shape](std::size_t pos, std::array<slice, N> const&, T* out) {
        auto const rb = x.sharding().block(pos, in_shape);
        std::array<bool, N> reduced{};
        reduced[j] = true;
        shape_t<N> const local = block_shape(rb);
        auto cur = cursor_of<N>(x, pos, rb, in_shape);
        reduce_block<op::sum, T, N>(cur, out, local, reduced, reduction_out_strides<N>(local, reduced));
      });
}

/// The cotangent of one value of type A: contributions accumulate, and take() gives their sum
/// in A's layout.
template <class A>
class cotangent {
 public:
  using T = typename A::value_type;
  using S = typename A::sharding_type;
  static constexpr std::size_t N = A::rank;

  cotangent(S s, shape_t<N> shape) : sharding_(std::move(s)), shape_(shape) {}

  /// Adds a contribution of A's shape: an expression or an array, of any layout and floating type.
  template <class E>
  void add(E const& e) {
    using X = stored_t<E>;
    if constexpr (resharded_partial<X>::value) {
      add(e.operand());  // a product laid out by out_sharding: kept partial, summed into A's layout at the end
    } else if constexpr (is_partial<X> && std::is_same_v<typename operand_traits<X>::value_type, T>) {
      using PA = std::remove_cvref_t<decltype(e.partial())>;
      constexpr dim_spec U = operand_traits<X>::unreduced;
      using pending = pending_partial<A, PA, U>;
      PA blocks = [&] {
        if (planning == nullptr) return PA(e.partial());
        e.partial_plan(*planning);
        return placeholder<PA>(typename PA::sharding_type(e.mesh()), shape_of(e));
      }();
      if (!partial_) {
        partial_ = std::make_unique<pending>(std::move(blocks));
      } else if (auto* p = dynamic_cast<pending*>(partial_.get())) {
        // Two partial sums over the same axes: added block by block, still partial.
        using PS = typename PA::sharding_type;
        using node = partial_array<T, N, PS, U>;
        if (planning == nullptr) {
          auto const both = node(p->blocks) + node(std::move(blocks));
          p->blocks = PA(both.partial());
        }
      } else {
        add_full(pending(std::move(blocks)).sum(sharding_));
      }
    } else {
      add_full(to_layout<A>(e));
    }
  }

  /// Adds a contribution of the shape of a broadcast result: summed over the dimensions that
  /// broadcasting added (leading ones, and size-1 dimensions that grew), as NumPy's rules ask.
  template <class E>
  void add_broadcast(E const& e) {
    constexpr std::size_t R = operand_traits<stored_t<E>>::rank;
    if constexpr (R > N) {
      add_broadcast([&]<std::size_t... I>(std::index_sequence<I...>) {
        return tessera::sum<I...>(e);
      }(std::make_index_sequence<R - N>{}));
    } else {
      auto const es = shape_of(e);
      bool grew = false;
      for (std::size_t j = 0; j < N; ++j) grew = grew || (shape_[j] == 1 && es[j] != 1);
      if (!grew) add(e);
      else add_grown(as_array<array_of_t<stored_t<E>>>(e));  // as add's own evaluation of e, where A is e's type
    }
  }

  /// A contribution that broadcasting grew, evaluated: summed where it grew, then added. Out of
  /// line, once per array type: the contributions of one type share it.
  template <class X>
  [[gnu::noinline]] void add_grown(X const& x) {
    add(sum_grown<0>(x));
  }

  bool empty() const { return !full_ && !partial_; }

  /// The sum of the contributions in A's layout (nothing when there were none).
  std::optional<A> take() {
    if (partial_) {
      A p = partial_->sum(sharding_);
      partial_.reset();
      if (full_) full_ = as_array<A>(p + *full_);
      else full_ = std::move(p);
    }
    std::optional<A> out = std::move(full_);
    full_.reset();
    return out;
  }

  void clear() {
    full_.reset();
    partial_.reset();
  }

  S const& sharding() const { return sharding_; }
  shape_t<N> const& shape() const { return shape_; }

 private:
  // Out of line: once per value type, not inside every contribution's code.
  [[gnu::noinline]] void add_full(A v) {
    if (full_) full_ = as_array<A>(*full_ + v);
    else full_ = std::move(v);
  }

  /// Dimension J of x summed where the primal has size 1 there and x does not; a dimension
  /// the primal shards is never summed (a broadcast dimension is replicated, or the forward
  /// operation refused it). Each step gives one type whatever it does: the dimension is left
  /// replicated, summed or gathered.
  template <std::size_t J, class X>
  auto sum_grown(X const& x) const {
    if constexpr (J == N) {
      return x;
    } else if constexpr (!operand_traits<A>::spec[J].is_none()) {
      return sum_grown<J + 1>(x);
    } else if constexpr (operand_traits<X>::spec[J].is_none()) {
      // Every device holds dimension J whole: summed in its own block, by code compiled once
      // per array type (a reduction node per dimension was compiled for every J, summed or not).
      if (shape_[J] == 1 && x.shape()[J] != 1) return sum_grown<J + 1>(sum_dim_kept(x, J));
      return sum_grown<J + 1>(x);
    } else {
      constexpr auto out = [] {
        auto s = operand_traits<X>::spec;
        s[J] = dim_spec{};
        return canonical_spec(s);
      }();
      using Out = array<typename X::value_type, N, named_sharding<typename X::sharding_type::mesh_type, spec_type_t<out>>>;
      Out step = [&]() -> Out {
        if (shape_[J] == 1 && x.shape()[J] != 1) {
          return expand_dims<J>(materialize(tessera::sum<J>(x)));
        }
        if constexpr (std::is_same_v<Out, X>) return x;
        else return as_array<Out>(tessera::reshard(x, spec_type_t<out>{}));
      }();
      return sum_grown<J + 1>(step);
    }
  }

 private:
  S sharding_;
  shape_t<N> shape_;
  std::optional<A> full_;
  std::unique_ptr<pending_sum<A>> partial_;
};

/// The blocks of a value a pass's prelude computes: each device's block is written once, by
/// the prelude's step on that device, or earlier by whatever reads it first (write_block on the
/// device's own thread, write_all from the host for a whole-array read).
struct prelude_blocks {
  detail::unique_function<void(std::size_t pos)> write_block;
  detail::unique_function<void()> write_all;
};

/// One value of the traced program: its forward value (computed when first needed), its
/// cotangent, and the tape it belongs to (not owned: the tape's steps own the nodes).
template <class A>
struct node {
  node(std::weak_ptr<tape> t, typename A::sharding_type s, shape_t<A::rank> shape)
      : tp(std::move(t)), ct(std::move(s), shape) {}

  A const& primal() {
    detail::call_once(once, [&] {
      if (!value) value.emplace(make());
    });
    if (!value) value.emplace(make());  // the pass that was to compute it failed (see schedule)
    if (pending) pending->write_all();  // claimed by a pass's prelude that has not run yet
    return *value;
  }

  std::weak_ptr<tape> tp;
  // Set when this value is x * x of the node `square_of` (a squared error): a sum or mean of it
  // then sends its cotangent straight to x (2 x g, one pass), skipping this node's.
  std::shared_ptr<node<A>> square_of;
  detail::unique_function<A()> make;
  // Set for a value computed element by element from values in the same layout's blocks: it can
  // be computed at the start of the pass that first reads it (expr/evaluate.hpp's pass_prelude)
  // instead of in a dispatch of its own, as XLA fuses element-wise producers into their consumer.
  detail::unique_function<void(pass_prelude&)> schedule;
  /// Set while a pass's prelude has claimed this value (its storage exists, its blocks are
  /// written by the prelude's steps): whatever reads it before that pass runs (a reduction of x
  /// in x - mean(x), computed before the pass that reads x) writes the blocks it reads first.
  std::shared_ptr<prelude_blocks> pending;
  std::once_flag once;
  std::optional<A> value;
  cotangent<A> ct;
};

template <class T>
struct is_tracer : std::false_type {};
template <class A>
struct is_tracer<tracer<A>> : std::true_type {};

}  // namespace detail::ad

/// A value traced by grad, value_and_grad or vjp (JAX's JVPTracer): the function's
/// arguments, and the result of every operation on them.
template <class A>
class tracer {
 public:
  using array_type = A;
  using value_type = typename A::value_type;
  using sharding_type = typename A::sharding_type;
  using mesh_type = typename sharding_type::mesh_type;
  /// x.ndim
  static constexpr std::size_t rank = A::rank;

  explicit tracer(std::shared_ptr<detail::ad::node<A>> n) : n_(std::move(n)) {}

  /// The forward value (jax.core.get_aval(x) holds its type; this holds the array).
  A const& primal() const { return n_->primal(); }
  /// x.shape
  shape_t<rank> const& shape() const { return n_->ct.shape(); }
  /// x.sharding
  sharding_type const& sharding() const { return n_->ct.sharding(); }
  /// x.dtype
  static constexpr std::string_view dtype() { return A::dtype(); }
  /// The library's record of this value.
  std::shared_ptr<detail::ad::node<A>> const& node() const { return n_; }

 private:
  std::shared_ptr<detail::ad::node<A>> n_;
};

/// Whether X is a tracer (an argument of a function under grad, or a value computed from one).
template <class X>
concept traced_value = detail::ad::is_tracer<std::remove_cvref_t<X>>::value;

/// Tracers bring their own operators: not rejected as non-operands by the expression layer.
template <class A>
inline constexpr bool has_own_operators<tracer<A>> = true;

namespace detail::ad {

/// A tracer's forward value as an expression leaf, computed only when an expression that
/// reads it is evaluated: an operation on tracers builds its expression without running its
/// operands, so values nothing needs (grad's loss, its last all-reduce) never run.
template <class A>
class deferred : public expression_tag {
 public:
  using value_type = typename A::value_type;
  using sharding_type = typename A::sharding_type;
  using mesh_type = typename sharding_type::mesh_type;
  using array_type = A;
  static constexpr std::size_t rank = A::rank;
  static constexpr std::array<dim_spec, rank> spec = operand_traits<A>::spec;

  explicit deferred(std::shared_ptr<node<A>> n) : n_(std::move(n)) {}
  shape_t<rank> shape() const { return n_->ct.shape(); }
  mesh_type const& mesh() const { return n_->ct.sharding().mesh(); }
  A const& result() const { return n_->primal(); }
  auto evaluate() const { return result(); }
  /// Computes the value, unless a pass's prelude has claimed it (then that pass, or the first
  /// reader of a block, writes it).
  void prepare() const {
    if (!n_->value) (void)n_->primal();
  }
  /// A value not computed yet is computed in the prelude of the pass that reads it, where it can be.
  void schedule_into(pass_prelude& prelude) const {
    if (planning == nullptr && !n_->value && n_->schedule) n_->schedule(prelude);
  }
  /// While explain() plans: the pending value's own plan (its evaluation is planned, once);
  /// otherwise a value is computed when read, and has no plan of its own before.
  void plan(std::vector<collective_event>&) const {
    if (planning != nullptr) (void)n_->primal();
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    if (auto const& p = n_->pending) p->write_block(pos);  // this device's block, if no step wrote it yet
    return cursor_of<Q>(*n_->value, pos, rb, rs);
  }

 private:
  std::shared_ptr<node<A>> n_;
};

/// Zeros with A's shape and layout, never stored: what a reduction's cotangent is broadcast
/// against, so that the backward pass of sum and mean reads nothing of the operand.
template <class A>
class layout_only : public expression_tag {
 public:
  using value_type = typename A::value_type;
  using sharding_type = typename A::sharding_type;
  using mesh_type = typename sharding_type::mesh_type;
  static constexpr std::size_t rank = A::rank;
  static constexpr std::array<dim_spec, rank> spec = operand_traits<A>::spec;

  layout_only(sharding_type s, shape_t<rank> shape) : s_(std::move(s)), shape_(shape) {}
  shape_t<rank> shape() const { return shape_; }
  mesh_type const& mesh() const { return s_.mesh(); }
  auto evaluate() const { return evaluate_node(*this); }
  void prepare() const {}
  void plan(std::vector<collective_event>&) const {}
  template <std::size_t Q>
  auto cursor(std::size_t, std::array<slice, Q> const&, shape_t<Q> const&) const {
    return scalar_cursor<value_type>{value_type(0)};
  }

 private:
  template <class E>
  static auto evaluate_node(E const& e) {
    return detail::evaluate(e);
  }
  sharding_type s_;
  shape_t<rank> shape_;
};

/// What an operand is in an expression: a tracer's value (deferred when its type is the one
/// expressions give; a leaf argument's own array otherwise), anything else itself.
template <class X>
auto primal_of(X const& x) {
  if constexpr (traced_value<X>) {
    using A = typename X::array_type;
    if constexpr (std::is_same_v<A, array_of_t<A>>) return deferred<A>(x.node());
    else return x.primal();
  } else {
    return x;
  }
}

/// A tracer's shape and layout as zeros (see layout_only).
template <class X>
auto layout_of(X const& x) {
  return layout_only<typename X::array_type>(x.sharding(), x.shape());
}

/// The tape the tracers among the operands belong to (one tape: nested grad is not supported).
template <class... X>
std::shared_ptr<tape> tape_of(X const&... x) {
  std::shared_ptr<tape> t;
  bool mixed = false;
  auto one = [&](auto const& v) {
    if constexpr (traced_value<decltype(v)>) {
      auto o = v.node()->tp.lock();
      if (!o)
        throw std::logic_error(
            "tessera: a tracer was used after its grad, value_and_grad or vjp call returned (JAX's "
            "UnexpectedTracerError); return arrays from the function, or use tessera::stop_gradient");
      if (t && t != o) mixed = true;
      if (!t) t = std::move(o);
    }
  };
  (one(x), ...);
  if (mixed)
    throw std::logic_error(
        "tessera: an operation mixes tracers of two grad calls; grad of grad (nested differentiation) is not "
        "supported yet");
  return t;
}

/// Whether a node of type A computed by E can be computed in a pass's prelude: E is an
/// element-wise tree over arrays, numbers and other nodes' values (each device reads only its
/// own blocks), with A's layout as its own.
template <class E>
struct prelude_leaves : std::false_type {};
template <class T, std::size_t N, class S>
struct prelude_leaves<array<T, N, S>> : std::true_type {};
template <class S>
struct prelude_leaves<scalar_operand<S>> : std::true_type {};
template <class A>
struct prelude_leaves<deferred<A>> : std::true_type {};
template <class A>
struct prelude_leaves<layout_only<A>> : std::true_type {};
template <class Op, class C, class R, class... Args>
struct prelude_leaves<elementwise<Op, C, R, Args...>>
    : std::bool_constant<!elementwise<Op, C, R, Args...>::partial_node && (prelude_leaves<Args>::value && ...)> {};
template <class E, class A>
inline constexpr bool in_prelude =
    prelude_leaves<E>::value && std::is_same_v<array_of_t<E>, A> && !std::is_same_v<E, deferred<A>>;

/// Writes one block of a prelude's value: (buffer, block position, the block's slices, the
/// value's shape), the only part of a prelude step that depends on the expression.
template <class T, std::size_t Q>
using prelude_fill = detail::unique_function<void(T*, std::size_t, std::array<slice, Q> const&, shape_t<Q> const&)>;

/// What a prelude step does once its expression's leaves are scheduled: the node's storage, the
/// step that writes each device's block with `fill`, and the undo. Compiled once per value type A
/// rather than once per expression (issue 31: compile time).
template <class A, std::size_t Q = (A::rank == 0 ? 1 : A::rank)>
void schedule_prelude_value(std::weak_ptr<node<A>> const& w, node<A>& n, pass_prelude& prelude,
                            typename A::sharding_type::mesh_type const& m, shape_t<A::rank> const& shape,
                            prelude_fill<typename A::value_type, Q> fill_one) {
  using T = typename A::value_type;
  using S = typename A::sharding_type;
  constexpr std::size_t N = A::rank;
  S const s(m);
  auto st = std::make_shared<array_storage<T, N, S>>(array_storage<T, N, S>{s, shape, pool_for(s, "grad"), {}});
  st->buffers.resize(s.num_devices());
  n.value.emplace(A(st));
  // Each block once: by this prelude's step, or by a reader that comes first (see prelude_blocks).
  auto written = std::make_shared<std::vector<char>>(s.num_devices(), 0);
  auto fill = std::make_shared<prelude_fill<T, Q>>(std::move(fill_one));
  auto write = [st, fill, written](std::size_t pos) {
    if ((*written)[pos]) return;
    (*written)[pos] = 1;
    auto const block = st->sharding.block(pos, st->shape);
    auto const rb = eval_block<Q>(block);
    int const device = st->sharding.device_ids()[pos];
    device_buffer<T> buf(element_count(block_shape(block)), device_buffer<T>::uninitialized, &st->pool->memory(device));
    if (buf.size() != 0) (*fill)(buf.data(), pos, rb, eval_shape<Q>(st->shape));
    st->buffers[pos] = std::move(buf);
  };
  prelude.steps.push_back(write);
  auto blocks = std::make_shared<prelude_blocks>();
  blocks->write_block = write;
  blocks->write_all = [st, write, written] {
    auto const& ids = st->sharding.device_ids();
    bool all = true;
    for (std::size_t p = 0; p < ids.size(); ++p) all = all && ((*written)[p] || !st->pool->is_local(ids[p]));
    if (all) return;
    std::vector<std::size_t> pos_of(static_cast<std::size_t>(st->pool->global_size()), 0);
    for (std::size_t p = 0; p < ids.size(); ++p) pos_of[static_cast<std::size_t>(ids[p])] = p;
    st->pool->run(std::span<int const>(ids), [&](int d) { write(pos_of[static_cast<std::size_t>(d)]); });
  };
  n.pending = std::move(blocks);
  prelude.on_failure.push_back([w] {
    if (auto p = w.lock()) {
      p->value.reset();
      p->pending.reset();
    }
  });
}

/// The node's schedule (see node::schedule): its own unread values first, then its storage,
/// whose blocks the prelude's step writes on each device before the pass reads them.
template <class A, class E>
detail::unique_function<void(pass_prelude&)> prelude_step(std::weak_ptr<node<A>> w, E const& e) {
  return [w, e](pass_prelude& prelude) {
    auto n = w.lock();
    if (!n || n->value) return;
    if (planning != nullptr) {
      // Only the node's own make (make_by_prelude) schedules while explain() plans: the value's
      // collectives, then its placeholder.
      plan_of(e, *planning);
      n->value.emplace(placeholder_on<A>(e.mesh(), e.shape()));
      return;
    }
    schedule_leaves(e, prelude);
    e.prepare();  // what cannot be computed in the prelude (a product the expression reads) is computed now
    using T = typename A::value_type;
    constexpr std::size_t Q = A::rank == 0 ? 1 : A::rank;
    schedule_prelude_value<A>(w, *n, prelude, e.mesh(), e.shape(),
                              prelude_fill<T, Q>([e](T* out, std::size_t pos, std::array<slice, Q> const& rb,
                                                     shape_t<Q> const& shape) {
                                auto cur = cursor_of<Q>(e, pos, rb, shape);
                                fill_block<T, Q>(cur, out, block_shape(rb));
                              }));
  };
}

/// A node's make where its value is scheduled into a pass's prelude (record's in_prelude): the
/// value scheduled into a prelude of its own, whose blocks node::primal then writes on every
/// device (write_all), by the prelude's own fill. The expression then has one evaluation, not
/// a prelude's and a pass's; this is one type per value type (issue 31's compile time).
template <class A>
struct make_by_prelude {
  std::weak_ptr<node<A>> w;
  A operator()() const {
    auto const n = w.lock();
    pass_prelude prelude;
    n->schedule(prelude);
    return *n->value;
  }
};

/// A node of value type A on tape t, its cotangent cleared when the tape is reset. Compiled
/// once per A, not once per recorded operation (issue 31: compile time).
template <class A>
std::shared_ptr<node<A>> new_node(std::shared_ptr<tape> const& t, typename A::sharding_type s,
                                  shape_t<A::rank> const& shape) {
  auto n = std::make_shared<node<A>>(t, std::move(s), shape);
  t->on_reset([w = std::weak_ptr<node<A>>(n)] {
    if (auto p = w.lock()) p->ct.clear();
  });
  return n;
}

/// new_node on the sharding of A's type over mesh m, made here (once per A, not per operation).
template <class A>
std::shared_ptr<node<A>> new_node_on(std::shared_ptr<tape> const& t, typename A::sharding_type::mesh_type const& m,
                                     shape_t<A::rank> const& shape) {
  return new_node<A>(t, typename A::sharding_type(m), shape);
}

/// y() of a backward rule: the node's forward value, computed when the rule first asks for it.
/// One type per A (a lambda in record would be one per operation, and so would every rule
/// instantiated with it).
template <class A>
struct primal_reader {
  node<A>* n;
  A const& operator()() const { return n->primal(); }
};

/// The tracer of an operation's result: `e` is the forward expression on the operands'
/// primals, `backward(g, y)` adds the operands' contributions for the result's cotangent g (an
/// array of the result's type; y gives the forward value when a rule needs it).
template <class E, class Backward>
auto record(std::shared_ptr<tape> const& t, E e, Backward backward) {
  using A = decltype(tessera::eval(e));
  auto n = new_node_on<A>(t, *mesh_of(e), shape_of(e));
  if constexpr (is_array<E>::value) {
    n->value.emplace(std::move(e));
  } else {
    if constexpr (in_prelude<E, A>) {
      n->schedule = prelude_step<A>(std::weak_ptr<node<A>>(n), e);
      n->make = make_by_prelude<A>{std::weak_ptr<node<A>>(n)};
    } else {
      n->make = [e = std::move(e)] { return as_array<A>(e); };
    }
  }
  t->record([n, backward = std::move(backward)] {
    std::optional<A> g = n->ct.take();
    if (!g) return;  // nothing depends on this value
    backward(*g, primal_reader<A>{n.get()});
  });
  return tracer<A>(std::move(n));
}

/// A leaf of the traced program: one of the arguments grad differentiates.
template <class A>
tracer<A> leaf(std::shared_ptr<tape> const& t, A const& value) {
  auto n = new_node<A>(t, value.sharding(), value.shape());
  n->value.emplace(value);
  return tracer<A>(std::move(n));
}

/// An array of A's type and `shape` with every element `v` (zeros for an unused argument, the
/// seed 1 of a scalar output).
template <class A>
A filled(typename A::sharding_type const& s, shape_t<A::rank> const& shape, typename A::value_type v) {
  using T = typename A::value_type;
  if (planning != nullptr) return placeholder<A>(s, shape);
  if constexpr (A::rank == 0) {
    // One number per device (the seed of a scalar output), written here: not worth a dispatch.
    using S = typename A::sharding_type;
    auto st = std::make_shared<array_storage<T, 0, S>>(array_storage<T, 0, S>{s, shape, pool_for(s, "grad"), {}});
    st->buffers.resize(s.num_devices());
    auto const& ids = s.device_ids();
    for (std::size_t p = 0; p < ids.size(); ++p)
      if (st->pool->is_local(ids[p])) {
        device_buffer<T> b(1);
        *b.data() = v;
        st->buffers[p] = std::move(b);
      }
    return A(std::move(st));
  }
  return build_array<T, A::rank>(s, shape, "grad", [&](std::size_t, auto const& block, T* out) {
    std::fill(out, out + element_count(block_shape(block)), v);
  });
}

/// The tracer of a node.
template <class A>
tracer<A> tracer_of(std::shared_ptr<node<A>> const& n) {
  return tracer<A>(n);
}

/// Adds a contribution to an operand's cotangent, where the operand is a tracer (constants have none).
template <class X, class Make>
void contribute(X const& x, Make&& make) {
  if constexpr (traced_value<X>) x.node()->ct.add_broadcast(make());
}

}  // namespace detail::ad

}  // namespace tessera
