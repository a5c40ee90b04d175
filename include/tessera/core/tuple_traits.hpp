#pragma once
// Whether a type is a std::tuple: how shard_map and jit tell several results from one.

#include <tuple>
#include <type_traits>

namespace tessera::detail {

template <class T>
struct is_std_tuple : std::false_type {};
template <class... T>
struct is_std_tuple<std::tuple<T...>> : std::true_type {};

}  // namespace tessera::detail
