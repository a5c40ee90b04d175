#pragma once
// The per-device values of a shard_map body: a device's block of an argument,
// and what the collectives return. Both are read-only xtensor expressions
// whose type carries `vma<...>`, the mesh axes the value varies over
// (core/varying_axes.hpp), so shard_map can check out_specs when compiling.
//
// xtensor keeps an lvalue operand of a lazy expression by reference, so
// `[](auto blk) { return 2 * xt::sin(blk) + 1; }` would return an expression
// that points at the by-value parameter after the lambda returned. A block is
// a pointer, a shape and (for collective results) a shared owner, so xtensor
// is told to hold it by value, which makes that lambda safe.

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/detail/xtensor/xadapt.hpp"
#include "tessera/detail/xtensor/xbuffer_adaptor.hpp"
#include "tessera/detail/xtensor/xexpression.hpp"
#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/shape.hpp"
#include "tessera/core/varying_axes.hpp"

namespace tessera {
namespace detail {
/// Keeps a block's memory alive (collective results own theirs; argument blocks do not) and
/// carries the vma in the block's type. xtensor calls it the buffer's "destructor".
template <class Vma>
struct block_owner {
  std::shared_ptr<void const> memory;
  void operator()() const noexcept {}  // xtensor takes a buffer "destructor" to be a callable
};
}  // namespace detail

/// A device's block inside shard_map (JAX's per-device `x` in the body), or a collective's
/// result: read-only, row-major, rank N, varying over the mesh axes `Vma` names.
template <class T, std::size_t N, class Vma = detail::untracked_vma>
using local_block = xt::xtensor_adaptor<xt::xbuffer_adaptor<T const*, xt::no_ownership, detail::block_owner<Vma>>, N,
                                        xt::layout_type::row_major, xt::xtensor_expression_tag>;

/// A number a collective returned (JAX: a 0-d array), with the mesh axes it varies over in its type.
/// Converts to T, so it works wherever the number does.
template <class T, class Vma>
class local_scalar {
 public:
  using value_type = T;
  using vma_type = Vma;
  constexpr explicit local_scalar(T v) : value_(v) {}
  constexpr operator T() const { return value_; }  // NOLINT: used as the number it is
  /// The number.
  constexpr T value() const { return value_; }

 private:
  T value_;
};

namespace detail {
template <class T>
struct is_local_block : std::false_type {};
template <class T, std::size_t N, class Vma>
struct is_local_block<local_block<T, N, Vma>> : std::true_type {};

template <class T>
struct is_local_scalar : std::false_type {};
template <class T, class Vma>
struct is_local_scalar<local_scalar<T, Vma>> : std::true_type {};

/// A view of memory someone else keeps alive (an argument's block).
template <class Vma, class T, std::size_t N>
local_block<T, N, Vma> make_local_block(T const* data, shape_t<N> const& shape) {
  using buffer = xt::xbuffer_adaptor<T const*, xt::no_ownership, block_owner<Vma>>;
  return local_block<T, N, Vma>(buffer(data, element_count(shape), block_owner<Vma>{}), shape);
}

/// A block of the memory `holder` keeps (anything with `data()` and a `shape` array), sharing it.
template <class Vma, class H>
auto block_of_holder(std::shared_ptr<H> holder) {
  using T = std::remove_cv_t<std::remove_pointer_t<decltype(holder->data())>>;
  constexpr std::size_t N = std::tuple_size_v<decltype(holder->shape)>;
  T const* data = holder->data();
  shape_t<N> const shape = holder->shape;
  using buffer = xt::xbuffer_adaptor<T const*, xt::no_ownership, block_owner<Vma>>;
  return local_block<T, N, Vma>(buffer(data, element_count(shape), block_owner<Vma>{std::move(holder)}), shape);
}

/// A block that owns `h`, anything with `data()` and a `shape` array (a collective's result).
template <class Vma, class Holder>
auto own_as_block(Holder&& h) {
  return block_of_holder<Vma>(std::make_shared<std::remove_cvref_t<Holder>>(std::forward<Holder>(h)));
}
}  // namespace detail
}  // namespace tessera

namespace xt {
// Lazy expressions hold a tessera block by value (see the top of this file).
template <class E>
struct xclosure<E, std::enable_if_t<tessera::detail::is_local_block<std::decay_t<E>>::value>> {
  using type = std::decay_t<E>;
};
template <class E>
struct const_xclosure<E, std::enable_if_t<tessera::detail::is_local_block<std::decay_t<E>>::value>> {
  using type = std::decay_t<E>;
};
}  // namespace xt
