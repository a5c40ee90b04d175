#pragma once
// optax's GradientTransformation for tessera trees: every optimizer is an `init(params)` /
// `update(grads, state, params)` pair, and `chain` composes them. params, grads and the
// optimizer state are tessera trees (tree/tree_util.hpp) of sharded arrays; each moment of a
// parameter is an array of the parameter's own type, so it keeps its sharding.
//
// What optax leaves to XLA's fusion is done here by hand: a transformation is also a kernel
// over a chunk of one leaf's elements, and the transformations of a chain run one after
// another on a chunk that stays in the L1 cache. So an update reads each gradient, parameter
// and moment block once and writes each new moment and the update (or, with
// update_and_apply, the new parameter) once, in one pass per device per leaf, which is the
// memory-bandwidth floor. Tessera's expression templates evaluate one output per pass
// (expr/evaluate.hpp), and an Adam step has three (mu, nu, the update), hence the kernel.
//
// The protocol a transformation X implements (the optimizers in this folder are examples):
//   X::slots                          the number of per-leaf state trees (Adam: 2, mu and nu)
//   x.init(params)                    the state (optax's init)
//   x.slot_trees(state)               a std::tuple of its `slots` trees, each shaped like params
//   x.begin(grads, state, params)     a step: the host scalars of this update (bias corrections,
//                                     the learning rate, the clipping factor); may communicate
//   step(leaf, u, p, in, out, n)      the kernel: u (in place, n elements, a multiple of the SIMD
//                                     width) from u, the parameters p and the slots' old blocks
//                                     in[k]; writes the new blocks out[k]
//   x.finish(step, state, slots)      the new state from the new slot trees (a std::tuple)
// and gradient_transformation<X> gives it `update` and `update_and_apply`.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/runtime/simd.hpp"
#include "tessera/tree/tree_util.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::optim {

/// optax.EmptyState: the state of a transformation that keeps none (a tree node with no leaves).
using empty_state = std::tuple<>;

/// optax's `count` (an int32 scalar): a plain integer leaf of the state, since it is read on the
/// host to form the step's scalars.
using count_type = std::int32_t;

/// optax's numerics.safe_increment: count + 1, saturating at the largest int32.
constexpr count_type safe_increment(count_type c) {
  return c < std::numeric_limits<count_type>::max() ? c + 1 : c;
}

