#pragma once
// jax.grad, jax.value_and_grad, jax.vjp and jax.lax.stop_gradient for functions of sharded
// arrays. The function is called once with tracers (autodiff/tracer.hpp) in place of the
// differentiated arguments; every operation on them runs as it would on arrays and is
// recorded, and the backward pass runs the recorded transposes. A gradient has exactly its
// argument's type (element type, rank and sharding), so a static_assert can check it.
//
// Arguments may be parameter trees (tree/tree_util.hpp): tuples, pairs, std::arrays and class
// templates over their field types (`template <class W, class B> struct params { W w; B b; };`,
// which can hold tracers as well as arrays); the gradient has the argument's structure.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/autodiff/rules.hpp"
#include "tessera/autodiff/shard_map_grad.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/parallel/vma_of.hpp"
#include "tessera/autodiff/tracer.hpp"
#include "tessera/debug/explain.hpp"
#include "tessera/debug/typeof.hpp"
#include "tessera/tree/tree_util.hpp"

namespace tessera {

/// has_aux=True: the function returns (value, aux) and aux is passed through undifferentiated.
struct has_aux_t {
  explicit has_aux_t() = default;
};
/// jax.grad(f, has_aux=True)
inline constexpr has_aux_t has_aux{};

namespace detail::ad {

template <class T>
struct class_template : std::false_type {};
template <template <class...> class S, class... F>
struct class_template<S<F...>> : std::true_type {
  template <class... G>
  using with = S<G...>;
};

/// Node T rebuilt from mapped children: a tuple, pair or std::array of them; the same struct
/// where the children have its field types; the same class template over the children's types;
/// a Hana struct or hana::map as tree/hana_tree.hpp rebuilds it (a map keeps its keys).
template <class T, class... C>
auto rebuild_node(C&&... c) {
  using U = std::remove_cvref_t<T>;
  if constexpr (hana_node<U>::value) {
    return hana_node<U>::rebuild(std::forward<C>(c)...);
  } else if constexpr (is_tuple_like<U>::value) {
    if constexpr (requires { typename U::first_type; }) return std::pair{std::forward<C>(c)...};
    else return std::tuple{std::forward<C>(c)...};
  } else if constexpr (is_std_array<U>::value) {
    return std::array{std::forward<C>(c)...};
  } else if constexpr (requires { U{std::forward<C>(c)...}; }) {
    return U{std::forward<C>(c)...};
  } else {
    static_assert(class_template<U>::value,
                  "tessera::grad: a struct in a differentiated argument must be a class template over its field types "
                  "(template <class W, class B> struct params { W w; B b; };), so that it can hold tracers and "
                  "gradients; or use a std::tuple");
    if constexpr (class_template<U>::value)
      return typename class_template<U>::template with<std::remove_cvref_t<C>...>{std::forward<C>(c)...};
  }
}

/// f applied to every leaf of a tree, the structure kept (tracers and arrays may change types).
template <class F, class T>
auto map_tree(F& f, T const& t) {
  if constexpr (!tree_node<T>) {
    return f(t);
  } else {
    auto children = children_of(t);
    // Braces: the leaves are mapped in order (a gradient's collectives then run in leaf order
    // with every compiler, as explain() lists them). A tuple is returned as it is made, not
    // moved into another (a reference count's update and a destructor per leaf).
    auto mapped = tessera::detail::apply(
        [&](auto const&... c) { return std::tuple<decltype(map_tree(f, c))...>{map_tree(f, c)...}; }, children);
    if constexpr (is_tuple_like<T>::value && !requires { typename T::first_type; }) return mapped;
    else return tessera::detail::apply([](auto&&... m) { return rebuild_node<T>(std::move(m)...); }, std::move(mapped));
  }
}

/// f(leaf of a, leaf of b) for leaves at the same places of two trees.
template <class F, class A, class B>
void for_each_pair(F& f, A const& a, B const& b) {
  if constexpr (!tree_node<A>) {
    f(a, b);
  } else {
    auto ca = children_of(a);
    auto cb = children_of(b);
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (for_each_pair(f, std::get<I>(ca), std::get<I>(cb)), ...);
    }(std::make_index_sequence<std::tuple_size_v<decltype(ca)>>{});
  }
}

template <class T>
inline constexpr bool floating_array = false;
template <class T, std::size_t N, class S>
inline constexpr bool floating_array<array<T, N, S>> = std::is_floating_point_v<T>;

/// Whether every leaf of tree T is an array of floating type (what grad can differentiate).
template <class T>
constexpr bool differentiable() {
  using leaves = decltype(tree_leaves(std::declval<T const&>()));
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (floating_array<std::tuple_element_t<I, leaves>> && ...);
  }(std::make_index_sequence<std::tuple_size_v<leaves>>{});
}

