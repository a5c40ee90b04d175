#pragma once
// Joining and cutting (jnp.concatenate, jnp.stack, jnp.split, jax.lax.slice and slice_in_dim,
// jax.lax.dynamic_slice and dynamic_update_slice, jnp.pad, jnp.flip, jnp.roll) with JAX's
// sharding rules: every result keeps its (first) operand's sharding, even along a sharded
// dimension whose size changes; on Explicit axes JAX's refusals are ours (differently sharded
// operands at compile time, a sharded dimension cut to a size its axes do not divide at run
// time); on Auto axes nothing is refused: operands are read in whatever layout they have, and a
// result whose size a sharded dimension's axes do not divide keeps that sharding with uneven
// blocks (tessera's blocks are ceil-divided, the last ones smaller), where JAX's compiler would
// choose a layout of its own.
//
// How the data moves. Most of these operations copy boxes: each operand's box lands, shifted,
// somewhere in the result (concatenate's operands side by side, a slice's window at the
// origin, pad's operand at its low widths, roll's two halves swapped). Within one process each
// device writes its block of the result by copying the parts of those boxes it needs from
// whichever device holds them, reading each byte once, as a reshard does; so a concatenate
// along a sharded dimension moves only the rows that change device, never whole operands.
// explain() lists that movement as one collective-permute with the most bytes one device reads
// from others. Across processes an operand is first resharded to a layout in which each device
// holds what its block needs (the touched dimension replicated), and each device then copies
// from its own block only. flip and the strided slice are per-element maps: their operand is
// gathered along the touched dimensions (an all-gather where they are sharded) first.

#include <algorithm>
#include <any>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/array/block_copy.hpp"
#include "tessera/array/queued_build.hpp"
#include "tessera/core/join_cut_diagnostics.hpp"
#include "tessera/core/shape_diagnostics.hpp"
#include "tessera/core/sharding_rules.hpp"
#include "tessera/detail/unique_function.hpp"
#include "tessera/expr/computed.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/expr/functions.hpp"
#include "tessera/expr/promote.hpp"
#include "tessera/expr/shape_ops.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera {

namespace detail::jc {

/// Where one operand's elements go in the result: result index = operand index + delta, for the
/// operand indices inside `window` (stack's operands have the new axis as a size-1 dimension).
template <std::size_t M>
struct piece {
  std::size_t operand = 0;
  std::array<long long, M> delta{};
  std::array<tessera::slice, M> window{};
};

/// One distinct block of an operand and the devices of this process that hold a copy of it.
template <class T, std::size_t M>
struct held_block {
  std::array<tessera::slice, M> block{};
  std::vector<std::pair<int, T const*>> copies;  // device id, its data (null while planning)
};

/// An operand block of rank N as a block of rank M (stack: a size-1 dimension [0, 1) at `axis`).
template <std::size_t M, std::size_t N>
std::array<tessera::slice, M> expanded(std::array<tessera::slice, N> const& b, std::size_t axis) {
  if constexpr (M == N) {
    return b;
  } else {
    std::array<tessera::slice, M> out{};
    for (std::size_t i = 0, k = 0; i < M; ++i) out[i] = i == axis ? tessera::slice{0, 1} : b[k++];
    return out;
  }
}

/// The distinct blocks of an operand laid out by sharding s, with the copies on devices `here`
/// accepts; `data(p)` gives position p's block (null while planning).
template <class T, std::size_t M, std::size_t N, class S, class Here, class Data>
std::vector<held_block<T, M>> blocks_of(S const& s, shape_t<N> const& shape, std::size_t axis, Here here, Data data) {
  std::vector<held_block<T, M>> out;
  auto const& ids = s.device_ids();
  for (std::size_t p = 0; p < ids.size(); ++p) {
    if (!here(ids[p])) continue;
    auto const b = expanded<M>(s.block(p, shape), axis);
    auto it = std::find_if(out.begin(), out.end(), [&](auto const& h) { return h.block == b; });
    if (it == out.end()) it = out.insert(out.end(), held_block<T, M>{b, {}});
    it->copies.emplace_back(ids[p], data(p));
  }
  return out;
}

inline std::size_t overlap(long long a0, long long a1, long long b0, long long b1) {
  long long const lo = std::max(a0, b0), hi = std::min(a1, b1);
  return hi > lo ? static_cast<std::size_t>(hi - lo) : 0;
}

/// How a result is assembled from boxes of its operands (see piece), and, for pad, the value of
/// what no box covers.
template <class T, std::size_t M>
struct assembly {
  std::vector<piece<M>> pieces;
  std::vector<std::vector<held_block<T, M>>> sources;  // per operand
  std::optional<T> fill;
  bool own_only = false;  // read only the writing device's copies (across processes)
  char const* what = "";