namespace detail {

/// The SIMD batch every kernel works on (runtime/simd.hpp keeps xsimd behind one include).
template <class T>
using batch = xsimd::batch<T>;

template <class T>
constexpr bool optimizable = std::is_same_v<T, float> || std::is_same_v<T, double>;

/// a·b + c rounded once where the machine has FMA, as XLA's CPU backend computes a multiply
/// feeding an add there (LLVM contracts them), and rounded twice where it has not, as XLA does
/// there. xsimd 8's fma on AVX-512 batches is a multiply and an add, so the intrinsic is called.
template <class T, class A>
xsimd::batch<T, A> fmadd(xsimd::batch<T, A> const& a, xsimd::batch<T, A> const& b, xsimd::batch<T, A> const& c) {
  using R = typename xsimd::batch<T, A>::register_type;
  // Told apart by size and element type: naming the vector types in a template argument drops
  // their attributes (GCC's -Wignored-attributes).
  [[maybe_unused]] R const ra = a, rb = b, rc = c;
  [[maybe_unused]] constexpr bool f32 = std::is_same_v<T, float>, f64 = std::is_same_v<T, double>;
#if defined(__AVX512F__)
  if constexpr (sizeof(R) == 64 && f32) return xsimd::batch<T, A>(_mm512_fmadd_ps(ra, rb, rc));
  if constexpr (sizeof(R) == 64 && f64) return xsimd::batch<T, A>(_mm512_fmadd_pd(ra, rb, rc));
#endif
#if defined(__FMA__)
  if constexpr (sizeof(R) == 32 && f32) return xsimd::batch<T, A>(_mm256_fmadd_ps(ra, rb, rc));
  if constexpr (sizeof(R) == 32 && f64) return xsimd::batch<T, A>(_mm256_fmadd_pd(ra, rb, rc));
  if constexpr (sizeof(R) == 16 && f32) return xsimd::batch<T, A>(_mm_fmadd_ps(ra, rb, rc));
  if constexpr (sizeof(R) == 16 && f64) return xsimd::batch<T, A>(_mm_fmadd_pd(ra, rb, rc));
#endif
  return xsimd::fma(a, b, c);  // NEON64's is the instruction; without FMA, a multiply and an add
}

/// xsimd::sqrt, except on AVX-512 where GCC 12's _mm512_sqrt_ps (which xsimd calls) warns that
/// its own undefined vector "may be used uninitialized": the masked form with every lane set.
template <class T, class A>
xsimd::batch<T, A> sqrt(xsimd::batch<T, A> const& a) {
#if defined(__AVX512F__)
  using R = typename xsimd::batch<T, A>::register_type;
  if constexpr (sizeof(R) == 64 && std::is_same_v<T, float>) {
    R const r = a;
    return xsimd::batch<T, A>(_mm512_mask_sqrt_ps(r, static_cast<__mmask16>(0xFFFF), r));
  }
  if constexpr (sizeof(R) == 64 && std::is_same_v<T, double>) {
    R const r = a;
    return xsimd::batch<T, A>(_mm512_mask_sqrt_pd(r, static_cast<__mmask8>(0xFF), r));
  }
#endif
  return xsimd::sqrt(a);
}

/// The scalar twin of fmadd (schedules, where XLA contracts too).
template <class T>
T fmadd(T a, T b, T c) {
#if defined(__FMA__) || defined(__aarch64__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// The leaves of a tree as a tuple (jax.tree.leaves), and their type at index I.
template <class Tree>
using leaves_t = decltype(tessera::tree_leaves(std::declval<Tree const&>()));
template <std::size_t I, class Tree>
using leaf_t = std::tuple_element_t<I, leaves_t<Tree>>;

template <class C, std::size_t I>
constexpr std::size_t leaves_before() {
  return []<std::size_t... J>(std::index_sequence<J...>) {
    return (std::size_t{0} + ... + tessera::tree_leaf_count<std::remove_cvref_t<std::tuple_element_t<J, C>>>);
  }(std::make_index_sequence<I>{});
}

/// jax.tree.unflatten(structure of Tree, leaves[Off:]): Tree's nodes around the given leaves.
template <class Tree, std::size_t Off = 0, class Leaves>
auto unflatten(Leaves& leaves) {
  if constexpr (!tessera::tree_node<Tree>) {
    return std::get<Off>(leaves);
  } else {
    using C = decltype(tessera::detail::children_of(std::declval<Tree&>()));
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return tessera::detail::rebuild<Tree>(std::make_tuple(
          unflatten<std::remove_cvref_t<std::tuple_element_t<I, C>>, Off + leaves_before<C, I>()>(leaves)...));
    }(std::make_index_sequence<std::tuple_size_v<C>>{});
  }
}

/// K arrays of a's type, shape and sharding, whose blocks `fill(pos, n, outs)` writes on each
/// device's own thread (n elements of the block at position pos, outs[k] the k-th array's).
/// build_array makes one output per pass; an optimizer step makes several.
template <std::size_t K, class T, std::size_t N, class S, class Fill>
std::array<array<T, N, S>, K> build_arrays(array<T, N, S> const& a, char const* where, Fill&& fill) {
  S const& s = a.sharding();
  auto const& pool = a.pool();
  auto const& ids = s.device_ids();
  std::size_t const nd = ids.size();
  std::array<std::vector<device_buffer<T>>, K> buffers;
  for (auto& b : buffers) b.resize(nd);
  std::vector<int> const pos_of = tessera::detail::positions_by_device(ids, pool->global_size());
  pool->run(std::span<int const>(ids), [&](int d) {
    std::size_t const p = static_cast<std::size_t>(pos_of[static_cast<std::size_t>(d)]);
    std::size_t const n = tessera::detail::element_count(tessera::detail::block_shape(s.block(p, a.shape())));
    tessera::detail::trace_span span("evaluate", where, n * sizeof(T) * K);  // the trace's view (docs/trace.md)
    std::array<T*, K> outs{};
    for (std::size_t k = 0; k < K; ++k) {
      buffers[k][p] = device_buffer<T>(n, device_buffer<T>::uninitialized, &pool->memory(d));
      outs[k] = buffers[k][p].data();
    }
    if (n != 0) fill(p, n, outs);
  });
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<array<T, N, S>, K>{array<T, N, S>(std::make_shared<tessera::detail::array_storage<T, N, S>>(
        tessera::detail::array_storage<T, N, S>{s, a.shape(), pool, std::move(buffers[I])}))...};
  }(std::make_index_sequence<K>{});
}

