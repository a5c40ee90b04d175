#pragma once
// Helpers shared by the unit tests.

#include <algorithm>
#include <cstddef>

namespace tessera_test {

/// Same shape and the same elements, in row-major order (xtensor's own == would clash with
/// Catch's expression decomposer, and compares xtensor containers only).
template <class A, class B>
bool same_array(A const& a, B const& b) {
  if (a.dimension() != b.dimension()) return false;
  for (std::size_t i = 0; i < a.dimension(); ++i)
    if (a.shape()[i] != b.shape()[i]) return false;
  return std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace tessera_test
