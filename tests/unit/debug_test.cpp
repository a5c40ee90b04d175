// Unit tests of tessera's debugging aids: typeof (JAX's `float32[4@x,8@y]`) and
// visualize_array_sharding (JAX's drawing). Drawings are compared with literal
// copies of JAX's output and with a small re-implementation of JAX's layout rules
// (jax._src.debugging.visualize_sharding, no colour) written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera::runtime;
using tessera::shape_t;

namespace {

template <class T, std::size_t N>
xt::xtensor<T, N> zeros(shape_t<N> const& shape) {
  auto h = xt::xtensor<T, N>::from_shape(shape);
  h.fill(T{});
  return h;
}

template <class A>
std::string draw(A const& a, int use_color = 0, tessera::visualize_options opt = {}) {
  std::ostringstream os;
  opt.use_color = use_color;
  tessera::visualize_array_sharding(a, os, opt);
  return os.str();
}

// ---- A re-implementation of JAX's layout rules for evenly divided, uncoloured drawings ----

struct ref_cell {
  std::set<int> devices;
  double width;   // fraction of the last dimension
  double height;  // fraction of dimension 0; negative for 1-D arrays
};

std::pair<int, int> py_divmod(int a, int b) {
  int q = a / b, r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) {
    --q;
    r += b;
  }
  return {q, r};
}

std::string rep(std::string const& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

/// rich.Table(box=SQUARE, show_lines=True, padding=0) of Padding(Align(label, center, middle)).
std::string jax_drawing(std::vector<std::vector<ref_cell>> const& grid, double aspect, double scale = 1.0,
                        int min_width = 9, int max_width = 80) {
  int const base_height = static_cast<int>(10 * scale);
  int const base_width = static_cast<int>(base_height * aspect);
  std::size_t const rows = grid.size(), cols = grid[0].size();
  struct laid {
    std::string text;
    int l, r, t, b;
  };
  std::vector<std::vector<laid>> out(rows, std::vector<laid>(cols));
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      auto const& c = grid[i][j];
      std::string text = "CPU ";
      bool first = true;
      for (int d : c.devices) {
        text += (first ? "" : ",") + std::to_string(d);
        first = false;
      }
      int width = static_cast<int>(c.width * base_width * 2.5);
      int const height = c.height < 0 ? 1 : static_cast<int>(c.height * base_height);
      width = std::min(std::max(width, min_width), max_width);
      auto const [lp, lrem] = py_divmod(width - static_cast<int>(text.size()) - 2, 2);
      auto const [tp, trem] = py_divmod(height - 2, 2);
      out[i][j] = {text, std::max(lp, 0), std::max(lp + lrem, 0), std::max(tp, 0), std::max(tp + trem, 0)};
    }
  auto w = [&](std::size_t j) { return out[0][j].l + static_cast<int>(out[0][j].text.size()) + out[0][j].r; };
  auto rule = [&](char const* l, char const* m, char const* r) {
    std::string s = l;
    for (std::size_t j = 0; j < cols; ++j) s += rep("─", w(j)) + (j + 1 < cols ? m : r);
    return s + "\n";
  };
  std::string s = rule("┌", "┬", "┐");
  for (std::size_t i = 0; i < rows; ++i) {
    int const h = out[i][0].t + 1 + out[i][0].b;
    for (int line = 0; line < h; ++line) {
      s += "│";
      for (std::size_t j = 0; j < cols; ++j) {
        auto const& c = out[i][j];
        s += line == c.t ? rep(" ", c.l) + c.text + rep(" ", c.r) : rep(" ", w(j));
        s += "│";
      }
      s += "\n";
    }
    if (i + 1 < rows) s += rule("├", "┼", "┤");
  }
  return s + rule("└", "┴", "┘") + "\n";
}

/// The grid of a 2-D array evenly split into `rows` x `cols` blocks, `holders(i, j)` holding block (i, j).
template <class F>
std::vector<std::vector<ref_cell>> even_grid(std::size_t rows, std::size_t cols, F holders) {
  std::vector<std::vector<ref_cell>> g(rows, std::vector<ref_cell>(cols));
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      auto const ids = holders(i, j);
      g[i][j] = {std::set<int>(ids.begin(), ids.end()), 1.0 / static_cast<double>(cols),
                 1.0 / static_cast<double>(rows)};
    }
  return g;
}

}  // namespace

