#pragma once
// Sharded expressions: `a + b`, `sin(x)`, `sum<0>(x)` build a tree of these
// types, and the sharding of every node is computed when the program is
// compiled (core/sharding_rules.hpp): `spec` is a constexpr member. A conflict
// on Explicit axes fails to compile in our words; on Auto axes the operand
// that loses is resharded before the pass. Nodes hold their operands by value
// (an array is a shared handle to immutable blocks), so an expression never
// dangles: returning `a + b` from a function is safe.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/shape.hpp"
#include "tessera/array/reshard_events.hpp"
#include "tessera/array/sum_partials.hpp"
#include "tessera/core/communication_plan.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/expr/cursor.hpp"
#include "tessera/expr/ops.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera {

/// Base of every expression node type (what tessera::sharded_expression recognises).
struct expression_tag {};

namespace detail {
template <class E>
struct is_named_array : std::false_type {};
template <class T, std::size_t N, class M, class S>
struct is_named_array<array<T, N, named_sharding<M, S>>> : std::true_type {};
}  // namespace detail

/// A tessera expression node (the result of an operation on arrays, not yet evaluated).
template <class E>
concept expression_node = std::is_base_of_v<expression_tag, std::remove_cvref_t<E>>;

/// Something with a sharding known at compile time: an array on a mesh, or an expression of them.
template <class E>
concept sharded_expression = detail::is_named_array<std::remove_cvref_t<E>>::value || expression_node<E>;

/// A number inside an expression; weakly typed, as a Python scalar is in JAX.
template <class S>
struct scalar_operand {
  using value_type = S;
  static constexpr std::size_t rank = 0;
  S value;
};

