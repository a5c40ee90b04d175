#pragma once
// What a device reads while it evaluates an expression over its block: one
// cursor per operand, walking the block row by row (a row is the last
// dimension). A leaf cursor is a pointer and strides into the device's own
// block of an array: a broadcast dimension has stride 0, a dimension the array
// holds whole but the result shards starts at the device's offset, so nothing
// is copied or expanded. Rows whose leaves are contiguous or broadcast run on
// xsimd batches; others element by element.

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/array/shape.hpp"
#include "tessera/core/slice.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/runtime/simd.hpp"

namespace tessera::detail {

/// A leaf: row-major strides (in elements) over the result block's Q dimensions.
template <class T, std::size_t Q>
struct leaf_cursor {
  using value_type = T;
  template <class U>
  static constexpr bool simd_ok = std::is_same_v<T, U>;

  T const* base = nullptr;
  std::ptrdiff_t offset = 0;
  std::array<std::ptrdiff_t, Q> strides{};
  T const* row = nullptr;

  void set_row(shape_t<Q> const& idx) {
    std::ptrdiff_t o = offset;
    for (std::size_t d = 0; d + 1 < Q; ++d) o += static_cast<std::ptrdiff_t>(idx[d]) * strides[d];
    row = base + o;
  }
  T at(std::size_t k) const { return row[static_cast<std::ptrdiff_t>(k) * strides[Q - 1]]; }
  bool simd_row() const { return strides[Q - 1] == 0 || strides[Q - 1] == 1; }
  template <class B>
  B load(std::size_t k) const {
    return strides[Q - 1] != 0 ? B::load_unaligned(row + k) : B(*row);
  }
  /// Whether the whole block of shape `local` reads as one row: the leaf's block in row-major
  /// order (strides 1, local[Q-1], ...), or one value everywhere (strides 0).
  bool flat(shape_t<Q> const& local) const {
    if (strides[Q - 1] != 0 && strides[Q - 1] != 1) return false;
    std::ptrdiff_t expect = strides[Q - 1];
    for (std::size_t d = Q; d-- > 0;) {
      if (local[d] == 1) continue;
      if (strides[d] != expect) return false;
      expect *= static_cast<std::ptrdiff_t>(local[d]);
    }
    return true;
  }
};

/// A number in an expression (`2 * x`).
template <class S>
struct scalar_cursor {
  using value_type = S;
  template <class U>
  static constexpr bool simd_ok = true;
  S value;
  template <std::size_t Q>
  void set_row(shape_t<Q> const&) {}
  S at(std::size_t) const { return value; }
  bool simd_row() const { return true; }
  template <std::size_t Q>
  bool flat(shape_t<Q> const&) const {
    return true;
  }
  template <class B>
  B load(std::size_t) const {
    return B(static_cast<typename B::value_type>(value));
  }
};

/// Whether cursor c reads a block of shape `local` as one row (set_row at the origin, then
/// at(k) or load(k) for k up to the element count): cursors without a flat() never do.
template <class Cursor, std::size_t Q>
bool cursor_flat(Cursor const& c, shape_t<Q> const& local) {
  if constexpr (requires { c.flat(local); }) return c.flat(local);
  else return false;
}

/// An element-wise operation: operands converted to C, the operation, the result converted to R.
template <class Op, class C, class R, class... Children>
struct map_cursor {
  using value_type = R;
  template <class U>
  static constexpr bool simd_ok = std::is_same_v<C, U> && std::is_same_v<R, U> && Op::template simd<U> &&
                                  (Children::template simd_ok<U> && ...);
  std::tuple<Children...> children;

