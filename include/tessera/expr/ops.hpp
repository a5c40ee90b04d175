#pragma once
// The element-wise operations of sharded expressions (jax.lax's add, sin, ...):
// each one computes on numbers and, where `simd<T>` says so, on xsimd batches
// of T, with the same result element for element. Their names appear in the
// expression types and in compile errors (`tessera::op::add`).

#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include "tessera/runtime/simd.hpp"

namespace tessera::op {

namespace detail {
template <class T>
inline constexpr bool floating = std::is_floating_point_v<T>;
template <class T>
inline constexpr bool vectorised = tessera::detail::simd::vectorised<T>;
template <class X>
inline constexpr bool is_number = std::is_arithmetic_v<X>;
}  // namespace detail

/// jnp.add (integers wrap around)
struct add {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a, X b) { return tessera::detail::wrapping_add(a, b); }
};
/// jnp.subtract (integers wrap around)
struct subtract {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a, X b) { return tessera::detail::wrapping_sub(a, b); }
};
/// jnp.multiply (integers wrap around; bool's is `and`)
struct multiply {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a, X b) { return tessera::detail::wrapping_mul(a, b); }
};
/// jnp.true_divide (computed in floating point, as `/` is in JAX)
struct divide {
  template <class T> static constexpr bool simd = detail::floating<T>;
  template <class X> static X apply(X a, X b) { return a / b; }
};
/// jnp.negative (integers wrap around: the minimum of a signed type is its own negation)
struct negate {
  template <class T> static constexpr bool simd = detail::vectorised<T> && std::is_signed_v<T>;
  template <class X> static X apply(X a) { return tessera::detail::wrapping_neg(a); }
};
/// jnp.maximum (a NaN in either operand gives NaN)
struct maximum {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a, X b) {
    if constexpr (detail::is_number<X>) {
      if constexpr (detail::floating<X>) {
        if (a != a || b != b) return a != a ? a : b;
      }
      return b > a ? b : a;
    } else if constexpr (detail::floating<typename X::value_type>) {
      return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, xsimd::select(b > a, b, a)));
    } else {
      return xsimd::select(b > a, b, a);
    }
  }
};
/// jnp.minimum (a NaN in either operand gives NaN)
struct minimum {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a, X b) {
    if constexpr (detail::is_number<X>) {
      if constexpr (detail::floating<X>) {
        if (a != a || b != b) return a != a ? a : b;
      }
      return b < a ? b : a;
    } else if constexpr (detail::floating<typename X::value_type>) {
      return xsimd::select(xsimd::isnan(a), a, xsimd::select(xsimd::isnan(b), b, xsimd::select(b < a, b, a)));
    } else {
      return xsimd::select(b < a, b, a);
    }
  }
};
/// jnp.power (integers by repeated squaring, as jnp does for integer exponents, wrapping around)
struct power {
  template <class T> static constexpr bool simd = detail::floating<T>;
  template <class X> static X apply(X a, X b) {
    if constexpr (!detail::is_number<X>) {
      // IEEE's pow(x, 0) and pow(1, y) are 1 for every x and y (NaN included), as std::pow and
      // JAX give; xsimd's pow (8.1) gives 0 for pow(0, 0).
      using V = typename X::value_type;
      return xsimd::select(b == X(V(0)) || a == X(V(1)), X(V(1)), xsimd::pow(a, b));
    } else if constexpr (detail::floating<X>) {
      return std::pow(a, b);
    } else if constexpr (std::is_same_v<X, bool>) {
      return a || !b;
    } else {
      if constexpr (std::is_signed_v<X>) {
        if (b < 0) return static_cast<X>(a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0));
      }
      // Wrapping products (uint16 * uint16 would overflow int, the type C++ multiplies it in).
      using U = std::make_unsigned_t<X>;
      U r = 1, base = static_cast<U>(a);
      for (U e = static_cast<U>(b); e != 0; e >>= 1) {
        if (e & 1) r = tessera::detail::wrapping_mul(r, base);
        base = tessera::detail::wrapping_mul(base, base);
      }
      return static_cast<X>(r);
    }
  }
};

namespace detail {
/// xsimd 8's log and log1p do not compile for AVX-512BW (xsimd_avx512bw.hpp casts an int batch
/// to __v64qi), which -march=native picks on such machines: there they run one element at a time.
inline constexpr bool batch_log_compiles =
#if defined(XSIMD_VERSION_MAJOR) && XSIMD_VERSION_MAJOR < 9 && XSIMD_WITH_AVX512BW
    false;
#else
    true;
#endif
}  // namespace detail

