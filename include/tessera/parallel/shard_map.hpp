#pragma once
// jax.shard_map: per-device code. The body runs once per device of the mesh,
// on that device's thread, with the device's blocks of the inputs; its results
// are the blocks of the outputs, laid out by out_specs.

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
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

#include "tessera/detail/xtensor/xadapt.hpp"
#include "tessera/detail/xtensor/xnoalias.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/core/varying_axes.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/parallel/block_functions.hpp"
#include "tessera/parallel/collectives.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/parallel/vma_of.hpp"
#include "tessera/runtime/team.hpp"

namespace tessera {

/// shard_map's in_specs=(P(...), ...): one PartitionSpec per argument.
template <partition_spec_type... S>
struct in_specs_t {
  static constexpr std::size_t size = sizeof...(S);
};
/// in_specs=(P('x'), P()): `tessera::in_specs(P<"x">{}, P<>{})`.
template <partition_spec_type... S>
constexpr in_specs_t<std::remove_cvref_t<S>...> in_specs(S const&...) {
  return {};
}

/// shard_map's out_specs: one PartitionSpec per result.
template <partition_spec_type... S>
struct out_specs_t {
  static constexpr std::size_t size = sizeof...(S);
};
/// out_specs=P(): `tessera::out_specs(P<>{})`; several results return a std::tuple.
template <partition_spec_type... S>
constexpr out_specs_t<std::remove_cvref_t<S>...> out_specs(S const&...) {
  return {};
}

/// JAX's `check_vma=False`: skip the compile-time check that out_specs match what the results
/// vary over (debug builds still compare the copies an out_spec promises are equal).
struct no_check_vma_t {
  explicit constexpr no_check_vma_t() = default;
};
/// Pass as shard_map's last argument for JAX's `check_vma=False`.
inline constexpr no_check_vma_t no_check_vma{};

namespace diagnostic {
/// Fires when a shard_map'd function is called with more or fewer arguments than in_specs has entries.
template <std::size_t Arguments, std::size_t InSpecs, bool Ok>
struct shard_map_arguments_must_match_in_specs {
  static_assert(Ok,
                "tessera::shard_map: the number of arguments differs from the number of in_specs (the two counts are "
                "the arguments of 'shard_map_arguments_must_match_in_specs<arguments, in_specs>' above); give one "
                "PartitionSpec per argument");
  static constexpr bool value = true;
};
/// Fires when the body returns more or fewer results than out_specs has entries.
template <std::size_t Results, std::size_t OutSpecs, bool Ok>
struct shard_map_results_must_match_out_specs {
  static_assert(Ok,
                "tessera::shard_map: the body returns a different number of results than out_specs has entries (the "
                "two counts are the arguments of 'shard_map_results_must_match_out_specs<results, out_specs>' above); "
                "return a std::tuple with one value per out_spec");
  static constexpr bool value = true;
};
/// Fires when a body result is neither a number nor an xtensor expression of static rank.
template <class Result, bool Ok>
struct shard_map_result_must_be_a_block {
  static_assert(Ok,
                "tessera::shard_map: a result of the body must be a number or an xtensor expression whose rank is in "
                "its type (xt::xtensor<T, N>, a block, or an expression of them); the type is the first argument of "
                "'shard_map_result_must_be_a_block<result>' above");
  static constexpr bool value = true;
};
}  // namespace diagnostic

namespace detail {

/// Arguments that make a shard_map call one grad differentiates through (autodiff's tracers
/// specialise it), so this layer need not know them.
template <class T>
struct traced_argument : std::false_type {};
/// A shard_map called with tracers: defined by autodiff/shard_map_grad.hpp.
template <class... Args>
struct traced_shard_map;

/// The results of a body as a tuple, whatever it returned.
template <class R>
auto results_as_tuple(R&& r) {
  if constexpr (is_std_tuple<std::remove_cvref_t<R>>::value) return std::forward<R>(r);
  else return std::tuple<std::remove_cvref_t<R>>(std::forward<R>(r));
}

/// A body's result on one device: its block of the output array and the block's shape.
template <class T, std::size_t N>
struct device_result {
  using value_type = T;
  static constexpr std::size_t rank = N;
  device_buffer<T> buf;
  shape_t<N> shape{};
};

/// A body result evaluated, in one pass, into memory from the device's cache (lazy expressions
/// may point at the blocks, so this runs on the device's thread before the body's frame ends).
template <class V>
auto own_result(V&& v, device_memory* memory) {
  if constexpr (is_scalar_value<V>) {
    using T = typename scalar_type<std::remove_cvref_t<V>>::type;
    device_result<T, 0> r{device_buffer<T>(1, device_buffer<T>::uninitialized, memory), {}};
    *r.buf.data() = static_cast<T>(v);
    return r;
  } else {
    constexpr bool ok = xt::is_xexpression<std::decay_t<V>>::value && has_static_rank_v<V>;
    static_assert(diagnostic::shard_map_result_must_be_a_block<std::remove_cvref_t<V>, ok>::value);
    if constexpr (ok) {
      using T = std::remove_cv_t<typename std::decay_t<V>::value_type>;
      constexpr std::size_t N = static_rank_v<V>;
      shape_t<N> shape{};
      for (std::size_t i = 0; i < N; ++i) shape[i] = static_cast<std::size_t>(v.shape()[i]);
      std::size_t const count = checked_element_count<T>(shape, "shard_map");
      // A collective's result returned as it is: its memory, from this device's cache, becomes
      // the output block (no copy: a 4 MiB all_gather's result took 30% of its shard_map).
      if constexpr (is_local_block<std::remove_cvref_t<V>>::value && !std::is_lvalue_reference_v<V>) {
        if (auto taken = take_result<T, N>(v.data(), count)) return device_result<T, N>{std::move(*taken), shape};
      }
      device_result<T, N> r{device_buffer<T>(count, device_buffer<T>::uninitialized, memory), shape};
      if (count != 0) {
        // A row-major contiguous block or container is copied as memory (xtensor's assignment
        // copied a 4 KiB block element by element: a quarter of an empty shard_map's instructions).
        if constexpr (row_major_contiguous<V>) {  // array/device_put.hpp; its elements are T
          std::copy_n(v.data(), count, r.buf.data());
        } else {
          auto dst = xt::adapt(r.buf.data(), count, xt::no_ownership(), shape);
          xt::noalias(dst) = std::forward<V>(v);
        }
      }
      return r;
    }
  }
}

/// The mesh axes a spec shards over.
template <class Spec>
constexpr axis_set spec_axes() {
  axis_set s;
  for (auto const& d : Spec::dims)
    for (std::size_t a = 0; a < d.count(); ++a) s.add(d.axis(a));
  return s;
}

template <class Mesh>
constexpr axis_set mesh_axes() {
  axis_set s;
  for (auto const& a : Mesh::axes) s.add(a.name);
  return s;
}

/// The type of the body's block of an argument laid out by `Spec`: it varies over the spec's axes.
template <class Mesh, class Spec>
using block_vma = vma_type_t<vma_state{mesh_axes<Mesh>(), spec_axes<Spec>(), false, {}}>;

/// Compile time: the body's result `J` (of type R) varies only over axes its out_spec names,
/// untracked parts counting as varying over the axes the in_specs use.
template <std::size_t J, class R, class OutSpec, class... In>
constexpr bool check_result_vma() {
  constexpr axis_set inputs = [] {
    axis_set s;
    ((s = s.joined(spec_axes<In>())), ...);
    return s;
  }();
  constexpr axis_set varies = resolve(vma_of<R>::value, inputs);
  constexpr axis_name bad = first_outside(varies, spec_axes<OutSpec>());
  return diagnostic::out_spec_must_name_every_axis_the_result_varies_over<J, bad, OutSpec, bad.empty()>::value;
}

template <class Spec>
std::string spec_text() {
  std::ostringstream os;
  os << Spec{};
  return os.str();
}

/// A queued result: the array of storage `st`, whose blocks the dispatch `done` writes.
template <class T, std::size_t N, class S>
array<T, N, S> queued_result(std::shared_ptr<array_storage<T, N, S>> st, std::shared_ptr<dispatch_completion> done) {
  return array<T, N, S>(std::move(st), std::move(done));
}

/// The global shapes of a shard_map's results, by the global shapes of its arguments, from its
/// first call with them. A later call with the same argument shapes is queued (asynchronous
/// dispatch) with these result shapes, as jax.jit reuses its trace for arguments of the same
/// shapes; the devices check that the body returns them. Shared by the copies of a shard_map.
class shard_map_shapes {
 public:
  /// The result shapes remembered for these argument shapes, if any.
  std::optional<std::vector<std::size_t>> find(std::vector<std::size_t> const& args) const {
    std::lock_guard lock(mutex_);
    for (auto const& [a, r] : known_)
      if (a == args) return r;
    return std::nullopt;
  }
  /// Remembers a call's result shapes (the oldest of `capacity` entries is let go for a new one).
  void remember(std::vector<std::size_t> args, std::vector<std::size_t> results) {
    std::lock_guard lock(mutex_);
    for (auto const& [a, r] : known_)
      if (a == args) return;
    if (known_.size() == capacity) known_.erase(known_.begin());
    known_.emplace_back(std::move(args), std::move(results));
  }
  static constexpr std::size_t capacity = 16;

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<std::vector<std::size_t>, std::vector<std::size_t>>> known_;
};

}  // namespace detail

template <class F, mesh_type Mesh, class InSpecs, class OutSpecs, bool CheckVma = true>
class shard_map_fn;

/// The callable jax.shard_map(f, mesh=..., in_specs=..., out_specs=...) returns.
template <class F, mesh_type Mesh, partition_spec_type... In, partition_spec_type... Out, bool CheckVma>
class shard_map_fn<F, Mesh, in_specs_t<In...>, out_specs_t<Out...>, CheckVma> {
  // Whether every in_spec and out_spec names only axes of the mesh (checked when the body is called).
  static constexpr bool specs_in_mesh = (detail::first_axis_not_in_mesh<Mesh, In>().empty() && ...) &&
                                        (detail::first_axis_not_in_mesh<Mesh, Out>().empty() && ...);