  /// Writes device `device`'s block `ob` of the result into out (unless dry); returns the bytes
  /// it reads from other devices. Throws if some element it needs is held by no device it may
  /// read (a bug in the choice of source layout: never silent).
  std::size_t write(int device, std::array<tessera::slice, M> const& ob, T* out, bool dry) const {
    std::size_t moved = 0;
    if (fill && !dry) std::fill(out, out + element_count(block_shape(ob)), *fill);
    for (auto const& pc : pieces) {
      std::size_t expected = 1;
      for (std::size_t d = 0; d < M; ++d)
        expected *= overlap(static_cast<long long>(pc.window[d].start) + pc.delta[d],
                            static_cast<long long>(pc.window[d].stop) + pc.delta[d], static_cast<long long>(ob[d].start),
                            static_cast<long long>(ob[d].stop));
      if (expected == 0) continue;
      std::size_t got = 0;
      for (auto const& hb : sources[pc.operand]) {
        std::pair<int, T const*> from{-1, nullptr};
        for (auto const& c : hb.copies)
          if (c.first == device) from = c;
        if (from.first < 0) {
          if (own_only || hb.copies.empty()) continue;
          from = hb.copies.front();
        }
        // One frame of non-negative coordinates for both sides: the operand's shifted by delta
        // where delta >= 0, the result's shifted by -delta where it is negative.
        std::array<tessera::slice, M> sb{}, db{}, region{};
        std::size_t n = 1;
        for (std::size_t d = 0; d < M; ++d) {
          long long const dl = pc.delta[d];
          std::size_t const up = dl > 0 ? static_cast<std::size_t>(dl) : 0, down = dl < 0 ? static_cast<std::size_t>(-dl) : 0;
          sb[d] = {hb.block[d].start + up, hb.block[d].stop + up};
          db[d] = {ob[d].start + down, ob[d].stop + down};
          std::size_t const lo = std::max({sb[d].start, db[d].start, pc.window[d].start + up});
          std::size_t const hi = std::min({sb[d].stop, db[d].stop, pc.window[d].stop + up});
          region[d] = {lo, hi > lo ? hi : lo};
          n *= region[d].size();
        }
        if (n == 0) continue;
        got += n;
        if (from.first != device) moved += n * sizeof(T);
        if (!dry) copy_region(from.second, sb, out, db, region);
      }
      if (got != expected)
        throw std::logic_error(std::string("tessera: internal: ") + what +
                               " found no device it may read holding part of an operand");
    }
    return moved;
  }
};

/// Set by tests: assemble as across processes (operands resharded to their portable layouts,
/// each device reading its own blocks only) within one process.
inline thread_local bool force_portable = false;

/// An operand of an assembly and the layout it is moved to across processes (a canonical spec).
template <auto Src, class X>
struct sourced {
  X x;
  std::size_t inserted = static_cast<std::size_t>(-1);  // stack: the new axis
};
template <auto Src, class X>
sourced<Src, X> source(X x, std::size_t inserted = static_cast<std::size_t>(-1)) {
  return {std::move(x), inserted};
}

/// The mesh axes any of the specs uses, in mesh order (what explain() names a move over).
template <class Mesh, std::size_t... R>
std::vector<std::string> axes_used(std::array<dim_spec, R> const&... specs) {
  std::vector<std::string> out;
  for (std::size_t a = 0; a < Mesh::rank; ++a) {
    bool used = false;
    auto one = [&](auto const& s) {
      for (auto const& d : s) used = used || d.uses(Mesh::axes[a].name);
    };
    (one(specs), ...);
    if (used) out.emplace_back(Mesh::axes[a].name.view());
  }
  return out;
}

template <class X>
using own_array_t = array_with_spec<typename operand_traits<X>::value_type, operand_traits<X>::rank,
                                    typename operand_traits<X>::mesh_type, canonical_spec(operand_traits<X>::spec)>;

/// The result A (sharding s, shape) assembled from the operands' boxes (see the file's comment).
template <class A, class... Ops>
computed<A> assemble(typename A::sharding_type s, shape_t<A::rank> shape, char const* what,
                     std::vector<piece<A::rank>> pieces, std::optional<typename A::value_type> fill, Ops... ops) {
  using T = typename A::value_type;
  constexpr std::size_t M = A::rank;
  using Mesh = typename A::sharding_type::mesh_type;
  auto across = [s, what] {
    auto const pool = pool_for(s, what);
    return force_portable || pool->spans_processes(std::span<int const>(s.device_ids()));
  };
  auto make = [=]() -> A {
    bool const portable = across();
    auto const pool = pool_for(s, what);
    if (!portable && pool->queues_here()) {
      // Queued (asynchronous dispatch): the operands are evaluated (queued too), and the first
      // device to run takes their blocks' addresses, after the work that writes them (queued
      // before); the task holds the operands, so their blocks live until every device wrote.
      struct queued_assembly {
        assembly<T, M> as;
        std::once_flag once;
        unique_function<void(assembly<T, M>&)> resolve;
      };
      auto q = std::make_shared<queued_assembly>();
      q->as = assembly<T, M>{pieces, {}, fill, false, what};
      std::array<std::size_t, sizeof...(Ops)> const inserted{ops.inserted...};
      q->resolve = [arrays = std::make_tuple(evaluated_as<canonical_spec(operand_traits<decltype(ops.x)>::spec)>(ops.x)...),
                    inserted, pool](assembly<T, A::rank>& as) {
        std::size_t i = 0;
        std::apply(
            [&](auto const&... arr) {
              (as.sources.push_back(blocks_of<T, A::rank>(
                   arr.sharding(), arr.shape(), inserted[i++], [&](int d) { return pool->is_local(d); },
                   [&](std::size_t p) { return arr.block_data(p); })),
               ...);
            },
            arrays);
      };
      return build_array_queued<T, M, typename A::sharding_type>(
          s, shape, what, [q, s](std::size_t pos, std::array<tessera::slice, A::rank> const& block, T* out) {
            call_once(q->once, [&] { q->resolve(q->as); });
            q->as.write(s.device_ids()[pos], block, out, false);
          });
    }
    assembly<T, M> as{pieces, {}, fill, portable, what};
    std::vector<std::any> keep;
    auto add = [&]<auto Src, class X>(sourced<Src, X> const& o) {
      auto one = [&](auto const& arr) {
        keep.emplace_back(arr);
        as.sources.push_back(blocks_of<T, M>(
            arr.sharding(), arr.shape(), o.inserted, [&](int d) { return pool->is_local(d); },
            [&](std::size_t p) { return arr.block_data(p); }));
      };
      if (portable) one(evaluated_as<Src>(o.x));
      else one(evaluated_as<canonical_spec(operand_traits<X>::spec)>(o.x));
    };
    (add(ops), ...);
    return build_array<T, M, typename A::sharding_type>(
        s, shape, what, [&](std::size_t pos, std::array<tessera::slice, M> const& block, T* out) {
          as.write(s.device_ids()[pos], block, out, false);
        });
  };
  auto plan = [=](std::vector<collective_event>& out) {
    bool const portable = across();
    assembly<T, M> as{pieces, {}, fill, portable, what};
    auto add = [&]<auto Src, class X>(sourced<Src, X> const& o) {
      auto one = [&]<auto L>() {
        using SX = named_sharding<Mesh, spec_type_t<L>>;
        as.sources.push_back(blocks_of<T, M>(SX(s.mesh()), shape_of(o.x), o.inserted, [](int) { return true; },
                                             [](std::size_t) { return static_cast<T const*>(nullptr); }));
      };
      if (portable) {
        plan_as<Src>(o.x, out);
        one.template operator()<Src>();
      } else {
        plan_of(o.x, out);
        one.template operator()<canonical_spec(operand_traits<X>::spec)>();
      }
    };
    (add(ops), ...);
    std::size_t bytes = 0;
    for (std::size_t p = 0; p < s.num_devices(); ++p)
      bytes = std::max(bytes, as.write(s.device_ids()[p], s.block(p, shape), nullptr, true));
    if (bytes > 0) {
      auto axes = axes_used<Mesh>(operand_traits<A>::spec, canonical_spec(operand_traits<decltype(ops.x)>::spec)...);
      out.push_back(collective_event{"collective-permute", std::move(axes), bytes});
    }
  };
  return computed<A>(std::move(s), shape, std::move(make), std::move(plan));
}

/// `spec` with the dimensions in `dims` (a bit mask) made None: the layout in which every
/// device holds those dimensions whole.
template <std::size_t N>
constexpr std::array<dim_spec, N> without(std::array<dim_spec, N> s, unsigned long long dims) {
  for (std::size_t d = 0; d < N; ++d)
    if (dims >> d & 1ull) s[d] = dim_spec{};
  return canonical_spec(s);
}
constexpr unsigned long long all_dims = ~0ull;

/// The first dimension where a and b differ on an Explicit axis (N when none).
template <class Mesh, std::size_t N>
constexpr std::size_t explicit_difference(std::array<dim_spec, N> const& a, std::array<dim_spec, N> const& b) {
  for (std::size_t d = 0; d < N; ++d)
    if (!(a[d] == b[d]) && (has_explicit_axis(a[d], Mesh::axes) || has_explicit_axis(b[d], Mesh::axes))) return d;
  return N;
}

/// JAX's check of a result that keeps its operand's sharding while sharded dimensions change
/// size: on Explicit axes the new size must divide by the axes' devices. `op` is JAX's word
/// ("slicing", "padding", "split", "dynamic_slice").
template <class X, std::size_t N>
void check_sharded_sizes(X const& x, shape_t<N> const& in, shape_t<N> const& out, char const* name, char const* op) {
  using tr = operand_traits<X>;
  using Mesh = typename tr::mesh_type;
  using S = named_sharding<Mesh, spec_type_t<canonical_spec(tr::spec)>>;
  S const s(*mesh_of(x));
  for (std::size_t d = 0; d < N; ++d) {
    if (!has_explicit_axis(tr::spec[d], Mesh::axes) || in[d] == out[d]) continue;
    std::size_t const k = s.num_shards(d);
    if (k <= 1 || out[d] % k == 0) continue;
    std::string axes;
    for (std::size_t a = 0; a < tr::spec[d].count(); ++a) (axes += a ? ", " : "") += tr::spec[d].axis(a).view();
    throw std::invalid_argument(std::string("tessera::") + name + ": " + op + " on sharded dims where out dim (" +
                                std::to_string(out[d]) + ") is not divisible by mesh axes (" + std::to_string(k) +
                                ") with spec (" + axes + ") is not implemented. Got input type=" +
                                operand_text<typename tr::value_type, N>(in, tr::spec) +
                                " and output shape=" + shape_string(out) + " (JAX's ShardingTypeError)");
  }
}

template <class X>
using mesh_t = typename operand_traits<X>::mesh_type;

/// The first operand whose spec differs from the first's on Explicit axes and the dimension: (operand, dim), or (0, 0).
template <class Mesh, std::size_t N, class... Xs>
constexpr std::pair<std::size_t, std::size_t> first_explicit_mismatch(std::array<dim_spec, N> const& first) {
  std::size_t k = 0;
  std::pair<std::size_t, std::size_t> r{0, 0};
  auto one = [&](auto const& s) {
    std::size_t const d = explicit_difference<Mesh>(canonical_spec(first), canonical_spec(s));
    if (r.first == 0 && d < N) r = {k, d};
    ++k;
  };
  (one(operand_traits<Xs>::spec), ...);
  return r;
}

template <class... Xs>
inline constexpr std::size_t first_rank = std::get<0>(std::make_tuple(operand_traits<Xs>::rank...));

/// The index of the first operand whose rank differs from the first's (0 when none).
template <class... Xs>
constexpr std::size_t rank_mismatch() {
  constexpr std::array<std::size_t, sizeof...(Xs)> r{operand_traits<Xs>::rank...};
  for (std::size_t i = 1; i < r.size(); ++i)
    if (r[i] != r[0]) return i;
  return 0;
}
template <class... Xs>
constexpr std::size_t mesh_mismatch() {
  using M0 = std::tuple_element_t<0, std::tuple<mesh_t<Xs>...>>;
  constexpr std::array<bool, sizeof...(Xs)> same{std::is_same_v<M0, mesh_t<Xs>>...};
  for (std::size_t i = 1; i < same.size(); ++i)
    if (!same[i]) return i;
  return 0;
}

/// The operand converted to T where its element type differs (jnp promotes joined operands).
template <class T, class X>
auto converted(X x) {
  if constexpr (std::is_same_v<typename operand_traits<X>::value_type, T>) return x;
  else return make_elementwise<op::convert, T, T>(std::move(x));
}

template <class X, class... Xs>
struct join_types {
  using T = typename operand_traits<X>::value_type;
};
template <class X, class Y, class... Xs>
struct join_types<X, Y, Xs...> {
  using T = promote_t<typename operand_traits<X>::value_type, typename join_types<Y, Xs...>::T>;
};

/// Throws unless every operand's shape equals the first's outside dimension `skip` (none: N).
template <std::size_t N, class... Xs>
std::vector<shape_t<N>> joined_shapes(char const* name, std::size_t skip, Xs const&... xs) {
  std::vector<shape_t<N>> shapes{shape_of(xs)...};
  for (std::size_t k = 1; k < shapes.size(); ++k)
    for (std::size_t d = 0; d < N; ++d)
      if (d != skip && shapes[k][d] != shapes[0][d])
        throw std::invalid_argument(
            std::string("tessera::") + name + ": " +
            (skip < N ? "all the input array dimensions except for the concatenation axis must match exactly, but "
                      : "all input arrays must have the same shape, but ") +
            "along dimension " + std::to_string(d) + ", the array at index 0 has size " +
            std::to_string(shapes[0][d]) + " and the array at index " + std::to_string(k) + " has size " +
            std::to_string(shapes[k][d]) + " (shapes " + shape_string(shapes[0]) + " and " + shape_string(shapes[k]) +
            ")");
  return shapes;
}

template <int Axis, bool Stack, class... Xs>
auto join(Xs... xs) {
  using X0 = std::tuple_element_t<0, std::tuple<Xs...>>;
  using Mesh = mesh_t<X0>;
  constexpr std::size_t N = operand_traits<X0>::rank;
  constexpr std::size_t M = Stack ? N + 1 : N;
  using T = typename join_types<Xs...>::T;
  constexpr std::size_t bad_rank = rank_mismatch<Xs...>();
  constexpr std::size_t bad_mesh = mesh_mismatch<Xs...>();
  constexpr bool axis_ok = Stack ? (Axis <= static_cast<int>(N) && Axis >= -static_cast<int>(N) - 1)
                                 : axis_in_range(Axis, N);
  using failed = failed_expression<T, M, Mesh>;
  if constexpr ((is_failed_expression<Xs>::value || ...)) {
    return failed{};
  } else if constexpr (bad_mesh != 0) {
    static_assert(diagnostic::joined_operands_are_on_different_meshes<bad_mesh, false>::value);
    return failed{};
  } else if constexpr (bad_rank != 0) {
    static_assert(diagnostic::joined_operands_have_different_ranks<
                  bad_rank, std::array<std::size_t, sizeof...(Xs)>{operand_traits<Xs>::rank...}[bad_rank], N, false>::value);
    return failed{};
  } else if constexpr (Stack && !axis_ok) {
    static_assert(diagnostic::stack_axis_out_of_range<Axis, N, false>::value);
    return failed{};
  } else if constexpr (!Stack && !axis_ok) {
    static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, false>::value);
    return failed{};
  } else if constexpr (N == 0 && !Stack) {
    static_assert(N != 0, "tessera::concatenate: zero-dimensional arrays cannot be concatenated (JAX's words)");
    return failed{};
  } else {
    constexpr auto bad = first_explicit_mismatch<Mesh, N, Xs...>(operand_traits<X0>::spec);
    if constexpr (bad.first != 0) {
      static_assert(diagnostic::all_operands_should_have_the_same_sharding<bad.first, bad.second, false>::value);
      return failed{};
    } else {
      constexpr std::size_t axis = Stack ? normalize_axis(Axis, N + 1) : normalize_axis(Axis, N);
      static constexpr auto first = canonical_spec(operand_traits<X0>::spec);
      static constexpr auto out_spec = [] {
        if constexpr (Stack) {
          std::array<dim_spec, M> s{};
          for (std::size_t i = 0, k = 0; i < M; ++i) s[i] = i == axis ? dim_spec{} : first[k++];
          return canonical_spec(s);
        } else {
          return first;
        }
      }();
      // Across processes each operand moves to the first's layout, with concatenate's axis whole.
      static constexpr auto src = Stack ? first : without(first, 1ull << axis);
      using A = array_with_spec<T, M, Mesh, out_spec>;
      char const* const name = Stack ? "stack" : "concatenate";
      auto const shapes = joined_shapes<N>(name, Stack ? N : axis, xs...);
      shape_t<M> shape{};
      std::vector<piece<M>> pieces;
      std::size_t offset = 0, k = 0;
      for (auto const& sh : shapes) {
        piece<M> pc;
        pc.operand = k;
        auto const ex = expanded<M>(full_block(sh), axis);
        pc.window = ex;
        pc.delta[axis] = static_cast<long long>(Stack ? k : offset);
        offset += Stack ? 1 : sh[axis];
        pieces.push_back(pc);
        ++k;
      }
      for (std::size_t d = 0; d < M; ++d) shape[d] = expanded<M>(full_block(shapes[0]), axis)[d].size();
      shape[axis] = offset;
      typename A::sharding_type const s(*mesh_of(std::get<0>(std::tie(xs...))));
      return assemble<A>(s, shape, name, std::move(pieces), std::nullopt,
                         source<src>(converted<T>(std::move(xs)), Stack ? axis : static_cast<std::size_t>(-1))...);
    }
  }
}