/// Every leaf of a tree made a leaf tracer of tape t.
template <class T>
auto trace(std::shared_ptr<tape> const& t, T const& tree) {
  auto f = [&](auto const& a) { return leaf(t, a); };
  return map_tree(f, tree);
}

/// Tracers replaced by their primal arrays (what the function computed).
template <class T>
auto strip(T const& tree) {
  auto f = [](auto const& x) {
    if constexpr (traced_value<decltype(x)>) return x.primal();
    else return x;
  };
  return map_tree(f, tree);
}

/// The gradients of a traced tree's leaves (zeros where nothing depended on a leaf).
template <class T>
auto gradients(T const& traced) {
  auto f = [](auto const& x) {
    using A = typename std::remove_cvref_t<decltype(x)>::array_type;
    std::optional<A> g = x.node()->ct.take();
    if (g) return std::move(*g);
    return filled<A>(x.sharding(), x.shape(), 0);
  };
  return map_tree(f, traced);
}

template <std::size_t I, std::size_t... Argnums>
inline constexpr bool is_argnum = ((I == Argnums) || ...);

/// Argument I as the function receives it: traced when it is differentiated.
template <std::size_t I, std::size_t... Argnums, class Arg>
decltype(auto) wrap(std::shared_ptr<tape> const& t, Arg const& arg) {
  if constexpr (is_argnum<I, Argnums...>) return trace(t, arg);
  else return (arg);
}

/// The function's scalar: its result, or the first of (value, aux) under has_aux.
template <bool HasAux, class O>
auto const& loss_of(O const& out) {
  if constexpr (HasAux) return std::get<0>(out);
  else return out;
}

/// grad's body once the arguments are checked: the forward pass, the backward pass from the
/// scalar result, and the gradients of the arguments Argnums.
template <bool HasAux, bool WantValue, std::size_t... Argnums, class F, class... Args>
auto grad_of_scalar(F const& f, Args const&... args) {
  auto t = std::make_shared<tape>();
  auto const all = std::forward_as_tuple(args...);
  auto wrapped = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::tuple<decltype(wrap<I, Argnums...>(t, std::get<I>(all)))...>(wrap<I, Argnums...>(t, std::get<I>(all))...);
  }(std::index_sequence_for<Args...>{});
  auto out = tessera::detail::apply(f, wrapped);
  auto const& loss = loss_of<HasAux>(out);
  using L = std::remove_cvref_t<decltype(loss)>;
  constexpr bool scalar = [] {
    if constexpr (traced_value<L>) return L::rank == 0;
    else if constexpr (sharded_expression<L>) return operand_traits<L>::rank == 0;  // a constant
    else return false;
  }();
  static_assert(scalar,
                "tessera::grad: the function must return a scalar, a tessera array of rank 0 (jax.grad: Gradient "
                "only defined for scalar-output functions); use tessera::vjp for other outputs");
  if constexpr (!scalar) {
    return std::pair<int, int>{};
  } else {
    if constexpr (traced_value<L>) {
      using A = typename L::array_type;
      static_assert(std::is_floating_point_v<typename A::value_type>,
                    "tessera::grad: the function's result must be float32 or float64 (jax.grad: grad requires "
                    "real-valued outputs)");
      loss.node()->ct.add(filled<A>(loss.sharding(), loss.shape(), 1));
      t->run();
    }
    auto grads = [&] {
      if constexpr (sizeof...(Argnums) == 1) return gradients(std::get<Argnums...>(wrapped));
      else  // braces: in argument order
        return std::tuple<decltype(gradients(std::get<Argnums>(wrapped)))...>{gradients(std::get<Argnums>(wrapped))...};
    }();
    // grad alone never evaluates the value: its last reduction (and all-reduce) does not run.
    auto value = [&] {
      if constexpr (!WantValue) return 0;
      else if constexpr (traced_value<L>) return loss.primal();
      else return tessera::eval(loss);
    }();
    if constexpr (HasAux) return std::make_pair(std::make_pair(value, strip(std::get<1>(out))), std::move(grads));
    else return std::make_pair(value, std::move(grads));
  }
}

