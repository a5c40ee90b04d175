#pragma once
// The collectives a shard_map body calls (jax.lax.psum, all_gather, ...), over
// one or several mesh axes: `psum<"x">(v)`, `all_gather<"x", "y">(v, 0)`.
// Values are numbers or xtensor expressions of static rank. A result is a
// tessera::local_block (read-only, owned by the calling device) or, for rank 0,
// a tessera::local_scalar; its type says which mesh axes it varies over
// (JAX's vma rules: psum, pmax, pmin, pmean and all_gather make it the same
// along their axes; psum_scatter, all_to_all, ppermute and axis_index make it
// vary along them).

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/detail/xtensor/xadapt.hpp"
#include "tessera/detail/xtensor/xnoalias.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/shape.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/fixed_string.hpp"
#include "tessera/core/varying_axes.hpp"
#include "tessera/parallel/across_processes.hpp"
#include "tessera/parallel/local_block.hpp"
#include "tessera/parallel/spmd_context.hpp"
#include "tessera/parallel/vma_of.hpp"
#include "tessera/runtime/collective_counter.hpp"
#include "tessera/runtime/collectives.hpp"
#include "tessera/runtime/device_buffer.hpp"

namespace tessera {

/// The `tiled=True` of jax.lax.all_gather, psum_scatter and all_to_all.
struct tiled_t {
  explicit constexpr tiled_t() = default;
};
/// Pass as the last argument for JAX's `tiled=True`.
inline constexpr tiled_t tiled{};

/// A collective's dimension argument, as JAX takes it: negative counts from the end.
struct collective_dim {
  std::ptrdiff_t value;
  template <std::integral I>
  constexpr collective_dim(I v) : value(static_cast<std::ptrdiff_t>(v)) {}  // NOLINT: implicit from integers by design
  /// The dimension among `rank` (a negative one plus rank); out of range stays out of range.
  std::size_t resolve(std::size_t rank, char const* what, char const* name) const {
    if (value >= 0) return static_cast<std::size_t>(value);
    std::ptrdiff_t const from_end = value + static_cast<std::ptrdiff_t>(rank);
    if (from_end >= 0) return static_cast<std::size_t>(from_end);
    throw std::invalid_argument(std::string(what) + ": " + name + " " + std::to_string(value) +
                                " is out of range for " + std::to_string(rank) + " dimensions (-" +
                                std::to_string(rank) + " to " + std::to_string(rank) + " - 1)");
  }
};

namespace detail {

template <class V>
inline constexpr bool is_scalar_value =
    std::is_arithmetic_v<std::remove_cvref_t<V>> || is_local_scalar<std::remove_cvref_t<V>>::value;

template <class V>
struct scalar_type {
  using type = std::remove_cvref_t<V>;
};
template <class T, class Vma>
struct scalar_type<local_scalar<T, Vma>> {
  using type = T;
};

template <class V, class = void>
struct value_traits;
template <class V>
struct value_traits<V, std::enable_if_t<is_scalar_value<V>>> {
  using type = typename scalar_type<std::remove_cvref_t<V>>::type;
  static constexpr std::size_t rank = 0;
};
template <class V>
struct value_traits<V, std::enable_if_t<!is_scalar_value<V> && xt::is_xexpression<std::decay_t<V>>::value>> {
  using type = std::remove_cv_t<typename std::decay_t<V>::value_type>;
  static constexpr std::size_t rank = static_rank_v<V>;
};

/// Memory a collective writes on the calling device: from the device's cache (runtime/device_memory.hpp),
/// so a call in a loop reuses pages this thread already touched instead of faulting in fresh ones
/// (a fresh 32 MiB result cost 60 ms of page faults per call, eight times the all_gather itself).
template <class T, std::size_t N>
struct result_buffer {
  std::shared_ptr<void const> owner;  // declared first, so the memory outlives the buffer
  device_buffer<T> buf;
  shape_t<N> shape{};
  T* data() { return buf.data(); }
  T const* data() const { return buf.data(); }
  std::size_t count() const { return element_count(shape); }
};

/// Dimension n of a collective's result, k times larger (all_gather, all_to_all's concatenation),
/// refused where it would wrap: the result's buffer would be short.
template <class Seq>
std::size_t scaled_dimension(std::size_t n, std::size_t k, Seq const& in_shape, char const* what) {
  if (k != 0 && n > max_array_size / k)
    throw std::length_error(std::string("tessera::") + what + ": an input of shape " + shape_string(in_shape) +
                            " over " + std::to_string(k) + " devices has a result dimension of " + std::to_string(n) +
                            " x " + std::to_string(k) + " elements, more than std::ptrdiff_t can count");
  return n * k;
}

template <class T, std::size_t N>
result_buffer<T, N> make_result(shape_t<N> const& shape) {
  spmd_frame const* f = current_frame;
  return result_buffer<T, N>{f ? f->owner : nullptr,
                             device_buffer<T>(checked_element_count<T>(shape, "collective result"),
                                              device_buffer<T>::uninitialized,
                                              f ? f->memory : nullptr),
                             shape};
}

/// A collective's input as a contiguous row-major buffer: the caller's own buffer when it is one, else a copy.
template <class T, std::size_t N>
struct collective_input {
  result_buffer<T, N> storage;
  T const* data = nullptr;
  shape_t<N> shape{};
  std::size_t count() const { return element_count(shape); }
};

template <class V>
auto make_input(V&& v) {
  using traits = value_traits<V>;
  using T = typename traits::type;
  constexpr std::size_t N = traits::rank;
  static_assert(N != static_cast<std::size_t>(-1),
                "tessera: a collective's argument must have its rank in its type (an xt::xtensor<T, N>, a block, or "
                "an expression of them); an xt::xarray has a run-time rank: convert it to xt::xtensor<T, N> first");
  collective_input<T, N> in;
  if constexpr (is_scalar_value<V>) {
    in.storage = make_result<T>(shape_t<0>{});
    *in.storage.data() = static_cast<T>(static_cast<typename scalar_type<std::remove_cvref_t<V>>::type>(v));
    in.data = in.storage.data();
  } else {
    using E = std::decay_t<V>;
    constexpr bool direct = xt::has_data_interface<E>::value && requires {
      E::static_layout;
      E::contiguous_layout;
    } && E::contiguous_layout && E::static_layout == xt::layout_type::row_major;
    for (std::size_t i = 0; i < N; ++i) in.shape[i] = static_cast<std::size_t>(v.shape()[i]);
    if constexpr (direct) {
      in.data = v.data();
    } else {
      in.storage = make_result<T>(in.shape);
      if (in.count() != 0) {
        auto dst = xt::adapt(in.storage.data(), in.count(), xt::no_ownership(), in.shape);
        xt::noalias(dst) = std::forward<V>(v);
      }
      in.data = in.storage.data();
    }
  }
  return in;
}

/// An address naming result_buffer<T, N> (recent_result::type).
template <class T, std::size_t N>
inline constexpr char result_type_tag = 0;

/// A collective's result as the calling device's value: a local_scalar for rank 0, else a local_block
/// (remembered in the frame, so that shard_map can take its memory if the body returns it).
template <class Vma, class T, std::size_t N>
auto as_result(result_buffer<T, N>&& r) {
  if constexpr (N == 0) {
    return local_scalar<T, Vma>(*r.data());
  } else {
    auto holder = std::make_shared<result_buffer<T, N>>(std::move(r));
    if (current_frame != nullptr && holder->data() != nullptr)
      current_frame->remember_result({holder->data(), &result_type_tag<T, N>, std::weak_ptr<void>(holder)});
    return block_of_holder<Vma>(std::move(holder));
  }
}

/// The memory of a collective result of this device's body at `data`, if the block being returned
/// (which holds it) is its only holder: the caller then owns it, and the block must not be read
/// again. Empty otherwise (the result was copied, sliced, or is still held elsewhere).
template <class T, std::size_t N>
std::optional<device_buffer<T>> take_result(T const* data, std::size_t count) {
  spmd_frame* f = current_frame;
  if (f == nullptr || data == nullptr) return std::nullopt;
  for (auto& e : f->recent) {
    if (e.data != data || e.type != &result_type_tag<T, N>) continue;
    auto const held = std::static_pointer_cast<result_buffer<T, N>>(e.holder.lock());
    // Two holders: the returned block and `held` here; more means someone else still reads it.
    if (!held || held.use_count() != 2 || held->count() != count) return std::nullopt;
    e = recent_result{};
    return std::move(held->buf);
  }
  return std::nullopt;
}

/// The vma of a collective's result: the argument's, made the same along A (Reduce) or varying along A.
/// The axes a collective acts over; every axis of the mesh when one of A is not in it, so that
/// after check_axes_in_mesh's error no out_spec check fails as well.
template <class V, axis_name... A>
constexpr axis_set collective_axes() {
  constexpr axis_set mesh = vma_of<V>::value.mesh;
  if constexpr (((mesh.size == 0 || mesh.contains(A)) && ...)) return make_axis_set<A...>();
  else return mesh;
}

template <class V, bool Reduce, axis_name... A>
using result_vma = vma_type_t<Reduce ? reduced_over(vma_of<V>::value, collective_axes<V, A...>())
                                     : varied_over(vma_of<V>::value, collective_axes<V, A...>())>;

/// Compile-time: the collective's axes are in the mesh the argument's type knows (when it knows one).
template <class V, axis_name... A>
constexpr bool check_axes_in_mesh() {
  constexpr axis_set mesh = vma_of<V>::value.mesh;
  static_assert(sizeof...(A) >= 1, "tessera: name the mesh axes of the collective, as in psum<\"x\">(v)");
  constexpr axis_name missing = [&] {
    for (axis_name const& a : {A...})
      if (mesh.size != 0 && !mesh.contains(a)) return a;
    return axis_name{};
  }();
  // A plain static_assert (not a failing class template), so clang reports it once.
  static_assert(diagnostic::collective_axis_must_be_in_mesh<missing, typename vma_type<vma_of<V>::value>::mesh>,
                "tessera: a collective (psum, all_gather, ...) names a mesh axis that the shard_map's mesh does not "
                "have (the axis and the mesh's axes are the arguments of 'collective_axis_must_be_in_mesh<axis, "
                "in_mesh<...>>'); use one of the mesh's axis names");
  return true;
}

template <std::size_t N>
std::uint64_t hash_shape(shape_t<N> const& s, std::uint64_t h = 1469598103934665603ull) {
  for (std::size_t x : s) h = (h ^ x) * 1099511628211ull;
  return h;
}

/// Everything a collective call needs on this device: its frame, group and signature.
template <axis_name... A>
struct collective_call {
  spmd_frame& f;
  std::array<std::size_t, sizeof...(A)> axes;
  group const& g;  // the frame's (group_of): valid until this device's next collective
  op_signature sig;