// ---------------------------------------------------------------------------
// typeof
// ---------------------------------------------------------------------------

TEST_CASE("type_of prints dtype and shape with mesh axes as JAX's typeof", "[debug][typeof]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const f = zeros<float, 2>({4, 8});
  CHECK(tessera::type_of(tessera::device_put(f, named_sharding(m, P<"x", "y">{}))) == "float32[4@x,8@y]");
  CHECK(tessera::type_of(tessera::device_put(f, named_sharding(m, P<"y", "x">{}))) == "float32[4@y,8@x]");
  CHECK(tessera::type_of(tessera::device_put(f, named_sharding(m, P<"x">{}))) == "float32[4@x,8]");
  CHECK(tessera::type_of(tessera::device_put(f, named_sharding(m, P<none, "y">{}))) == "float32[4,8@y]");
  CHECK(tessera::type_of(tessera::device_put(f, named_sharding(m, P<>{}))) == "float32[4,8]");
  CHECK(tessera::type_of(tessera::device_put(zeros<float, 1>({8}), named_sharding(m, P<axes<"x", "y">>{}))) ==
        "float32[8@(x,y)]");
  CHECK(tessera::type_of(tessera::device_put(zeros<float, 1>({8}), named_sharding(m, P<axes<"y", "x">>{}))) ==
        "float32[8@(y,x)]");

  auto const i = zeros<std::int32_t, 2>({4, 2});
  CHECK(tessera::type_of(i) == "int32[4,2]");                       // host xtensor
  CHECK(tessera::type_of(tessera::device_put(i)) == "int32[4,2]");  // single device
  CHECK(tessera::type_of(xt::xarray<std::int32_t>(i)) == "int32[4,2]");
  CHECK(tessera::type_of(xt::arange<double>(5)) == "float64[5]");  // lazy expression
  auto const e = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  CHECK(tessera::type_of(tessera::device_put(i, named_sharding(e, P<"X", none>{}))) == "int32[4@X,2]");

  CHECK(tessera::type_of(tessera::device_put(zeros<bool, 1>({3}), named_sharding(m, P<"x">{}))) == "bool[3@x]");
  CHECK(tessera::type_of(tessera::device_put(zeros<std::uint8_t, 2>({2, 5}), named_sharding(m, P<none, "y">{}))) ==
        "uint8[2,5@y]");
  CHECK(tessera::type_of(tessera::device_put(zeros<std::int64_t, 1>({7}), 3)) == "int64[7]");
  CHECK(tessera::type_of(tessera::device_put(zeros<double, 2>({6, 4}), named_sharding(m, P<axes<"y", "x">>{}))) ==
        "float64[6@(y,x),4]");
  auto const m3 = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
  CHECK(tessera::type_of(tessera::device_put(zeros<float, 3>({2, 3, 4}), named_sharding(m3, P<"x", none, "z">{}))) ==
        "float32[2@x,3,4@z]");
  CHECK(tessera::type_of(tessera::device_put(zeros<float, 0>({}), named_sharding(m3, P<>{}))) == "float32[]");
  CHECK(tessera::type_of(zeros<bool, 0>({})) == "bool[]");
}

#if defined(__STRICT_ANSI__) || !defined(__GNUC__)
TEST_CASE("typeof, JAX's spelling, in standard C++ mode", "[debug][typeof]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  CHECK(tessera::typeof(tessera::device_put(zeros<float, 2>({4, 8}), named_sharding(m, P<"x", "y">{}))) ==
        "float32[4@x,8@y]");
  CHECK(tessera::typeof(zeros<std::int32_t, 2>({4, 2})) == "int32[4,2]");
}
#endif

// ---------------------------------------------------------------------------
// visualize_array_sharding
// ---------------------------------------------------------------------------

