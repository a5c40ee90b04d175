#pragma once
// Integer arithmetic that wraps around (two's complement), as JAX's does, without the
// undefined behaviour of signed overflow in C++: integers are added, subtracted, multiplied
// and negated in an unsigned type and converted back (a conversion C++20 defines modulo
// 2^bits). The unsigned type is at least unsigned int, since uint16 * uint16 would otherwise
// promote to int and overflow it. Floating-point values and bool keep the expression they
// always had (`static_cast<T>(a + b)`), so their results are bit for bit unchanged.
// Every scalar `+ - * unary-` on an element type in tessera goes through these; the xsimd
// batch overloads are in runtime/simd.hpp.

#include <type_traits>

namespace tessera::detail {

/// The integer element types whose arithmetic wraps around (every integer but bool).
template <class T>
concept wrapping_integer = std::is_integral_v<T> && !std::is_same_v<T, bool>;

/// The unsigned type T's arithmetic is done in: T's unsigned twin, at least unsigned int.
template <wrapping_integer T>
using wrapping_unsigned_t =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

/// a + b, wrapping around for integers (jax.lax.add).
template <class T>
  requires std::is_arithmetic_v<T>
constexpr T wrapping_add(T a, T b) {
  if constexpr (wrapping_integer<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return static_cast<T>(a + b);
  }
}

/// a - b, wrapping around for integers (jax.lax.sub).
template <class T>
  requires std::is_arithmetic_v<T>
constexpr T wrapping_sub(T a, T b) {
  if constexpr (wrapping_integer<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return static_cast<T>(a - b);
  }
}

/// a * b, wrapping around for integers (jax.lax.mul); bool's is `and`.
template <class T>
  requires std::is_arithmetic_v<T>
constexpr T wrapping_mul(T a, T b) {
  if constexpr (wrapping_integer<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else {
    return static_cast<T>(a * b);
  }
}

/// -a, wrapping around for integers (jax.lax.neg): the minimum of a signed type is its own negation.
template <class T>
  requires std::is_arithmetic_v<T>
constexpr T wrapping_neg(T a) {
  if constexpr (wrapping_integer<T>) {
    using U = wrapping_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
  } else {
    return static_cast<T>(-a);
  }
}

}  // namespace tessera::detail
