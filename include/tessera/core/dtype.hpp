#pragma once
// Element types and the names JAX prints for them (`float32`, `int32`, ...).

#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace tessera {

/// The element types a sharded array may hold (jnp dtypes that have a C++ twin).
template <class T>
concept element_type = std::is_arithmetic_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>;

/// The dtype name JAX prints in `typeof` (`jnp.dtype(...).name`).
template <element_type T>
constexpr std::string_view dtype_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_floating_point_v<T>) {
    if constexpr (sizeof(T) == 4) return "float32";
    else if constexpr (sizeof(T) == 8) return "float64";
    else return "float128";
  } else if constexpr (std::is_signed_v<T>) {
    if constexpr (sizeof(T) == 1) return "int8";
    else if constexpr (sizeof(T) == 2) return "int16";
    else if constexpr (sizeof(T) == 4) return "int32";
    else return "int64";
  } else {
    if constexpr (sizeof(T) == 1) return "uint8";
    else if constexpr (sizeof(T) == 2) return "uint16";
    else if constexpr (sizeof(T) == 4) return "uint32";
    else return "uint64";
  }
}

}  // namespace tessera