// jax.debug.visualize_array_sharding of a 4x8 array over a 2x4 mesh, P('x', 'y'), as printed in
// the JAX docs' "Key concept: data sharding" (no colour).
std::string const jax_doc_2x4 =
    "┌──────────┬──────────┬──────────┬──────────┐\n"
    "│          │          │          │          │\n"
    "│  CPU 0   │  CPU 1   │  CPU 2   │  CPU 3   │\n"
    "│          │          │          │          │\n"
    "│          │          │          │          │\n"
    "├──────────┼──────────┼──────────┼──────────┤\n"
    "│          │          │          │          │\n"
    "│  CPU 4   │  CPU 5   │  CPU 6   │  CPU 7   │\n"
    "│          │          │          │          │\n"
    "│          │          │          │          │\n"
    "└──────────┴──────────┴──────────┴──────────┘\n"
    "\n";

TEST_CASE("the reference drawing reproduces JAX's documented output", "[debug][visualize]") {
  auto const grid = even_grid(2, 4, [](std::size_t i, std::size_t j) { return std::vector<int>{static_cast<int>(i * 4 + j)}; });
  CHECK(jax_drawing(grid, 8.0 / 4.0) == jax_doc_2x4);
}

TEST_CASE("visualize_array_sharding: 4x8 over a 2x4 mesh, P('x', 'y')", "[debug][visualize]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const a = tessera::device_put(zeros<float, 2>({4, 8}), named_sharding(m, P<"x", "y">{}));
  CHECK(draw(a) == jax_doc_2x4);
  // Without use_color, a string stream never gets colour.
  std::ostringstream os;
  tessera::visualize_array_sharding(a, os);
  CHECK(os.str() == jax_doc_2x4);
}

TEST_CASE("visualize_array_sharding: one device, and P('x', None)", "[debug][visualize]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const host = zeros<float, 2>({4, 8});
  std::string const blank = "│" + rep(" ", 48) + "│\n";
  std::string const top = "┌" + rep("─", 48) + "┐\n";
  std::string const mid = "├" + rep("─", 48) + "┤\n";
  std::string const bottom = "└" + rep("─", 48) + "┘\n";

  // Width int(1 * 20 * 2.5) = 50: padding 21 + 'CPU 0' + 22; height 10: 4 lines above, 4 below.
  std::string const single = top + rep(blank, 4) + "│" + rep(" ", 21) + "CPU 0" + rep(" ", 22) + "│\n" +
                             rep(blank, 4) + bottom + "\n";
  CHECK(draw(tessera::device_put(host)) == single);

  // Blocks of 2 rows, each held by the 4 devices along 'y': height 5 gives 1 line above, 2 below.
  std::string const rows = top + blank + "│" + rep(" ", 18) + "CPU 0,1,2,3" + rep(" ", 19) + "│\n" + blank + blank +
                           mid + blank + "│" + rep(" ", 18) + "CPU 4,5,6,7" + rep(" ", 19) + "│\n" + blank + blank +
                           bottom + "\n";
  CHECK(draw(tessera::device_put(host, named_sharding(m, P<"x", none>{}))) == rows);
}

TEST_CASE("visualize_array_sharding: a 1-D array over 8 devices is one row of 9-wide blocks", "[debug][visualize]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x">({8});
  auto const a = tessera::device_put(zeros<float, 1>({8}), named_sharding(m, P<"x">{}));
  std::string const expected =
      "┌───────┬───────┬───────┬───────┬───────┬───────┬───────┬───────┐\n"
      "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │\n"
      "└───────┴───────┴───────┴───────┴───────┴───────┴───────┴───────┘\n"
      "\n";
  CHECK(draw(a) == expected);
  // Over an explicit device order the labels follow the blocks.
  auto const r = tessera::make_mesh<"x">({4}, std::vector<int>{3, 1, 2, 0});
  auto const b = tessera::device_put(zeros<float, 1>({8}), named_sharding(r, P<"x">{}));
  CHECK(draw(b) ==
        "┌───────┬───────┬───────┬───────┐\n"
        "│ CPU 3 │ CPU 1 │ CPU 2 │ CPU 0 │\n"
        "└───────┴───────┴───────┴───────┘\n"
        "\n");
}