// ---- grad inside a shard_map body (seed 004's jax.grad(loss_fn) before pmean) --------------

template <class B>
struct block_vma_type;
template <class T, std::size_t N, class Vma>
struct block_vma_type<local_block<T, N, Vma>> {
  using type = Vma;
};

/// f(leaf of a, leaf of b) for the leaves at the same places of two trees, in a's structure.
template <class F, class A, class B>
auto map_trees(F& f, A const& a, B const& b) {
  if constexpr (!tree_node<A>) {
    return f(a, b);
  } else {
    auto ca = children_of(a);
    auto cb = children_of(b);
    auto mapped = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<decltype(map_trees(f, std::get<I>(ca), std::get<I>(cb)))...>{
          map_trees(f, std::get<I>(ca), std::get<I>(cb))...};
    }(std::make_index_sequence<std::tuple_size_v<decltype(ca)>>{});
    return tessera::detail::apply([](auto&&... m) { return rebuild_node<A>(std::move(m)...); }, std::move(mapped));
  }
}

/// Whether X is a device's block or another xtensor value grad can differentiate inside a
/// shard_map body: static rank, floating elements.
template <class X>
constexpr bool local_leaf_type() {
  using D = std::remove_cvref_t<X>;
  if constexpr (!xt::is_xexpression<D>::value) return false;
  else if constexpr (!has_static_rank_v<D>) return false;
  else return std::is_floating_point_v<typename D::value_type>;
}

/// Whether every leaf of tree T is such a value.
template <class T>
constexpr bool locally_differentiable() {
  using leaves = decltype(tree_leaves(std::declval<T const&>()));
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (local_leaf_type<std::tuple_element_t<I, leaves>>() && ...);
  }(std::make_index_sequence<std::tuple_size_v<leaves>>{});
}

/// The mesh axes (of the running shard_map) a block's type says it varies over; an untracked
/// value counts as varying over every axis but those reduced since (what shard_map assumes).
/// Under no_check_vma every value varies (JAX's check_vma=False: no implicit psum in grad).
template <class B>
axis_mask block_mask() {
  spmd_frame const* f = current_frame;
  if (f == nullptr) return 0;
  if (!f->check_vma) return static_cast<axis_mask>((axis_mask{1} << f->axis_names.size()) - 1);
  constexpr vma_state s = vma_of<std::remove_cvref_t<B>>::value;
  auto const has = [](axis_set const& set, std::string_view name) {
    for (std::size_t i = 0; i < set.size; ++i)
      if (set.names[i].view() == name) return true;
    return false;
  };
  axis_mask m = 0;
  for (std::size_t a = 0; a < f->axis_names.size(); ++a)
    if (has(s.vary, f->axis_names[a]) || (s.unknown && !has(s.except, f->axis_names[a]))) m |= axis_mask{1} << a;
  return m;
}

/// A device's value of a local tracer, as the xt::xtensor grad returns inside a body.
template <class T, std::size_t N>
xt::xtensor<T, N> to_xtensor(local_value<T, N> const& v) {
  xt::xtensor<T, N> out = xt::xtensor<T, N>::from_shape(v.shape);
  std::copy(v.v.begin(), v.v.end(), out.data());
  return out;
}