  collective_call(char const* what, op_kind kind)
      : f(frame_for(what)), axes(resolve_axes(f, std::array<axis_name, sizeof...(A)>{A...}, what)),
        g(group_of(f, axes)) {
    sig.seq = f.seq++;
    sig.kind = static_cast<std::uint32_t>(kind);
    sign_axes(sig, axes);
    sig.describe = f.describe;
  }
  std::size_t k() const { return g.size(); }
  /// Records the collective in any live collective_counter, once (by the device at mesh position 0).
  void record(char const* kind, std::size_t bytes) const {
    if (f.team_pos != 0 || !counting()) return;  // one device of each process records
    collective_event e{kind, {}, bytes};
    for (std::size_t a : axes) e.axes.emplace_back(f.axis_names[a]);
    record_collective(e);
  }
};

/// An all-reduce of v's elements (an xt::xtensor of v's element type and shape), and the group size.
template <class T, std::size_t N>
struct reduced {
  result_buffer<T, N> out;
  std::size_t k;
};
template <axis_name... A, class T, std::size_t N>
auto all_reduce_value(collective_input<T, N> const& in, op_kind kind, reduce_op op, char const* what) {
  collective_call<A...> c(what, kind);
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape);
  c.record("all-reduce", in.count() * sizeof(T));
  auto out = make_result<T>(in.shape);
  if (c.f.xp != nullptr) {
    all_reduce_across_processes<T>(c.f, c.g, c.sig, in.data, out.data(), in.count(), op);
  } else {
    all_reduce(*c.f.t, c.f.pos, c.g, c.sig, in.data, out.data(), in.count(), op);
  }
  return reduced<T, N>{std::move(out), c.k()};
}

}  // namespace detail