/// fill(pos, n, outs) on each device's own thread, writing into the blocks of the arrays `into`
/// (donated: their blocks are reused, as jax.jit's donate_argnums reuses buffers), which it returns.
template <std::size_t K, class T, std::size_t N, class S, class Fill>
std::array<array<T, N, S>, K> fill_in_place(std::array<array<T, N, S>, K> const& into, char const* where, Fill&& fill) {
  array<T, N, S> const& a = into[0];
  S const& s = a.sharding();
  auto const& pool = a.pool();
  auto const& ids = s.device_ids();
  std::vector<int> const pos_of = tessera::detail::positions_by_device(ids, pool->global_size());
  pool->run(std::span<int const>(ids), [&](int d) {
    std::size_t const p = static_cast<std::size_t>(pos_of[static_cast<std::size_t>(d)]);
    std::size_t const n = tessera::detail::element_count(tessera::detail::block_shape(s.block(p, a.shape())));
    tessera::detail::trace_span span("evaluate", where, n * sizeof(T) * K);
    std::array<T*, K> outs{};
    for (std::size_t k = 0; k < K; ++k) outs[k] = const_cast<T*>(into[k].block_data(p));  // donated: this call's own
    if (n != 0) fill(p, n, outs);
  });
  return into;
}

/// jnp.zeros_like(a): zeros of a's type, shape and sharding, written on each device.
template <class T, std::size_t N, class S>
array<T, N, S> zeros_like(array<T, N, S> const& a) {
  return build_arrays<1>(a, "zeros_like", [](std::size_t, std::size_t n, std::array<T*, 1> o) {
    std::memset(static_cast<void*>(o[0]), 0, n * sizeof(T));
  })[0];
}

/// optax.tree.zeros_like(params): a tree of zeros shaped and sharded like params.
template <class Params>
Params tree_zeros_like(Params const& params) {
  return tessera::tree_map([](auto const& p) { return zeros_like(p); }, params);
}

/// Refuses a gradient or state leaf that is not laid out as its parameter.
template <class A>
void check_leaf(A const& want, A const& got, std::size_t leaf, char const* what) {
  if (got.shape() != want.shape() || got.pool() != want.pool() || !(got.sharding().mesh() == want.sharding().mesh()))
    throw std::invalid_argument(std::string("tessera::optim: leaf ") + std::to_string(leaf) + " of the " + what +
                                " has another shape or mesh than the parameter at the same place (shape " +
                                tessera::detail::shape_string(got.shape()) + " against " + tessera::detail::shape_string(want.shape()) +
                                "); pass trees shaped, sharded and on the mesh of the parameters");
}

/// step's kernel on n elements, and new_p = p + u: in one step where it has the form that takes
/// new_p (scale's: p + u·s in one fma, as XLA fuses a jitted step's apply_updates).
template <class Step, class T>
void kernel_apply(Step const& step, std::size_t leaf, T* u, T const* p, T const* const* in, T* const* out,
                  std::size_t n, T* new_p) {
  if constexpr (requires { step(leaf, u, p, in, out, n, new_p); }) {
    step(leaf, u, p, in, out, n, new_p);
  } else {
    step(leaf, u, p, in, out, n);
    for (std::size_t i = 0; i < n; i += batch<T>::size)
      (batch<T>::load_unaligned(p + i) + batch<T>::load_unaligned(u + i)).store_unaligned(new_p + i);
  }
}