namespace detail {

template <class S>
struct is_scalar_operand : std::false_type {};
template <class S>
struct is_scalar_operand<scalar_operand<S>> : std::true_type {};

/// What a node stores for an operand: numbers wrapped, everything else by value.
template <class X>
using stored_t = std::conditional_t<std::is_arithmetic_v<std::remove_cvref_t<X>>,
                                    scalar_operand<std::remove_cvref_t<X>>, std::remove_cvref_t<X>>;

template <class X>
stored_t<X> store(X&& x) {
  if constexpr (std::is_arithmetic_v<std::remove_cvref_t<X>>) return stored_t<X>{x};
  else return std::forward<X>(x);
}

/// A spec's entries for dimensions 0..N-1 (None past its end), built without mutation: GCC 12
/// rejects a static constexpr member whose initializer assigns when it is first read inside
/// another constant evaluation.
template <class S, std::size_t... I>
constexpr std::array<dim_spec, sizeof...(I)> padded_spec(std::index_sequence<I...>) {
  return {S::dim(I)...};
}

/// Rank, mesh and spec of a stored operand.
template <class E, class = void>
struct operand_traits;
template <class T, std::size_t N, class M, class S>
struct operand_traits<array<T, N, named_sharding<M, S>>> {
  using value_type = T;
  using mesh_type = M;
  static constexpr std::size_t rank = N;
  static constexpr std::array<dim_spec, N> spec = padded_spec<S>(std::make_index_sequence<N>{});
  static constexpr dim_spec unreduced{};
};
template <class S>
struct operand_traits<scalar_operand<S>> {
  using value_type = S;
  using mesh_type = void;
  static constexpr std::size_t rank = 0;
  static constexpr std::array<dim_spec, 0> spec{};
  static constexpr dim_spec unreduced{};
};
template <class E>
struct operand_traits<E, std::enable_if_t<expression_node<E>>> {
  using value_type = typename E::value_type;
  using mesh_type = typename E::mesh_type;
  static constexpr std::size_t rank = E::rank;
  static constexpr std::array<dim_spec, E::rank> spec = E::spec;
  /// The mesh axes its values are still partial sums over (none for most nodes).
  static constexpr dim_spec unreduced = [] {
    if constexpr (requires { E::unreduced; }) return E::unreduced;
    else return dim_spec{};
  }();
};

/// What an operation returns when one of its compile-time checks has failed: a node of the
/// right element type, rank and mesh (replicated), so that `tessera::array r = a + b;` and
/// later operations raise no errors after ours and the first error is the only one printed.
template <class T, std::size_t N, class Mesh>
struct failed_expression : expression_tag {
  using value_type = T;
  using mesh_type = Mesh;
  using sharding_type = named_sharding<Mesh, P<>>;
  static constexpr std::size_t rank = N;
  static constexpr std::array<dim_spec, N> spec{};
  /// Never runs: a program holding a failed_expression does not compile.
  array<T, N, sharding_type> evaluate() const { throw std::logic_error("tessera: a failed expression"); }
  /// As an array's, so that code using the result adds no errors of its own.
  std::size_t size() const { return 0; }
  /// As an array's.
  std::array<std::size_t, N> shape() const { return {}; }
};

template <class E>
struct is_failed_expression : std::false_type {};
template <class T, std::size_t N, class Mesh>
struct is_failed_expression<failed_expression<T, N, Mesh>> : std::true_type {};

/// Whether an operand holds partial sums (JAX's `unreduced`).
template <class E>
inline constexpr bool is_partial = !operand_traits<E>::unreduced.is_none();

/// The first mesh among the operands (numbers have none).
template <class... E>
struct first_mesh {
  using type = void;
};
template <class E, class... Rest>
struct first_mesh<E, Rest...> {
  using type = std::conditional_t<std::is_void_v<typename operand_traits<E>::mesh_type>,
                                  typename first_mesh<Rest...>::type, typename operand_traits<E>::mesh_type>;
};
template <class... E>
using first_mesh_t = typename first_mesh<E...>::type;

/// A spec entry rebuilt the way P<"x"> builds one, so that equal entries are equal template
/// arguments to GCC 12 whatever constant evaluation computed them (it crashes otherwise).
constexpr dim_spec canonical(dim_spec const& d) {
  if (d.count() == 0) return dim_spec(none);
  dim_spec c(d.axis(0));
  for (std::size_t i = 1; i < d.count(); ++i) c.push(d.axis(i));
  return c;
}

template <std::size_t R, std::size_t... I>
constexpr std::array<dim_spec, R> canonical_spec(std::array<dim_spec, R> const& s, std::index_sequence<I...>) {
  return {canonical(s[I])...};
}
/// Every entry of a spec canonical (for specs used as template arguments).
template <std::size_t R>
constexpr std::array<dim_spec, R> canonical_spec(std::array<dim_spec, R> const& s) {
  return canonical_spec(s, std::make_index_sequence<R>{});
}

/// P<Spec[0], Spec[1], ...> from a constexpr array.
template <auto Spec, class Seq = std::make_index_sequence<Spec.size()>>
struct spec_type;
template <auto Spec, std::size_t... I>
struct spec_type<Spec, std::index_sequence<I...>> {
  using type = P<canonical(Spec[I])...>;
};
template <auto Spec>
using spec_type_t = typename spec_type<Spec>::type;

/// Every operand of an expression on one mesh: the run-time half of the check (same axes,
/// but also the same sizes and devices).
template <class Mesh>
void check_same_mesh(Mesh const& a, Mesh const& b, char const* what) {
  if (!(a == b)) {
    std::ostringstream os;
    auto runtime = [](Mesh const& m) {
      return m.runtime_id() == 0 ? std::string() : " of runtime " + std::to_string(m.runtime_id());
    };
    os << "tessera::" << what << ": the operands are on different meshes, " << a << " over devices "
       << join_ints(a.device_ids()) << runtime(a) << " and " << b << " over devices " << join_ints(b.device_ids())
       << runtime(b) << "; device_put one onto the other's mesh";
    throw std::invalid_argument(os.str());
  }
}

/// Materialised results (reductions, resharded operands): computed once, on first use, and
/// shared by copies of the node. Arrays are immutable, so a result never goes stale.
template <class A>
struct result_cache {
  std::once_flag once;
  std::optional<A> value;
};

/// The array an operand evaluates to: its own element type, rank, mesh and propagated spec.
template <class E>
using array_of_t = array<typename operand_traits<E>::value_type, operand_traits<E>::rank,
                         named_sharding<typename operand_traits<E>::mesh_type,
                                        spec_type_t<operand_traits<E>::spec>>>;

/// Declared here, defined in expr/evaluate.hpp: an expression evaluated into an array with its propagated sharding.
template <class E>
auto evaluate(E const& e);
/// Declared here, defined in expr/evaluate.hpp: every device's partial values of a partial node.
template <class E>
auto evaluate_partial(E const& e);

/// The mesh of a stored operand (nullptr for numbers).
template <class E>
auto const* mesh_of(E const& e) {
  if constexpr (is_named_array<E>::value) return &e.sharding().mesh();
  else if constexpr (is_scalar_operand<E>::value) return static_cast<void const*>(nullptr);
  else return &e.mesh();
}

template <class E>
auto shape_of(E const& e) {
  if constexpr (is_scalar_operand<E>::value) return shape_t<0>{};
  else return e.shape();
}

template <class E>
void prepare(E const& e) {
  if constexpr (expression_node<E>) e.prepare();
}

/// Appends the collectives evaluating an operand runs (none for arrays and numbers).
template <class E>
void plan_of(E const& e, std::vector<collective_event>& out) {
  if constexpr (expression_node<E>) e.plan(out);
}
/// The same for an operand read as partial sums: its own sum is left out.
template <class E>
void partial_plan_of(E const& e, std::vector<collective_event>& out) {
  if constexpr (is_partial<E>) e.partial_plan(out);
  else plan_of(e, out);
}

/// The cursor of a stored operand for the device at `pos`, whose result block is `rb` of a
/// result of global shape `rs` (Q = max(rank, 1) dimensions).
template <std::size_t Q, class E>
auto cursor_of(E const& e, std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) {
  if constexpr (is_scalar_operand<E>::value) {
    return scalar_cursor<typename E::value_type>{e.value};
  } else if constexpr (is_named_array<E>::value) {
    constexpr std::size_t N = E::rank;
    std::array<std::size_t, N> perm{};
    for (std::size_t i = 0; i < N; ++i) perm[i] = i;
    return make_leaf_cursor<typename E::value_type, Q, N>(e.block_data(pos), e.sharding().block(pos, e.shape()),
                                                          e.shape(), perm, rb, rs);
  } else {
    return e.template cursor<Q>(pos, rb, rs);
  }
}

/// Whether an operand's spec fits the result's: every sharded dimension sharded alike.
template <std::size_t K, std::size_t R>
constexpr bool fits(std::array<dim_spec, K> const& s, std::array<dim_spec, R> const& result) {
  for (std::size_t j = 0; j < K; ++j)
    if (!s[j].is_none() && !(s[j] == result[j + R - K])) return false;
  return true;
}

/// Whether an operand's spec shards a dimension over one of the axes in `u`.
template <class E>
constexpr bool spec_uses_any(dim_spec const& u) {
  for (auto const& d : operand_traits<E>::spec)
    for (std::size_t i = 0; i < u.count(); ++i)
      if (d.uses(u.axis(i))) return true;
  return false;
}

/// The partial-sum axes an element-wise node keeps: a linear operation on partial sums is
/// itself a partial sum (p1 + p2, -p, p * c, p / c with c whole on every device it meets),
/// so the sum waits for the result. Anything else sums its operands first (none).
template <class Op, class... Args>
constexpr dim_spec elementwise_unreduced() {
  constexpr std::size_t partial = (std::size_t{is_partial<Args>} + ... + 0);
  if constexpr (partial == 0) {
    return {};
  } else {
    dim_spec u{};
    bool same = true;
    auto pick = [&](dim_spec const& x) {
      if (x.is_none()) return;
      if (u.is_none()) u = x;
      else same = same && u == x;
    };
    (pick(operand_traits<Args>::unreduced), ...);
    if (!same) return {};
    constexpr std::size_t arrays = (std::size_t{!is_scalar_operand<Args>::value} + ... + 0);
    // Non-partial operands must not be sharded over the partial axes: the device's partial
    // value covers the whole block there, and their slice would cut it.
    bool const others_whole = ((is_partial<Args> || !spec_uses_any<Args>(u)) && ...);
    if constexpr (std::is_same_v<Op, op::add> || std::is_same_v<Op, op::subtract>) {
      return partial == arrays && partial == sizeof...(Args) ? u : dim_spec{};
    } else if constexpr (std::is_same_v<Op, op::negate>) {
      return u;
    } else if constexpr (std::is_same_v<Op, op::multiply>) {
      return partial == 1 && others_whole ? u : dim_spec{};
    } else if constexpr (std::is_same_v<Op, op::divide>) {
      constexpr bool first_partial = is_partial<std::tuple_element_t<0, std::tuple<Args...>>>;
      return partial == 1 && first_partial && others_whole ? u : dim_spec{};
    } else {
      return {};
    }
  }
}

}  // namespace detail