/// The result of cutting a box out of one operand (slice, dynamic_slice, split's pieces):
/// x's sharding, `shape`, the operand's window starting at `start`.
template <auto Src, class X, std::size_t N>
auto cut(X x, shape_t<N> const& start, shape_t<N> const& shape, char const* name) {
  using tr = operand_traits<X>;
  using A = own_array_t<X>;
  piece<N> pc;
  for (std::size_t d = 0; d < N; ++d) {
    pc.window[d] = {start[d], start[d] + shape[d]};
    pc.delta[d] = -static_cast<long long>(start[d]);
  }
  typename A::sharding_type const s(*mesh_of(x));
  (void)sizeof(tr);
  return assemble<A>(s, shape, name, {pc}, std::nullopt, source<Src>(std::move(x)));
}

/// A node sharing x's evaluation among several results (split's).
template <class X>
auto shared(X x) {
  using A = own_array_t<X>;
  static constexpr auto own = canonical_spec(operand_traits<X>::spec);
  typename A::sharding_type s(*mesh_of(x));
  auto const shape = shape_of(x);
  return computed<A>(
      s, shape, [x] { return A(evaluated_as<own>(x)); }, [x](std::vector<collective_event>& out) { plan_of(x, out); });
}

/// Python's slice bound: negative counts from the end, then clamped to [0, n].
inline std::size_t python_bound(long long i, std::size_t n) {
  long long const nn = static_cast<long long>(n);
  if (i < 0) i += nn;
  return static_cast<std::size_t>(std::clamp(i, 0ll, nn));
}