/// Whether a step has the fused form: `step.prepare<T>(leaf)` gives a function of one batch,
/// `f(u, i, p, in, out)`, returning the update from u (the previous part's update, at first the
/// gradient) at element i and writing its slots' new values there; and optionally
/// `f.apply(u, i, p, in, out)`, returning the new parameter instead (scale's fma). update_leaf then
/// runs the whole chain in one loop, in registers: each element of g, p and the slots loaded once,
/// each output stored once, no buffer in between.
template <class S, class T>
concept preparable = requires(S const& s) { s.template prepare<T>(std::size_t{}); };
template <class T, class Tuple>
inline constexpr bool all_preparable = false;
template <class T, class... S>
inline constexpr bool all_preparable<T, std::tuple<S...>> = (preparable<S, T> && ...);

/// A prepared function's new parameter: its own apply where it has one, else p + its update.
template <class F, class T>
batch<T> prepared_apply(F const& f, batch<T> const& u, std::size_t i, T const* p, T const* const* in, T* const* out) {
  if constexpr (requires { f.apply(u, i, p, in, out); }) return f.apply(u, i, p, in, out);
  else return batch<T>::load_unaligned(p + i) + f(u, i, p, in, out);
}

/// The new parameter from the gradient g: a chain's apply_update, or one prepared function's.
template <class F, class T>
batch<T> fused_apply(F const& f, batch<T> const& g, std::size_t i, T const* p, T const* const* in, T* const* out) {
  if constexpr (requires { f.apply_update(g, i, p, in, out); }) return f.apply_update(g, i, p, in, out);
  else return prepared_apply(f, g, i, p, in, out);
}

