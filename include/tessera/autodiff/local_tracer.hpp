#pragma once
// What a shard_map body works on when grad, value_and_grad or vjp differentiates through the
// shard_map (autodiff/shard_map_grad.hpp): a local_tracer, one device's block recorded on that
// device's own tape. The body runs once per device as usual; each device records its own
// program, and the backward pass runs every device's tape in reverse, in a second shard_map,
// where the collectives' transposes are collectives again (JAX's rules):
//   psum -> a copy of the cotangent (pbroadcast); all_gather -> this device's slice;
//   psum_scatter -> all_gather; all_to_all(split, concat) -> all_to_all(concat, split);
//   ppermute(perm) -> ppermute(inverse perm); pmax, pmin -> not differentiable (compile error).
//
// Which mesh axes a value varies over (JAX's vma) is tracked at run time: a device-invariant
// value used with a varying one is implicitly broadcast (JAX's pvary), and the transpose of
// that broadcast is a psum over the axes it added. That psum is where the gradient of a
// replicated parameter becomes the sum over the devices, exactly once.
//
// The body differentiated must compute with tessera's functions and operators (`tessera::sin`,
// `tessera::sum`, `tessera::matmul`, `tessera::psum<"x">`...), as a jitted JAX function uses
// jnp rather than numpy: xt:: functions cannot see a local_tracer.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/shape.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/parallel/block_math.hpp"
#include "tessera/parallel/collectives.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/gemm.hpp"
#include "tessera/runtime/mesh_group.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera {

template <class T, std::size_t N>
class local_tracer;

namespace detail::ad {

/// Mesh axes as bits, in the mesh's order (at most max_mesh_axes of them).
using axis_mask = std::uint32_t;


/// A device's tape: backward steps in recording order, and how to forget the cotangents.
struct local_tape {
  std::vector<detail::unique_function<void()>> steps;
  std::vector<detail::unique_function<void()>> clears;
  void run() {
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) (*it)();
  }
  void reset() {
    for (auto& c : clears) c();
  }
};

/// The tape of the shard_map body running on this thread (set by autodiff/shard_map_grad.hpp).
inline thread_local local_tape* current_local_tape = nullptr;

inline local_tape& local_tape_for(char const* what) {
  if (current_local_tape == nullptr)
    throw std::logic_error(std::string("tessera::") + what +
                           ": a local tracer was used outside the shard_map body that made it");
  return *current_local_tape;
}

/// The mesh axes of `axes` (indices into the frame's axes) as bits.
template <std::size_t K>
axis_mask mask_of(std::array<std::size_t, K> const& axes) {
  axis_mask m = 0;
  for (std::size_t a : axes) m |= axis_mask{1} << a;
  return m;
}

/// The frame's axis indices of mesh axes A..., and their bits.
template <axis_name... A>
axis_mask collective_mask(char const* what) {
  return mask_of(resolve_axes(frame_for(what), std::array<axis_name, sizeof...(A)>{A...}, what));
}

/// The sum of x over the devices along the axes in m (the transpose of an implicit pvary),
/// as one all-reduce; collective_counter sees it like any psum.
template <class T, std::size_t N>
local_value<T, N> psum_over(local_value<T, N> const& x, axis_mask m) {
  spmd_frame& f = frame_for("grad");
  std::vector<std::size_t> axes;
  for (std::size_t a = 0; a < f.sizes.size(); ++a)
    if ((m >> a) & 1u) axes.push_back(a);
  group const g = group_along(f.pos, f.sizes, axes);
  op_signature sig;
  sig.seq = f.seq++;
  sig.kind = static_cast<std::uint32_t>(op_kind::psum);
  sign_axes(sig, axes);
  sig.describe = f.describe;
  sig.count = x.count();
  sig.dtype = dtype_code<T>();
  sig.param = hash_shape(x.shape);
  if (f.team_pos == 0 && counting()) {
    collective_event e{"all-reduce", {}, x.count() * sizeof(T)};
    for (std::size_t a : axes) e.axes.emplace_back(f.axis_names[a]);
    record_collective(e);
  }
  auto out = make_value<T>(x.shape);
  if (f.xp != nullptr) {  // a mesh that spans processes (parallel/across_processes.hpp)
    auto const ins = inputs_across_processes<T>(f, g, sig, x.data(), x.count());
    reduce_inputs<T>([&](std::size_t j) { return ins[j]; }, ins.size(), reduce_op::sum, out.data(), 0, x.count());
  } else {
    all_reduce(*f.t, f.pos, g, sig, x.data(), out.data(), x.count(), reduce_op::sum);
  }
  return out;
}