 public:
  shard_map_fn(F f, Mesh mesh) : f_(std::move(f)), mesh_(std::move(mesh)) {}

  /// Runs the body on every device of the mesh. Arguments are tessera arrays (resharded to
  /// the in_specs when laid out otherwise) or host xtensor expressions (put with the in_specs).
  /// Returns one array, or a std::tuple of arrays for several out_specs.
  template <class... Args>
  auto operator()(Args&&... args) const {
    static_assert(diagnostic::shard_map_arguments_must_match_in_specs<sizeof...(Args), sizeof...(In),
                                                                      sizeof...(Args) == sizeof...(In)>::value);
    if constexpr (!specs_in_mesh) {
      // Naming an axis the mesh lacks fails here, in named_sharding's words, and nothing after it does.
      static_assert(((sizeof(named_sharding<Mesh, In>) > 0) && ...) && ((sizeof(named_sharding<Mesh, Out>) > 0) && ...));
      return detail::failed_expression<float, 0, Mesh>{};
    } else if constexpr ((detail::traced_argument<std::remove_cvref_t<Args>>::value || ...)) {
      // Under grad, value_and_grad or vjp: every device records its program (autodiff/shard_map_grad.hpp).
      return detail::traced_shard_map<std::remove_cvref_t<Args>...>::run(*this, args...);
    } else if constexpr (sizeof...(Args) == sizeof...(In)) {
      return call(std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
    }
  }

  /// The mesh the body runs over.
  Mesh const& mesh() const { return mesh_; }
  /// The body (the f of jax.shard_map(f, ...)).
  F const& body() const { return f_; }

 private:
  template <class Spec, class Arg>
  auto put(std::size_t index, Arg&& arg, std::shared_ptr<detail::device_pool> const& pool) const {
    using S = named_sharding<Mesh, Spec>;
    // JAX requires each sharded dimension to divide evenly; so does shard_map here.
    auto check_divisible = [&](S const& s, auto const& shape) {
      std::size_t const dims = std::min<std::size_t>(Spec::size, shape.size());
      for (std::size_t d = 0; d < dims; ++d) {
        std::size_t const k = s.num_shards(d);
        if (shape[d] % k != 0)
          throw std::invalid_argument("tessera::shard_map: argument " + std::to_string(index) + " has shape " +
                                      detail::shape_string(shape) + " and in_specs[" + std::to_string(index) +
                                      "] = " + detail::spec_text<Spec>() + " splits dimension " + std::to_string(d) +
                                      " over " + std::to_string(k) + " devices, but " + std::to_string(shape[d]) +
                                      " is not evenly divisible by " + std::to_string(k) + "; consider padding");
      }
    };
    if constexpr (array_type<Arg>) {
      using A = std::remove_cvref_t<Arg>;
      detail::check_argument_pool(arg, pool, "shard_map", index);
      if constexpr (std::is_same_v<typename A::sharding_type, S>) {
        // Already laid out by the in_spec on this mesh: the array itself (no sharding built).
        if (arg.sharding().mesh() == mesh_) {
          check_divisible(arg.sharding(), arg.shape());
          return array<typename A::value_type, A::rank, S>(arg);
        }
      }
    }
    S const s(mesh_, Spec{});
    auto a = device_put(std::forward<Arg>(arg), s);
    check_divisible(s, a.shape());
    return a;
  }

  template <std::size_t... K, class... Args>
  auto call(std::index_sequence<K...>, Args&&... args) const {
    auto const pool = detail::pool_for_devices(mesh_.runtime_id(), mesh_.device_ids(), "shard_map");
    auto inputs = std::make_tuple(put<In>(K, std::forward<Args>(args), pool)...);
    return run(inputs, pool, std::index_sequence<K...>{});
  }

  template <class Inputs, std::size_t... K>
  auto run(Inputs const& inputs, std::shared_ptr<detail::device_pool> const& pool, std::index_sequence<K...>) const {
    using R = decltype(detail::results_as_tuple(f_(block_of<In>(std::get<K>(inputs), 0)...)));
    constexpr std::size_t n_results = std::tuple_size_v<R>;
    static_assert(diagnostic::shard_map_results_must_match_out_specs<n_results, sizeof...(Out),
                                                                     n_results == sizeof...(Out)>::value);
    if constexpr (n_results == sizeof...(Out)) {
      if constexpr (CheckVma) check_vma<R>(std::make_index_sequence<sizeof...(Out)>{});
      std::vector<std::size_t> args;
      (args.insert(args.end(), std::get<K>(inputs).shape().begin(), std::get<K>(inputs).shape().end()), ...);
      auto arrays = [&] {
        if (pool->queues_here())
          if (auto const shapes = shapes_->find(args))
            return run_queued<R>(inputs, pool, *shapes, std::index_sequence<K...>{},
                                 std::make_index_sequence<sizeof...(Out)>{});
        auto a = run_checked<R>(inputs, pool, std::index_sequence<K...>{}, std::make_index_sequence<sizeof...(Out)>{});
        std::vector<std::size_t> results;
        std::apply([&](auto const&... o) { (results.insert(results.end(), o.shape().begin(), o.shape().end()), ...); }, a);
        shapes_->remember(std::move(args), std::move(results));
        return a;
      }();
      if constexpr (sizeof...(Out) == 1) return std::get<0>(std::move(arrays));
      else return arrays;
    }
  }

  /// A call whose argument shapes an earlier call had: queued on the devices with that call's
  /// result shapes, and returned at once (asynchronous dispatch; the arrays are futures). Each
  /// device checks that its results have the shapes promised; a device that fails aborts the
  /// team, and the failure is thrown by the next wait on a result, naming the device.
  template <class R, class Inputs, std::size_t... K, std::size_t... J>
  auto run_queued(Inputs const& inputs, std::shared_ptr<detail::device_pool> const& pool,
                  std::vector<std::size_t> const& shapes, std::index_sequence<K...>, std::index_sequence<J...>) const {
    using owned_t =
        std::tuple<decltype(detail::own_result(std::declval<std::tuple_element_t<J, R>>(), nullptr))...>;
    using out_specs_tuple = std::tuple<Out...>;
    std::size_t const n = mesh_.num_devices();
    std::size_t at = 0;
    auto storage = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      using owned = std::tuple_element_t<I, owned_t>;
      using T = typename owned::value_type;
      using Spec = std::tuple_element_t<I, out_specs_tuple>;
      using S = named_sharding<Mesh, Spec>;
      shape_t<owned::rank> global{};
      for (auto& g : global) g = shapes[at++];
      auto st = std::make_shared<detail::array_storage<T, owned::rank, S>>(
          detail::array_storage<T, owned::rank, S>{S(mesh_, Spec{}), global, pool, {}});
      st->buffers.resize(n);
      return st;
    };
    using storages_t = std::tuple<decltype(storage(std::integral_constant<std::size_t, J>{}))...>;
    // Braced: the storages take their shapes from `shapes` in order.
    storages_t out{storage(std::integral_constant<std::size_t, J>{})...};

    struct task {
      shard_map_fn const fn;  // const: the body is called as the synchronous path calls it
      Inputs inputs;
      storages_t out;
      std::array<std::size_t, Mesh::rank> sizes{};
      std::array<std::string_view, Mesh::rank> names{};
      detail::team t;
      task(shard_map_fn const& f, Inputs const& in, storages_t o)
          : fn(f), inputs(in), out(std::move(o)), t(fn.mesh_.num_devices(), std::span<int const>(fn.mesh_.device_ids())) {
        for (std::size_t a = 0; a < Mesh::rank; ++a) {
          sizes[a] = static_cast<std::size_t>(fn.mesh_.size(a));
          names[a] = Mesh::axes[a].name.view();
        }
      }
      void operator()(int d) {
        auto const& pool = std::get<0>(out)->pool;
        std::size_t const pos = *fn.mesh_.position_of(d);
        detail::spmd_frame fr{&t, pos, 0, names, sizes, &detail::describe_op<Mesh>, &pool->memory(d), pool};
        fr.check_vma = CheckVma;
        fr.team_pos = pos;
        detail::frame_guard guard(fr);
        // Each result lands in memory the device owns (first touch), in the shape promised.
        auto store = [&]<std::size_t I, class V>(std::integral_constant<std::size_t, I>, V&& v) {
          auto& st = *std::get<I>(out);
          auto owned = detail::own_result(std::forward<V>(v), &pool->memory(d));
          auto const want = detail::block_shape(st.sharding.block(pos, st.shape));
          if (owned.shape != want)
            throw std::invalid_argument(
                "tessera::shard_map: result " + std::to_string(I) + " has shape " + detail::shape_string(owned.shape) +
                " on device " + std::to_string(d) + ", but the first call with arguments of these shapes returned blocks of shape " +
                detail::shape_string(want) + "; a call is queued with the result shapes of the first call with the same "
                "argument shapes (asynchronous dispatch, as jax.jit reuses its trace): make the results' shapes depend only "
                "on the arguments' shapes, or turn asynchronous dispatch off (TESSERA_ASYNC_DISPATCH=0)");
          st.buffers[pos] = std::move(owned.buf);
        };
        try {
          auto r = detail::results_as_tuple(fn.f_(block_of<In>(std::get<K>(inputs), pos)...));
          (store(std::integral_constant<std::size_t, J>{}, std::get<J>(std::move(r))), ...);
          detail::op_signature end;
          end.seq = fr.seq;
          end.describe = fr.describe;
          t.enter(pos, end, nullptr, nullptr);
#ifndef NDEBUG
          // Every block is written (the end of the body is a barrier): one device checks the copies.
          if (pos == 0) {
            auto const& st = out;
            (fn.template check_replicas<Out>(J, std::get<J>(st)->sharding, std::get<J>(st)->buffers,
                                             detail::block_shape(std::get<J>(st)->sharding.block(0, std::get<J>(st)->shape))),
             ...);
          }
#endif
        } catch (collective_aborted const&) {
          // Another device failed and aborted the team: its error is the dispatch's.
        } catch (...) {
          t.abort();
          throw;
        }
      }
    };
    auto queued = std::make_shared<task>(*this, inputs, out);
    auto done = pool->enqueue(std::span<int const>(mesh_.device_ids()), "shard_map", std::move(queued));
    return std::make_tuple(detail::queued_result(std::get<J>(out), done)...);
  }