template <int Axis, class X>
auto split_at(X x, std::vector<long long> const& indices, bool check) {
  constexpr std::size_t N = operand_traits<X>::rank;
  constexpr std::size_t axis = normalize_axis(Axis, N);
  static constexpr auto src = without(canonical_spec(operand_traits<X>::spec), 1ull << axis);
  auto const whole = shared(std::move(x));
  auto const in = whole.shape();
  using R = decltype(cut<src>(whole, in, in, "split"));
  std::vector<R> out;
  std::size_t prev = 0;
  for (std::size_t i = 0; i <= indices.size(); ++i) {
    std::size_t const stop = i < indices.size() ? python_bound(indices[i], in[axis]) : in[axis];
    std::size_t const start = std::min(prev, in[axis]);
    shape_t<N> st{}, sh = in;
    st[axis] = start;
    sh[axis] = stop > start ? stop - start : 0;
    if (check) check_sharded_sizes(whole, in, sh, "split", "split");
    out.push_back(cut<src>(whole, st, sh, "split"));
    prev = stop;
  }
  return out;
}

template <class I, std::size_t K>
std::array<long long, K> longs(I const (&v)[K]) {
  std::array<long long, K> a{};
  for (std::size_t i = 0; i < K; ++i) a[i] = static_cast<long long>(v[i]);
  return a;
}