/// An operand moved to another sharding before the pass (an Auto-axis conflict, or reshard()).
/// jax.lax.with_sharding_constraint / jax.sharding.reshard of an intermediate.
template <class A, auto Target>
class resharded : public expression_tag {
 public:
  using value_type = typename detail::operand_traits<A>::value_type;
  using mesh_type = typename detail::operand_traits<A>::mesh_type;
  static constexpr std::size_t rank = detail::operand_traits<A>::rank;
  static constexpr std::array<dim_spec, rank> spec = Target;
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<Target>>;
  using array_type = array<value_type, rank, sharding_type>;

  explicit resharded(A a) : a_(std::move(a)), cache_(std::make_shared<detail::result_cache<array_type>>()) {}

  shape_t<rank> shape() const { return detail::shape_of(a_); }
  mesh_type const& mesh() const { return *detail::mesh_of(a_); }
  /// The operand before the move.
  A const& operand() const { return a_; }

  /// Evaluates the node into an array (its cached move).
  auto evaluate() const { return detail::evaluate(*this); }
  /// Evaluates the operand and moves it (once; copies of this node share the result).
  void prepare() const;
  array_type const& result() const {
    prepare();
    return *cache_->value;
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(*cache_->value, pos, rb, rs);
  }
  /// The operand's collectives, then the move's: a slice, all-gather, all-to-all, or for
  /// partial sums a reduce-scatter or all-reduce.
  void plan(std::vector<collective_event>& out) const {
    if (cache_->value) return;  // already moved: nothing left to run
    detail::partial_plan_of(a_, out);
    using from = named_sharding<mesh_type, detail::spec_type_t<detail::operand_traits<A>::spec>>;
    auto const e = detail::reshard_events<value_type, rank>(shape(), from(mesh()), detail::operand_traits<A>::unreduced,
                                                            sharding_type(mesh()));
    out.insert(out.end(), e.begin(), e.end());
  }

