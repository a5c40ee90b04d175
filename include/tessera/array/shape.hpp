#pragma once
// Shapes: checked conversion from user integers, element counts (checked where a
// shape comes in), and the static rank of an xtensor expression.

#include <array>
#include <concepts>
#include <cstddef>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

namespace tessera {

/// A global or block shape of rank N.
template <std::size_t N>
using shape_t = std::array<std::size_t, N>;

namespace detail {

template <class Seq>
std::string shape_string(Seq const& s) {
  std::ostringstream os;
  os << '(';
  std::size_t i = 0;
  for (auto x : s) os << (i++ ? ", " : "") << x;
  if (i == 1) os << ',';
  os << ')';
  return os.str();
}

/// The most elements, and the most bytes, an array may have: offsets and strides are
/// std::ptrdiff_t (in the cursors and in xtensor), and no allocation can be larger.
inline constexpr std::size_t max_array_size = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

/// What keeps `shape` from being an array of `element_bytes`-byte elements, or "" when nothing.
/// As in NumPy, sizes of 0 are left out of the product, so that no stride or partial
/// product of a shape that passes can wrap either, even though it has no elements.
template <class Seq>
std::string size_error(Seq const& shape, std::size_t element_bytes) {
  std::size_t n = 1;
  for (auto x : shape) {
    auto const e = static_cast<std::size_t>(x);
    if (e == 0) continue;
    if (n > max_array_size / e)
      return "has more elements than std::ptrdiff_t can count (" + std::to_string(max_array_size) + ")";
    n *= e;
  }
  if (n > max_array_size / element_bytes)
    return "needs more bytes (" + std::to_string(element_bytes) + " per element) than std::ptrdiff_t can count (" +
           std::to_string(max_array_size) + ")";
  return {};
}

/// Elements of a shape, unchecked: for shapes that passed checked_element_count where they came
/// in (and their blocks), so the hot paths pay nothing.
template <std::size_t N>
std::size_t element_count(shape_t<N> const& s) {
  std::size_t n = 1;
  for (auto x : s) n *= x;
  return n;
}

/// Elements of a shape that comes from outside (a user, a body's result), checked once, where it
/// comes in, to be an array of T: a count that wrapped would let a short buffer be written past.
template <class T, std::size_t N>
std::size_t checked_element_count(shape_t<N> const& s, char const* where) {
  if (std::string const e = size_error(s, sizeof(T)); !e.empty())
    throw std::length_error(std::string("tessera::") + where + ": shape " + shape_string(s) + " " + e);
  return element_count(s);
}

/// Converts a user-given shape, rejecting negative sizes with the whole shape in the message.
template <std::integral I, std::size_t N>
shape_t<N> checked_shape(I const* dims, char const* where) {
  shape_t<N> out{};
  for (std::size_t i = 0; i < N; ++i) {
    if constexpr (std::is_signed_v<I>) {
      if (dims[i] < 0) {
        std::ostringstream os;
        os << "tessera::" << where << ": shape (";
        for (std::size_t j = 0; j < N; ++j) os << (j ? ", " : "") << dims[j];
        os << (N == 1 ? ",)" : ")") << " has a negative size " << dims[i] << " in dimension " << i;
        throw std::invalid_argument(os.str());
      }
    }
    out[i] = static_cast<std::size_t>(dims[i]);
  }
  return out;
}

template <class S, class = void>
struct static_rank_of : std::integral_constant<std::size_t, static_cast<std::size_t>(-1)> {};
template <class S>
struct static_rank_of<S, std::void_t<decltype(std::tuple_size<S>::value)>>
    : std::integral_constant<std::size_t, std::tuple_size<S>::value> {};

}  // namespace detail

/// Rank of an xtensor expression when its type fixes it (xtensor, fixed shapes, reshape_view with {..}).
template <class E>
inline constexpr std::size_t static_rank_v = detail::static_rank_of<typename std::decay_t<E>::shape_type>::value;
/// Whether the rank of E is known at compile time.
template <class E>
inline constexpr bool has_static_rank_v = static_rank_v<E> != static_cast<std::size_t>(-1);

}  // namespace tessera