/// jax.lax.psum(x, axes): the sum over the devices along the mesh axes, on every one of them.
template <axis_name... A, class V>
auto psum(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  static_assert(!std::is_same_v<typename detail::value_traits<V>::type, bool>,
                "tessera::psum of bool values: use pmax (any) or pmin (all)");
  return detail::as_result<detail::result_vma<V, true, A...>>(
      detail::all_reduce_value<A...>(detail::make_input(std::forward<V>(v)), detail::op_kind::psum, detail::reduce_op::sum, "psum").out);
}

/// jax.lax.pmax(x, axes): the element-wise maximum over the devices along the mesh axes.
template <axis_name... A, class V>
auto pmax(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  return detail::as_result<detail::result_vma<V, true, A...>>(
      detail::all_reduce_value<A...>(detail::make_input(std::forward<V>(v)), detail::op_kind::pmax, detail::reduce_op::max, "pmax").out);
}

/// jax.lax.pmin(x, axes): the element-wise minimum over the devices along the mesh axes.
template <axis_name... A, class V>
auto pmin(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  return detail::as_result<detail::result_vma<V, true, A...>>(
      detail::all_reduce_value<A...>(detail::make_input(std::forward<V>(v)), detail::op_kind::pmin, detail::reduce_op::min, "pmin").out);
}