/// jax.lax.slice's result: `check` is JAX's divisibility check (off for the cotangents of grad,
/// which keep their primal's layout whatever their size).
template <class X, std::size_t N>
auto static_slice(X x, std::array<long long, N> const& start, std::array<long long, N> const& stop,
                  std::array<long long, N> const& step, char const* name, char const* jax_op, bool check = true) {
  using tr = operand_traits<X>;
  using T = typename tr::value_type;
  using A = own_array_t<X>;
  shape_t<N> const in = shape_of(x);
  shape_t<N> out{}, st{};
  bool strided = false;
  for (std::size_t d = 0; d < N; ++d) {
    if (start[d] < 0 || stop[d] < start[d] || stop[d] > static_cast<long long>(in[d]) || step[d] < 1)
      throw std::invalid_argument(std::string("tessera::") + name + ": dimension " + std::to_string(d) + " of shape " +
                                  shape_string(in) + " cannot be sliced from " + std::to_string(start[d]) + " to " +
                                  std::to_string(stop[d]) + " with step " + std::to_string(step[d]) +
                                  " (JAX needs 0 <= start <= stop <= size and step >= 1)");
    st[d] = static_cast<std::size_t>(start[d]);
    out[d] = static_cast<std::size_t>((stop[d] - start[d] + step[d] - 1) / step[d]);
    strided = strided || (step[d] > 1 && out[d] > 1);
  }
  if (check) check_sharded_sizes(x, in, out, name, jax_op);
  static constexpr auto replicated = without(canonical_spec(tr::spec), all_dims);
  if (!strided) {
    auto node = cut<replicated>(std::move(x), st, out, name);
    return node;
  }
  // A per-element map: the operand gathered whole first (the first version of the strided slice).
  auto kernel = gathering<N>(
      [st, step](std::array<std::size_t, N> const& g, std::array<std::size_t, N>& gi, T&) {
        for (std::size_t d = 0; d < N; ++d) gi[d] = st[d] + g[d] * static_cast<std::size_t>(step[d]);
        return true;
      },
      name);
  typename A::sharding_type const s(*mesh_of(x));
  return relayout<A, replicated>(std::move(x), s, out, name, kernel);
}

/// JAX's reading of a dynamic start: a negative one counts from the end (allow_negative_indices),
/// then it is clamped into [0, size - window].
inline std::size_t clamped_start(long long start, std::size_t size, std::size_t window) {
  if (start < 0) start += static_cast<long long>(size);
  long long const hi = static_cast<long long>(size) - static_cast<long long>(window);
  return static_cast<std::size_t>(std::clamp(start, 0ll, hi < 0 ? 0ll : hi));
}

template <class X, std::size_t N>
auto dynamic_cut(X x, std::array<long long, N> const& starts, std::array<long long, N> const& sizes, bool check = true) {
  shape_t<N> const in = shape_of(x);
  shape_t<N> st{}, sh{};
  for (std::size_t d = 0; d < N; ++d) {
    if (sizes[d] < 0 || sizes[d] > static_cast<long long>(in[d]))
      throw std::invalid_argument("tessera::dynamic_slice: slice size " + std::to_string(sizes[d]) + " of dimension " +
                                  std::to_string(d) + " does not fit the operand's shape " + shape_string(in) +
                                  " (JAX: 'Slice size at index " + std::to_string(d) +
                                  " in gather op is out of range')");
    sh[d] = static_cast<std::size_t>(sizes[d]);
    st[d] = clamped_start(starts[d], in[d], sh[d]);
  }
  if (check) check_sharded_sizes(x, in, sh, "dynamic_slice", "dynamic_slice");
  static constexpr auto replicated = without(canonical_spec(operand_traits<X>::spec), all_dims);
  return cut<replicated>(std::move(x), st, sh, "dynamic_slice");
}

template <class X, class U, std::size_t N>
auto update_slice(X x, U u, std::array<long long, N> const& starts) {
  using A = own_array_t<X>;
  shape_t<N> const in = shape_of(x), us = shape_of(u);
  piece<N> keep, put;
  keep.operand = 0;
  keep.window = full_block(in);
  put.operand = 1;
  put.window = full_block(us);
  for (std::size_t d = 0; d < N; ++d) {
    if (us[d] > in[d])
      throw std::invalid_argument("tessera::dynamic_update_slice: the update's shape " + shape_string(us) +
                                  " is larger than the operand's " + shape_string(in) + " in dimension " +
                                  std::to_string(d));
    put.delta[d] = static_cast<long long>(clamped_start(starts[d], in[d], us[d]));
  }
  static constexpr auto own = canonical_spec(operand_traits<X>::spec);
  static constexpr auto whole = without(canonical_spec(operand_traits<U>::spec), all_dims);
  typename A::sharding_type const s(*mesh_of(x));
  return assemble<A>(s, in, "dynamic_update_slice", {keep, put}, std::nullopt, source<own>(std::move(x)),
                     source<whole>(std::move(u)));
}