  template <class R, class Inputs, std::size_t... K, std::size_t... J>
  auto run_checked(Inputs const& inputs, std::shared_ptr<detail::device_pool> const& pool, std::index_sequence<K...>,
                   std::index_sequence<J...>) const {
    using owned_t =
        std::tuple<decltype(detail::own_result(std::declval<std::tuple_element_t<J, R>>(), nullptr))...>;
    std::size_t const n = mesh_.num_devices();
    std::vector<int> const& ids = mesh_.device_ids();
    std::array<std::size_t, Mesh::rank> sizes{};
    std::array<std::string_view, Mesh::rank> names{};
    for (std::size_t a = 0; a < Mesh::rank; ++a) {
      sizes[a] = static_cast<std::size_t>(mesh_.size(a));
      names[a] = Mesh::axes[a].name.view();
    }
    // This process's devices are the team (every device, unless the mesh spans processes: then
    // the collectives go between processes through `xp`, parallel/across_processes.hpp, and
    // team_pos maps a mesh position to its place in the team).
    std::size_t local_count = 0;
    for (int d : ids) local_count += pool->is_local(d) ? std::size_t{1} : std::size_t{0};
    bool const spans = local_count != n;
    std::optional<detail::process_run> xp;
    if (spans) xp.emplace(detail::make_process_run(*pool, ids, sizes, local_count));
    // The team's ids and each local position's place in it come from the mesh, or from its
    // layout among the processes (kept by the pool): nothing copied per call.
    std::span<int const> const team_ids = spans ? std::span<int const>(xp->layout->local_ids) : std::span<int const>(ids);
    std::vector<std::size_t> const* const team_pos = spans ? &xp->layout->index_in_process : nullptr;
    detail::team t(team_ids.size(), team_ids);
    std::vector<std::optional<owned_t>> results(n);
    std::tuple<std::vector<device_buffer<typename std::tuple_element_t<J, owned_t>::value_type>>...> buffers;
    (std::get<J>(buffers).resize(n), ...);

    try {
      pool->run(std::span<int const>(ids), [&](int d) {
        std::size_t const pos = *mesh_.position_of(d);
        detail::spmd_frame fr{&t, pos, 0, names, sizes, &detail::describe_op<Mesh>, &pool->memory(d), pool};
        fr.check_vma = CheckVma;
        fr.team_pos = team_pos != nullptr ? (*team_pos)[pos] : pos;
        fr.xp = xp ? &*xp : nullptr;
        detail::frame_guard guard(fr);
        try {
          auto r = detail::results_as_tuple(f_(block_of<In>(std::get<K>(inputs), pos)...));
          // Each result lands in memory the device owns, written by this thread (first touch).
          results[pos].emplace(detail::own_result(std::get<J>(std::move(r)), &pool->memory(d))...);
          ((std::get<J>(buffers)[pos] = std::move(std::get<J>(*results[pos]).buf)), ...);
          detail::op_signature end;
          end.seq = fr.seq;
          end.describe = fr.describe;
          t.enter(fr.team_pos, end, nullptr, nullptr);
          // Checked: every process has made as many collectives (or all of them throw
          // collective_mismatch). Unchecked there is nothing to compare, and nothing is called.
          if (fr.xp != nullptr && fr.xp->checked)
            (void)detail::inputs_across_processes<char>(fr, detail::group{{pos}, 0}, end, nullptr, 0);
        } catch (...) {
          t.abort();
          throw;
        }
      });
    } catch (device_error const& e) {
      // Across processes, a failure other than one every process sees alike (a mismatch) would
      // leave the other processes waiting in their next exchange: the job ends, naming it.
      if (xp && !xp->mismatch && !xp->async_mismatch.value.load() && pool->abort_processes)
        pool->abort_processes(std::string("a shard_map across processes failed: ") + e.what());
      throw detail::without_abandoned(e);
    }
    return std::make_tuple(assemble<Out>(J, results, std::get<J>(buffers), pool,
                                         [](owned_t const& o) -> auto const& { return std::get<J>(o); })...);
  }