/// jax.lax.pmean(x, axes): psum / axis size. Integers give floating results, as in JAX
/// (float for 32-bit and smaller, double for 64-bit).
template <axis_name... A, class V>
auto pmean(V&& v) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  using T = typename detail::value_traits<V>::type;
  static_assert(!std::is_same_v<T, bool>, "tessera::pmean of bool values: convert to a number first");
  using R = std::conditional_t<std::is_floating_point_v<T>, T, std::conditional_t<(sizeof(T) > 4), double, float>>;
  using Vma = detail::result_vma<V, true, A...>;
  auto const divide = [](auto r) {
    R const k = static_cast<R>(r.k);
    for (R* p = r.out.data(), *e = p + r.out.count(); p != e; ++p) *p /= k;
    return detail::as_result<Vma>(std::move(r.out));
  };
  auto in = detail::make_input(std::forward<V>(v));
  if constexpr (std::is_floating_point_v<T>) {
    return divide(detail::all_reduce_value<A...>(in, detail::op_kind::pmean, detail::reduce_op::sum, "pmean"));
  } else {
    // Converted before the sum, so the sum cannot wrap around in the integer type.
    constexpr std::size_t N = std::tuple_size_v<decltype(in.shape)>;
    detail::collective_input<R, N> wide;
    wide.shape = in.shape;
    wide.storage = detail::make_result<R>(in.shape);
    std::copy(in.data, in.data + in.count(), wide.storage.data());
    wide.data = wide.storage.data();
    return divide(detail::all_reduce_value<A...>(wide, detail::op_kind::pmean, detail::reduce_op::sum, "pmean"));
  }
}

namespace detail {
/// all_gather's axis, checked in the caller's words (`name`: all_gather, all_gather_async).
template <bool Tiled, std::size_t N>
void check_gather_axis(std::size_t axis, char const* name) {
  if (Tiled ? axis >= N : axis > N)
    throw std::invalid_argument("tessera::" + std::string(name) + (Tiled ? "(tiled)" : "") + ": axis " +
                                std::to_string(axis) + " is out of range for a rank-" + std::to_string(N) +
                                " value (0 to " + std::to_string(Tiled ? N - 1 : N) + ")");
}

/// An all_gather's result shape, and the products of the input's dimensions before `axis`
/// (outer) and from it on (inner): the layout the gathered chunks are copied in.
template <bool Tiled, std::size_t N>
struct gather_layout {
  shape_t<Tiled ? N : N + 1> out_shape{};
  std::size_t outer = 1, inner = 1;
};

/// The blocking and the asynchronous all_gather's common start, on call c (its k devices) with
/// input `in` (axis checked): the layout, c's signature, and the collective counted.
template <bool Tiled, class T, class Call, class In>
auto begin_all_gather(Call& c, In const& in, std::size_t axis, char const* name) {
  constexpr std::size_t N = std::tuple_size_v<std::remove_cvref_t<decltype(in.shape)>>;
  gather_layout<Tiled, N> lay;
  if constexpr (Tiled) {
    lay.out_shape = in.shape;
    lay.out_shape[axis] = scaled_dimension(lay.out_shape[axis], c.k(), in.shape, name);
  } else {
    for (std::size_t i = 0, j = 0; i <= N; ++i) lay.out_shape[i] = i == axis ? c.k() : in.shape[j++];
  }
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape, axis);
  c.record("all-gather", in.count() * c.k() * sizeof(T));
  for (std::size_t i = 0; i < axis; ++i) lay.outer *= in.shape[i];
  for (std::size_t i = axis; i < N; ++i) lay.inner *= in.shape[i];
  return lay;
}