/// One value of a device's program: its value, the axes it varies over, and the contributions
/// to its cotangent, grouped by the axes they must still be summed over.
template <class T, std::size_t N>
struct local_node {
  local_value<T, N> value;
  axis_mask vma = 0;
  std::vector<std::pair<axis_mask, local_value<T, N>>> ct;

  /// A contribution typed as varying over `varies` (a superset of vma): the axes beyond vma are
  /// summed over when the cotangent is taken (pvary's transpose).
  void add(axis_mask varies, local_value<T, N>&& g) {
    axis_mask const key = varies & ~vma;
    for (auto& [k, acc] : ct)
      if (k == key) {
        for (std::size_t i = 0; i < acc.count(); ++i) acc.v[i] += g.v[i];
        return;
      }
    ct.emplace_back(key, std::move(g));
  }
  bool has_cotangent() const { return !ct.empty(); }
  /// The cotangent, typed like the value (the same on every device along axes it does not vary over).
  local_value<T, N> take() {
    local_value<T, N> out;
    bool first = true;
    for (auto& [key, acc] : ct) {
      local_value<T, N> s = key == 0 ? std::move(acc) : psum_over(acc, key);
      if (first) out = std::move(s);
      else
        for (std::size_t i = 0; i < out.count(); ++i) out.v[i] += s.v[i];
      first = false;
    }
    ct.clear();
    return out;
  }
};

template <class X>
struct is_local_tracer : std::false_type {};
template <class T, std::size_t N>
struct is_local_tracer<local_tracer<T, N>> : std::true_type {};

}  // namespace detail::ad

/// A device's block inside a shard_map body that grad differentiates through (JAX: the
/// per-device tracer of a shard_map'd function under jax.grad).
template <class T, std::size_t N>
class local_tracer {
 public:
  using value_type = T;
  /// x.ndim
  static constexpr std::size_t rank = N;
  explicit local_tracer(std::shared_ptr<detail::ad::local_node<T, N>> n) : n_(std::move(n)) {}
  /// x.shape
  shape_t<N> const& shape() const { return n_->value.shape; }
  /// The value's elements, row-major (read-only).
  T const* data() const { return n_->value.data(); }
  /// The library's record of this value.
  std::shared_ptr<detail::ad::local_node<T, N>> const& node() const { return n_; }

 private:
  std::shared_ptr<detail::ad::local_node<T, N>> n_;
};

/// Whether X is a local tracer (a shard_map body's value under grad).
template <class X>
concept local_traced = detail::ad::is_local_tracer<std::remove_cvref_t<X>>::value;

