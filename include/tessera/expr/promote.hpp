#pragma once
// Result element types, as jnp computes them (jnp.promote_types and weak-typed
// Python scalars), not as C++ does: int8 + int8 is int8 (C++ says int), and
// 2.0 * x keeps x's float32 (C++ says double).

#include <cstdint>
#include <type_traits>

namespace tessera::detail {

template <class T>
inline constexpr bool is_bool_v = std::is_same_v<T, bool>;

template <std::size_t Bytes>
struct signed_of_size;
template <> struct signed_of_size<1> { using type = std::int8_t; };
template <> struct signed_of_size<2> { using type = std::int16_t; };
template <> struct signed_of_size<4> { using type = std::int32_t; };
template <> struct signed_of_size<8> { using type = std::int64_t; };

template <class A, class B>
struct promote_types {
  static auto pick() {
    if constexpr (std::is_same_v<A, B>) return A{};
    else if constexpr (is_bool_v<A>) return B{};
    else if constexpr (is_bool_v<B>) return A{};
    else if constexpr (std::is_floating_point_v<A> && std::is_floating_point_v<B>) {
      if constexpr (sizeof(A) >= sizeof(B)) return A{};
      else return B{};
    } else if constexpr (std::is_floating_point_v<A>) return A{};
    else if constexpr (std::is_floating_point_v<B>) return B{};
    else if constexpr (std::is_signed_v<A> == std::is_signed_v<B>) {
      if constexpr (sizeof(A) >= sizeof(B)) return A{};
      else return B{};
    } else {
      using S = std::conditional_t<std::is_signed_v<A>, A, B>;
      using U = std::conditional_t<std::is_signed_v<A>, B, A>;
      if constexpr (sizeof(S) > sizeof(U)) return S{};
      else if constexpr (sizeof(U) < 8) return typename signed_of_size<2 * sizeof(U)>::type{};
      else return double{};  // jnp: int64 with uint64 is float64
    }
  }
  using type = decltype(pick());
};

/// jnp.promote_types(A, B).
template <class A, class B>
using promote_t = typename promote_types<A, B>::type;

/// A C++ number S combined with an array of T: S is weakly typed, as a Python scalar is in JAX.
template <class T, class S>
struct promote_weak {
  static auto pick() {
    if constexpr (is_bool_v<S>) return T{};
    else if constexpr (std::is_integral_v<S>) {
      if constexpr (is_bool_v<T>) return std::int32_t{};
      else return T{};
    } else {
      if constexpr (std::is_floating_point_v<T>) return T{};
      else return float{};
    }
  }
  using type = decltype(pick());
};

/// The floating type a function of T computes in (jnp.sin of int32 is float32).
template <class T>
using float_of_t = std::conditional_t<std::is_floating_point_v<T>, T, std::conditional_t<(sizeof(T) > 4), double, float>>;

}  // namespace tessera::detail