/// grad's body inside a shard_map body: the Argnums arguments' leaves become local tracers
/// on a tape of this device's own, and the gradients are this device's values (the seed then
/// averages them with pmean).
template <bool HasAux, bool WantValue, std::size_t... Argnums, class F, class... Args>
auto local_grad_of_scalar(F const& f, Args const&... args) {
  local_tape tp;
  local_tape_guard guard(&tp);
  auto const all = std::forward_as_tuple(args...);
  auto trace_leaf = [](auto const& leaf) {
    using D = std::remove_cvref_t<decltype(leaf)>;
    using T = std::remove_cv_t<typename D::value_type>;
    constexpr std::size_t N = static_rank_v<D>;
    local_value<T, N> v = [&] {
      if constexpr (N == 0) {
        return local_value<T, 0>{std::vector<T>(1, static_cast<T>(leaf())), {}};
      } else {
        shape_t<N> sh{};
        for (std::size_t i = 0; i < N; ++i) sh[i] = static_cast<std::size_t>(leaf.shape()[i]);
        local_value<T, N> r = make_value<T>(sh);
        std::copy(leaf.begin(), leaf.end(), r.v.begin());  // row-major iteration, any expression
        return r;
      }
    }();
    return local_tracer<T, N>(local_leaf(std::move(v), block_mask<D>()));
  };
  auto wrapped = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple([&]<std::size_t K>(std::integral_constant<std::size_t, K>) -> decltype(auto) {
      // The other arguments' floating blocks are traced too (their gradients dropped), so
      // that operations mix them with the differentiated ones.
      using A = std::remove_cvref_t<std::tuple_element_t<K, std::tuple<Args...>>>;
      if constexpr (is_argnum<K, Argnums...> || locally_differentiable<A>()) return map_tree(trace_leaf, std::get<K>(all));
      else return std::get<K>(all);
    }(std::integral_constant<std::size_t, I>{})...);
  }(std::index_sequence_for<Args...>{});
  auto out = tessera::detail::apply(f, wrapped);
  auto const& loss = loss_of<HasAux>(out);
  using L = std::remove_cvref_t<decltype(loss)>;
  constexpr bool scalar = [] {
    if constexpr (local_traced<L>) return L::rank == 0;
    else return false;
  }();
  static_assert(scalar,
                "tessera::grad inside a shard_map body: the function must return a scalar computed from its "
                "differentiated arguments with tessera's operations (a rank-0 local tracer; jax.grad: Gradient only "
                "defined for scalar-output functions)");
  if constexpr (!scalar) {
    return std::pair<int, int>{};
  } else {
    using T = typename L::value_type;
    loss.node()->add(loss.node()->vma, local_value<T, 0>{std::vector<T>(1, T(1)), {}});
    tp.run();
    // A gradient has its primal's type: a block's (its vma included), else an xt::xtensor.
    auto gradient_of = [](auto const& primal, auto const& x) {
      using B = std::remove_cvref_t<decltype(primal)>;
      auto const& n = x.node();
      auto g = n->has_cotangent() ? n->take() : make_value<typename std::remove_cvref_t<decltype(x)>::value_type>(n->value.shape);
      if constexpr (is_local_block<B>::value) return own_as_block<typename block_vma_type<B>::type>(std::move(g));
      else return to_xtensor(g);
    };
    auto grads = [&] {
      if constexpr (sizeof...(Argnums) == 1)
        return map_trees(gradient_of, std::get<Argnums...>(all), std::get<Argnums...>(wrapped));
      else
        return std::tuple<decltype(map_trees(gradient_of, std::get<Argnums>(all), std::get<Argnums>(wrapped)))...>{
            map_trees(gradient_of, std::get<Argnums>(all), std::get<Argnums>(wrapped))...};
    }();
    auto value = [&] {
      if constexpr (!WantValue) return 0;
      else return loss.node()->value.v[0];
    }();
    if constexpr (HasAux) {
      auto plain = [](auto const& x) {
        if constexpr (local_traced<decltype(x)>) return to_xtensor(x.node()->value);
        else return x;
      };
      return std::make_pair(std::make_pair(value, map_tree(plain, std::get<1>(out))), std::move(grads));
    } else {
      return std::make_pair(value, std::move(grads));
    }
  }
}