template <class X, std::size_t N>
auto make_pad(X x, std::array<std::array<long long, 2>, N> const& widths, typename operand_traits<X>::value_type value,
              bool check = true) {
  using A = own_array_t<X>;
  shape_t<N> const in = shape_of(x);
  shape_t<N> out{};
  piece<N> pc;
  pc.window = full_block(in);
  for (std::size_t d = 0; d < N; ++d) {
    if (widths[d][0] < 0 || widths[d][1] < 0)
      throw std::invalid_argument("tessera::pad: the pad widths of dimension " + std::to_string(d) + " are (" +
                                  std::to_string(widths[d][0]) + ", " + std::to_string(widths[d][1]) +
                                  "); jnp.pad takes no negative widths ('index can't contain negative values')");
    out[d] = in[d] + static_cast<std::size_t>(widths[d][0] + widths[d][1]);
    pc.delta[d] = widths[d][0];
  }
  if (check) check_sharded_sizes(x, in, out, "pad", "padding");
  static constexpr auto replicated = without(canonical_spec(operand_traits<X>::spec), all_dims);
  typename A::sharding_type const s(*mesh_of(x));
  return assemble<A>(s, out, "pad", {pc}, value, source<replicated>(std::move(x)));
}

template <std::size_t Axis, class X>
auto make_roll(X x, long long shift) {
  constexpr std::size_t N = operand_traits<X>::rank;
  using A = own_array_t<X>;
  shape_t<N> const in = shape_of(x);
  std::size_t const n = in[Axis];
  long long const nn = static_cast<long long>(n);
  std::size_t const s = n == 0 ? 0 : static_cast<std::size_t>(((shift % nn) + nn) % nn);
  piece<N> head, tail;  // [0, n - s) moves up by s; [n - s, n) moves to the front
  head.window = full_block(in);
  tail.window = full_block(in);
  head.window[Axis] = {0, n - s};
  tail.window[Axis] = {n - s, n};
  head.delta[Axis] = static_cast<long long>(s);
  tail.delta[Axis] = -static_cast<long long>(n - s);
  static constexpr auto src = without(canonical_spec(operand_traits<X>::spec), 1ull << Axis);
  typename A::sharding_type const sh(*mesh_of(x));
  return assemble<A>(sh, in, "roll", {head, tail}, std::nullopt, source<src>(std::move(x)));
}

/// The first axis out of range (0 when none).
template <std::size_t N, int... Axes>
constexpr int first_bad_axis() {
  int r = 0;
  bool found = false;
  ((!found && !axis_in_range(Axes, N) ? (r = Axes, found = true) : false), ...);
  return r;
}

template <std::size_t... Axes, class X>
auto make_flip(X x) {
  constexpr std::size_t N = operand_traits<X>::rank;
  using T = typename operand_traits<X>::value_type;
  using A = own_array_t<X>;
  constexpr unsigned long long mask = ((1ull << Axes) | ... | 0ull);
  static constexpr auto src = without(canonical_spec(operand_traits<X>::spec), mask);
  shape_t<N> const in = shape_of(x);
  auto kernel = gathering<N>(
      [in](std::array<std::size_t, N> const& g, std::array<std::size_t, N>& gi, T&) {
        for (std::size_t d = 0; d < N; ++d) gi[d] = (mask >> d & 1ull) ? in[d] - 1 - g[d] : g[d];
        return true;
      },
      "flip");
  typename A::sharding_type const s(*mesh_of(x));
  return relayout<A, src>(std::move(x), s, in, "flip", kernel);
}

/// x's element `index` along `Axis` (stack's cotangent): rank N - 1.
template <std::size_t Axis, class X>
auto take_index(X x, std::size_t index) {
  using tr = operand_traits<X>;
  constexpr std::size_t N = tr::rank;
  using T = typename tr::value_type;
  static constexpr auto src = without(canonical_spec(tr::spec), 1ull << Axis);
  static constexpr auto out_spec = [] {
    std::array<dim_spec, N - 1> s{};
    for (std::size_t i = 0, k = 0; i < N; ++i)
      if (i != Axis) s[k++] = src[i];
    return canonical_spec(s);
  }();
  using A = array_with_spec<T, N - 1, typename tr::mesh_type, out_spec>;
  shape_t<N> const in = shape_of(x);
  shape_t<N - 1> out{};
  for (std::size_t i = 0, k = 0; i < N; ++i)
    if (i != Axis) out[k++] = in[i];
  auto kernel = gathering<N>(
      [index](std::array<std::size_t, N - 1> const& g, std::array<std::size_t, N>& gi, T&) {
        for (std::size_t i = 0, k = 0; i < N; ++i) gi[i] = i == Axis ? index : g[k++];
        return true;
      },
      "stack's cotangent");
  typename A::sharding_type const s(*mesh_of(x));
  return relayout<A, src>(std::move(x), s, out, "stack's cotangent", kernel);
}

/// lax.pad with interior padding of the strided slice's cotangent: g's elements at start +
/// i * step, zeros elsewhere, in a result of `shape` laid out as g.
template <class X, std::size_t N>
auto strided_scatter(X g, shape_t<N> const& shape, shape_t<N> const& start, std::array<long long, N> const& step) {
  using tr = operand_traits<X>;
  using T = typename tr::value_type;
  using A = own_array_t<X>;
  static constexpr auto replicated = without(canonical_spec(tr::spec), all_dims);
  shape_t<N> const gs = shape_of(g);
  auto kernel = gathering<N>(
      [start, step, gs](std::array<std::size_t, N> const& o, std::array<std::size_t, N>& gi, T&) {
        for (std::size_t d = 0; d < N; ++d) {
          if (o[d] < start[d]) return false;
          std::size_t const r = o[d] - start[d], k = static_cast<std::size_t>(step[d]);
          if (r % k != 0 || r / k >= gs[d]) return false;
          gi[d] = r / k;
        }
        return true;
      },
      "slice's cotangent");
  typename A::sharding_type const s(*mesh_of(g));
  return relayout<A, replicated>(std::move(g), s, shape, "slice's cotangent", kernel);
}

}  // namespace detail::jc