namespace detail::ad {

/// The tracer of a device's operation: `value`, varying over `vma`; `backward(g)` adds the
/// operands' contributions for the cotangent g.
template <class T, std::size_t N, class Backward>
local_tracer<T, N> local_record(local_value<T, N>&& value, axis_mask vma, Backward backward, char const* what) {
  local_tape& tp = local_tape_for(what);
  auto n = std::make_shared<local_node<T, N>>();
  n->value = std::move(value);
  n->vma = vma;
  tp.clears.push_back([w = std::weak_ptr<local_node<T, N>>(n)] {
    if (auto p = w.lock()) p->ct.clear();
  });
  tp.steps.push_back([n, backward = std::move(backward)] {
    if (!n->has_cotangent()) return;  // nothing depends on it: the same on every device
    backward(n->take(), n->vma);
  });
  return local_tracer<T, N>(std::move(n));
}

/// A leaf of a device's program (an argument's block), varying over `vma`.
template <class T, std::size_t N>
std::shared_ptr<local_node<T, N>> local_leaf(local_value<T, N>&& value, axis_mask vma) {
  local_tape& tp = local_tape_for("grad");
  auto n = std::make_shared<local_node<T, N>>();
  n->value = std::move(value);
  n->vma = vma;
  tp.clears.push_back([w = std::weak_ptr<local_node<T, N>>(n)] {
    if (auto p = w.lock()) p->ct.clear();
  });
  return n;
}


/// g (of the broadcast shape) summed into shape s: the transpose of broadcasting s.
template <std::size_t M, class T, std::size_t R>
local_value<T, M> unbroadcast(local_value<T, R> const& g, shape_t<M> const& s) {
  if constexpr (M == R) {
    if (g.shape == s) return g;
  }
  auto out = make_value<T>(s);
  std::array<std::array<std::size_t, R>, 1> st{broadcast_strides<R>(s)};
  for_each_offset(g.shape, st, [&](std::size_t i, auto const& off) { out.v[off[0]] += g.v[i]; });
  return out;
}

/// A binary operation where one operand at least is a local tracer and the other a local
/// tracer or a number.
template <class A, class B>
concept local_binary =
    (local_traced<A> || local_traced<B>) && (local_traced<A> || std::is_arithmetic_v<std::remove_cvref_t<A>>) &&
    (local_traced<B> || std::is_arithmetic_v<std::remove_cvref_t<B>>);

template <class X>
struct local_rank : std::integral_constant<std::size_t, 0> {};
template <class T, std::size_t N>
struct local_rank<local_tracer<T, N>> : std::integral_constant<std::size_t, N> {};

template <class A, class B>
struct local_element {
  using type = typename std::conditional_t<local_traced<A>, A, B>::value_type;
};

/// What a backward step keeps of an operand: the tracer, or the number as a 0-d value.
template <class T, class X>
auto hold(X const& x) {
  if constexpr (local_traced<X>) return x;
  else return local_value<T, 0>{std::vector<T>(1, static_cast<T>(x)), {}};
}
template <class H>
auto const& value_ref(H const& h) {
  if constexpr (local_traced<H>) return h.node()->value;
  else return h;
}
template <class H>
axis_mask vma_of_held(H const& h) {
  if constexpr (local_traced<H>) return h.node()->vma;
  else return 0;
}

/// Records a binary operation: `f(a, b)` per element, `da(g, a, b)` and `db(g, a, b)` the
/// contributions per element of the broadcast shape (summed back to each operand's shape).
template <class A, class B, class F, class DA, class DB>
auto binary_op(A const& a, B const& b, F f, DA da, DB db, char const* what) {
  using T = typename local_element<A, B>::type;
  if constexpr (local_traced<A> && local_traced<B>)
    static_assert(std::is_same_v<typename A::value_type, typename B::value_type>,
                  "tessera: the operands of an operation in a differentiated shard_map body have different element "
                  "types; convert one with tessera::astype first");
  constexpr std::size_t R = std::max(local_rank<A>::value, local_rank<B>::value);
  auto ha = hold<T>(a);
  auto hb = hold<T>(b);
  local_value<T, R> y = zip(value_ref(ha), value_ref(hb), f, what);
  axis_mask const vma = vma_of_held(ha) | vma_of_held(hb);
  return local_record(std::move(y), vma, [ha, hb, da, db](local_value<T, R> g, axis_mask v) {
    (void)da;  // one of the two is unused where that operand is a number
    (void)db;
    auto const& xa = value_ref(ha);
    auto const& xb = value_ref(hb);
    std::array<std::array<std::size_t, R>, 2> st{broadcast_strides<R>(xa.shape), broadcast_strides<R>(xb.shape)};
    auto each = [&](auto d) {
      auto c = make_value<T>(g.shape);
      for_each_offset(g.shape, st, [&](std::size_t i, auto const& off) { c.v[i] = d(g.v[i], xa.v[off[0]], xb.v[off[1]]); });
      return c;
    };
    if constexpr (local_traced<decltype(ha)>) ha.node()->add(v, unbroadcast(each(da), xa.shape));
    if constexpr (local_traced<decltype(hb)>) hb.node()->add(v, unbroadcast(each(db), xb.shape));
  }, what);
}

/// Records a unary element-wise operation: `f(x)` per element, `df(g, x, y)` the contribution.
template <class T, std::size_t N, class F, class D>
local_tracer<T, N> unary_op(local_tracer<T, N> const& x, F f, D df, char const* what) {
  auto const& xv = x.node()->value;
  auto y = make_value<T>(xv.shape);
  for (std::size_t i = 0; i < y.count(); ++i) y.v[i] = f(xv.v[i]);
  return local_record(std::move(y), x.node()->vma, [x, df](local_value<T, N> g, axis_mask v) {
    auto const& xv2 = x.node()->value;
    for (std::size_t i = 0; i < g.count(); ++i) g.v[i] = df(g.v[i], xv2.v[i]);
    x.node()->add(v, std::move(g));
  }, what);
}

/// A local value as a collective's argument (a row-major view, no copy).
template <class T, std::size_t N>
auto as_block(local_value<T, N> const& x) {
  return make_local_block<untracked_vma>(x.data(), x.shape);
}

/// A collective's result as a local value.
template <class T, std::size_t N, class R>
local_value<T, N> from_result(R const& r) {
  if constexpr (N == 0) {
    return local_value<T, 0>{std::vector<T>(1, static_cast<T>(r)), {}};
  } else {
    shape_t<N> s{};
    for (std::size_t i = 0; i < N; ++i) s[i] = static_cast<std::size_t>(r.shape()[i]);
    local_value<T, N> out{std::vector<T>(r.data(), r.data() + element_count(s)), s};
    return out;
  }
}

/// Index `r` (one chunk of m, when tiled) of dimension `axis`, as the transposes of all_gather take it.
template <std::size_t M, class T, std::size_t R>
local_value<T, M> slice_of(local_value<T, R> const& g, std::size_t axis, std::size_t start, std::size_t m) {
  shape_t<M> s{};
  if constexpr (M == R) {
    s = g.shape;
    s[axis] = m;
  } else {
    for (std::size_t i = 0, j = 0; i < R; ++i)
      if (i != axis) s[j++] = g.shape[i];
  }
  auto out = make_value<T>(s);
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < axis; ++i) outer *= g.shape[i];
  for (std::size_t i = axis + 1; i < R; ++i) inner *= g.shape[i];
  std::size_t const width = M == R ? m : 1;
  for (std::size_t o = 0; o < outer; ++o)
    std::copy_n(g.data() + (o * g.shape[axis] + start) * inner, width * inner, out.data() + o * width * inner);
  return out;
}

}  // namespace detail::ad