/// The arguments checked, then grad_of_scalar (a tree for one argnum, a tuple of trees for several).
template <bool HasAux, bool WantValue, std::size_t... Argnums, class F, class... Args>
auto value_and_grad_call(F const& f, Args const&... args) {
  constexpr bool in_range = ((Argnums < sizeof...(Args)) && ...);
  static_assert(in_range,
                "tessera::grad: an argnum is not less than the number of arguments the function is called with "
                "(jax.grad: argnums out of bounds)");
  if constexpr (!in_range) {
    return std::pair<int, int>{};  // after our error, nothing more to report
  } else {
    using arg_types = std::tuple<Args...>;
    if constexpr ((locally_differentiable<std::tuple_element_t<Argnums, arg_types>>() && ...)) {
      return local_grad_of_scalar<HasAux, WantValue, Argnums...>(f, args...);
    } else {
      constexpr bool real = (differentiable<std::tuple_element_t<Argnums, arg_types>>() && ...);
      static_assert(real,
                    "tessera::grad: a differentiated argument holds a leaf that is not an array of float32 or float64; "
                    "grad requires real-valued inputs, as jax.grad does (leave the argument out of argnums, or convert "
                    "it with astype)");
      if constexpr (!real) {
        return std::pair<int, int>{};
      } else {
        return grad_of_scalar<HasAux, WantValue, Argnums...>(f, args...);
      }
    }
  }
}

template <std::size_t... Argnums>
struct argnums_or_first {
  template <bool HasAux, bool WantValue, class F, class... Args>
  static auto call(F const& f, Args const&... args) {
    if constexpr (sizeof...(Argnums) == 0) return value_and_grad_call<HasAux, WantValue, 0>(f, args...);
    else return value_and_grad_call<HasAux, WantValue, Argnums...>(f, args...);
  }
};

}  // namespace detail::ad

namespace detail::ad {

/// What a grad function gives (jax.grad, its has_aux form, jax.value_and_grad and its has_aux form).
enum class grad_result { gradients, gradients_and_aux, value_and_gradients, value_aux_and_gradients };

/// Type names joined as a plan's result line shows them: `float32[32,1]`, or a list in parentheses.
inline std::string join_leaf_types(std::vector<std::string> const& types) {
  std::string out;
  for (auto const& t : types) out += (out.empty() ? "" : ", ") + t;
  return types.size() == 1 ? out : "(" + out + ")";
}
/// Appends the type name of each leaf of t, in order: one call per leaf, out of line per leaf
/// type, and no copy of the leaves (a tree of 26 leaves wrote all of it out 26 times).
template <class T>
[[gnu::noinline]] void push_leaf_types(std::vector<std::string>& out, T const& t) {
  if constexpr (!tree_node<T>) out.push_back(type_of(t));
  else tessera::detail::apply([&](auto const&... c) { (push_leaf_types(out, c), ...); }, children_of(t));
}
/// The type names of a tree's leaves, for a plan's result line.
template <class T>
std::string leaf_types(T const& tree) {
  std::vector<std::string> types;
  push_leaf_types(types, tree);
  return join_leaf_types(types);
}

/// Sets the planning sink for its lifetime.
class planning_guard {
 public:
  explicit planning_guard(std::vector<collective_event>* sink) : previous_(planning) { planning = sink; }
  ~planning_guard() { planning = previous_; }
  planning_guard(planning_guard const&) = delete;
  planning_guard& operator=(planning_guard const&) = delete;

 private:
  std::vector<collective_event>* previous_;
};

}  // namespace detail::ad

/// The function jax.grad or jax.value_and_grad returns: call it with the arguments; explain()
/// of it lists the collectives a call would run (forward and backward), without running them.
template <detail::ad::grad_result R, class F, std::size_t... Argnums>
class grad_function {
  static constexpr bool has_aux = R == detail::ad::grad_result::gradients_and_aux ||
                                  R == detail::ad::grad_result::value_aux_and_gradients;
  static constexpr bool wants_value = R == detail::ad::grad_result::value_and_gradients ||
                                      R == detail::ad::grad_result::value_aux_and_gradients;

 public:
  explicit grad_function(F f) : f_(std::move(f)) {}

  /// The gradients (and the value and aux, as the JAX function it stands for gives them).
  template <class... Args>
  auto operator()(Args const&... args) const {
    auto r = detail::ad::argnums_or_first<Argnums...>::template call<has_aux, wants_value>(f_, args...);
    if constexpr (R == detail::ad::grad_result::gradients) return std::move(r.second);
    else if constexpr (R == detail::ad::grad_result::gradients_and_aux)
      return std::make_pair(std::move(r.second), std::move(r.first.second));
    else return r;
  }

