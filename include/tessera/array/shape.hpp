#pragma once
// Shapes: checked conversion from user integers, element counts, and the static
// rank of an xtensor expression.

#include <array>
#include <concepts>
#include <cstddef>
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

template <std::size_t N>
std::size_t element_count(shape_t<N> const& s) {
  std::size_t n = 1;
  for (auto x : s) n *= x;
  return n;
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