/// all_gather, stacked (a new dimension of the group's size at `axis`) or Tiled (concatenated
/// along `axis`): the same bytes, only the shape differs.
template <bool Tiled, axis_name... A, class V>
auto gather(V&& v, std::size_t axis) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(!Tiled || N >= 1, "tessera::all_gather(x, axis, tiled): a scalar has no dimension to concatenate along");
  auto in = make_input(std::forward<V>(v));
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(in.data)>>;
  check_gather_axis<Tiled, N>(axis, "all_gather");
  collective_call<A...> c("all_gather", op_kind::all_gather);
  auto const lay = begin_all_gather<Tiled, T>(c, in, axis, "all_gather");
  auto out = make_result<T>(lay.out_shape);
  if (c.f.xp != nullptr) {
    all_gather_across_processes<T>(c.f, c.g, c.sig, in.data, out.data(), lay.outer, lay.inner);
  } else {
    all_gather(*c.f.t, c.f.pos, c.g, c.sig, in.data, out.data(), lay.outer, lay.inner);
  }
  return as_result<result_vma<V, true, A...>>(std::move(out));
}

/// psum_scatter's argument checks, in the caller's words.
template <std::size_t N>
void check_scatter(shape_t<N> const& shape, std::size_t dim, std::size_t k, bool tiled_mode) {
  if (dim >= N)
    throw std::invalid_argument("tessera::psum_scatter: scatter_dimension " + std::to_string(dim) +
                                " is out of range for a rank-" + std::to_string(N) + " value");
  if (!tiled_mode && shape[dim] != k)
    throw std::invalid_argument("tessera::psum_scatter: dimension " + std::to_string(dim) + " has size " +
                                std::to_string(shape[dim]) + " but must equal the axis size " + std::to_string(k) +
                                " (or pass tessera::tiled to divide it)");
  if (tiled_mode && shape[dim] % k != 0)
    throw std::invalid_argument("tessera::psum_scatter: dimension " + std::to_string(dim) + " has size " +
                                std::to_string(shape[dim]) + ", which is not evenly divisible by the axis size " +
                                std::to_string(k));
}

/// psum_scatter: the sum, device i keeping the i-th of k chunks of dimension `dim`; untiled, the
/// chunk is one index and the dimension is dropped (the same bytes).
template <bool Tiled, axis_name... A, class V>
auto scatter(V&& v, std::size_t dim) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(N >= 1, "tessera::psum_scatter: a scalar has no dimension to scatter");
  auto in = make_input(std::forward<V>(v));
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(in.data)>>;
  collective_call<A...> c("psum_scatter", op_kind::psum_scatter);
  std::size_t const k = c.k();
  check_scatter(in.shape, dim, k, Tiled);
  constexpr std::size_t R = Tiled ? N : N - 1;
  shape_t<R> out_shape{};
  for (std::size_t i = 0, j = 0; i < N; ++i) {
    if (i != dim) out_shape[j++] = in.shape[i];
    else if (Tiled) out_shape[j++] = in.shape[i] / k;
  }
  auto out = make_result<T>(out_shape);
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape, dim * 2 + (Tiled ? 1 : 0));
  c.record("reduce-scatter", in.count() * sizeof(T));
  std::size_t outer = 1, inner = 1;
  for (std::size_t i = 0; i < dim; ++i) outer *= in.shape[i];
  for (std::size_t i = dim + 1; i < N; ++i) inner *= in.shape[i];
  if (c.f.xp != nullptr) {
    reduce_scatter_across_processes<T>(c.f, c.g, c.sig, in.data, out.data(), outer, in.shape[dim] / k * inner);
  } else {
    reduce_scatter(*c.f.t, c.f.pos, c.g, c.sig, in.data, out.data(), outer, in.shape[dim] / k * inner);
  }
  return as_result<result_vma<V, false, A...>>(std::move(out));
}