// ---- arithmetic ------------------------------------------------------------------------------

/// jnp.add in a differentiated shard_map body.
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto operator+(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x + y; }, [](auto g, auto, auto) { return g; }, [](auto g, auto, auto) { return g; },
      "add");
}
/// jnp.subtract in a differentiated shard_map body.
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto operator-(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x - y; }, [](auto g, auto, auto) { return g; }, [](auto g, auto, auto) { return -g; },
      "subtract");
}
/// jnp.multiply in a differentiated shard_map body.
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto operator*(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x * y; }, [](auto g, auto, auto y) { return g * y; },
      [](auto g, auto x, auto) { return g * x; }, "multiply");
}
/// jnp.divide in a differentiated shard_map body.
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto operator/(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x / y; }, [](auto g, auto, auto y) { return g / y; },
      [](auto g, auto x, auto y) { return -g * x / (y * y); }, "divide");
}
/// jnp.negative in a differentiated shard_map body.
template <local_traced X>
auto operator-(X const& x) {
  return detail::ad::unary_op(x, [](auto v) { return -v; }, [](auto g, auto) { return -g; }, "negative");
}

// ---- element-wise functions (JAX's choices at the kinks: relu'(0) = 0, abs'(0) = 1) ----------

/// jnp.exp
template <local_traced X>
auto exp(X const& x) {
  return detail::ad::unary_op(x, [](auto v) { return std::exp(v); }, [](auto g, auto v) { return g * std::exp(v); }, "exp");
}
/// jnp.log
template <local_traced X>
auto log(X const& x) {
  return detail::ad::unary_op(x, [](auto v) { return std::log(v); }, [](auto g, auto v) { return g / v; }, "log");
}
/// jnp.sin
template <local_traced X>
auto sin(X const& x) {
  return detail::ad::unary_op(x, [](auto v) { return std::sin(v); }, [](auto g, auto v) { return g * std::cos(v); }, "sin");
}
/// jnp.cos
template <local_traced X>
auto cos(X const& x) {
  return detail::ad::unary_op(x, [](auto v) { return std::cos(v); }, [](auto g, auto v) { return -g * std::sin(v); }, "cos");
}
/// jnp.tanh
template <local_traced X>
auto tanh(X const& x) {
  return detail::ad::unary_op(
      x, [](auto v) { return std::tanh(v); },
      [](auto g, auto v) {
        auto const t = std::tanh(v);
        return g * (1 - t * t);
      },
      "tanh");
}
/// jax.nn.sigmoid
template <local_traced X>
auto sigmoid(X const& x) {
  using T = typename X::value_type;
  auto s = [](T v) { return T(1) / (T(1) + std::exp(-v)); };
  return detail::ad::unary_op(x, s, [s](T g, T v) { return g * s(v) * (T(1) - s(v)); }, "sigmoid");
}
/// jax.nn.relu
template <local_traced X>
auto relu(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(x, [](T v) { return v > T(0) ? v : T(0); }, [](T g, T v) { return v > T(0) ? g : T(0); }, "relu");
}
/// jnp.sqrt
template <local_traced X>
auto sqrt(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(x, [](T v) { return std::sqrt(v); }, [](T g, T v) { return g / (T(2) * std::sqrt(v)); }, "sqrt");
}
/// jnp.abs
template <local_traced X>
auto abs(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(
      x, [](T v) { return std::abs(v); }, [](T g, T v) { return v >= T(0) ? g : -g; }, "abs");  // select(x >= 0, g, -g)
}