/// One leaf's update: the chain's kernel over every block of leaf I, in chunks that stay in
/// cache. Writes the new slot blocks and the update (Apply: the parameter plus the update).
template <bool Apply, bool Donate, std::size_t I, class X, class Step, class G, class P, class SlotLeaves>
auto update_leaf(Step const& step, G const& grads, P const& params, SlotLeaves const& slot_leaves) {
  constexpr std::size_t K = X::slots;
  auto const& g = std::get<I>(grads);
  auto const& p = std::get<I>(params);
  using A = std::remove_cvref_t<decltype(p)>;
  using T = typename A::value_type;
  static_assert(optimizable<T>, "tessera::optim: parameters and gradients are float32 or float64 arrays");
  static_assert(std::is_same_v<std::remove_cvref_t<decltype(g)>, A>,
                "tessera::optim: each gradient has its parameter's type (element type, rank and sharding), as "
                "tessera::grad returns them; evaluate or device_put the gradient into the parameter's sharding");
  check_leaf(p, g, I, "gradients");
  std::array<A const*, K + 1> slot_arrays{};  // + 1: never empty
  [&]<std::size_t... k>(std::index_sequence<k...>) {
    static_assert((std::is_same_v<std::remove_cvref_t<decltype(std::get<I>(std::get<k>(slot_leaves)))>, A> && ...),
                  "tessera::optim: a leaf of the optimizer state has another type than its parameter");
    ((slot_arrays[k] = &std::get<I>(std::get<k>(slot_leaves))), ...);
  }(std::make_index_sequence<K>{});
  for (std::size_t k = 0; k < K; ++k) check_leaf(p, *slot_arrays[k], I, "optimizer state");
  // The fused form: one loop over the block, everything in registers (see preparable).
  // A template whose body names `step` through S, so that clang too instantiates it only if called
  // (for a step without prepare()).
  auto fused = [&]<class S = Step>(std::size_t pos, std::size_t n, auto const& outs) {
    using B = batch<T>;
    constexpr std::size_t W = B::size;
    auto const f = static_cast<S const&>(step).template prepare<T>(I);
    T const* const gb = g.block_data(pos);
    T const* const pb = p.block_data(pos);
    std::array<T const*, K + 1> in{};  // + 1: never empty
    for (std::size_t k = 0; k < K; ++k) in[k] = slot_arrays[k]->block_data(pos);
    std::array<T*, K + 1> const o = outs;
    T* const dst = outs[K];
    std::size_t const body = n - n % W;
    for (std::size_t i = 0; i < body; i += W) {
      B const gv = B::load_unaligned(gb + i);
      if constexpr (Apply) fused_apply(f, gv, i, pb, in.data(), o.data()).store_unaligned(dst + i);
      else f(gv, i, pb, in.data(), o.data()).store_unaligned(dst + i);
    }
    if (std::size_t const rest = n - body; rest != 0) {
      // The last elements, fewer than a batch, in zero-padded batches (the same instructions).
      alignas(64) T tg[W] = {}, tp[W] = {}, ti[K + 1][W] = {}, to[K + 1][W] = {};
      std::memcpy(tg, gb + body, rest * sizeof(T));
      std::memcpy(tp, pb + body, rest * sizeof(T));
      std::array<T const*, K + 1> i{};
      std::array<T*, K + 1> t{};
      for (std::size_t k = 0; k < K; ++k) {
        std::memcpy(ti[k], in[k] + body, rest * sizeof(T));
        i[k] = ti[k], t[k] = to[k];
      }
      B const gv = B::load_unaligned(tg);
      B const r = Apply ? fused_apply(f, gv, 0, tp, i.data(), t.data()) : f(gv, 0, tp, i.data(), t.data());
      for (std::size_t k = 0; k < K; ++k) std::memcpy(outs[k] + body, to[k], rest * sizeof(T));
      r.store_unaligned(tg);
      std::memcpy(dst + body, tg, rest * sizeof(T));
    }
  };
  auto chunked = [&](std::size_t pos, std::size_t n, std::array<T*, K + 1> const& outs) {
    constexpr std::size_t W = batch<T>::size;
    constexpr std::size_t chunk = 1024;  // 4 KiB of float32 per stream: all of them stay in L1
    T const* gb = g.block_data(pos);
    T const* pb = p.block_data(pos);
    std::array<T const*, K + 1> in{};  // + 1: never empty
    for (std::size_t k = 0; k < K; ++k) in[k] = slot_arrays[k]->block_data(pos);
    alignas(64) T ubuf[chunk];
    std::size_t const body = n - n % W;
    for (std::size_t off = 0; off < body; off += chunk) {
      std::size_t const m = std::min(chunk, body - off);
      T* u = Apply ? ubuf : outs[K] + off;
      std::memcpy(u, gb + off, m * sizeof(T));
      std::array<T const*, K + 1> i{};
      std::array<T*, K + 1> o{};
      for (std::size_t k = 0; k < K; ++k) i[k] = in[k] + off, o[k] = outs[k] + off;
      if constexpr (Apply) kernel_apply(step, I, u, pb + off, i.data(), o.data(), m, outs[K] + off);
      else step(I, u, pb + off, i.data(), o.data(), m);
    }
    if (std::size_t const rest = n - body; rest != 0) {
      // The last elements, fewer than a batch: copied into zero-padded batches so that they are
      // computed by the same instructions as the others.
      alignas(64) T tg[W] = {}, tp[W] = {}, tn[W] = {}, ti[K + 1][W] = {}, to[K + 1][W] = {};
      std::memcpy(tg, gb + body, rest * sizeof(T));
      std::memcpy(tp, pb + body, rest * sizeof(T));
      std::array<T const*, K + 1> i{};
      std::array<T*, K + 1> o{};
      for (std::size_t k = 0; k < K; ++k) {
        std::memcpy(ti[k], in[k] + body, rest * sizeof(T));
        i[k] = ti[k], o[k] = to[k];
      }
      if constexpr (Apply) kernel_apply(step, I, tg, tp, i.data(), o.data(), W, tn);
      else step(I, tg, tp, i.data(), o.data(), W);
      for (std::size_t k = 0; k < K; ++k) std::memcpy(outs[k] + body, to[k], rest * sizeof(T));
      std::memcpy(outs[K] + body, Apply ? tn : tg, rest * sizeof(T));
    }
  };
  auto kernel = [&](std::size_t pos, std::size_t n, std::array<T*, K + 1> const& outs) {
    if constexpr (preparable<Step, T>) fused(pos, n, outs);
    else chunked(pos, n, outs);
  };
  if constexpr (Donate) {
    auto const into = [&]<std::size_t... k>(std::index_sequence<k...>) {
      return std::array<A, K + 1>{*slot_arrays[k]..., p};
    }(std::make_index_sequence<K>{});
    return fill_in_place<K + 1>(into, "optimizer update and apply (donated)", kernel);
  } else {
    return build_arrays<K + 1>(p, Apply ? "optimizer update and apply" : "optimizer update", kernel);
  }
}