/// all_to_all's argument checks: axes in range; the split dimension divisible by (tiled) or equal to the axis size.
template <std::size_t N>
void check_all_to_all(shape_t<N> const& shape, std::size_t split, std::size_t concat, std::size_t k, bool tiled_mode) {
  if (split >= N || concat >= N)
    throw std::invalid_argument("tessera::all_to_all: split_axis " + std::to_string(split) + " and concat_axis " +
                                std::to_string(concat) + " must be below the rank " + std::to_string(N));
  if (tiled_mode && shape[split] % k != 0)
    throw std::invalid_argument("tessera::all_to_all: split_axis " + std::to_string(split) + " has size " +
                                std::to_string(shape[split]) + ", which is not evenly divisible by the axis size " +
                                std::to_string(k));
  if (!tiled_mode && shape[split] != k)
    throw std::invalid_argument("tessera::all_to_all: split_axis " + std::to_string(split) + " has size " +
                                std::to_string(shape[split]) + " but must equal the axis size " + std::to_string(k) +
                                " (or pass tessera::tiled)");
}

/// An all_to_all's layout: the shape the tiled exchange runs on (the input's, with untiled's
/// unit dimension inserted at `concat`; arrays, not vectors: a small all_to_all costs about a
/// microsecond), its rank, the split and concat dimensions in it, and the result's shape.
template <std::size_t N>
struct exchange_layout {
  std::array<std::size_t, N + 1> shape{};
  std::size_t rank = N, split = 0, concat = 0;
  shape_t<N> out_shape{};
};

/// The blocking and the asynchronous all_to_all's common start, on call c (its k devices) with
/// input `in`: the arguments checked, the layout, c's signature, and the collective counted.
template <bool Tiled, class T, class Call, class In>
auto begin_all_to_all(Call& c, In const& in, std::size_t split_axis, std::size_t concat_axis, char const* name) {
  constexpr std::size_t N = std::tuple_size_v<std::remove_cvref_t<decltype(in.shape)>>;
  std::size_t const k = c.k();
  check_all_to_all(in.shape, split_axis, concat_axis, k, Tiled);
  exchange_layout<N> lay;
  std::copy(in.shape.begin(), in.shape.end(), lay.shape.begin());
  lay.split = split_axis, lay.concat = concat_axis;
  if (!Tiled && lay.split != lay.concat) {
    if (lay.split < lay.concat) ++lay.concat;
    else ++lay.split;
    std::copy_backward(lay.shape.begin() + static_cast<std::ptrdiff_t>(lay.concat),
                       lay.shape.begin() + static_cast<std::ptrdiff_t>(N), lay.shape.begin() + static_cast<std::ptrdiff_t>(N + 1));
    lay.shape[lay.concat] = 1;
    lay.rank = N + 1;
  }
  std::array<std::size_t, N + 1> r = lay.shape;
  r[lay.split] /= k;
  r[lay.concat] = scaled_dimension(r[lay.concat], k, in.shape, name);
  for (std::size_t i = 0, j = 0; i < lay.rank; ++i)
    if (Tiled || lay.split == lay.concat || i != lay.split) lay.out_shape[j++] = r[i];
  c.sig.count = in.count();
  c.sig.dtype = dtype_code<T>();
  c.sig.param = hash_shape(in.shape, split_axis * 64 + concat_axis * 2 + (Tiled ? 1 : 0));
  c.record("all-to-all", in.count() * sizeof(T));
  return lay;
}

/// all_to_all, tiled or not. Untiled runs as JAX does it: a unit dimension is inserted for the
/// chunks to land in, the tiled exchange runs, and the split dimension (now of size 1) is
/// dropped. Unit dimensions do not move bytes, so only the shapes change.
template <bool Tiled, axis_name... A, class V>
auto exchange(V&& v, std::size_t split_axis, std::size_t concat_axis) {
  static_assert(check_axes_in_mesh<V, A...>());
  constexpr std::size_t N = value_traits<V>::rank;
  static_assert(N >= 1, "tessera::all_to_all: a scalar has no dimension to split");
  auto in = make_input(std::forward<V>(v));
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(in.data)>>;
  collective_call<A...> c("all_to_all", op_kind::all_to_all);
  auto const lay = begin_all_to_all<Tiled, T>(c, in, split_axis, concat_axis, "all_to_all");
  auto out = make_result<T>(lay.out_shape);
  std::span<std::size_t const> const shape(lay.shape.data(), lay.rank);
  if (c.f.xp != nullptr) {
    all_to_all_across_processes<T>(c.f, c.g, c.sig, in.data, out.data(), shape, lay.split, lay.concat);
  } else {
    all_to_all(*c.f.t, c.f.pos, c.g, c.sig, in.data, out.data(), shape, lay.split, lay.concat);
  }
  return as_result<result_vma<V, false, A...>>(std::move(out));
}
}  // namespace detail

