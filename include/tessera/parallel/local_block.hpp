#pragma once
// What shard_map's body receives: one device's block as a read-only xtensor
// expression over the device's buffer (no copy).
//
// xtensor keeps an lvalue operand of a lazy expression by reference, so
// `[](auto blk) { return 2 * xt::sin(blk) + 1; }` would return an expression
// that points at the by-value parameter after the lambda returned. The block
// type has its own allocator tag so that xtensor can be told to hold it by
// value (it is a pointer and a shape), which makes that lambda safe.

#include <cstddef>
#include <memory>

#include <xtensor/xadapt.hpp>
#include <xtensor/xbuffer_adaptor.hpp>
#include <xtensor/xexpression.hpp>
#include <xtensor/xtensor.hpp>

#include "tessera/array/shape.hpp"

namespace tessera {
namespace detail {
/// std::allocator under another name: only marks the buffer as a tessera block.
template <class T>
struct block_allocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = block_allocator<U>;
  };
  block_allocator() = default;
  template <class U>
  block_allocator(block_allocator<U> const&) noexcept {}  // NOLINT: allocator conversion
};
}  // namespace detail

/// A device's block inside shard_map (JAX's per-device `x` in the body): read-only, row-major, rank N.
template <class T, std::size_t N>
using local_block = xt::xtensor_adaptor<xt::xbuffer_adaptor<T const*, xt::no_ownership, detail::block_allocator<T>>, N,
                                        xt::layout_type::row_major, xt::xtensor_expression_tag>;

namespace detail {
template <class T, std::size_t N>
local_block<T, N> make_local_block(T const* data, shape_t<N> const& shape) {
  using buffer = xt::xbuffer_adaptor<T const*, xt::no_ownership, block_allocator<T>>;
  return local_block<T, N>(buffer(data, element_count(shape)), shape);
}
}  // namespace detail
}  // namespace tessera

namespace xt {
// Lazy expressions hold a tessera block by value (see the top of this file).
template <class T, std::size_t N>
struct xclosure<tessera::local_block<T, N>&, std::enable_if_t<true>> {
  using type = tessera::local_block<T, N>;
};
template <class T, std::size_t N>
struct xclosure<tessera::local_block<T, N> const&, std::enable_if_t<true>> {
  using type = tessera::local_block<T, N>;
};
template <class T, std::size_t N>
struct const_xclosure<tessera::local_block<T, N>&, std::enable_if_t<true>> {
  using type = tessera::local_block<T, N>;
};
template <class T, std::size_t N>
struct const_xclosure<tessera::local_block<T, N> const&, std::enable_if_t<true>> {
  using type = tessera::local_block<T, N>;
};
}  // namespace xt
