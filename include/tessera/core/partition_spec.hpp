#pragma once
// PartitionSpec: for each array dimension, the mesh axes it is split over.

#include <array>
#include <cstddef>
#include <ostream>

#include "tessera/core/fixed_string.hpp"

namespace tessera {

/// Python's `None` in a PartitionSpec: the dimension is not sharded.
struct none_t {
  friend constexpr bool operator==(none_t, none_t) { return true; }
};
/// `P("x", none)` is `P('x', None)`.
inline constexpr none_t none{};

/// One PartitionSpec entry: no axis (None), one axis ('x'), or several, major to minor (('x','y')).
/// The names are kept joined by commas in one character array, its only member, so compilers
/// print an entry as `dim_spec{"x"}` or `dim_spec{"x,y"}` and a spec as `P<dim_spec{"x"}, dim_spec{""}>`
/// (issue 14: short type names in errors).
struct dim_spec {
  static constexpr std::size_t max_axes = 4;
  static constexpr std::size_t capacity = max_axes * axis_name::capacity;
  char text[capacity]{};

  constexpr dim_spec() = default;
  constexpr dim_spec(none_t) {}  // NOLINT: `none` is a spec entry
  template <std::size_t N>
  constexpr dim_spec(char const (&s)[N]) {  // NOLINT: "x" is a spec entry
    push(axis_name(s));
  }
  constexpr dim_spec(axis_name n) { push(n); }  // NOLINT
  /// How many mesh axes the entry names (0 for None).
  constexpr std::size_t count() const {
    if (text[0] == '\0') return 0;
    std::size_t k = 1;
    for (std::size_t i = 0; i < capacity && text[i] != '\0'; ++i) k += text[i] == ',';
    return k;
  }
  /// The i-th axis, major to minor.
  constexpr axis_name axis(std::size_t i) const {
    axis_name n;
    std::size_t p = 0;
    for (; i > 0 && p < capacity && text[p] != '\0'; ++p) i -= text[p] == ',';
    for (std::size_t k = 0; p < capacity && text[p] != '\0' && text[p] != ','; ++p) n.chars[k++] = text[p];
    return n;
  }
  /// Appends an axis (the next, more minor one).
  constexpr void push(axis_name const& n) {
    std::size_t p = 0;
    while (p < capacity && text[p] != '\0') ++p;
    if (p != 0) text[p++] = ',';
    for (char c : n.view()) {
      if (c == ',') throw "tessera: a mesh axis name used in a PartitionSpec may not contain ','";
      text[p++] = c;
    }
  }
  constexpr bool is_none() const { return text[0] == '\0'; }
  constexpr bool uses(axis_name const& n) const {
    for (std::size_t i = 0; i < count(); ++i)
      if (axis(i) == n) return true;
    return false;
  }
  friend constexpr bool operator==(dim_spec const& a, dim_spec const& b) {
    for (std::size_t i = 0; i < capacity; ++i)
      if (a.text[i] != b.text[i]) return false;
    return true;
  }
};

/// A spec entry sharded over several mesh axes, major to minor: `P(axes<"x","y">)` is `P(('x','y'),)`.
template <axis_name... Names>
inline constexpr dim_spec axes = [] {
  static_assert(sizeof...(Names) >= 1 && sizeof...(Names) <= dim_spec::max_axes,
                "tessera: axes<...> takes between 1 and 4 mesh axis names");
  dim_spec d;
  (d.push(Names), ...);
  return d;
}();

namespace detail {
template <std::size_t K>
constexpr bool spec_has_repeated_axis(std::array<dim_spec, K> const& dims) {
  for (std::size_t i = 0; i < K; ++i)
    for (std::size_t a = 0; a < dims[i].count(); ++a)
      for (std::size_t j = i; j < K; ++j)
        for (std::size_t b = (j == i ? a + 1 : 0); b < dims[j].count(); ++b)
          if (dims[i].axis(a) == dims[j].axis(b)) return true;
  return false;
}
}  // namespace detail

/// jax.sharding.PartitionSpec: `P<"x", none>` is `P('x', None)`, `P<>` is `P()`.
/// Dimensions past the spec's length are replicated.
template <dim_spec... Dims>
struct P {
  /// Number of entries (len(spec)).
  static constexpr std::size_t size = sizeof...(Dims);
  /// The entries as a constexpr array.
  static constexpr std::array<dim_spec, size> dims{Dims...};

  static_assert(!detail::spec_has_repeated_axis(dims),
                "tessera: a PartitionSpec uses the same mesh axis twice; each mesh axis may shard at most one "
                "dimension, once (JAX: 'PartitionSpec ... has duplicate entries')");

  /// Entry for array dimension `i` (none past the end).
  static constexpr dim_spec dim(std::size_t i) { return i < size ? dims[i] : dim_spec{}; }

  /// repr(spec) as JAX 0.12 prints it: `P('x', None)`, `P(('x', 'y'),)`, `P()`.
  friend std::ostream& operator<<(std::ostream& os, P const&) {
    os << "P(";
    for (std::size_t i = 0; i < size; ++i) {
      auto const& d = dims[i];
      os << (i ? ", " : "");
      if (d.is_none()) {
        os << "None";
      } else if (d.count() == 1) {
        os << '\'' << d.axis(0).view() << '\'';
      } else {
        os << '(';
        for (std::size_t a = 0; a < d.count(); ++a) os << (a ? ", " : "") << '\'' << d.axis(a).view() << '\'';
        os << ')';
      }
    }
    if (size == 1) os << ',';
    return os << ')';
  }
};

/// Whether two specs mean the same layout: trailing `None`s do not matter (P('x') == P('x', None)).
template <std::size_t K1, std::size_t K2>
constexpr bool same_layout(std::array<dim_spec, K1> const& a, std::array<dim_spec, K2> const& b) {
  for (std::size_t i = 0; i < (K1 > K2 ? K1 : K2); ++i) {
    dim_spec x = i < K1 ? a[i] : dim_spec{};
    dim_spec y = i < K2 ? b[i] : dim_spec{};
    if (!(x == y)) return false;
  }
  return true;
}

}  // namespace tessera