 private:
  A a_;
  std::shared_ptr<detail::result_cache<array_type>> cache_;
};

namespace detail {

/// An element-wise node's operand as plain values, for broadcast_operands: its rank, where its
/// sizes start in the list of all of them, and whether it is a number.
struct broadcast_operand {
  std::size_t rank = 0, offset = 0;
  bool number = false;
};

/// NumPy broadcasting of an element-wise node's operands (sizes `dims`, whether each dimension
/// is sharded `sharded`) into `out`, the node's shape, checked as JAX checks when it traces:
/// sizes that differ and are not 1, a result too large to count, a size-1 dimension that
/// broadcasts but is sharded. `seen` is scratch of out's length, all false.
inline void broadcast_operands(std::span<broadcast_operand const> ops, std::span<std::size_t const> dims,
                               std::span<unsigned char const> sharded, std::span<std::size_t> out,
                               std::span<bool> seen, std::size_t element_bytes) {
  std::size_t const rank = out.size();
  auto shape_at = [&](broadcast_operand const& o) { return dims.subspan(o.offset, o.rank); };
  auto operand_shapes = [&] {  // "(4, 1) and (1, 8)", for messages
    std::string shapes;
    for (auto const& o : ops)
      if (!o.number) shapes += (shapes.empty() ? "" : " and ") + shape_string(shape_at(o));
    return shapes;
  };
  std::fill(out.begin(), out.end(), std::size_t{1});
  for (auto const& o : ops)
    for (std::size_t j = 0; j < o.rank; ++j) {
      std::size_t const d = j + rank - o.rank, size = dims[o.offset + j];
      if (size == 1) continue;
      if (seen[d] && out[d] != size)
        throw std::invalid_argument("tessera: operands of shapes " + operand_shapes() +
                                    " do not broadcast together: result dimension " + std::to_string(d) +
                                    " would have sizes " + std::to_string(out[d]) + " and " + std::to_string(size));
      out[d] = size;
      seen[d] = true;
    }
  // Small operands can broadcast to a result too large to count; refused before any block is sized.
  if (std::string const e = size_error(out, element_bytes); !e.empty())
    throw std::length_error("tessera: operands of shapes " + operand_shapes() + " broadcast to shape " +
                            shape_string(out) + ", which " + e);
  // A size-1 dimension that broadcasts must be whole on every device.
  for (auto const& o : ops)
    for (std::size_t j = 0; j < o.rank; ++j)
      if (dims[o.offset + j] == 1 && out[j + rank - o.rank] != 1 && sharded[o.offset + j])
        throw std::invalid_argument("tessera: dimension " + std::to_string(j) + " of an operand of shape " +
                                    shape_string(shape_at(o)) +
                                    " has size 1 and broadcasts, but it is sharded over mesh axes; replicate it "
                                    "(reshard it to None in that dimension)");
}

/// Checks that an element-wise node's operand is on the node's mesh (numbers are on every mesh).
template <class M, class X>
void check_operand_mesh(M const& m, X const& x) {
  if constexpr (!is_scalar_operand<X>::value) check_same_mesh(m, *mesh_of(x), "expression");
}

/// Writes an operand's sizes `xs` and whether each dimension is sharded (its spec `s`) at `at` in
/// dims and sharded, and its entry for broadcast_operands into op.
inline void describe_plain_operand(std::span<dim_spec const> s, std::size_t const* xs, bool number,
                                   broadcast_operand& op, std::size_t* dims, unsigned char* sharded,
                                   std::size_t& at) {
  op = {s.size(), at, number};
  for (std::size_t j = 0; j < s.size(); ++j) {
    dims[at + j] = xs[j];
    sharded[at + j] = !s[j].is_none();
  }
  at += s.size();
}

/// describe_plain_operand for operand x (compiled once per operand type, shared by every node
/// that has an operand of that type).
template <class X>
void describe_operand(X const& x, broadcast_operand& op, std::size_t* dims, unsigned char* sharded, std::size_t& at) {
  static constexpr auto s = operand_traits<X>::spec;
  auto const xs = shape_of(x);
  describe_plain_operand(s, xs.data(), is_scalar_operand<X>::value, op, dims, sharded, at);
}

}  // namespace detail