/// jnp.maximum in a differentiated shard_map body: g to the larger operand, half to each at a tie
/// (JAX's _balanced_eq).
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto maximum(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x > y ? x : y; },
      [](auto g, auto x, auto y) { return x > y ? g : (x == y ? g / 2 : decltype(g)(0)); },
      [](auto g, auto x, auto y) { return y > x ? g : (x == y ? g / 2 : decltype(g)(0)); }, "maximum");
}
/// jnp.minimum in a differentiated shard_map body: as maximum.
template <class A, class B>
  requires detail::ad::local_binary<A, B>
auto minimum(A const& a, B const& b) {
  return detail::ad::binary_op(
      a, b, [](auto x, auto y) { return x < y ? x : y; },
      [](auto g, auto x, auto y) { return x < y ? g : (x == y ? g / 2 : decltype(g)(0)); },
      [](auto g, auto x, auto y) { return y < x ? g : (x == y ? g / 2 : decltype(g)(0)); }, "minimum");
}

// ---- reductions ------------------------------------------------------------------------------

namespace detail::ad {
/// Sum (Mean: divided by the count) over Axes... (every axis when none), recorded.
template <bool Mean, std::size_t... Axes, class T, std::size_t N>
auto reduce(local_tracer<T, N> const& x, char const* what) {
  static_assert(((Axes < N) && ...), "tessera::sum in a shard_map body: an axis is out of range for the operand's rank");
  auto const& xv = x.node()->value;
  reduction_layout<N, Axes...> const r(xv.shape);
  auto y = make_value<T>(r.shape);
  for_each_offset(xv.shape, r.strides, [&](std::size_t i, auto const& off) { y.v[off[0]] += xv.v[i]; });
  T const scale = Mean ? T(1) / static_cast<T>(r.count) : T(1);
  if constexpr (Mean)
    for (auto& e : y.v) e *= scale;
  return local_record(std::move(y), x.node()->vma, [x, sts = r.strides, scale](local_value<T, reduction_layout<N, Axes...>::M> g, axis_mask v) {
    auto c = make_value<T>(x.node()->value.shape);
    for_each_offset(c.shape, sts, [&](std::size_t i, auto const& off) { c.v[i] = g.v[off[0]] * scale; });
    x.node()->add(v, std::move(c));
  }, what);
}
}  // namespace detail::ad

namespace detail::ad {
/// An axis as NumPy names it (-1 the last) as an index; one out of range stays out of range.
template <int Axis, std::size_t N>
inline constexpr std::size_t local_axis = static_cast<std::size_t>(Axis < 0 ? Axis + static_cast<long>(N) : Axis);
}  // namespace detail::ad

/// jnp.sum(x, axis=Axes) in a differentiated shard_map body (every axis when none).
template <int... Axes, local_traced X>
auto sum(X const& x) {
  return detail::ad::reduce<false, detail::ad::local_axis<Axes, X::rank>...>(x, "sum");
}
/// jnp.mean(x, axis=Axes) in a differentiated shard_map body.
template <int... Axes, local_traced X>
auto mean(X const& x) {
  return detail::ad::reduce<true, detail::ad::local_axis<Axes, X::rank>...>(x, "mean");
}

namespace detail::ad {
/// max (Max) or min over Axes..., recorded: g goes to the elements equal to the result, shared
/// equally among ties (JAX's _reduce_chooser_jvp_rule).
template <bool Max, std::size_t... Axes, class T, std::size_t N>
auto choose_recorded(local_tracer<T, N> const& x, char const* what) {
  auto y = choose<Max, Axes...>(x.node()->value, what);
  using R = decltype(y);
  R best = y;  // what the backward step compares with (a copy: the node keeps y)
  return local_record(std::move(y), x.node()->vma, [x, best = std::move(best)](R g, axis_mask v) {
    auto const& xv = x.node()->value;
    reduction_layout<N, Axes...> const r(xv.shape);
    auto ties = make_value<T>(r.shape);
    for_each_offset(xv.shape, r.strides, [&](std::size_t i, auto const& off) {
      if (xv.v[i] == best.v[off[0]]) ties.v[off[0]] += T(1);
    });
    auto c = make_value<T>(xv.shape);
    for_each_offset(xv.shape, r.strides, [&](std::size_t i, auto const& off) {
      c.v[i] = xv.v[i] == best.v[off[0]] ? g.v[off[0]] / ties.v[off[0]] : T(0);
    });
    x.node()->add(v, std::move(c));
  }, what);
}
}  // namespace detail::ad