  template <class R, std::size_t... J>
  static constexpr void check_vma(std::index_sequence<J...>) {
    static_assert((detail::check_result_vma<J, std::tuple_element_t<J, R>, Out, In...>() && ...));
  }

  template <class Spec, class A>
  static auto block_of(A const& a, std::size_t pos) {
    auto const b = a.sharding().block(pos, a.shape());
    return detail::make_local_block<detail::block_vma<Mesh, Spec>>(a.block_data(pos), detail::block_shape(b));
  }

  /// The output array of one out_spec from every device's result.
  template <class Spec, class Results, class T, class Get>
  auto assemble(std::size_t j, Results const& results, std::vector<device_buffer<T>>& buffers,
                std::shared_ptr<detail::device_pool> const& pool, Get get) const {
    using local_t = std::remove_cvref_t<decltype(get(*results[0]))>;
    constexpr std::size_t N = local_t::rank;
    static_assert(diagnostic::spec_must_not_be_longer_than_rank<Spec::size, N, (Spec::size <= N)>::value);
    using S = named_sharding<Mesh, Spec>;
    S const s(mesh_, Spec{});
    std::size_t const n = results.size();
    // The first of this process's devices (every device, unless the mesh spans processes).
    std::size_t first = 0;
    while (first + 1 < n && !results[first]) ++first;
    shape_t<N> local{};
    for (std::size_t i = 0; i < N; ++i) local[i] = get(*results[first]).shape[i];
    for (std::size_t p = first + 1; p < n; ++p) {
      if (!results[p]) continue;  // another process's device
      shape_t<N> other{};
      for (std::size_t i = 0; i < N; ++i) other[i] = get(*results[p]).shape[i];
      if (other != local)
        throw std::invalid_argument("tessera::shard_map: result " + std::to_string(j) + " has shape " +
                                    detail::shape_string(local) + " on device " + std::to_string(mesh_.device_ids()[first]) +
                                    " but " + detail::shape_string(other) + " on device " +
                                    std::to_string(mesh_.device_ids()[p]) + "; every device must return the same shape");
    }
    // Each block passed own_result's check; their concatenation may still be too large to count.
    auto const too_large = [&](std::string const& what) {
      return std::length_error("tessera::shard_map: result " + std::to_string(j) + " has blocks of shape " +
                               detail::shape_string(local) + " and out_specs[" + std::to_string(j) + "] = " +
                               detail::spec_text<Spec>() + " makes " + what);
    };
    shape_t<N> global = local;
    for (std::size_t i = 0; i < N; ++i) {
      std::size_t const k = s.num_shards(i);
      if (local[i] > detail::max_array_size / k)
        throw too_large("dimension " + std::to_string(i) + " of the global shape " + std::to_string(local[i]) + " * " +
                        std::to_string(k) + ", more than std::ptrdiff_t can count");
      global[i] = local[i] * k;
    }
    if (std::string const e = detail::size_error(global, sizeof(T)); !e.empty())
      throw too_large("the global shape " + detail::shape_string(global) + ", which " + e);
#ifndef NDEBUG
    check_replicas<Spec>(j, s, buffers, local);
#endif
    auto st = std::make_shared<detail::array_storage<T, N, S>>(
        detail::array_storage<T, N, S>{s, global, pool, std::move(buffers)});
    return array<T, N, S>(std::move(st));
  }