/// jnp.concatenate([x, ...], axis=Axis): the operands' shapes agree outside Axis; the result
/// keeps the first operand's sharding, even along a sharded Axis (Explicit: every operand must
/// be sharded alike; Auto: the others are read in their own layouts).
template <int Axis = 0, sharded_expression X, sharded_expression... Xs>
auto concatenate(X&& x, Xs&&... xs) {
  return detail::jc::join<Axis, false>(detail::store(std::forward<X>(x)), detail::store(std::forward<Xs>(xs))...);
}

/// jnp.stack([x, ...], axis=Axis): a new dimension at Axis (None in the spec), the operands'
/// equal shapes and first sharding kept.
template <int Axis = 0, sharded_expression X, sharded_expression... Xs>
auto stack(X&& x, Xs&&... xs) {
  return detail::jc::join<Axis, true>(detail::store(std::forward<X>(x)), detail::store(std::forward<Xs>(xs))...);
}

/// jnp.split(x, n, axis=Axis): n equal pieces (n must divide the size), each with x's sharding.
template <int Axis = 0, sharded_expression X>
auto split(X&& x, std::size_t sections) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  auto xs = detail::store(std::forward<X>(x));
  std::size_t const n = detail::shape_of(xs)[detail::normalize_axis(Axis, N)];
  if (sections == 0 || n % sections != 0)
    throw std::invalid_argument("tessera::split: array split does not result in an equal division (" +
                                std::to_string(n) + " elements in " + std::to_string(sections) + " sections)");
  std::vector<long long> idx;
  for (std::size_t i = 1; i < sections; ++i) idx.push_back(static_cast<long long>(i * (n / sections)));
  return detail::jc::split_at<Axis>(std::move(xs), idx, true);
}
/// jnp.split(x, indices, axis=Axis): pieces between the indices (Python's slice bounds).
template <int Axis = 0, sharded_expression X>
auto split(X&& x, std::vector<long long> const& indices) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, detail::axis_in_range(Axis, N)>::value);
  return detail::jc::split_at<Axis>(detail::store(std::forward<X>(x)), indices, true);
}
/// jnp.split(x, {i, j}, axis=Axis).
template <int Axis = 0, sharded_expression X, std::integral I, std::size_t K>
auto split(X&& x, I const (&indices)[K]) {
  auto const a = detail::jc::longs(indices);
  return split<Axis>(std::forward<X>(x), std::vector<long long>(a.begin(), a.end()));
}

/// The jax.lax names whose spelling would hide tessera's own `slice` (a block's range).
namespace lax {

/// jax.lax.slice(x, start, stop): the box [start, stop), with x's sharding (Explicit: a sharded
/// dimension's new size must divide by its axes, as in JAX).
template <sharded_expression X, std::integral I, std::size_t N>
auto slice(X&& x, I const (&start)[N], I const (&stop)[N]) {
  static_assert(N == detail::operand_traits<detail::stored_t<X>>::rank,
                "tessera::lax::slice: give one start and one stop per dimension of the operand");
  std::array<long long, N> step{};
  step.fill(1);
  return detail::jc::static_slice(detail::store(std::forward<X>(x)), detail::jc::longs(start), detail::jc::longs(stop),
                                  step, "lax::slice", "slicing");
}
/// jax.lax.slice(x, start, stop, strides).
template <sharded_expression X, std::integral I, std::size_t N>
auto slice(X&& x, I const (&start)[N], I const (&stop)[N], I const (&step)[N]) {
  static_assert(N == detail::operand_traits<detail::stored_t<X>>::rank,
                "tessera::lax::slice: give one start, stop and step per dimension of the operand");
  return detail::jc::static_slice(detail::store(std::forward<X>(x)), detail::jc::longs(start), detail::jc::longs(stop),
                                  detail::jc::longs(step), "lax::slice", "slicing");
}

}  // namespace lax

/// jax.lax.slice_in_dim(x, start, stop, step, axis=Axis) (negative bounds count from the end).
template <int Axis = 0, sharded_expression X>
auto slice_in_dim(X&& x, long long start, long long stop, long long step = 1) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  constexpr bool ok = detail::axis_in_range(Axis, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, ok>::value);
  auto xs = detail::store(std::forward<X>(x));
  auto const in = detail::shape_of(xs);
  constexpr std::size_t a = detail::normalize_axis(Axis, N);
  std::array<long long, N> st{}, sp{}, stp{};
  for (std::size_t d = 0; d < N; ++d) {
    sp[d] = static_cast<long long>(in[d]);
    stp[d] = 1;
  }
  long long const n = static_cast<long long>(in[a]);
  st[a] = start < 0 ? start + n : start;
  sp[a] = stop < 0 ? stop + n : stop;
  stp[a] = step;
  return detail::jc::static_slice(std::move(xs), st, sp, stp, "slice_in_dim", "slicing");
}

/// jax.lax.dynamic_slice(x, starts, sizes): starts known at run time, read as JAX reads them (a
/// negative one counts from the end, then clamped into [0, size - slice size]); x's sharding kept.
template <sharded_expression X, std::integral I, std::integral J, std::size_t N>
auto dynamic_slice(X&& x, I const (&starts)[N], J const (&sizes)[N]) {
  static_assert(N == detail::operand_traits<detail::stored_t<X>>::rank,
                "tessera::dynamic_slice: give one start and one size per dimension of the operand");
  return detail::jc::dynamic_cut(detail::store(std::forward<X>(x)), detail::jc::longs(starts), detail::jc::longs(sizes));
}
/// jax.lax.dynamic_slice(x, starts, sizes) with the starts and sizes as arrays.
template <sharded_expression X, std::size_t N>
auto dynamic_slice(X&& x, std::array<long long, N> const& starts, std::array<long long, N> const& sizes) {
  return detail::jc::dynamic_cut(detail::store(std::forward<X>(x)), starts, sizes);
}

