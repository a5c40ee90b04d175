#pragma once
// A string usable as a template argument: mesh axis names live in types, so
// errors print `mesh<"x","y">`-like names and specs are checked at compile time.

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace tessera {

/// A compile-time axis name, the `'x'` in `Mesh(devices, ('x', 'y'))`.
/// Fixed capacity (not templated on length) so every name has one type and
/// names can be compared and stored in plain constexpr arrays. The characters
/// are its only member, so compilers print it as `axis_name{"x"}` (issue 14).
struct axis_name {
  static constexpr std::size_t capacity = 32;
  char chars[capacity]{};

  constexpr axis_name() = default;
  template <std::size_t N>
  constexpr axis_name(char const (&s)[N]) {  // NOLINT: implicit from literals by design
    static_assert(N - 1 < capacity, "tessera: an axis name is limited to 31 characters");
    for (std::size_t i = 0; i + 1 < N; ++i) chars[i] = s[i];
  }
  /// The name: the characters before the first NUL.
  constexpr std::string_view view() const {
    std::size_t n = 0;
    while (n < capacity && chars[n] != '\0') ++n;
    return {chars, n};
  }
  constexpr bool empty() const { return chars[0] == '\0'; }
  friend constexpr bool operator==(axis_name const& a, axis_name const& b) { return a.view() == b.view(); }
};

}  // namespace tessera