/// Runs transformation x on every leaf: (the updates or the new params, the new state).
template <bool Apply, bool Donate = false, class X, class G, class S, class P>
auto run_update(X const& x, G const& grads, S const& state, P const& params) {
  static_assert(tessera::detail::same_structure<G, P>(),
                "tessera::optim: the gradients' tree has another structure than the parameters' (grad returns a "
                "tree shaped like the parameters it differentiates)");
  auto const step = x.begin(grads, state, params);
  auto const gl = tessera::tree_leaves(grads);
  auto const pl = tessera::tree_leaves(params);
  auto const slots = x.slot_trees(state);
  auto const slot_leaves = tessera::detail::apply([](auto const&... t) { return std::make_tuple(tessera::tree_leaves(t)...); }, slots);
  constexpr std::size_t L = std::tuple_size_v<std::remove_cvref_t<decltype(pl)>>;
  constexpr std::size_t K = X::slots;
  auto outs = [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::make_tuple(update_leaf<Apply, Donate, I, X>(step, gl, pl, slot_leaves)...);
  }(std::make_index_sequence<L>{});
  auto column = [&]<std::size_t C>(std::integral_constant<std::size_t, C>) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) { return std::make_tuple(std::get<I>(outs)[C]...); }(
        std::make_index_sequence<L>{});
  };
  auto new_slots = [&]<std::size_t... k>(std::index_sequence<k...>) {
    return std::make_tuple([&] {
      auto leaves = column(std::integral_constant<std::size_t, k>{});
      return unflatten<std::remove_cvref_t<std::tuple_element_t<k, std::remove_cvref_t<decltype(slots)>>>>(leaves);
    }()...);
  }(std::make_index_sequence<K>{});
  auto last = column(std::integral_constant<std::size_t, K>{});
  return std::pair{unflatten<P>(last), x.finish(step, state, std::move(new_slots))};
}

}  // namespace detail

/// The update/apply half of optax.GradientTransformation for a transformation X that
/// implements the protocol above (CRTP: X derives from gradient_transformation<X>).
template <class X>
struct gradient_transformation {
  /// optax's `updates, new_state = tx.update(grads, state, params)`: a std::pair of the
  /// updates (a tree shaped and sharded like params) and the new state. One pass per device
  /// per leaf; no communication unless a transformation needs it (clip_by_global_norm).
  template <class G, class S, class P>
  auto update(G const& grads, S const& state, P const& params) const {
    return detail::run_update<false>(static_cast<X const&>(*this), grads, state, params);
  }
  /// `update` followed by optax.apply_updates, in the same pass: a std::pair of the new params
  /// and the new state. What a jitted JAX training step fuses into one loop, and what
  /// TrainState::apply_gradients calls.
  template <class G, class S, class P>
  auto update_and_apply(G const& grads, S const& state, P const& params) const {
    return detail::run_update<true>(static_cast<X const&>(*this), grads, state, params);
  }
  /// update_and_apply writing the new params and state into the blocks of the ones given, as
  /// jax.jit(step, donate_argnums=(params, opt_state)) does: no new blocks, and each block is
  /// read and written once, in cache (a new block costs its cache lines' reads for ownership
  /// too). The arguments are moved in: every other copy of those arrays (copies share blocks)
  /// sees the new values, as JAX's donated arrays may not be used again.
  template <class G, class S, class P>
    requires(!std::is_lvalue_reference_v<S> && !std::is_lvalue_reference_v<P>)
  auto update_and_apply_donated(G const& grads, S&& state, P&& params) const {
    return detail::run_update<true, true>(static_cast<X const&>(*this), grads, state, params);
  }
};