namespace detail::jc {
template <class X, class U, std::size_t N>
auto checked_update_slice(X x, U u, std::array<long long, N> const& starts) {
  using tx = operand_traits<X>;
  using tu = operand_traits<U>;
  using Mesh = typename tx::mesh_type;
  constexpr bool same_type = std::is_same_v<typename tx::value_type, typename tu::value_type>;
  constexpr bool shape_ok = same_type && tx::rank == tu::rank;
  static_assert(diagnostic::dynamic_update_slice_update_must_match_the_operand<tx::rank, tu::rank, same_type,
                                                                               shape_ok>::value);
  static_assert(diagnostic::joined_operands_are_on_different_meshes<1, std::is_same_v<Mesh, typename tu::mesh_type>>::value);
  if constexpr (shape_ok && std::is_same_v<Mesh, typename tu::mesh_type>) {
    constexpr std::size_t bad = explicit_difference<Mesh>(canonical_spec(tx::spec), canonical_spec(tu::spec));
    static_assert(
        diagnostic::dynamic_update_slice_operand_sharding_must_equal_update_sharding<bad, (bad == tx::rank)>::value);
    if constexpr (bad == tx::rank) return update_slice(std::move(x), std::move(u), starts);
    else return failed_expression<typename tx::value_type, tx::rank, Mesh>{};
  } else {
    return failed_expression<typename tx::value_type, tx::rank, Mesh>{};
  }
}
}  // namespace detail::jc

/// jax.lax.dynamic_update_slice(x, update, starts): x with `update` written at the starts
/// (clamped as JAX clamps them); x's sharding kept (Explicit: the update must be sharded alike).
template <sharded_expression X, sharded_expression U, std::integral I, std::size_t N>
auto dynamic_update_slice(X&& x, U&& update, I const (&starts)[N]) {
  static_assert(N == detail::operand_traits<detail::stored_t<X>>::rank,
                "tessera::dynamic_update_slice: give one start per dimension of the operand");
  return detail::jc::checked_update_slice(detail::store(std::forward<X>(x)), detail::store(std::forward<U>(update)),
                                          detail::jc::longs(starts));
}
/// jax.lax.dynamic_update_slice(x, update, starts) with the starts as an array.
template <sharded_expression X, sharded_expression U, std::size_t N>
auto dynamic_update_slice(X&& x, U&& update, std::array<long long, N> const& starts) {
  return detail::jc::checked_update_slice(detail::store(std::forward<X>(x)), detail::store(std::forward<U>(update)),
                                          starts);
}

/// jnp.pad(x, ((lo, hi), ...), constant_values=value): x's sharding kept (Explicit: a sharded
/// dimension's new size must divide by its axes, as in JAX).
template <sharded_expression X, std::integral I, std::size_t N>
auto pad(X&& x, I const (&widths)[N][2], detail::value_t<X> value = 0) {
  static_assert(N == detail::operand_traits<detail::stored_t<X>>::rank,
                "tessera::pad: give one (low, high) pair per dimension of the operand");
  std::array<std::array<long long, 2>, N> w{};
  for (std::size_t d = 0; d < N; ++d) w[d] = {static_cast<long long>(widths[d][0]), static_cast<long long>(widths[d][1])};
  return detail::jc::make_pad(detail::store(std::forward<X>(x)), w, value);
}
/// jnp.pad with the widths as an array of (low, high) pairs.
template <sharded_expression X, std::size_t N>
auto pad(X&& x, std::array<std::array<long long, 2>, N> const& widths, detail::value_t<X> value = 0) {
  return detail::jc::make_pad(detail::store(std::forward<X>(x)), widths, value);
}

/// jnp.flip(x, axis=(Axes...)) (every axis when none): x's sharding kept; a flipped sharded
/// dimension is gathered first.
template <int... Axes, sharded_expression X>
auto flip(X&& x) {
  constexpr std::size_t N = detail::operand_traits<detail::stored_t<X>>::rank;
  constexpr bool ok = (detail::axis_in_range(Axes, N) && ...);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<detail::jc::first_bad_axis<N, Axes...>(),
                                                              detail::jc::first_bad_axis<N, Axes...>(), N, ok>::value);
  if constexpr (!ok) {
    return detail::failed_expression<detail::value_t<X>, N, typename detail::operand_traits<detail::stored_t<X>>::mesh_type>{};
  } else if constexpr (sizeof...(Axes) == 0) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return detail::jc::make_flip<I...>(detail::store(std::forward<X>(x)));
    }(std::make_index_sequence<N>{});
  } else {
    return detail::jc::make_flip<detail::normalize_axis(Axes, N)...>(detail::store(std::forward<X>(x)));
  }
}

/// jnp.roll(x, shift, axis=Axis): x's sharding kept. JAX refuses to roll a dimension sharded on
/// Explicit axes; on Auto axes only the elements that change device move.
template <int Axis, sharded_expression X>
auto roll(X&& x, long long shift) {
  using tr = detail::operand_traits<detail::stored_t<X>>;
  constexpr std::size_t N = tr::rank;
  constexpr bool in_range = detail::axis_in_range(Axis, N);
  static_assert(diagnostic::axis_out_of_range_for_the_operand<Axis, Axis, N, in_range>::value);
  if constexpr (!in_range) {
    return detail::failed_expression<detail::value_t<X>, N, typename tr::mesh_type>{};
  } else {
    constexpr std::size_t a = detail::normalize_axis(Axis, N);
    constexpr bool ok = !detail::has_explicit_axis(tr::spec[a], tr::mesh_type::axes);
    static_assert(diagnostic::roll_of_a_dimension_sharded_on_explicit_axes<Axis, ok>::value);
    if constexpr (ok) return detail::jc::make_roll<a>(detail::store(std::forward<X>(x)), shift);
    else return detail::failed_expression<detail::value_t<X>, N, typename tr::mesh_type>{};
  }
}

}  // namespace tessera
