#pragma once
// print(x) as NumPy writes an array, so the examples' output reads like the
// seeds' notebooks: `[[1]\n [2]]`, `[ 0  1 10]`, `[ 0.  1. 10.]`, and floats
// with up to `precision` decimals (np.set_printoptions(precision=...)).
// Enough of NumPy for small arrays: no line wrapping, no summarising.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xtensor.hpp>

namespace examples {

namespace detail {
inline std::string decimals(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();  // NumPy's "maxprec": no trailing zeros...
  return s;                              // ...but the '.' stays, as in `1.`
}
}  // namespace detail

/// The text NumPy's repr-less print (str) gives for x.
template <class E>
std::string numpy_str(E const& e, int precision = 8) {
  using T = typename E::value_type;
  auto const x = xt::eval(e);
  std::size_t const rank = x.dimension();
  std::vector<std::string> items;
  for (auto v : x) {
    if constexpr (std::is_floating_point_v<T>) items.push_back(detail::decimals(static_cast<double>(v), precision));
    else items.push_back(std::to_string(v));
  }
  // One width for the whole array: integer parts right-aligned, decimals left-aligned.
  std::size_t left = 0, right = 0;
  for (auto const& s : items) {
    std::size_t const dot = std::min(s.find('.'), s.size());
    left = std::max(left, dot);
    right = std::max(right, s.size() - dot);
  }
  for (auto& s : items) {
    std::size_t const dot = std::min(s.find('.'), s.size());
    s = std::string(left - dot, ' ') + s + std::string(right - (s.size() - dot), ' ');
  }
  std::string out;
  std::vector<std::size_t> index(rank, 0);
  for (std::size_t i = 0; i < items.size(); ++i) {
    // Brackets open where trailing indices are 0; rows are separated by a newline per closed level.
    std::size_t opened = 0;
    while (opened < rank && std::all_of(index.end() - static_cast<std::ptrdiff_t>(opened + 1), index.end(),
                                        [](std::size_t k) { return k == 0; }))
      ++opened;
    if (i == 0) out += std::string(opened, '[');
    else if (opened > 0) out += std::string(rank - opened, ' ') + std::string(opened, '[');
    out += items[i];
    std::size_t closed = 0;
    for (std::size_t d = rank; d-- > 0;) {
      if (++index[d] < x.shape()[d]) break;
      index[d] = 0;
      ++closed;
    }
    out += std::string(closed, ']');
    if (i + 1 < items.size()) out += closed == 0 ? " " : std::string(closed, '\n');
  }
  if (rank == 0) return items.empty() ? std::string() : items[0];
  if (items.empty()) return std::string(rank, '[') + std::string(rank, ']');
  return out;
}

/// print(x)
template <class E>
void print(E const& e, int precision = 8) {
  std::printf("%s\n", numpy_str(e, precision).c_str());
}

}  // namespace examples