/// jnp.max(x, axis=Axes) in a differentiated shard_map body (every axis when none).
template <int... Axes, local_traced X>
auto max(X const& x) {
  return detail::ad::choose_recorded<true, detail::ad::local_axis<Axes, X::rank>...>(x, "max");
}
/// jnp.min(x, axis=Axes) in a differentiated shard_map body (every axis when none).
template <int... Axes, local_traced X>
auto min(X const& x) {
  return detail::ad::choose_recorded<false, detail::ad::local_axis<Axes, X::rank>...>(x, "min");
}

// ---- matmul and transpose --------------------------------------------------------------------

namespace detail::ad {
}  // namespace detail::ad

/// jnp.matmul of rank-1 or rank-2 blocks in a differentiated shard_map body.
template <local_traced A, local_traced B>
auto matmul(A const& a, B const& b) {
  using T = typename A::value_type;
  constexpr std::size_t NA = A::rank, NB = B::rank;
  static_assert(std::is_same_v<T, typename B::value_type>,
                "tessera::matmul in a shard_map body: the operands have different element types");
  static_assert(NA >= 1 && NA <= 2 && NB >= 1 && NB <= 2,
                "tessera::matmul in a shard_map body: the operands must be vectors or matrices");
  using namespace detail;
  using namespace detail::ad;
  auto const am = as_matrix<true>(a.node()->value);
  auto const bm = as_matrix<false>(b.node()->value);
  if (am.shape[1] != bm.shape[0])
    throw std::invalid_argument("tessera::matmul in a shard_map body: shapes " + detail::shape_string(a.shape()) + " and " +
                                detail::shape_string(b.shape()) + " do not contract");
  constexpr std::size_t R = NA + NB - 2;
  shape_t<R> s{};
  if constexpr (NA == 2 && NB == 2) s = {am.shape[0], bm.shape[1]};
  else if constexpr (NA == 2) s = {am.shape[0]};
  else if constexpr (NB == 2) s = {bm.shape[1]};
  auto c = make_value<T>(shape_t<2>{am.shape[0], bm.shape[1]});
  product(am.shape[0], bm.shape[1], am.shape[1], am.data(), bm.data(), c.data());
  axis_mask const vma = a.node()->vma | b.node()->vma;
  return local_record(from_matrix(std::move(c), s), vma, [a, b](local_value<T, R> g, axis_mask v) {
    auto const am2 = as_matrix<true>(a.node()->value);
    auto const bm2 = as_matrix<false>(b.node()->value);
    local_value<T, 2> const gm{std::move(g.v), {am2.shape[0], bm2.shape[1]}};
    auto ga = make_value<T>(am2.shape);  // g b^T
    auto const bt = transposed_matrix(bm2);
    product(am2.shape[0], am2.shape[1], bm2.shape[1], gm.data(), bt.data(), ga.data());
    auto gb = make_value<T>(bm2.shape);  // a^T g
    auto const at = transposed_matrix(am2);
    product(bm2.shape[0], bm2.shape[1], am2.shape[0], at.data(), gm.data(), gb.data());
    a.node()->add(v, from_matrix(std::move(ga), a.shape()));
    b.node()->add(v, from_matrix(std::move(gb), b.shape()));
  }, "matmul");
}
/// jnp.dot of rank-1 or rank-2 blocks: matmul.
template <local_traced A, local_traced B>
auto dot(A const& a, B const& b) {
  return matmul(a, b);
}

/// x.T of a matrix block in a differentiated shard_map body.
template <local_traced X>
  requires(X::rank == 2)
auto transpose(X const& x) {
  using T = typename X::value_type;
  return detail::ad::local_record(detail::transposed_matrix(x.node()->value), x.node()->vma,
                                  [x](detail::local_value<T, 2> g, detail::ad::axis_mask v) {
                                    x.node()->add(v, detail::transposed_matrix(g));
                                  },
                                  "transpose");
}