  /// The collectives of a call with these arguments, in the order they would run: the function
  /// is called with tracers whose values are only planned, as jax.jit(jax.grad(f)).lower(...)
  /// shows the program's collectives; the function must not read its traced values.
  template <class... Args>
  communication_plan plan(Args const&... args) const {
    communication_plan p;
    detail::ad::planning_guard guard(&p.collectives);
    auto r = detail::ad::argnums_or_first<Argnums...>::template call<has_aux, false>(f_, args...);
    p.result = detail::ad::leaf_types(r.second);
    return p;
  }

 private:
  F f_;
};

/// explain(jax.grad(f), args...): the collectives grad(f)(args...) would run, before it runs;
/// a collective_counter around the call confirms them.
template <detail::ad::grad_result R, class F, std::size_t... Argnums, class... Args>
communication_plan explain(grad_function<R, F, Argnums...> const& g, Args const&... args) {
  return g.plan(args...);
}

/// jax.grad(f, argnums=(Argnums...)): the gradient of scalar f with respect to the arguments
/// Argnums (the first when none is given); one tree for one argnum, a std::tuple for several.
template <std::size_t... Argnums, class F>
auto grad(F f) {
  return grad_function<detail::ad::grad_result::gradients, F, Argnums...>(std::move(f));
}

/// jax.grad(f, argnums, has_aux=True): f returns (value, aux); gives (gradients, aux).
template <std::size_t... Argnums, class F>
auto grad(F f, has_aux_t) {
  return grad_function<detail::ad::grad_result::gradients_and_aux, F, Argnums...>(std::move(f));
}

/// jax.value_and_grad(f, argnums): gives (f's value, gradients).
template <std::size_t... Argnums, class F>
auto value_and_grad(F f) {
  return grad_function<detail::ad::grad_result::value_and_gradients, F, Argnums...>(std::move(f));
}

/// jax.value_and_grad(f, argnums, has_aux=True): gives ((value, aux), gradients).
template <std::size_t... Argnums, class F>
auto value_and_grad(F f, has_aux_t) {
  return grad_function<detail::ad::grad_result::value_aux_and_gradients, F, Argnums...>(std::move(f));
}

/// jax.vjp(f, *primals): gives (f(*primals), vjp_fn); vjp_fn(cotangent) gives a std::tuple of
/// the primals' cotangents (trees shaped like them), and can be called again.
template <class F, class... Args>
auto vjp(F const& f, Args const&... primals) {
  static_assert((detail::ad::differentiable<Args>() && ...),
                "tessera::vjp: every leaf of a primal must be an array of float32 or float64");
  auto t = std::make_shared<detail::ad::tape>();
  auto traced = std::make_tuple(detail::ad::trace(t, primals)...);
  auto out = tessera::detail::apply(f, traced);
  auto value = detail::ad::strip(out);
  auto fn = [t, traced, out](auto const& cotangent) {
    t->reset();
    auto seed = [](auto const& y, auto const& c) {
      if constexpr (traced_value<decltype(y)>) {
        using A = typename std::remove_cvref_t<decltype(y)>::array_type;
        if (c.shape() != y.shape())
          throw std::invalid_argument("tessera::vjp: the cotangent has shape " + detail::shape_string(c.shape()) +
                                      ", the output " + detail::shape_string(y.shape()));
        y.node()->ct.add(detail::ad::to_layout<A>(c));
      }
    };
    detail::ad::for_each_pair(seed, out, cotangent);
    t->run();
    return tessera::detail::apply(
        [](auto const&... tr) {
          return std::tuple<decltype(detail::ad::gradients(tr))...>{detail::ad::gradients(tr)...};
        },
        traced);
  };
  return std::make_pair(std::move(value), std::move(fn));
}

/// jax.lax.stop_gradient(x): x's value, not differentiated (a tracer's primal array).
template <class X>
auto stop_gradient(X const& x) {
  if constexpr (traced_value<X>) return x.primal();
  else return x;
}

}  // namespace tessera