  template <std::size_t Q>
  void set_row(shape_t<Q> const& idx) {
    tessera::detail::apply([&](auto&... c) { (c.set_row(idx), ...); }, children);
  }
  R at(std::size_t k) const {
    return tessera::detail::apply([&](auto const&... c) { return static_cast<R>(Op::apply(static_cast<C>(c.at(k))...)); },
                      children);
  }
  bool simd_row() const {
    return tessera::detail::apply([](auto const&... c) { return (c.simd_row() && ...); }, children);
  }
  template <std::size_t Q>
  bool flat(shape_t<Q> const& local) const {
    return tessera::detail::apply([&](auto const&... c) { return (cursor_flat(c, local) && ...); }, children);
  }
  template <class B>
  B load(std::size_t k) const {
    return tessera::detail::apply([&](auto const&... c) { return Op::apply(c.template load<B>(k)...); }, children);
  }
};

/// The cursor of an array's block seen from a result block: the array's dimension
/// perm[i] is its i-th (after a transpose), aligned to the last of the result's Q dimensions.
template <class T, std::size_t Q, std::size_t N>
leaf_cursor<T, Q> make_leaf_cursor(T const* data, std::array<slice, N> const& block, shape_t<N> const& global,
                                   std::array<std::size_t, N> const& perm, std::array<slice, Q> const& result_block,
                                   shape_t<Q> const& result_global) {
  static_assert(N <= Q, "tessera: internal: an operand has a higher rank than its expression");
  std::array<std::ptrdiff_t, N> local{};
  std::ptrdiff_t s = 1;
  for (std::size_t j = N; j-- > 0;) {
    local[j] = s;
    s *= static_cast<std::ptrdiff_t>(block[j].size());
  }
  leaf_cursor<T, Q> c;
  c.base = data;
  for (std::size_t i = 0; i < N; ++i) {
    std::size_t const j = perm[i];
    std::size_t const d = i + Q - N;
    if (global[j] == 1 && result_global[d] != 1) continue;  // broadcast: stride 0
    c.strides[d] = local[j];
    if (result_block[d].size() == 0) continue;
    if (result_block[d].start < block[j].start || result_block[d].stop > block[j].stop)
      throw std::logic_error("tessera: internal: an operand's block does not cover the result's block in dimension " +
                             std::to_string(d));
    c.offset += static_cast<std::ptrdiff_t>(result_block[d].start - block[j].start) * local[j];
  }
  return c;
}

/// One row on xsimd batches; returns the elements done. Flattened, so the whole operation
/// tree (xsimd's sin, exp, ...) is inlined into the loop whatever other call sites the
/// translation unit has; the cursor is copied into a local, so the batch stores (xsimd's
/// stores alias anything) do not force the leaves' row pointers and strides to be reloaded
/// from memory for every batch.
template <class T, class Cursor>
[[gnu::flatten]] std::size_t fill_row_simd(Cursor const& cur_in, T* o, std::size_t inner) {
  Cursor const cur = cur_in;
  using B = xsimd::batch<T>;
  std::size_t k = 0;
  for (; k + B::size <= inner; k += B::size) cur.template load<B>(k).store_unaligned(o + k);
  return k;
}

/// out (a row-major block of shape `local`) = the cursor's values, row by row.
template <class T, std::size_t Q, class Cursor>
void fill_block(Cursor& cur, T* out, shape_t<Q> const& local) {
  std::size_t const count = element_count(local);
  if (count == 0) return;
  std::size_t const inner = local[Q - 1];
  std::size_t const rows = count / inner;
  shape_t<Q> idx{};
  [[maybe_unused]] bool vec = false;
  if constexpr (Cursor::template simd_ok<T> && simd::vectorised<T>) vec = cur.simd_row();
  // Every leaf in row-major order (or constant): the whole block is one row, without the
  // per-row restart that dominates short rows (a head's 16 elements in the transformer). One
  // call site of fill_row_simd either way: it is flattened, so each site is a copy of the tree.
  bool const flat = rows > 1 && cursor_flat(cur, local);
  std::size_t const n_rows = flat ? 1 : rows, row_len = flat ? count : inner;
  for (std::size_t r = 0; r < n_rows; ++r) {
    cur.set_row(idx);
    T* o = out + r * row_len;
    std::size_t k = 0;
    if constexpr (Cursor::template simd_ok<T> && simd::vectorised<T>) {
      if (vec) k = fill_row_simd<T>(cur, o, row_len);
    }
    for (; k < row_len; ++k) o[k] = cur.at(k);
    for (std::size_t d = Q - 1; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace tessera::detail