// ---- collectives and their transposes --------------------------------------------------------

/// jax.lax.psum in a differentiated shard_map body: the result is invariant along the axes;
/// its transpose gives every device the cotangent (pbroadcast), typed varying along them, so a
/// value that was invariant there before the psum gets the psum of the copies (it counted k times).
template <axis_name... A, class V>
  requires local_traced<V>
auto psum(V&& v) {
  using X = std::remove_cvref_t<V>;
  using T = typename X::value_type;
  using namespace detail;
  using namespace detail::ad;
  axis_mask const m = collective_mask<A...>("psum");
  auto y = from_result<T, X::rank>(tessera::psum<A...>(as_block(v.node()->value)));
  return local_record(std::move(y), v.node()->vma & ~m, [x = X(v), m](local_value<T, X::rank> g, axis_mask vg) {
    x.node()->add(vg | m, std::move(g));
  }, "psum");
}

/// jax.lax.pmean in a differentiated shard_map body: psum / k.
template <axis_name... A, class V>
  requires local_traced<V>
auto pmean(V&& v) {
  using X = std::remove_cvref_t<V>;
  using T = typename X::value_type;
  static_assert(std::is_floating_point_v<T>, "tessera::pmean in a differentiated shard_map body needs floating values");
  using namespace detail;
  using namespace detail::ad;
  axis_mask const m = collective_mask<A...>("pmean");
  T const k = static_cast<T>(detail::group_size<A...>("pmean"));
  auto y = from_result<T, X::rank>(tessera::pmean<A...>(as_block(v.node()->value)));
  return local_record(std::move(y), v.node()->vma & ~m, [x = X(v), m, k](local_value<T, X::rank> g, axis_mask vg) {
    for (auto& e : g.v) e /= k;
    x.node()->add(vg | m, std::move(g));
  }, "pmean");
}

/// jax.lax.pmax: not differentiable here (JAX differentiates it only through its own rules).
template <axis_name... A, class V>
  requires local_traced<V>
auto pmax(V&& v) {
  static_assert(!local_traced<V>,
                "tessera::pmax is not differentiable: grad through a shard_map body that calls pmax is refused; take "
                "the maximum with psum of a one-hot mask, or wrap the value in stop_gradient outside the shard_map");
  return std::remove_cvref_t<V>(v);  // the error above is the only one
}
/// jax.lax.pmin: not differentiable here.
template <axis_name... A, class V>
  requires local_traced<V>
auto pmin(V&& v) {
  static_assert(!local_traced<V>,
                "tessera::pmin is not differentiable: grad through a shard_map body that calls pmin is refused; take "
                "the minimum with psum of a one-hot mask, or wrap the value in stop_gradient outside the shard_map");
  return std::remove_cvref_t<V>(v);  // the error above is the only one
}

namespace detail::ad {
/// all_gather (tiled or stacked): invariant along the axes (tessera's all_gather is JAX's
/// all_gather_invariant); the transpose is this device's slice of the cotangent, typed varying
/// along the axes, so that contributions that vary there are summed first (together: psum_scatter).
template <bool Tiled, axis_name... A, class X>
auto gather(X const& x, std::size_t axis) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  constexpr std::size_t R = Tiled ? N : N + 1;
  axis_mask const m = collective_mask<A...>("all_gather");
  local_value<T, R> y = [&] {
    if constexpr (Tiled) return from_result<T, R>(tessera::all_gather<A...>(as_block(x.node()->value), axis, tiled));
    else return from_result<T, R>(tessera::all_gather<A...>(as_block(x.node()->value), axis));
  }();
  std::size_t const r = static_cast<std::size_t>(static_cast<int>(tessera::axis_index<A...>()));
  std::size_t width = 1;
  if constexpr (Tiled) width = x.shape()[axis];
  return local_record(std::move(y), x.node()->vma & ~m, [x, m, r, width, axis](local_value<T, R> g, axis_mask vg) {
    x.node()->add(vg | m, slice_of<N>(g, axis, r * width, width));
  }, "all_gather");
}
}  // namespace detail::ad

/// jax.lax.all_gather(x, axes, axis=axis) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto all_gather(V&& v, std::size_t axis = 0) {
  return detail::ad::gather<false, A...>(std::remove_cvref_t<V>(v), axis);
}
/// jax.lax.all_gather(x, axes, axis=axis, tiled=True) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto all_gather(V&& v, std::size_t axis, tiled_t) {
  return detail::ad::gather<true, A...>(std::remove_cvref_t<V>(v), axis);
}