/// optax.apply_updates(params, updates): params + updates, leaf by leaf, in params' dtype.
template <class P, class U>
P apply_updates(P const& params, U const& updates) {
  return tessera::tree_map([](auto const& p, auto const& u) { return p + u; }, params, updates);
}

/// optax.chain(*transformations): applies them in order; the state is the tuple of their
/// states. The chained kernels run one after another on each chunk, in one pass.
namespace detail {
/// Whether X reads its whole input before the pass (clip_by_global_norm's norm).
template <class X>
constexpr bool needs_whole_input() {
  if constexpr (requires { X::needs_whole_input; }) return X::needs_whole_input;
  else return false;
}
}  // namespace detail

template <class... X>
struct chain_t : gradient_transformation<chain_t<X...>> {
  std::tuple<X...> parts;

  explicit chain_t(X... x) : parts(std::move(x)...) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      static_assert(((I == 0 || !detail::needs_whole_input<X>()) && ...),
                    "tessera::optim::chain: clip_by_global_norm comes first in a chain: every transformation of a "
                    "chain runs in the same pass over each leaf, so the norm is taken of the gradients before it");
    }(std::index_sequence_for<X...>{});
  }
  /// The chain's first transformation reads the whole gradient tree first, if it does.
  static constexpr bool needs_whole_input = detail::needs_whole_input<std::tuple_element_t<0, std::tuple<X...>>>();

  static constexpr std::size_t slots = (std::size_t{0} + ... + X::slots);

  template <class P>
  auto init(P const& params) const {
    return tessera::detail::apply([&](auto const&... x) { return std::make_tuple(x.init(params)...); }, parts);
  }
  template <class S>
  auto slot_trees(S const& state) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple_cat(std::get<I>(parts).slot_trees(std::get<I>(state))...);
    }(std::index_sequence_for<X...>{});
  }

  template <class Steps>
  struct step_t {
    Steps steps;
    template <class T>
    void operator()(std::size_t leaf, T* u, T const* p, T const* const* in, T* const* out, std::size_t n) const {
      std::size_t off = 0;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(steps)(leaf, u, p, in + off, out + off, n), off += X::slots), ...);
      }(std::index_sequence_for<X...>{});
    }
    /// The parts in order, the last one also writing new_p = p + u (fused where it can).
    template <class T>
    void operator()(std::size_t leaf, T* u, T const* p, T const* const* in, T* const* out, std::size_t n,
                    T* new_p) const {
      std::size_t off = 0;
      constexpr std::size_t last = sizeof...(X) - 1;
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((std::get<I>(steps)(leaf, u, p, in + off, out + off, n),
          off += std::tuple_element_t<I, std::tuple<X...>>::slots),
         ...);
      }(std::make_index_sequence<last>{});
      detail::kernel_apply(std::get<last>(steps), leaf, u, p, in + off, out + off, n, new_p);
    }
    /// The fused form (see detail::update_leaf): every part's prepared batch function, threaded.
    template <class T, class Parts>
    struct prepared {
      Parts parts;
      template <std::size_t J>
      static constexpr std::size_t slot_offset() {
        return []<std::size_t... I>(std::index_sequence<I...>) {
          return (std::size_t{0} + ... + std::tuple_element_t<I, std::tuple<X...>>::slots);
        }(std::make_index_sequence<J>{});
      }
      detail::batch<T> operator()(detail::batch<T> u, std::size_t i, T const* p, T const* const* in,
                                  T* const* out) const {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          ((u = std::get<I>(parts)(u, i, p, in + slot_offset<I>(), out + slot_offset<I>())), ...);
        }(std::index_sequence_for<X...>{});
        return u;
      }
      /// The update and new_p = p + u: the last part's own apply where it has one (scale's fma).
      detail::batch<T> apply_update(detail::batch<T> u, std::size_t i, T const* p, T const* const* in,
                                    T* const* out) const {
        constexpr std::size_t last = sizeof...(X) - 1;
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          ((u = std::get<I>(parts)(u, i, p, in + slot_offset<I>(), out + slot_offset<I>())), ...);
        }(std::make_index_sequence<last>{});
        return detail::prepared_apply(std::get<last>(parts), u, i, p, in + slot_offset<last>(), out + slot_offset<last>());
      }
    };
    template <class T>
      requires detail::all_preparable<T, Steps>
    auto prepare(std::size_t leaf) const {
      auto parts = [&]<std::size_t... I>(std::index_sequence<I...>) {
        return std::make_tuple(std::get<I>(steps).template prepare<T>(leaf)...);
      }(std::index_sequence_for<X...>{});
      return prepared<T, decltype(parts)>{std::move(parts)};
    }
  };

  template <class G, class S, class P>
  auto begin(G const& grads, S const& state, P const& params) const {
    auto steps = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::make_tuple(std::get<I>(parts).begin(grads, std::get<I>(state), params)...);
    }(std::index_sequence_for<X...>{});
    return step_t<decltype(steps)>{std::move(steps)};
  }

  template <class Step, class S, class Slots>
  auto finish(Step const& step, S const& state, Slots&& new_slots) const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::make_tuple(std::get<I>(parts).finish(std::get<I>(step.steps), std::get<I>(state),
                                                       take<I>(new_slots))...);
    }(std::index_sequence_for<X...>{});
  }

 private:
  /// The slot trees of part I: its X::slots trees after those of the parts before it.
  template <std::size_t I, class Slots>
  static auto take(Slots& s) {
    constexpr std::size_t off = []<std::size_t... J>(std::index_sequence<J...>) {
      return (std::size_t{0} + ... + std::tuple_element_t<J, std::tuple<X...>>::slots);
    }(std::make_index_sequence<I>{});
    constexpr std::size_t k = std::tuple_element_t<I, std::tuple<X...>>::slots;
    return [&]<std::size_t... J>(std::index_sequence<J...>) { return std::make_tuple(std::get<off + J>(s)...); }(
        std::make_index_sequence<k>{});
  }
};

/// optax.chain(*transformations).
template <class... X>
chain_t<X...> chain(X... x) {
  return chain_t<X...>(std::move(x)...);
}

/// A stateless transformation's per-step kernel: u = f(u, p) on batches (the scalars it needs are
/// in f). Helpers for the transformations of this folder.
namespace detail {

/// Runs body(i) for i = 0, W, 2W, ... < n (n is a multiple of the batch width W).
template <class T, class Body>
void for_batches(std::size_t n, Body&& body) {
  for (std::size_t i = 0; i < n; i += batch<T>::size) body(i);
}

template <class T>
batch<T> load(T const* p) {
  return batch<T>::load_unaligned(p);
}

/// Stateless transformations: no slots, the state given back unchanged.
struct stateless {
  static constexpr std::size_t slots = 0;
  template <class P>
  empty_state init(P const&) const {
    return {};
  }
  template <class S>
  std::tuple<> slot_trees(S const&) const {
    return {};
  }
  template <class Step, class S>
  S finish(Step const&, S const& state, std::tuple<>) const {
    return state;
  }
};

}  // namespace detail

}  // namespace tessera::optim
