#pragma once
// Tuple helpers: whether a type is a std::tuple (how shard_map and jit tell several results
// from one), and apply.

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace tessera::detail {

template <class T>
struct is_std_tuple : std::false_type {};
template <class... T>
struct is_std_tuple<std::tuple<T...>> : std::true_type {};

/// std::apply(f, t) for a callable that is called as f(args...) (every use in tessera): without
/// std::apply's noexcept specification and std::__invoke, whose traits (is_nothrow_invocable,
/// __invoke_result) cost the compiler more than the call itself; tessera applies a lambda to
/// the operands of every node of every expression (clang -ftime-trace, tests/unit/scan_test.cpp:
/// 241 std::apply instantiations, 2.6 s of 15 s of front end). Tuples of up to three operands
/// (every node's) are unpacked without an index-sequence lambda, and always_inline lets clang -O0
/// emit no function for the call at all: 2 000 functions fewer in a golden test (issue 31).
template <class F, class Tuple>
[[gnu::always_inline]] constexpr decltype(auto) apply(F&& f, Tuple&& t) {
  constexpr std::size_t n = std::tuple_size_v<std::remove_cvref_t<Tuple>>;
  if constexpr (n == 0) return static_cast<F&&>(f)();
  else if constexpr (n == 1) return static_cast<F&&>(f)(std::get<0>(static_cast<Tuple&&>(t)));
  else if constexpr (n == 2)
    return static_cast<F&&>(f)(std::get<0>(static_cast<Tuple&&>(t)), std::get<1>(static_cast<Tuple&&>(t)));
  else if constexpr (n == 3)
    return static_cast<F&&>(f)(std::get<0>(static_cast<Tuple&&>(t)), std::get<1>(static_cast<Tuple&&>(t)),
                               std::get<2>(static_cast<Tuple&&>(t)));
  else
    return [&]<std::size_t... I>(std::index_sequence<I...>) -> decltype(auto) {
      return static_cast<F&&>(f)(std::get<I>(static_cast<Tuple&&>(t))...);
    }(std::make_index_sequence<n>{});
}

}  // namespace tessera::detail