TEST_CASE("visualize_array_sharding follows JAX's layout rules", "[debug][visualize]") {
  runtime rt{8};
  auto const m24 = tessera::make_mesh<"x", "y">({2, 4});
  auto const m22 = tessera::make_mesh<"x", "y">({2, 2});
  auto const m32 = tessera::make_mesh<"x", "y">({3, 2});
  auto const mp = tessera::make_mesh<"x", "y">({2, 4}, std::vector<int>{5, 3, 7, 1, 0, 6, 2, 4});

  SECTION("8x8 over 2x2, P('x', 'y')") {
    auto const a = tessera::device_put(zeros<float, 2>({8, 8}), named_sharding(m22, P<"x", "y">{}));
    CHECK(draw(a) == jax_drawing(even_grid(2, 2, [](std::size_t i, std::size_t j) {
                                   return std::vector<int>{static_cast<int>(i * 2 + j)};
                                 }),
                                 1.0));
  }
  SECTION("8x4 over 2x4, P('y', 'x'): rows follow 'y', columns 'x'") {
    auto const a = tessera::device_put(zeros<float, 2>({8, 4}), named_sharding(m24, P<"y", "x">{}));
    CHECK(draw(a) == jax_drawing(even_grid(4, 2, [](std::size_t i, std::size_t j) {
                                   return std::vector<int>{static_cast<int>(j * 4 + i)};  // device at x=j, y=i
                                 }),
                                 4.0 / 8.0));
  }
  SECTION("6x6 over 3x2, P('x', 'y')") {
    auto const a = tessera::device_put(zeros<std::int32_t, 2>({6, 6}), named_sharding(m32, P<"x", "y">{}));
    CHECK(draw(a) == jax_drawing(even_grid(3, 2, [](std::size_t i, std::size_t j) {
                                   return std::vector<int>{static_cast<int>(i * 2 + j)};
                                 }),
                                 1.0));
  }
  SECTION("replicated blocks list their devices sorted") {
    auto const a = tessera::device_put(zeros<float, 2>({16, 16}), named_sharding(mp, P<>{}));
    CHECK(draw(a) == jax_drawing(even_grid(1, 1, [](std::size_t, std::size_t) { return std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}; }),
                                 1.0));
    CHECK_THAT(draw(a), Contains("CPU 0,1,2,3,4,5,6,7"));
    // P('x'): rows held by the devices of a mesh row, {5,3,7,1} and {0,6,2,4}.
    auto const b = tessera::device_put(zeros<float, 2>({4, 4}), named_sharding(mp, P<"x">{}));
    CHECK(draw(b) == jax_drawing(even_grid(2, 1,
                                           [](std::size_t i, std::size_t) {
                                             return i == 0 ? std::vector<int>{5, 3, 7, 1} : std::vector<int>{0, 6, 2, 4};
                                           }),
                                 1.0));
    CHECK_THAT(draw(b), Contains("CPU 1,3,5,7") && Contains("CPU 0,2,4,6"));
  }
  SECTION("P(None, ('y', 'x')) on a wide array") {
    auto const a = tessera::device_put(zeros<float, 2>({2, 64}), named_sharding(m24, P<none, axes<"y", "x">>{}));
    CHECK(draw(a) == jax_drawing(even_grid(1, 8, [](std::size_t, std::size_t j) {
                                   return std::vector<int>{static_cast<int>((j % 2) * 4 + j / 2)};  // block j = 2y + x
                                 }),
                                 32.0));
  }
  SECTION("the widest block is clamped to max_width") {
    auto const a = tessera::device_put(zeros<float, 2>({2, 100}));
    std::string const d = draw(a);
    CHECK(d == jax_drawing(even_grid(1, 1, [](std::size_t, std::size_t) { return std::vector<int>{0}; }), 50.0));
    CHECK_THAT(d, Contains("┌" + rep("─", 78) + "┐"));  // 36 + 'CPU 0' + 37
  }
  SECTION("1-D arrays") {
    auto const m4 = tessera::make_mesh<"x">({4});
    auto const a = tessera::device_put(zeros<float, 1>({16}), named_sharding(m4, P<"x">{}));
    std::vector<std::vector<ref_cell>> g(1);
    for (int d = 0; d < 4; ++d) g[0].push_back({{d}, 0.25, -1});
    CHECK(draw(a) == jax_drawing(g, 1.0 / 16.0));
    auto const r = tessera::device_put(zeros<float, 1>({8}), named_sharding(m24, P<>{}));
    std::vector<std::vector<ref_cell>> gr{{{{0, 1, 2, 3, 4, 5, 6, 7}, 1.0, -1}}};
    CHECK(draw(r) == jax_drawing(gr, 1.0 / 8.0));
    CHECK_THAT(draw(r), Contains("│CPU 0,1,2,3,4,5,6,7│"));  // wider than 9: no padding left
  }
  SECTION("scale, min_width and max_width options") {
    auto const a = tessera::device_put(zeros<float, 2>({4, 8}), named_sharding(m24, P<"x", "y">{}));
    auto const grid = even_grid(2, 4, [](std::size_t i, std::size_t j) { return std::vector<int>{static_cast<int>(i * 4 + j)}; });
    tessera::visualize_options big;
    big.scale = 2.0;
    CHECK(draw(a, 0, big) == jax_drawing(grid, 2.0, 2.0));
    tessera::visualize_options narrow;
    narrow.min_width = 15;
    CHECK(draw(a, 0, narrow) == jax_drawing(grid, 2.0, 1.0, 15, 80));
    tessera::visualize_options clamp;
    clamp.max_width = 8;
    CHECK(draw(a, 0, clamp) == jax_drawing(grid, 2.0, 1.0, 9, 8));
  }
}