/// An element-wise operation over operands broadcast NumPy-style (jnp.add, jnp.sin, jnp.where, ...):
/// Op computes in C and gives R.
template <class Op, class C, class R, class... Args>
class elementwise : public expression_tag {
 public:
  using value_type = R;
  using mesh_type = detail::first_mesh_t<Args...>;
  static constexpr std::size_t rank = std::max({detail::operand_traits<Args>::rank...});
  static constexpr std::array<dim_spec, rank> spec = detail::canonical_spec([] {  // canonical: GCC 12, see padded_spec
    std::array<dim_spec, rank> s{};
    auto merge = [&](auto const& o) {
      for (std::size_t j = 0; j < o.size(); ++j)
        if (!o[j].is_none()) s[j + rank - o.size()] = o[j];
    };
    (merge(detail::operand_traits<Args>::spec), ...);
    return s;
  }());
  static_assert((detail::fits(detail::operand_traits<Args>::spec, spec) && ...),
                "tessera: internal: the operands of an element-wise node must be resharded to fit it first");
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;
  using array_type = array<value_type, rank, sharding_type>;
  /// The mesh axes the values are still partial sums over: a linear operation keeps its
  /// operands' partial sums (JAX's `unreduced`), summed once, when the result is used.
  /// The first operand that is not a number: the node's mesh is its mesh (found now, so that
  /// mesh() is one call rather than a visit of every operand, in unoptimised builds too).
  static constexpr std::size_t mesh_operand = [] {
    constexpr bool number[] = {detail::is_scalar_operand<Args>::value...};
    std::size_t i = 0;
    while (number[i]) ++i;
    return i;
  }();
  static constexpr dim_spec unreduced = detail::canonical(detail::elementwise_unreduced<Op, Args...>());
  static constexpr bool partial_node = !unreduced.is_none();