  /// Debug builds: an out_spec that leaves a mesh axis out promises equal blocks along it; check the promise.
  template <class Spec, class S, class T, std::size_t N>
  void check_replicas(std::size_t j, S const& s, std::vector<device_buffer<T>> const& buffers,
                      shape_t<N> const& local) const {
    std::size_t const n = buffers.size();
    std::size_t const count = detail::element_count(local);
    std::vector<std::size_t> sizes(mesh_.sizes().begin(), mesh_.sizes().end());
    for (std::size_t p = 0; p < n; ++p) {
      if (s.replica_id(p) == 0 || buffers[p].data() == nullptr) continue;  // or another process's
      // The first copy: the same coordinates along the axes the spec uses, 0 along the others.
      auto c = detail::coordinates(p, sizes);
      std::string axes_left_out;
      for (std::size_t a = 0; a < Mesh::rank; ++a)
        if (!S::uses_axis(Mesh::axes[a].name)) {
          if (c[a] != 0) axes_left_out += (axes_left_out.empty() ? "'" : ", '") + std::string(Mesh::axes[a].name.view()) + "'";
          c[a] = 0;
        }
      std::size_t q = 0;
      for (std::size_t a = 0; a < Mesh::rank; ++a) q = q * sizes[a] + c[a];
      if (buffers[q].data() == nullptr) continue;  // the first copy is another process's
      if (count != 0 && std::memcmp(buffers[p].data(), buffers[q].data(), count * sizeof(T)) != 0)
        throw std::invalid_argument(
            "tessera::shard_map: out_specs[" + std::to_string(j) + "] = " + detail::spec_text<Spec>() +
            " promises the result is the same along mesh axes it does not name, but device " +
            std::to_string(mesh_.device_ids()[p]) + "'s block differs from device " +
            std::to_string(mesh_.device_ids()[q]) + "'s (they differ along " + axes_left_out +
            "); reduce it over those axes (psum) or name them in the out_spec");
    }
  }

  F f_;
  Mesh mesh_;
  std::shared_ptr<detail::shard_map_shapes> shapes_ = std::make_shared<detail::shard_map_shapes>();
};

/// jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...): f runs once per device on its blocks.
/// Each out_spec is checked at compile time against the mesh axes its result varies over.
template <class F, mesh_type Mesh, partition_spec_type... In, partition_spec_type... Out>
auto shard_map(F&& f, Mesh const& mesh, in_specs_t<In...>, out_specs_t<Out...>) {
  return shard_map_fn<std::decay_t<F>, Mesh, in_specs_t<In...>, out_specs_t<Out...>>(std::forward<F>(f), mesh);
}

/// jax.shard_map(f, ..., check_vma=False): the out_specs are trusted, not checked at compile time.
template <class F, mesh_type Mesh, partition_spec_type... In, partition_spec_type... Out>
auto shard_map(F&& f, Mesh const& mesh, in_specs_t<In...>, out_specs_t<Out...>, no_check_vma_t) {
  return shard_map_fn<std::decay_t<F>, Mesh, in_specs_t<In...>, out_specs_t<Out...>, false>(std::forward<F>(f), mesh);
}

}  // namespace tessera