namespace detail::ad {
/// psum_scatter: varying along the axes; the transpose is the all_gather of the cotangent.
template <bool Tiled, axis_name... A, class X>
auto scatter(X const& x, std::size_t dim) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  constexpr std::size_t R = Tiled ? N : N - 1;
  axis_mask const m = collective_mask<A...>("psum_scatter");
  local_value<T, R> y = [&] {
    if constexpr (Tiled) return from_result<T, R>(tessera::psum_scatter<A...>(as_block(x.node()->value), dim, tiled));
    else return from_result<T, R>(tessera::psum_scatter<A...>(as_block(x.node()->value), dim));
  }();
  return local_record(std::move(y), x.node()->vma | m, [x, m, dim](local_value<T, R> g, axis_mask vg) {
    local_value<T, N> c = [&] {
      if constexpr (Tiled) return from_result<T, N>(tessera::all_gather<A...>(as_block(g), dim, tiled));
      else return from_result<T, N>(tessera::all_gather<A...>(as_block(g), dim));
    }();
    x.node()->add(vg | m, std::move(c));
  }, "psum_scatter");
}
}  // namespace detail::ad

/// jax.lax.psum_scatter(x, axes, scatter_dimension=dim) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto psum_scatter(V&& v, std::size_t dim = 0) {
  return detail::ad::scatter<false, A...>(std::remove_cvref_t<V>(v), dim);
}
/// jax.lax.psum_scatter(x, axes, scatter_dimension=dim, tiled=True) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto psum_scatter(V&& v, std::size_t dim, tiled_t) {
  return detail::ad::scatter<true, A...>(std::remove_cvref_t<V>(v), dim);
}

namespace detail::ad {
/// all_to_all: a permutation of the blocks' pieces; its transpose swaps split and concat.
template <bool Tiled, axis_name... A, class X>
auto exchange(X const& x, std::size_t split, std::size_t concat) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  axis_mask const m = collective_mask<A...>("all_to_all");
  auto run = [](local_value<T, N> const& in, std::size_t s, std::size_t c) {
    if constexpr (Tiled) return from_result<T, N>(tessera::all_to_all<A...>(as_block(in), s, c, tiled));
    else return from_result<T, N>(tessera::all_to_all<A...>(as_block(in), s, c));
  };
  return local_record(run(x.node()->value, split, concat), x.node()->vma | m,
                      [x, m, split, concat, run](local_value<T, N> g, axis_mask vg) {
                        x.node()->add(vg | m, run(g, concat, split));
                      },
                      "all_to_all");
}
}  // namespace detail::ad

/// jax.lax.all_to_all(x, axes, split_axis, concat_axis, tiled=True) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto all_to_all(V&& v, std::size_t split_axis, std::size_t concat_axis, tiled_t) {
  return detail::ad::exchange<true, A...>(std::remove_cvref_t<V>(v), split_axis, concat_axis);
}
/// jax.lax.all_to_all(x, axes, split_axis, concat_axis) in a differentiated shard_map body.
template <axis_name... A, class V>
  requires local_traced<V>
auto all_to_all(V&& v, std::size_t split_axis, std::size_t concat_axis) {
  return detail::ad::exchange<false, A...>(std::remove_cvref_t<V>(v), split_axis, concat_axis);
}

/// jax.lax.ppermute(x, axes, perm) in a differentiated shard_map body: the transpose sends
/// each cotangent back along the inverse permutation.
template <axis_name... A, class V>
  requires local_traced<V>
auto ppermute(V&& v, std::vector<std::pair<int, int>> const& perm) {
  using X = std::remove_cvref_t<V>;
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  using namespace detail;
  using namespace detail::ad;
  axis_mask const m = collective_mask<A...>("ppermute");
  std::vector<std::pair<int, int>> inverse;
  inverse.reserve(perm.size());
  for (auto const& [s, d] : perm) inverse.emplace_back(d, s);
  auto y = from_result<T, N>(tessera::ppermute<A...>(as_block(v.node()->value), perm));
  return local_record(std::move(y), v.node()->vma | m, [x = X(v), m, inverse](local_value<T, N> g, axis_mask vg) {
    x.node()->add(vg | m, from_result<T, N>(tessera::ppermute<A...>(as_block(g), inverse)));
  }, "ppermute");
}

}  // namespace tessera