  /// Checks the meshes and broadcasts the shapes now, as JAX does when it traces.
  explicit elementwise(Args... args) : args_(std::move(args)...) {
    if constexpr (partial_node) cache_ = std::make_shared<partial_cache>();
    // The operands' shapes and sharded dimensions as plain values, checked and broadcast by
    // code compiled once rather than once per node type (issue 14); each operand is described
    // by a function of its own type, shared by every node that has an operand of that type.
    constexpr std::size_t dims_in_all = (detail::operand_traits<Args>::rank + ... + 0);
    std::array<std::size_t, dims_in_all> dims{};
    std::array<unsigned char, dims_in_all> sharded{};
    std::array<detail::broadcast_operand, sizeof...(Args)> ops{};
    mesh_type const& m = mesh();
    std::size_t at = 0, i = 0;
    tessera::detail::apply(
        [&](auto const&... a) {
          (detail::check_operand_mesh(m, a), ...);
          (detail::describe_operand(a, ops[i++], dims.data(), sharded.data(), at), ...);
        },
        args_);
    std::array<bool, rank> seen{};
    detail::broadcast_operands(ops, dims, sharded, shape_, seen, sizeof(value_type));
  }

  /// x.shape
  shape_t<rank> const& shape() const { return shape_; }
  /// The mesh of the operands.
  mesh_type const& mesh() const { return *detail::mesh_of(std::get<mesh_operand>(args_)); }
  /// The operands.
  std::tuple<Args...> const& operands() const { return args_; }
  /// The collectives evaluating the operands runs (and the sum of a partial result).
  void plan(std::vector<collective_event>& out) const {
    if constexpr (partial_node) {
      if (cache_->reduced) return;  // already summed: nothing left to run
      partial_plan(out);
      sharding_type const s(mesh());
      auto const e = detail::reshard_events<value_type, rank>(shape_, s, unreduced, s);
      out.insert(out.end(), e.begin(), e.end());
    } else {
      tessera::detail::apply([&](auto const&... a) { (detail::plan_of(a, out), ...); }, args_);
    }
  }
  /// The operands' collectives, partial operands left unsummed.
  void partial_plan(std::vector<collective_event>& out) const {
    if constexpr (partial_node)
      if (cache_->partial) return;
    tessera::detail::apply([&](auto const&... a) { (detail::partial_plan_of(a, out), ...); }, args_);
  }