/// jax.lax.all_gather(x, axes, axis=axis): every device's x stacked along a new dimension `axis`.
/// The result is the same on every device along the axes (JAX's all_gather_invariant; JAX's
/// all_gather types it as varying only because of how it differentiates).
template <axis_name... A, class V>
auto all_gather(V&& v, collective_dim axis = 0) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::gather<false, A...>(std::forward<V>(v), axis.resolve(N + 1, "tessera::all_gather", "axis"));
}

/// jax.lax.all_gather(x, axes, axis=axis, tiled=True): every device's x concatenated along `axis`.
template <axis_name... A, class V>
auto all_gather(V&& v, collective_dim axis, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::gather<true, A...>(std::forward<V>(v), axis.resolve(N, "tessera::all_gather(tiled)", "axis"));
}

/// all_gather(v, axis, true): JAX's tiled=True is spelled tessera::tiled here.
template <axis_name... A, class V, class Flag>
  requires(!std::is_same_v<std::remove_cvref_t<Flag>, tiled_t>)
auto all_gather(V&& v, collective_dim axis, Flag&&) {
  static_assert(diagnostic::tiled_must_be_passed_as_tessera_tiled<std::remove_cvref_t<Flag>, false>::value);
  return all_gather<A...>(std::forward<V>(v), axis, tiled);  // the fixed call's type: no error after ours
}

/// jax.lax.psum_scatter(x, axes, scatter_dimension=dim): the sum, where device i keeps
/// index i of dimension `dim` (whose size must be the axis size); that dimension is removed.
template <axis_name... A, class V>
auto psum_scatter(V&& v, collective_dim dim = 0) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::scatter<false, A...>(std::forward<V>(v), dim.resolve(N, "tessera::psum_scatter", "scatter_dimension"));
}

/// jax.lax.psum_scatter(x, axes, scatter_dimension=dim, tiled=True): the sum, where device i
/// keeps the i-th of k equal chunks of dimension `dim`.
template <axis_name... A, class V>
auto psum_scatter(V&& v, collective_dim dim, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::scatter<true, A...>(std::forward<V>(v), dim.resolve(N, "tessera::psum_scatter", "scatter_dimension"));
}

/// psum_scatter(v, dim, true): JAX's tiled=True is spelled tessera::tiled here.
template <axis_name... A, class V, class Flag>
  requires(!std::is_same_v<std::remove_cvref_t<Flag>, tiled_t>)
auto psum_scatter(V&& v, collective_dim dim, Flag&&) {
  static_assert(diagnostic::tiled_must_be_passed_as_tessera_tiled<std::remove_cvref_t<Flag>, false>::value);
  return psum_scatter<A...>(std::forward<V>(v), dim, tiled);  // the fixed call's type: no error after ours
}

/// jax.lax.all_to_all(x, axes, split_axis, concat_axis, tiled=True): dimension `split_axis` is cut
/// into one chunk per device; chunk j goes to device j, and the chunks received are concatenated
/// along `concat_axis` in device order.
template <axis_name... A, class V>
auto all_to_all(V&& v, collective_dim split_axis, collective_dim concat_axis, tiled_t) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::exchange<true, A...>(std::forward<V>(v), split_axis.resolve(N, "tessera::all_to_all", "split_axis"),
                                      concat_axis.resolve(N, "tessera::all_to_all", "concat_axis"));
}

/// all_to_all(v, split, concat, true): JAX's tiled=True is spelled tessera::tiled here.
template <axis_name... A, class V, class Flag>
  requires(!std::is_same_v<std::remove_cvref_t<Flag>, tiled_t>)
auto all_to_all(V&& v, collective_dim split_axis, collective_dim concat_axis, Flag&&) {
  static_assert(diagnostic::tiled_must_be_passed_as_tessera_tiled<std::remove_cvref_t<Flag>, false>::value);
  // The fixed call's type: no error after ours.
  return all_to_all<A...>(std::forward<V>(v), split_axis, concat_axis, tiled);
}