TEST_CASE("visualize_array_sharding: colour only when asked", "[debug][visualize]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const a = tessera::device_put(zeros<float, 2>({4, 8}), named_sharding(m, P<"x", "y">{}));
  std::string const plain = draw(a, 0);
  std::string const colour = draw(a, 1);
  CHECK(plain.find('\x1b') == std::string::npos);
  CHECK_THAT(colour, Contains("\x1b[48;5;") && Contains("\x1b[0m"));
  for (int d = 0; d < 8; ++d) CHECK_THAT(colour, Contains("CPU " + std::to_string(d)));
}

TEST_CASE("visualize_array_sharding of 0-D, 3-D and empty arrays does not throw", "[debug][visualize]") {
  runtime rt{8};
  auto const m3 = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
  auto const a = tessera::device_put(zeros<float, 3>({4, 4, 6}), named_sharding(m3, P<"x", "y", "z">{}));
  std::string d;
  REQUIRE_NOTHROW(d = draw(a));
  CHECK_THAT(d, Contains("CPU 0,1") && Contains("CPU 6,7"));  // dims 0-1 drawn: devices along 'z' share a cell
  CHECK_THAT(d, Contains("dimensions 0-1 drawn above") && Contains("CPU 1: [3:6]") && Contains("block (1, 1)"));

  auto const z = tessera::device_put(zeros<float, 0>({}), named_sharding(m3, P<>{}));
  REQUIRE_NOTHROW(d = draw(z));
  CHECK_THAT(d, Contains("CPU 0,1,2,3,4,5,6,7"));

  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  REQUIRE_NOTHROW(d = draw(tessera::device_put(zeros<float, 2>({0, 8}), named_sharding(m, P<"x", "y">{}))));
  CHECK_THAT(d, Contains("CPU 7"));
  REQUIRE_NOTHROW(d = draw(tessera::device_put(zeros<float, 1>({0}), named_sharding(m, P<"y">{}))));
  CHECK_THAT(d, Contains("CPU 3,7"));
  REQUIRE_NOTHROW(d = draw(tessera::device_put(zeros<float, 2>({3, 5}), named_sharding(m, P<"y", "x">{}))));
  CHECK_THAT(d, Contains("CPU 0") && Contains("CPU 7"));
}