  /// Evaluates the node into an array (one fused pass per device).
  auto evaluate() const { return detail::evaluate(*this); }
  void prepare() const {
    if constexpr (partial_node) {
      // Inside the once: a node already summed looks nothing up again.
      detail::call_once(cache_->reduced_once, [&] {
        detail::summing_partials(mesh(), [&] {
          partial();
          cache_->reduced.emplace(
              detail::sum_partials(*cache_->partial, unreduced, sharding_type(mesh()), detail::reduce_op::sum));
        });
      });
    } else {
      tessera::detail::apply([](auto const&... a) { (detail::prepare(a), ...); }, args_);
    }
  }
  /// The summed result of a partial node (computed once; copies share it).
  array_type const& result() const
    requires partial_node
  {
    prepare();
    return *cache_->reduced;
  }
  /// Every device's partial values: one fused pass over the operands' partial values.
  array_type const& partial() const
    requires partial_node
  {
    tessera::detail::apply(
        [](auto const&... a) {
          auto one = [](auto const& x) {
            if constexpr (detail::is_partial<std::remove_cvref_t<decltype(x)>>) x.partial();
            else detail::prepare(x);
          };
          (one(a), ...);
        },
        args_);
    detail::call_once(cache_->partial_once, [&] { cache_->partial.emplace(detail::evaluate_partial(*this)); });
    return *cache_->partial;
  }
  template <std::size_t Q>
  auto partial_cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const
    requires partial_node
  {
    return tessera::detail::apply(
        [&](auto const&... a) {
          auto one = [&](auto const& x) {
            if constexpr (detail::is_partial<std::remove_cvref_t<decltype(x)>>) return x.template partial_cursor<Q>(pos, rb, rs);
            else return detail::cursor_of<Q>(x, pos, rb, rs);
          };
          return detail::map_cursor<Op, C, R, decltype(one(a))...>{{one(a)...}};
        },
        args_);
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    if constexpr (partial_node) return detail::cursor_of<Q>(*cache_->reduced, pos, rb, rs);
    else return tessera::detail::apply(
        [&](auto const&... a) {
          return detail::map_cursor<Op, C, R, decltype(detail::cursor_of<Q>(a, pos, rb, rs))...>{
              {detail::cursor_of<Q>(a, pos, rb, rs)...}};
        },
        args_);
  }

 private:
  struct partial_cache {
    std::once_flag partial_once, reduced_once;
    std::optional<array_type> partial, reduced;
  };
  std::tuple<Args...> args_;
  shape_t<rank> shape_{};
  std::shared_ptr<partial_cache> cache_;  // partial nodes only
};

/// A transpose (jnp.transpose(x, axes)): result dimension i is the operand's Perm[i]. Free on an
/// array (the strides are permuted); an expression is evaluated first.
template <class A, std::size_t... Perm>
class transposed : public expression_tag {
 public:
  using value_type = typename detail::operand_traits<A>::value_type;
  using mesh_type = typename detail::operand_traits<A>::mesh_type;
  static constexpr std::size_t rank = sizeof...(Perm);
  static constexpr std::array<std::size_t, rank> perm{Perm...};
  static constexpr std::array<dim_spec, rank> spec = detail::permute_spec(detail::operand_traits<A>::spec, perm);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;

  explicit transposed(A a) : a_(std::move(a)) {
    if constexpr (!detail::is_named_array<A>::value) cache_ = std::make_shared<cache_type>();
  }
  shape_t<rank> shape() const {
    auto const s = detail::shape_of(a_);
    shape_t<rank> out{};
    for (std::size_t i = 0; i < rank; ++i) out[i] = s[perm[i]];
    return out;
  }
  mesh_type const& mesh() const { return *detail::mesh_of(a_); }
  /// Evaluates the node into an array (one fused pass per device).
  auto evaluate() const { return detail::evaluate(*this); }
  /// The collectives evaluating the operand runs (the transpose itself is local).
  void plan(std::vector<collective_event>& out) const {
    if constexpr (!detail::is_named_array<A>::value)
      if (cache_->value) return;
    detail::plan_of(a_, out);
  }
  void prepare() const {
    if constexpr (!detail::is_named_array<A>::value) {
      detail::prepare(a_);
      detail::call_once(cache_->once, [&] { cache_->value.emplace(detail::evaluate(a_)); });
    }
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    auto const& x = source();
    return detail::make_leaf_cursor<value_type, Q, rank>(x.block_data(pos), x.sharding().block(pos, x.shape()),
                                                         x.shape(), perm, rb, rs);
  }

 private:
  auto const& source() const {
    if constexpr (detail::is_named_array<A>::value) return a_;
    else return *cache_->value;
  }
  using cache_type =
      std::conditional_t<detail::is_named_array<A>::value, int, detail::result_cache<detail::array_of_t<A>>>;
  A a_;
  std::shared_ptr<cache_type> cache_;
};

}  // namespace tessera