/// jax.lax.all_to_all(x, axes, split_axis, concat_axis): dimension `split_axis` (whose size is the
/// axis size) is scattered over the devices and a new dimension of that size, indexed by source
/// device, appears at `concat_axis` of the result.
template <axis_name... A, class V>
auto all_to_all(V&& v, collective_dim split_axis, collective_dim concat_axis) {
  constexpr std::size_t N = detail::value_traits<V>::rank;
  return detail::exchange<false, A...>(std::forward<V>(v), split_axis.resolve(N, "tessera::all_to_all", "split_axis"),
                                       concat_axis.resolve(N, "tessera::all_to_all", "concat_axis"));
}

/// jax.lax.ppermute(x, axes, perm): device `dst` receives the x of device `src` for each
/// (src, dst) pair (indices along the axes); a device that receives nothing gets zeros.
template <axis_name... A, class V>
auto ppermute(V&& v, std::vector<std::pair<int, int>> const& perm) {
  static_assert(detail::check_axes_in_mesh<V, A...>());
  auto in = detail::make_input(std::forward<V>(v));
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(in.data)>>;
  detail::collective_call<A...> c("ppermute", detail::op_kind::ppermute);
  long const k = static_cast<long>(c.k());
  std::vector<char> is_src(static_cast<std::size_t>(k), 0), is_dst(static_cast<std::size_t>(k), 0);
  long source = -1;
  std::uint64_t h = detail::hash_shape(in.shape);
  for (auto const& [s, d] : perm) {
    if (s < 0 || s >= k || d < 0 || d >= k)
      throw std::invalid_argument("tessera::ppermute: the pair (" + std::to_string(s) + ", " + std::to_string(d) +
                                  ") is out of range for an axis of size " + std::to_string(k));
    if (is_src[static_cast<std::size_t>(s)]++)
      throw std::invalid_argument("tessera::ppermute: source " + std::to_string(s) + " appears twice in perm");
    if (is_dst[static_cast<std::size_t>(d)]++)
      throw std::invalid_argument("tessera::ppermute: destination " + std::to_string(d) + " appears twice in perm");
    if (static_cast<std::size_t>(d) == c.g.rank) source = s;
    h = (h ^ (static_cast<std::uint64_t>(s) << 20 | static_cast<std::uint64_t>(d))) * std::uint64_t{1099511628211ull};
  }
  c.sig.count = in.count();
  c.sig.dtype = detail::dtype_code<T>();
  c.sig.param = h;
  c.record("collective-permute", in.count() * sizeof(T));
  auto out = detail::make_result<T>(in.shape);
  if (c.f.xp != nullptr) {
    // Across processes every member's block is exchanged (an all-gather), and each device keeps its source's.
    auto const ins = detail::inputs_across_processes<T>(c.f, c.g, c.sig, in.data, in.count());
    if (source < 0) std::fill(out.data(), out.data() + in.count(), T{});
    else std::copy(ins[static_cast<std::size_t>(source)], ins[static_cast<std::size_t>(source)] + in.count(), out.data());
  } else {
    detail::permute(*c.f.t, c.f.pos, c.g, c.sig, in.data, out.data(), in.count(), source);
  }
  return detail::as_result<detail::result_vma<V, false, A...>>(std::move(out));
}

/// jax.lax.axis_index(axes): this device's index along the mesh axes (row-major over several);
/// a number that varies over them.
template <axis_name... A>
auto axis_index() {
  static_assert(sizeof...(A) >= 1, "tessera: name the mesh axes, as in axis_index<\"x\">()");
  auto& f = detail::frame_for("axis_index");
  auto const axes = detail::resolve_axes(f, std::array<axis_name, sizeof...(A)>{A...}, "axis_index");
  auto const mine = detail::coordinates(f.pos, f.sizes);
  std::size_t r = 0;
  for (std::size_t a : axes) r = r * f.sizes[a] + mine[a];
  return local_scalar<int, vma<in_mesh<>, varying<A...>>>(static_cast<int>(r));
}

namespace detail {
template <axis_name... A>
std::size_t group_size(char const* what) {
  auto& f = frame_for(what);
  std::size_t k = 1;
  for (std::size_t a : resolve_axes(f, std::array<axis_name, sizeof...(A)>{A...}, what)) k *= f.sizes[a];
  return k;
}
}  // namespace detail

/// jax.lax.axis_size(axes) (psum(1, axes) in older JAX): the number of devices along the mesh axes.
template <axis_name... A>
int axis_size() {
  static_assert(sizeof...(A) >= 1, "tessera: name the mesh axes, as in axis_size<\"x\">()");
  return static_cast<int>(detail::group_size<A...>("axis_size"));
}

}  // namespace tessera