#define TESSERA_FLOAT_FUNCTION(NAME, JNP, SCALAR, BATCH)                   \
  /** JNP */                                                               \
  struct NAME {                                                            \
    template <class T> static constexpr bool simd = detail::floating<T>;   \
    template <class X> static X apply(X a) {                               \
      if constexpr (detail::is_number<X>) return SCALAR;                   \
      else return BATCH;                                                   \
    }                                                                      \
  };
TESSERA_FLOAT_FUNCTION(sin, jnp.sin, std::sin(a), xsimd::sin(a))
TESSERA_FLOAT_FUNCTION(cos, jnp.cos, std::cos(a), xsimd::cos(a))
TESSERA_FLOAT_FUNCTION(tan, jnp.tan, std::tan(a), xsimd::tan(a))
TESSERA_FLOAT_FUNCTION(exp, jnp.exp, std::exp(a), xsimd::exp(a))
TESSERA_FLOAT_FUNCTION(sqrt, jnp.sqrt, std::sqrt(a), xsimd::sqrt(a))
TESSERA_FLOAT_FUNCTION(tanh, jnp.tanh, std::tanh(a), xsimd::tanh(a))
TESSERA_FLOAT_FUNCTION(rsqrt, jax.lax.rsqrt, X(1) / std::sqrt(a), X(1) / xsimd::sqrt(a))
TESSERA_FLOAT_FUNCTION(sigmoid, jax.nn.sigmoid, X(1) / (X(1) + std::exp(-a)), X(1) / (X(1) + xsimd::exp(-a)))
#undef TESSERA_FLOAT_FUNCTION

#define TESSERA_LOG_FUNCTION(NAME, JNP, SCALAR, BATCH)                                                \
  /** JNP */                                                                                        \
  struct NAME {                                                                                     \
    template <class T> static constexpr bool simd = detail::floating<T> && detail::batch_log_compiles; \
    template <class X> static X apply(X a) {                                                        \
      if constexpr (detail::is_number<X>) return SCALAR;                                            \
      else return BATCH;                                                                            \
    }                                                                                               \
  };
TESSERA_LOG_FUNCTION(log, jnp.log, std::log(a), xsimd::log(a))
TESSERA_LOG_FUNCTION(log1p, jnp.log1p, std::log1p(a), xsimd::log1p(a))
#undef TESSERA_LOG_FUNCTION

/// jnp.abs (the minimum of a signed type is its own absolute value, as in JAX)
struct abs {
  template <class T> static constexpr bool simd = detail::floating<T>;
  template <class X> static X apply(X a) {
    if constexpr (!detail::is_number<X>) return xsimd::abs(a);
    else if constexpr (std::is_unsigned_v<X>) return a;
    else if constexpr (detail::floating<X>) return std::fabs(a);
    else return a < 0 ? tessera::detail::wrapping_neg(a) : a;
  }
};

/// jnp.where(c, a, b)
struct where {
  template <class T> static constexpr bool simd = false;
  template <class X> static X apply(X c, X a, X b) { return c != X(0) ? a : b; }  // c is 0 or 1: tested for truth first
};

/// x.astype(T): the value converted (no arithmetic).
struct convert {
  template <class T> static constexpr bool simd = detail::vectorised<T>;
  template <class X> static X apply(X a) { return a; }
};

#define TESSERA_COMPARISON(NAME, JNP, OP)                          \
  /** JNP */                                                       \
  struct NAME {                                                    \
    template <class T> static constexpr bool simd = false;         \
    template <class X> static bool apply(X a, X b) { return a OP b; } \
  };
TESSERA_COMPARISON(equal, jnp.equal, ==)
TESSERA_COMPARISON(not_equal, jnp.not_equal, !=)
TESSERA_COMPARISON(less, jnp.less, <)
TESSERA_COMPARISON(less_equal, jnp.less_equal, <=)
TESSERA_COMPARISON(greater, jnp.greater, >)
TESSERA_COMPARISON(greater_equal, jnp.greater_equal, >=)
#undef TESSERA_COMPARISON

/// The reductions (jnp.sum, mean, max, min, prod): identity and combine, on numbers and
/// batches; integer sums and products wrap around at the result type.
struct sum {
  template <class T> static constexpr T identity() { return T(0); }
  template <class T> static T combine(T a, T b) { return op::add::apply(a, b); }
};
/// jnp.mean: a sum, divided by the count afterwards.
struct mean : sum {};
/// jnp.max
struct max {
  template <class T> static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  template <class T> static T combine(T a, T b) { return op::maximum::apply(a, b); }
};
/// jnp.min
struct min {
  template <class T> static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::max();
  }
  template <class T> static T combine(T a, T b) { return op::minimum::apply(a, b); }
};
/// jnp.prod
struct prod {
  template <class T> static constexpr T identity() { return T(1); }
  template <class T> static T combine(T a, T b) { return op::multiply::apply(a, b); }
};

}  // namespace tessera::op
