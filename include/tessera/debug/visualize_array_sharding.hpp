#pragma once
// jax.debug.visualize_array_sharding: the grid of blocks, each labelled with the
// devices holding it, sized in proportion to the block's extents (JAX's layout
// rules, from jax._src.debugging.visualize_sharding).

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tessera/array/array.hpp"
#include "tessera/detail/linkage.hpp"

namespace tessera {

/// Options of visualize_array_sharding, with JAX's defaults.
struct visualize_options {
  /// Scale of the drawing (JAX's `scale`).
  double scale = 1.0;
  /// Narrowest and widest block in characters (JAX's `min_width`, `max_width`).
  int min_width = 9;
  int max_width = 80;
  /// Background colours: -1 automatic (only when writing std::cout to a terminal), 0 off, 1 on.
  int use_color = -1;
};

namespace detail {

struct viz_cell {
  std::set<int> devices;
  double height = -1;  // fraction of dimension 0; -1 for 1-D arrays (one text line)
  double width = 0;    // fraction of the last drawn dimension
};

/// Python's divmod for ints: the quotient rounds toward minus infinity.
inline std::pair<int, int> floor_divmod(int a, int b) {
  int q = a / b, r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) --q, r += b;
  return {q, r};
}

inline std::string repeat(std::string const& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

/// Draws cells[(row, col)] as a box-drawing table.
TESSERA_LINKAGE void draw_grid(std::ostream& os, std::map<std::pair<std::size_t, std::size_t>, viz_cell> const& cells,
                               double aspect, visualize_options const& opt, bool color);

}  // namespace detail

namespace detail {

/// visualize_array_sharding's drawing of sharding s over `shape`.
template <std::size_t N, class S>
void visualize_sharding(S const& s, shape_t<N> const& shape, std::ostream& os, visualize_options opt) {
  bool const color = opt.use_color == 1 || (opt.use_color == -1 && &os == &std::cout && ::isatty(1) != 0);
  std::map<std::pair<std::size_t, std::size_t>, detail::viz_cell> cells;
  std::map<std::pair<std::size_t, std::size_t>, std::set<std::string>> deeper;  // N > 2: other dims' ranges
  auto frac = [&](std::size_t i, slice const& r) {
    return shape[i] == 0 ? 1.0 : static_cast<double>(r.size()) / static_cast<double>(shape[i]);
  };
  for (std::size_t p = 0; p < s.num_devices(); ++p) {
    auto const b = s.block(p, shape);
    std::pair<std::size_t, std::size_t> key{0, 0};
    detail::viz_cell c;
    if constexpr (N == 0) {
      c.width = 1.0;
    } else if constexpr (N == 1) {
      key.second = s.num_shards(0) > 1 ? s.shard_index(p, 0) : 0;
      c.width = frac(0, b[0]);
    } else {
      key = {s.num_shards(0) > 1 ? s.shard_index(p, 0) : 0, s.num_shards(1) > 1 ? s.shard_index(p, 1) : 0};
      c.height = frac(0, b[0]);
      c.width = frac(1, b[1]);
      if constexpr (N > 2) {
        std::ostringstream r;
        r << "CPU " << s.device_ids()[p] << ": [";
        for (std::size_t i = 2; i < N; ++i) r << (i > 2 ? ", " : "") << b[i].start << ':' << b[i].stop;
        r << ']';
        deeper[key].insert(r.str());
      }
    }
    auto& cell = cells[key];
    cell.devices.insert(s.device_ids()[p]);
    cell.height = c.height;
    cell.width = c.width;
  }
  double const aspect = N >= 2 ? (shape[0] == 0 ? 1.0 : static_cast<double>(shape[1]) / static_cast<double>(shape[0]))
                        : N == 1 ? (shape[0] == 0 ? 1.0 : 1.0 / static_cast<double>(shape[0]))
                                 : 1.0;
  detail::draw_grid(os, cells, aspect, opt, color);
  if constexpr (N > 2) {
    os << "dimensions 0-1 drawn above; blocks along dimensions 2.." << N - 1 << ":\n";
    for (auto const& [k, lines] : deeper)
      for (auto const& l : lines) os << "  block (" << k.first << ", " << k.second << ") " << l << '\n';
  }
  os << '\n';
}

}  // namespace detail

/// jax.debug.visualize_array_sharding(x): draws which devices hold which block.
/// 1-D and 2-D arrays are drawn as JAX draws them; 0-D as one block; 3-D and up as
/// one grid per dimension pair is not meaningful, so the first two dimensions are
/// drawn and the blocks along the others are listed below the grid. Across processes, process 0
/// draws it (the others would print the same grid again).
template <class T, std::size_t N, class S>
void visualize_array_sharding(array<T, N, S> const& x, std::ostream& os = std::cout, visualize_options opt = {}) {
  if (x.pool()->spans_processes() && x.pool()->process_of(x.pool()->first_id()) != 0) return;
  detail::visualize_sharding(x.sharding(), x.shape(), os, opt);  // the element type plays no part
}

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE void detail::draw_grid(std::ostream& os,
                                       std::map<std::pair<std::size_t, std::size_t>, viz_cell> const& cells,
                                       double aspect, visualize_options const& opt, bool color) {
  std::size_t rows = 0, cols = 0;
  for (auto const& [k, c] : cells) {
    rows = std::max(rows, k.first + 1);
    cols = std::max(cols, k.second + 1);
  }
  int const base_height = static_cast<int>(10 * opt.scale);
  int const base_width = static_cast<int>(base_height * aspect);
  constexpr double height_to_width = 2.5;

  struct laid {
    std::string text;
    int left = 0, right = 0, top = 0, bottom = 0;
  };
  std::vector<std::vector<laid>> grid(rows, std::vector<laid>(cols));
  std::vector<int> col_width(cols, 0), row_height(rows, 0);
  for (auto const& [k, c] : cells) {
    laid l;
    l.text = "CPU ";
    bool first = true;
    for (int d : c.devices) {
      l.text += (first ? "" : ",") + std::to_string(d);
      first = false;
    }
    int width = static_cast<int>(c.width * base_width * height_to_width);
    int const height = c.height < 0 ? 1 : static_cast<int>(c.height * base_height);
    width = std::min(std::max(width, opt.min_width), opt.max_width);
    int const len = static_cast<int>(l.text.size());
    auto const [lp0, lrem] = floor_divmod(width - len - 2, 2);
    auto const [tp0, trem] = floor_divmod(height - 2, 2);
    int lp = lp0, rp = lp0 + lrem, tp = tp0, bp = tp0 + trem;
    if (color) ++lp, ++rp, ++tp, ++bp;
    l.left = std::max(lp, 0);
    l.right = std::max(rp, 0);
    l.top = std::max(tp, 0);
    l.bottom = std::max(bp, 0);
    grid[k.first][k.second] = l;
    col_width[k.second] = std::max(col_width[k.second], l.left + len + l.right);
    row_height[k.first] = std::max(row_height[k.first], l.top + 1 + l.bottom);
  }
  auto rule = [&](char const* l, char const* m, char const* r) {
    os << l;
    for (std::size_t j = 0; j < cols; ++j) os << repeat("─", col_width[j]) << (j + 1 < cols ? m : r);
    os << '\n';
  };
  // A fixed palette of light backgrounds, cycled per block, with dark text.
  static constexpr int palette[] = {153, 194, 223, 225, 189, 159, 230, 217, 183, 157};
  rule("┌", "┬", "┐");
  for (std::size_t i = 0; i < rows; ++i) {
    for (int line = 0; line < row_height[i]; ++line) {
      os << "│";
      for (std::size_t j = 0; j < cols; ++j) {
        auto const& l = grid[i][j];
        int const w = col_width[j];
        int const extra = row_height[i] - (l.top + 1 + l.bottom);
        int const text_line = l.top + extra / 2;
        std::string cell(static_cast<std::size_t>(w), ' ');
        if (line == text_line) {
          int const inner = w - l.left - l.right;
          int const len = static_cast<int>(l.text.size());
          int const start = l.left + std::max(0, (inner - len) / 2);
          cell.replace(static_cast<std::size_t>(std::min(start, std::max(0, w - len))), l.text.size(), l.text);
          cell.resize(static_cast<std::size_t>(std::max(w, len)));
        }
        if (color) os << "\x1b[48;5;" << palette[(i * cols + j) % 10] << "m\x1b[38;5;16m" << cell << "\x1b[0m";
        else os << cell;
        os << "│";
      }
      os << '\n';
    }
    if (i + 1 < rows) rule("├", "┼", "┤");
  }
  rule("└", "┴", "┘");
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
