// Global-view sharded expressions (issue 4): every element-wise operation, NumPy
// broadcasting, reductions, transposes and jit, evaluated on sharded arrays over
// many meshes, specs and random shapes (uneven and empty ones too), and compared
// with the same computation done in double precision on plain xtensor arrays on
// the host. Each result is checked twice: the global value (to_host) and every
// device's shard against the expected block, so a wrong all-reduce or a wrongly
// sliced replicated operand shows up on the device it happens on. The result
// type (tessera::type_of) is checked against the string JAX would print.
//
// To keep the build light, the compile-time side (specs, dtypes, operations) is a
// handful of combinations, and the run-time side (mesh sizes, device orders,
// shapes) is looped over.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::none;
using tessera::P;
using tessera::shape_t;

namespace {

// ---------------------------------------------------------------------------
// Random host data
// ---------------------------------------------------------------------------

/// What values an operand holds: chosen so that every reference below is exact in double
/// and no integer operation overflows.
enum class kind {
  general,   // ints in [-9, 9]; floats: multiples of 0.25 in [-4, 4]
  nonzero,   // the same without 0 (divisors)
  positive,  // ints in [1, 9]; floats: multiples of 0.25 in [0.25, 4]
  sign,      // -1 and 1, now and then 2 (products stay small)
};

double draw_value(std::mt19937& g, kind k, bool floating) {
  switch (k) {
    case kind::general:
      return floating ? std::uniform_int_distribution<int>(-16, 16)(g) * 0.25
                      : std::uniform_int_distribution<int>(-9, 9)(g);
    case kind::nonzero: {
      double v = 0;
      while (v == 0) v = draw_value(g, kind::general, floating);
      return v;
    }
    case kind::positive:
      return floating ? std::uniform_int_distribution<int>(1, 16)(g) * 0.25
                      : std::uniform_int_distribution<int>(1, 9)(g);
    case kind::sign: {
      int const p = std::uniform_int_distribution<int>(0, 99)(g);
      if (p < 4) return 2;
      return p % 2 ? 1 : -1;
    }
  }
  return 0;
}

template <class T, std::size_t N>
xt::xtensor<T, N> random_host(shape_t<N> const& shape, std::mt19937& g, kind k = kind::general) {
  auto h = xt::xtensor<T, N>::from_shape(shape);
  for (auto& x : h) {
    if constexpr (std::is_same_v<T, bool>) x = std::uniform_int_distribution<int>(0, 1)(g) != 0;
    else x = static_cast<T>(draw_value(g, k, std::is_floating_point_v<T>));
  }
  return h;
}

/// A dimension size: mostly small (uneven against every mesh), sometimes 0 or 1, sometimes long
/// enough for the SIMD loops to run several batches.
std::size_t draw_dim(std::mt19937& g) {
  int const p = std::uniform_int_distribution<int>(0, 99)(g);
  if (p < 7) return 0;
  if (p < 20) return 1;
  if (p < 85) return static_cast<std::size_t>(std::uniform_int_distribution<int>(2, 11)(g));
  return static_cast<std::size_t>(std::uniform_int_distribution<int>(12, 70)(g));
}
/// A dimension size of at least 1 (reductions without identity, broadcasting partners).
std::size_t draw_dim_nonempty(std::mt19937& g) {
  std::size_t n = 0;
  while (n == 0) n = draw_dim(g);
  return n;
}

template <class T, std::size_t N>
xt::xarray<double> to_d(xt::xtensor<T, N> const& h) {
  xt::xarray<double> r = xt::cast<double>(h);
  return r;
}

/// A host array of zeros (no uninitialised memory reaches the devices).
template <class T, std::size_t N>
xt::xtensor<T, N> zeros(shape_t<N> const& shape) {
  return xt::xtensor<T, N>(xt::zeros<T>(shape));
}

template <class Spec, class M, class T, std::size_t N>
auto put(M const& m, xt::xtensor<T, N> const& h) {
  return tessera::device_put(h, tessera::named_sharding(m, Spec{}));
}

template <class Seq>
std::string fmt(Seq const& s) {
  std::ostringstream os;
  os << '(';
  std::size_t i = 0;
  for (auto x : s) os << (i++ ? ", " : "") << x;
  os << ')';
  return os.str();
}

/// The type string JAX prints: ty("int32", {{4, "X"}, {8, ""}}) is "int32[4@X,8]".
std::string ty(std::string dtype, std::vector<std::pair<std::size_t, std::string>> const& dims) {
  dtype += '[';
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) dtype += ',';
    dtype += std::to_string(dims[i].first);
    if (!dims[i].second.empty()) dtype += "@" + dims[i].second;
  }
  return dtype + ']';
}

// ---------------------------------------------------------------------------
// Meshes: every size from 1 to 8 devices, on devices in a random order
// ---------------------------------------------------------------------------

constexpr std::array<std::array<int, 2>, 8> mesh_sizes_2d{{{1, 1}, {1, 2}, {2, 1}, {2, 2}, {2, 4}, {4, 2}, {1, 8}, {8, 1}}};
constexpr std::array<int, 6> mesh_sizes_1d{1, 2, 3, 4, 5, 8};

/// n distinct device ids out of 8: the first n in order half of the time, else a random pick in random order.
std::vector<int> device_grid(std::size_t n, std::mt19937& g) {
  std::vector<int> ids(8);
  std::iota(ids.begin(), ids.end(), 0);
  if (std::uniform_int_distribution<int>(0, 1)(g)) std::shuffle(ids.begin(), ids.end(), g);
  ids.resize(n);
  return ids;
}

template <class M>
std::string mesh_text(M const& m) {
  std::ostringstream os;
  os << m << " on devices " << fmt(m.device_ids());
  return os.str();
}

/// f(mesh) for a 2-D mesh ("X", "Y") of every size in mesh_sizes_2d, with axes of type Tag.
template <class Tag, class F>
void for_each_mesh_2d(std::mt19937& g, F&& f) {
  for (auto const& sz : mesh_sizes_2d) {
    auto const m = tessera::make_mesh<"X", "Y">(sz, device_grid(static_cast<std::size_t>(sz[0] * sz[1]), g), Tag{});
    INFO(mesh_text(m));
    f(m);
  }
}
/// f(mesh) for a 1-D mesh ("X") of every size in mesh_sizes_1d.
template <class Tag, class F>
void for_each_mesh_1d(std::mt19937& g, F&& f) {
  for (int k : mesh_sizes_1d) {
    auto const m = tessera::make_mesh<"X">({k}, device_grid(static_cast<std::size_t>(k), g), Tag{});
    INFO(mesh_text(m));
    f(m);
  }
}

// ---------------------------------------------------------------------------
// Comparison with the host reference
// ---------------------------------------------------------------------------

bool close_to(double got, double want, double tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= tol * (1 + std::abs(want));
}

/// "" when `got` (row-major iteration) matches `want`, else where it first differs.
template <class G>
std::string mismatch(G const& got, xt::xarray<double> const& want, double tol) {
  std::vector<std::size_t> gs(got.shape().begin(), got.shape().end());
  std::vector<std::size_t> ws(want.shape().begin(), want.shape().end());
  if (gs != ws) return "shape " + fmt(gs) + ", expected " + fmt(ws);
  std::size_t i = 0;
  auto w = want.begin();
  for (auto it = got.begin(); it != got.end(); ++it, ++w, ++i) {
    double const g = static_cast<double>(*it);
    if (!close_to(g, *w, tol)) {
      std::ostringstream os;
      os.precision(9);
      os << "element " << i << " (row-major) is " << g << ", expected " << *w;
      return os.str();
    }
  }
  return {};
}

/// The array's global value and every device's shard, against `want`; floating results to a
/// relative tolerance (the devices use xsimd's functions, the reference std's in double).
template <class T, std::size_t N, class S>
void check_array(tessera::array<T, N, S> const& r, xt::xarray<double> const& want, std::string const& what) {
  double const tol = std::is_floating_point_v<T> ? (sizeof(T) == 4 ? 2e-5 : 1e-10) : 0.0;
  std::string err = mismatch(tessera::to_host(r), want, tol);
  if (err.empty()) {
    for (auto const& sh : r.addressable_shards()) {
      xt::xstrided_slice_vector sv;
      for (auto const& s : sh.index) sv.push_back(xt::range(s.start, s.stop));
      // An empty want has no data to view (xtensor would offset its null pointer).
      xt::xarray<double> part = want.size() == 0 ? xt::xarray<double>(xt::xarray<double>::from_shape(sh.data.shape()))
                                                 : xt::xarray<double>(xt::strided_view(want, sv));
      std::string e = mismatch(sh.data, part, tol);
      if (!e.empty()) {
        err = "the shard on device " + std::to_string(sh.device) + " (block " +
              fmt([&] {
                std::vector<std::string> v;
                for (auto const& s : sh.index) v.push_back(std::to_string(s.start) + ":" + std::to_string(s.stop));
                return v;
              }()) +
              "): " + e;
        break;
      }
    }
  } else {
    err = "to_host: " + err;
  }
  if (!err.empty()) FAIL_CHECK(what << ": " << err);
  else SUCCEED(what);
}

/// Evaluates `e` and checks it against `want`; the evaluated array has the expression's type.
template <class E>
void expect(E const& e, xt::xarray<double> const& want, std::string const& what) {
  auto const r = tessera::eval(e);
  if constexpr (tessera::expression_node<E>) CHECK(tessera::type_of(r) == tessera::type_of(e));
  check_array(r, want, what);
}

// ---------------------------------------------------------------------------
// Host reference for reductions
// ---------------------------------------------------------------------------

enum class red { sum, mean, max, min, prod };

/// jnp.<op>(h, axis=axes) in double (every axis when `axes` is empty); max and min propagate NaN.
xt::xarray<double> ref_reduce(xt::xarray<double> const& h, std::vector<std::size_t> ax, red op) {
  std::size_t const N = h.dimension();
  if (ax.empty())
    for (std::size_t i = 0; i < N; ++i) ax.push_back(i);
  std::vector<bool> reduced(N, false);
  for (auto a : ax) reduced[a] = true;
  std::vector<std::size_t> oshape;
  for (std::size_t i = 0; i < N; ++i)
    if (!reduced[i]) oshape.push_back(h.shape()[i]);
  double init = 0;
  if (op == red::prod) init = 1;
  if (op == red::max) init = -std::numeric_limits<double>::infinity();
  if (op == red::min) init = std::numeric_limits<double>::infinity();
  xt::xarray<double> out = xt::xarray<double>::from_shape(oshape);
  std::fill(out.begin(), out.end(), init);
  // Row-major strides of the output, per input dimension (0 for reduced ones).
  std::vector<std::size_t> ostride(N, 0);
  std::size_t s = 1;
  for (std::size_t i = N; i-- > 0;)
    if (!reduced[i]) {
      ostride[i] = s;
      s *= h.shape()[i];
    }
  std::size_t count = 1;
  for (auto a : ax) count *= h.shape()[a];
  std::vector<std::size_t> idx(N, 0);
  for (std::size_t flat = 0; flat < h.size(); ++flat) {
    std::size_t rest = flat, o = 0;
    for (std::size_t i = N; i-- > 0;) {
      idx[i] = rest % h.shape()[i];
      rest /= h.shape()[i];
      o += idx[i] * ostride[i];
    }
    double const v = h.data()[flat];
    double& acc = out.data()[o];
    switch (op) {
      case red::sum:
      case red::mean: acc += v; break;
      case red::prod: acc *= v; break;
      case red::max: acc = (std::isnan(acc) || std::isnan(v)) ? std::nan("") : std::max(acc, v); break;
      case red::min: acc = (std::isnan(acc) || std::isnan(v)) ? std::nan("") : std::min(acc, v); break;
    }
  }
  if (op == red::mean)
    for (auto& x : out) x = x / static_cast<double>(count);  // 0/0 is NaN, as jnp.mean of nothing
  return out;
}

// ---------------------------------------------------------------------------
// Every element-wise operation on three operands
// ---------------------------------------------------------------------------

/// The binary operations of expr/functions.hpp (operators, comparisons, maximum, minimum,
/// pow, where, astype) on a (any values), b (no zeros) and c (a condition), against the same
/// on the host in double. The operands may have different shapes (they broadcast) and
/// dtypes (they promote).
template <class A, class B, class C>
void check_binary(A const& a, B const& b, C const& c, xt::xarray<double> const& ha, xt::xarray<double> const& hb,
                  xt::xarray<double> const& hc) {
  namespace t = tessera;
  expect(a + b, ha + hb, "a + b");
  expect(a - b, ha - hb, "a - b");
  expect(a * b, ha * hb, "a * b");
  expect(a / b, ha / hb, "a / b");
  expect(b / a, hb / ha, "b / a (a may hold zeros: inf as in jnp)");
  expect(-(a + b), -(ha + hb), "-(a + b)");
  expect(a == b, xt::equal(ha, hb), "a == b");
  expect(a != b, xt::not_equal(ha, hb), "a != b");
  expect(a < b, xt::less(ha, hb), "a < b");
  expect(a <= b, xt::less_equal(ha, hb), "a <= b");
  expect(a > b, xt::greater(ha, hb), "a > b");
  expect(a >= b, xt::greater_equal(ha, hb), "a >= b");
  expect(t::maximum(a, b), xt::maximum(ha, hb), "maximum(a, b)");
  expect(t::minimum(a, b), xt::minimum(ha, hb), "minimum(a, b)");
  expect(t::pow(a, t::abs(b)), xt::pow(ha, xt::abs(hb)), "pow(a, abs(b))");
  expect(t::where(c, a, b), xt::where(xt::not_equal(hc, 0.0), ha, hb), "where(c, a, b)");
  expect(t::where(a > b, a, 0), xt::where(xt::greater(ha, hb), ha, 0.0), "where(a > b, a, 0)");
  expect(t::where(c, 1, b), xt::where(xt::not_equal(hc, 0.0), 1.0, hb), "where(c, 1, b)");
  expect(c * a, hc * ha, "c * a (bool promotes)");
  expect(t::astype<std::int32_t>(b), xt::trunc(hb), "astype<int32>(b)");
  expect(t::astype<double>(a + b) * 0.5, (ha + hb) * 0.5, "astype<double>(a + b) * 0.5");
  expect((a + b) * (a - b) / (t::abs(b) + 1), (ha + hb) * (ha - hb) / (xt::abs(hb) + 1.0),
         "(a + b) * (a - b) / (abs(b) + 1)");
  expect(t::where(c, t::exp(-t::abs(a)), t::tanh(b) * a),
         xt::where(xt::not_equal(hc, 0.0), xt::exp(-xt::abs(ha)), xt::tanh(hb) * ha), "where(c, exp(-abs(a)), tanh(b) * a)");
}

/// The unary operations and functions (integers compute in float32), and numbers on either
/// side of the operators (weakly typed), on a (any values).
template <class A>
void check_unary(A const& a, xt::xarray<double> const& ha) {
  namespace t = tessera;
  expect(-a, -ha, "-a");
  expect(t::abs(a), xt::abs(ha), "abs(a)");
  expect(t::relu(a), xt::maximum(ha, 0.0), "relu(a)");
  expect(t::clip(a, -2, 3), xt::minimum(xt::maximum(ha, -2.0), 3.0), "clip(a, -2, 3)");
  expect(t::pow(t::abs(a) + 1, 2), xt::pow(xt::abs(ha) + 1.0, 2.0), "pow(abs(a) + 1, 2)");
  expect(t::pow(2, t::abs(a)), xt::exp2(xt::abs(ha)), "pow(2, abs(a))");
  expect(t::sin(a), xt::sin(ha), "sin(a)");
  expect(t::cos(a), xt::cos(ha), "cos(a)");
  expect(t::tan(a), xt::tan(ha), "tan(a)");
  expect(t::exp(a), xt::exp(ha), "exp(a)");
  expect(t::tanh(a), xt::tanh(ha), "tanh(a)");
  expect(t::sigmoid(a), 1.0 / (1.0 + xt::exp(-ha)), "sigmoid(a)");
  expect(t::log(t::abs(a) + 1), xt::log(xt::abs(ha) + 1.0), "log(abs(a) + 1)");
  expect(t::log1p(t::abs(a)), xt::log1p(xt::abs(ha)), "log1p(abs(a))");
  expect(t::sqrt(t::abs(a)), xt::sqrt(xt::abs(ha)), "sqrt(abs(a))");
  expect(t::rsqrt(t::abs(a) + 1), 1.0 / xt::sqrt(xt::abs(ha) + 1.0), "rsqrt(abs(a) + 1)");
  expect(t::astype<float>(a), ha, "astype<float>(a)");
  expect(t::astype<bool>(a), xt::not_equal(ha, 0.0), "astype<bool>(a)");
  expect(2 * t::sin(a) + 1, 2.0 * xt::sin(ha) + 1.0, "2 * sin(a) + 1");
  // Numbers on either side.
  expect(2 * a, 2.0 * ha, "2 * a");
  expect(a * 2, ha * 2.0, "a * 2");
  expect(1 - a, 1.0 - ha, "1 - a");
  expect(a - 1, ha - 1.0, "a - 1");
  expect(a * 0.5, ha * 0.5, "a * 0.5");
  expect(0.25f + a, 0.25 + ha, "0.25f + a");
  expect(a / 2, ha / 2.0, "a / 2");
  expect(3 / (t::abs(a) + 1), 3.0 / (xt::abs(ha) + 1.0), "3 / (abs(a) + 1)");
  expect(a < 1, xt::less(ha, 1.0), "a < 1");
  expect(2 >= a, xt::less_equal(ha, 2.0), "2 >= a");
  expect(1.5 == a * 0.5, xt::equal(ha * 0.5, 1.5), "1.5 == a * 0.5");
  expect(t::maximum(a, 1), xt::maximum(ha, 1.0), "maximum(a, 1)");
  expect(t::minimum(2.5, a), xt::minimum(ha, 2.5), "minimum(2.5, a)");
}

}  // namespace

// ===========================================================================
// The seed's examples
// ===========================================================================

TEST_CASE("the seed's broadcasting add: int32[4@X,1] + int32[1,8@Y] is int32[4@X,8@Y]", "[expr][typeof]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto a0 = tessera::device_put(xt::reshape_view(xt::arange<int>(4), {4, 1}),
                                tessera::named_sharding(mesh, P<"X", none>{}));
  auto a1 = tessera::device_put(xt::reshape_view(xt::arange<int>(8), {1, 8}),
                                tessera::named_sharding(mesh, P<none, "Y">{}));
  CHECK(tessera::type_of(a0) == "int32[4@X,1]");
  CHECK(tessera::type_of(a1) == "int32[1,8@Y]");
  auto sum = a0 + a1;
  CHECK(tessera::type_of(sum) == "int32[4@X,8@Y]");
  tessera::array r = sum;
  STATIC_REQUIRE(std::is_same_v<decltype(r)::value_type, int>);
  CHECK(tessera::type_of(r) == "int32[4@X,8@Y]");
  xt::xtensor<int, 2> want = xt::reshape_view(xt::arange<int>(4), {4, 1}) + xt::reshape_view(xt::arange<int>(8), {1, 8});
  CHECK(tessera_test::same_array(tessera::to_host(r), want));
  // Every device holds its 2x2 block.
  for (auto const& sh : r.addressable_shards()) {
    CHECK(sh.data.shape()[0] == 2);
    CHECK(sh.data.shape()[1] == 2);
  }
}

TEST_CASE("the seed's f_elementwise and f_contract under jit", "[expr][jit]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
  xt::xtensor<int, 2> host = xt::reshape_view(xt::arange<int>(32), {4, 8});
  auto arr_sharded = put<P<"x", "y">>(mesh, host);

  auto f_elementwise = tessera::jit([](auto x) { return 2 * tessera::sin(x) + 1; });
  auto result = f_elementwise(arr_sharded);
  STATIC_REQUIRE(std::is_same_v<decltype(result)::value_type, float>);
  STATIC_REQUIRE(std::is_same_v<decltype(result)::sharding_type, decltype(arr_sharded)::sharding_type>);
  CHECK(result.sharding() == arr_sharded.sharding());  // "shardings match: True"
  CHECK(tessera::type_of(result) == "float32[4@x,8@y]");
  check_array(result, 2.0 * xt::sin(to_d(host)) + 1.0, "2 * sin(x) + 1");

  auto f_contract = tessera::jit([](auto x) { return tessera::sum<0>(x); });
  auto contracted = f_contract(arr_sharded);
  CHECK(tessera::type_of(contracted) == "int32[8@y]");
  check_array(contracted, ref_reduce(to_d(host), {0}, red::sum), "sum<0>(x)");
  // Partially replicated: the first two elements live on devices 0 and 4, the next two on 1 and 5, ...
  for (auto const& sh : contracted.addressable_shards()) {
    CAPTURE(sh.device);
    CHECK(sh.index[0].start == static_cast<std::size_t>(2 * (sh.device % 4)));
    CHECK(sh.index[0].stop == static_cast<std::size_t>(2 * (sh.device % 4) + 2));
    CHECK(sh.replica_id == sh.device / 4);
  }
}

// ===========================================================================
// Element-wise operations
// ===========================================================================

TEST_CASE("every element-wise operation matches xtensor: float32 operands sharded alike", "[expr][elementwise]") {
  tessera::runtime rt{8};
  std::mt19937 g(1001);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      shape_t<2> const s{draw_dim(g), draw_dim(g)};
      INFO("shape " << fmt(s));
      auto const ha = random_host<float>(s, g), hb = random_host<float>(s, g, kind::nonzero);
      auto const hc = random_host<bool>(s, g);
      auto const a = put<P<"X", "Y">>(m, ha);
      auto const b = put<P<"X", "Y">>(m, hb);
      auto const c = put<P<"X", none>>(m, hc);
      CHECK(tessera::type_of(a + b) == ty("float32", {{s[0], "X"}, {s[1], "Y"}}));
      CHECK(tessera::type_of(a < b) == ty("bool", {{s[0], "X"}, {s[1], "Y"}}));
      CHECK(tessera::type_of(tessera::where(c, 1, 0)) == ty("int32", {{s[0], "X"}, {s[1], ""}}));
      check_binary(a, b, c, to_d(ha), to_d(hb), to_d(hc));
      check_unary(a, to_d(ha));
    }
  });
}

TEST_CASE("every element-wise operation matches xtensor: int32 operands sharded on different dimensions",
          "[expr][elementwise]") {
  tessera::runtime rt{8};
  std::mt19937 g(1002);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      shape_t<2> const s{draw_dim(g), draw_dim(g)};
      INFO("shape " << fmt(s));
      auto const ha = random_host<int>(s, g), hb = random_host<int>(s, g, kind::nonzero);
      auto const hc = random_host<bool>(shape_t<1>{s[1]}, g);
      // Each operand is replicated in the dimension the other shards: each device slices it locally.
      auto const a = put<P<"X", none>>(m, ha);
      auto const b = put<P<none, "Y">>(m, hb);
      auto const c = put<P<"Y">>(m, hc);
      CHECK(tessera::type_of(a + b) == ty("int32", {{s[0], "X"}, {s[1], "Y"}}));
      CHECK(tessera::type_of(a / b) == ty("float32", {{s[0], "X"}, {s[1], "Y"}}));
      CHECK(tessera::type_of(tessera::sin(a)) == ty("float32", {{s[0], "X"}, {s[1], ""}}));
      CHECK(tessera::type_of(2.5 * a) == ty("float32", {{s[0], "X"}, {s[1], ""}}));
      CHECK(tessera::type_of(2 * a) == ty("int32", {{s[0], "X"}, {s[1], ""}}));
      check_binary(a, b, c, to_d(ha), to_d(hb), to_d(hc));
      check_unary(a, to_d(ha));
    }
  });
}

TEST_CASE("every element-wise operation matches xtensor: int32 with float32, broadcast, Auto axes",
          "[expr][elementwise][broadcast]") {
  tessera::runtime rt{8};
  std::mt19937 g(1003);
  for_each_mesh_2d<tessera::auto_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const rows = draw_dim(g), cols = draw_dim(g);
      INFO("shapes " << rows << "x" << cols);
      auto const ha = random_host<int>(shape_t<2>{rows, cols}, g);
      auto const hb = random_host<float>(shape_t<2>{1, cols}, g, kind::nonzero);
      auto const hc = random_host<bool>(shape_t<2>{rows, 1}, g);
      auto const a = put<P<axes<"X", "Y">, none>>(m, ha);
      auto const b = put<P<none, none>>(m, hb);
      auto const c = put<P<>>(m, hc);
      CHECK(tessera::type_of(a + b) == ty("float32", {{rows, "(X,Y)"}, {cols, ""}}));
      CHECK(tessera::type_of(c * a) == ty("int32", {{rows, "(X,Y)"}, {cols, ""}}));
      check_binary(a, b, c, to_d(ha), to_d(hb), to_d(hc));
    }
  });
}

TEST_CASE("every element-wise operation matches xtensor: float64 with int64 on 1-D meshes, rank-0 condition",
          "[expr][elementwise][broadcast]") {
  tessera::runtime rt{8};
  std::mt19937 g(1004);
  for_each_mesh_1d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const rows = draw_dim(g), cols = draw_dim(g);
      INFO("shapes " << rows << "x" << cols);
      auto const ha = random_host<double>(shape_t<2>{rows, cols}, g);
      auto const hb = random_host<std::int64_t>(shape_t<1>{cols}, g, kind::nonzero);
      auto const hc = random_host<bool>(shape_t<0>{}, g);
      auto const a = put<P<none, "X">>(m, ha);
      auto const b = put<P<"X">>(m, hb);
      auto const c = put<P<>>(m, hc);
      CHECK(tessera::type_of(a + b) == ty("float64", {{rows, ""}, {cols, "X"}}));
      CHECK(tessera::type_of(b + b) == ty("int64", {{cols, "X"}}));
      CHECK(tessera::type_of(b / b) == ty("float64", {{cols, "X"}}));
      check_binary(a, b, c, to_d(ha), to_d(hb), to_d(hc));
      check_unary(a, to_d(ha));
    }
  });
}

TEST_CASE("result dtypes follow jnp's promotion, numbers weakly typed", "[expr][dtype]") {
  tessera::runtime rt{2};
  auto m = tessera::make_mesh<"X">({2});
  auto arr = [&]<class T>(T) { return put<P<"X">>(m, zeros<T, 1>({4})); };
  auto i8 = arr(std::int8_t{});
  auto u8 = arr(std::uint8_t{});
  auto i16 = arr(std::int16_t{});
  auto i32 = arr(std::int32_t{});
  auto u32 = arr(std::uint32_t{});
  auto i64 = arr(std::int64_t{});
  auto u64 = arr(std::uint64_t{});
  auto f32 = arr(float{});
  auto f64 = arr(double{});
  auto b = arr(bool{});
  auto dt = [](auto const& e) { return std::string(tessera::dtype_name<typename std::remove_cvref_t<decltype(e)>::value_type>()); };
  // Arrays with arrays: jnp.promote_types.
  CHECK(dt(i8 + i8) == "int8");
  CHECK(dt(i8 + i32) == "int32");
  CHECK(dt(u8 + i8) == "int16");
  CHECK(dt(u8 + i16) == "int16");
  CHECK(dt(u8 + i32) == "int32");
  CHECK(dt(i32 + u32) == "int64");
  CHECK(dt(i64 + u64) == "float64");
  CHECK(dt(i32 + f32) == "float32");
  CHECK(dt(i64 + f32) == "float32");
  CHECK(dt(f32 + f64) == "float64");
  CHECK(dt(b + i8) == "int8");
  CHECK(dt(b + b) == "bool");
  CHECK(dt(b * f32) == "float32");
  // Numbers are weak: the array's dtype wins within its kind.
  CHECK(dt(i8 + 1) == "int8");
  CHECK(dt(1 + u8) == "uint8");
  CHECK(dt(i32 * 2.5) == "float32");
  CHECK(dt(2.0 * f32) == "float32");
  CHECK(dt(f64 + 1.0f) == "float64");
  CHECK(dt(b + 1) == "int32");
  CHECK(dt(b * 1.5) == "float32");
  CHECK(dt(i16 + true) == "int16");
  // True division is floating; functions of integers compute in float32.
  CHECK(dt(i32 / i32) == "float32");
  CHECK(dt(i8 / 2) == "float32");
  CHECK(dt(u8 / u8) == "float32");
  CHECK(dt(f64 / 2) == "float64");
  CHECK(dt(tessera::sin(i32)) == "float32");
  CHECK(dt(tessera::sqrt(u8)) == "float32");
  CHECK(dt(tessera::exp(f64)) == "float64");
  CHECK(dt(tessera::abs(i8)) == "int8");
  CHECK(dt(-i16) == "int16");
  // Comparisons give bool; where promotes its branches; astype converts.
  CHECK(dt(i32 < f32) == "bool");
  CHECK(dt(tessera::where(b, i8, 1)) == "int8");
  CHECK(dt(tessera::where(b, i8, f32)) == "float32");
  CHECK(dt(tessera::astype<std::uint8_t>(f32)) == "uint8");
  // Reductions: small integer sums widen, means are floating, max keeps the dtype.
  CHECK(dt(tessera::sum(b)) == "int32");
  CHECK(dt(tessera::sum(i8)) == "int32");
  CHECK(dt(tessera::sum(u8)) == "uint32");
  CHECK(dt(tessera::prod(i16)) == "int32");
  CHECK(dt(tessera::sum(i64)) == "int64");
  CHECK(dt(tessera::mean(i32)) == "float32");
  CHECK(dt(tessera::mean(f64)) == "float64");
  CHECK(dt(tessera::max(i8)) == "int8");
  CHECK(dt(tessera::min(u8)) == "uint8");
}

TEST_CASE("small-integer arithmetic wraps and reductions widen, as in jnp", "[expr][dtype]") {
  tessera::runtime rt{8};
  std::mt19937 g(1005);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    shape_t<2> const s{draw_dim(g), draw_dim_nonempty(g)};
    INFO("shape " << fmt(s));
    xt::xtensor<std::uint8_t, 2> h = xt::xtensor<std::uint8_t, 2>::from_shape(s);
    for (auto& x : h) x = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0, 255)(g));
    auto const x = put<P<"X", "Y">>(m, h);
    xt::xarray<double> const d = to_d(h);
    // uint8 + uint8 stays uint8 (mod 256); sum widens to uint32 and does not wrap.
    expect(x + x, xt::fmod(2.0 * d, 256.0), "x + x (uint8)");
    expect(x * 3 + 7, xt::fmod(3.0 * d + 7.0, 256.0), "x * 3 + 7 (uint8)");
    expect(tessera::sum<0>(x), ref_reduce(d, {0}, red::sum), "sum<0>(x) (uint32)");
    expect(tessera::sum(x), ref_reduce(d, {}, red::sum), "sum(x) (uint32)");
    expect(tessera::max<1>(x + x), ref_reduce(xt::fmod(2.0 * d, 256.0), {1}, red::max), "max<1>(x + x)");
    // int8 sums widen to int32: 127 * 70 does not wrap.
    xt::xtensor<std::int8_t, 2> h8 = xt::xtensor<std::int8_t, 2>::from_shape(s);
    for (auto& v : h8) v = static_cast<std::int8_t>(std::uniform_int_distribution<int>(-128, 127)(g));
    auto const x8 = put<P<"Y", "X">>(m, h8);
    CHECK(tessera::type_of(tessera::sum<0>(x8)) == ty("int32", {{s[1], "X"}}));
    expect(tessera::sum<0>(x8), ref_reduce(to_d(h8), {0}, red::sum), "sum<0>(x) (int8 to int32)");
    expect(tessera::sum(x8 - x8 + 1), xt::xarray<double>(static_cast<double>(s[0] * s[1])), "sum(x - x + 1) (int8 to int32)");
  });
}

// ===========================================================================
// Broadcasting and the propagation rules, explicit axes
// ===========================================================================

namespace {

/// a + b, b - a and a * b - 2 * a for a of spec SA and shape sa, b of SB and sb (int32), with
/// their type strings.
template <class SA, class SB, class M, std::size_t NA, std::size_t NB>
void rule_case(M const& m, std::mt19937& g, shape_t<NA> const& sa, shape_t<NB> const& sb, std::string const& t_ab,
               std::string const& t_ba) {
  auto const ha = random_host<int>(sa, g);
  auto const hb = random_host<int>(sb, g);
  auto const a = put<SA>(m, ha);
  auto const b = put<SB>(m, hb);
  std::ostringstream os;
  os << "a " << fmt(sa) << " " << SA{} << ", b " << fmt(sb) << " " << SB{};
  INFO(os.str());
  auto const da = to_d(ha), db = to_d(hb);
  CHECK(tessera::type_of(a + b) == t_ab);
  CHECK(tessera::type_of(b - a) == t_ba);
  expect(a + b, da + db, "a + b");
  expect(b - a, db - da, "b - a");
}

}  // namespace

TEST_CASE("broadcasting and sharding propagation on 2-D meshes with explicit axes", "[expr][broadcast][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(2001);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 6; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g), k = draw_dim(g);
      INFO("r=" << r << " c=" << c << " k=" << k);
      using S2 = shape_t<2>;
      using S1 = shape_t<1>;
      // The seed's rule: size-1 dimensions broadcast, each operand brings its axis.
      rule_case<P<"X", none>, P<none, "Y">>(m, g, S2{r, 1}, S2{1, c}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                            ty("int32", {{r, "X"}, {c, "Y"}}));
      rule_case<P<none, "Y">, P<"X", none>>(m, g, S2{1, c}, S2{r, 1}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                            ty("int32", {{r, "X"}, {c, "Y"}}));
      // None with X gives X: the replicated operand is sliced on each device.
      rule_case<P<"X", none>, P<>>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "X"}, {c, ""}}),
                                   ty("int32", {{r, "X"}, {c, ""}}));
      rule_case<P<>, P<"X", "Y">>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                  ty("int32", {{r, "X"}, {c, "Y"}}));
      rule_case<P<"X", "Y">, P<"X", "Y">>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                          ty("int32", {{r, "X"}, {c, "Y"}}));
      // Lower-rank operands align on the right, sharded or not.
      rule_case<P<"X", none>, P<"Y">>(m, g, S2{r, c}, S1{c}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                      ty("int32", {{r, "X"}, {c, "Y"}}));
      rule_case<P<none>, P<"X", "Y">>(m, g, S1{c}, S2{r, c}, ty("int32", {{r, "X"}, {c, "Y"}}),
                                      ty("int32", {{r, "X"}, {c, "Y"}}));
      rule_case<P<"Y">, P<none, none>>(m, g, S1{c}, S2{r, 1}, ty("int32", {{r, ""}, {c, "Y"}}),
                                       ty("int32", {{r, ""}, {c, "Y"}}));
      rule_case<P<>, P<"Y", "X">>(m, g, shape_t<0>{}, S2{r, c}, ty("int32", {{r, "Y"}, {c, "X"}}),
                                  ty("int32", {{r, "Y"}, {c, "X"}}));
      // Several axes in one entry.
      rule_case<P<axes<"X", "Y">, none>, P<>>(m, g, S2{r, c}, S2{r, 1}, ty("int32", {{r, "(X,Y)"}, {c, ""}}),
                                              ty("int32", {{r, "(X,Y)"}, {c, ""}}));
      rule_case<P<none, axes<"Y", "X">>, P<none>>(m, g, S2{r, c}, S1{c}, ty("int32", {{r, ""}, {c, "(Y,X)"}}),
                                                  ty("int32", {{r, ""}, {c, "(Y,X)"}}));
      rule_case<P<axes<"X", "Y">>, P<axes<"X", "Y">>>(m, g, S1{r}, S1{r}, ty("int32", {{r, "(X,Y)"}}),
                                                      ty("int32", {{r, "(X,Y)"}}));
      // Rank 3, with broadcasting in the middle and on the left.
      rule_case<P<"X", none, none>, P<"Y", none>>(m, g, shape_t<3>{k, 1, c}, S2{r, c},
                                                  ty("int32", {{k, "X"}, {r, "Y"}, {c, ""}}),
                                                  ty("int32", {{k, "X"}, {r, "Y"}, {c, ""}}));
      rule_case<P<none, "Y", none>, P<"X", none, none>>(m, g, shape_t<3>{1, r, c}, shape_t<3>{k, 1, c},
                                                        ty("int32", {{k, "X"}, {r, "Y"}, {c, ""}}),
                                                        ty("int32", {{k, "X"}, {r, "Y"}, {c, ""}}));
    }
  });
}

TEST_CASE("broadcasting and sharding propagation on 1-D meshes", "[expr][broadcast][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(2002);
  for_each_mesh_1d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 6; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g);
      INFO("r=" << r << " c=" << c);
      rule_case<P<"X", none>, P<none>>(m, g, shape_t<2>{r, c}, shape_t<1>{c}, ty("int32", {{r, "X"}, {c, ""}}),
                                       ty("int32", {{r, "X"}, {c, ""}}));
      rule_case<P<>, P<none, "X">>(m, g, shape_t<2>{r, 1}, shape_t<2>{r, c}, ty("int32", {{r, ""}, {c, "X"}}),
                                   ty("int32", {{r, ""}, {c, "X"}}));
      rule_case<P<"X">, P<"X">>(m, g, shape_t<1>{r}, shape_t<1>{r}, ty("int32", {{r, "X"}}), ty("int32", {{r, "X"}}));
      rule_case<P<"X">, P<>>(m, g, shape_t<1>{r}, shape_t<0>{}, ty("int32", {{r, "X"}}), ty("int32", {{r, "X"}}));
    }
  });
}

TEST_CASE("three operands broadcast together: where(c, a, b) and chains", "[expr][broadcast]") {
  tessera::runtime rt{8};
  std::mt19937 g(2003);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g);
      INFO("r=" << r << " c=" << c);
      auto const hc = random_host<bool>(shape_t<2>{r, 1}, g);
      auto const ha = random_host<float>(shape_t<2>{1, c}, g);
      auto const hb = random_host<int>(shape_t<1>{c}, g);
      auto const hd = random_host<float>(shape_t<2>{r, c}, g);
      auto const cc = put<P<"X", none>>(m, hc);
      auto const a = put<P<none, "Y">>(m, ha);
      auto const b = put<P<none>>(m, hb);
      auto const d = put<P<>>(m, hd);
      auto const w = tessera::where(cc, a, b);
      CHECK(tessera::type_of(w) == ty("float32", {{r, "X"}, {c, "Y"}}));
      expect(w, xt::where(xt::not_equal(to_d(hc), 0.0), to_d(ha), to_d(hb)), "where(c, a, b)");
      auto const chain = (a + b) * d - tessera::where(cc, d, 2 * a) + 1;
      CHECK(tessera::type_of(chain) == ty("float32", {{r, "X"}, {c, "Y"}}));
      expect(chain,
             (to_d(ha) + to_d(hb)) * to_d(hd) - xt::where(xt::not_equal(to_d(hc), 0.0), to_d(hd), 2.0 * to_d(ha)) + 1.0,
             "(a + b) * d - where(c, d, 2 * a) + 1");
      // An explicit reshard settles what would be a conflict on Explicit axes.
      auto const e = put<P<"Y", none>>(m, hd);
      auto const settled = d * tessera::reshard(e, P<"X", none>{}) + cc;
      CHECK(tessera::type_of(settled) == ty("float32", {{r, "X"}, {c, ""}}));
      expect(settled, to_d(hd) * to_d(hd) + to_d(hc), "d * reshard(e, P(X, None)) + c");
    }
  });
}

// ===========================================================================
// Auto axes: conflicts are resolved by resharding one operand
// ===========================================================================

TEST_CASE("Auto axes: conflicting operands are resharded and the values are right", "[expr][auto][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(3001);
  for_each_mesh_2d<tessera::auto_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 5; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g), q = draw_dim(g);
      INFO("r=" << r << " c=" << c << " q=" << q);
      using S2 = shape_t<2>;
      // One dimension on two axes: the left operand keeps its sharding (equal ranks).
      rule_case<P<"X", none>, P<"Y", none>>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "X"}, {c, ""}}),
                                            ty("int32", {{r, "Y"}, {c, ""}}));
      // One axis in two dimensions: the right operand's use goes.
      rule_case<P<"X", none>, P<none, "X">>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "X"}, {c, ""}}),
                                            ty("int32", {{r, ""}, {c, "X"}}));
      // Different ranks: the higher-rank operand keeps its sharding (the broadcast one moves fewer bytes).
      rule_case<P<"X">, P<none, "Y">>(m, g, shape_t<1>{c}, S2{r, c}, ty("int32", {{r, ""}, {c, "Y"}}),
                                      ty("int32", {{r, ""}, {c, "Y"}}));
      // Several axes in one entry against one of them elsewhere.
      rule_case<P<axes<"X", "Y">, none>, P<none, "Y">>(m, g, S2{r, c}, S2{r, c}, ty("int32", {{r, "(X,Y)"}, {c, ""}}),
                                                       ty("int32", {{r, ""}, {c, "Y"}}));
      // A lower-rank operand's axis already used by another dimension: the higher rank keeps it.
      rule_case<P<"X", none>, P<"X">>(m, g, S2{r, c}, shape_t<1>{c}, ty("int32", {{r, "X"}, {c, ""}}),
                                      ty("int32", {{r, "X"}, {c, ""}}));
      // Both dimensions swapped.
      rule_case<P<"X", "Y">, P<"Y", "X">>(m, g, S2{q, q}, S2{q, q}, ty("int32", {{q, "X"}, {q, "Y"}}),
                                          ty("int32", {{q, "Y"}, {q, "X"}}));
      // A conflict in the middle of a longer chain and in where(): three operands folded left to right.
      auto const hx = random_host<int>(S2{q, q}, g);
      auto const x = put<P<"X", "Y">>(m, hx);
      auto const dx = to_d(hx);
      xt::xarray<double> const dxt = xt::transpose(dx);
      CHECK(tessera::type_of(x + tessera::transpose(x)) == ty("int32", {{q, "X"}, {q, "Y"}}));
      expect(x + tessera::transpose(x), dx + dxt, "x + transpose(x)");
      expect(tessera::transpose(x) - x * 2, dxt - dx * 2.0, "transpose(x) - x * 2");
      auto const hc = random_host<bool>(S2{r, c}, g);
      auto const ha = random_host<int>(S2{r, c}, g), hb = random_host<int>(S2{r, c}, g);
      auto const cc = put<P<"X", none>>(m, hc);
      auto const a = put<P<"Y", none>>(m, ha);
      auto const b = put<P<none, "X">>(m, hb);
      auto const w = tessera::where(cc, a, b);
      CHECK(tessera::type_of(w) == ty("int32", {{r, "X"}, {c, ""}}));
      expect(w, xt::where(xt::not_equal(to_d(hc), 0.0), to_d(ha), to_d(hb)), "where(c, a, b) with conflicts");
      expect(a + b + cc, to_d(ha) + to_d(hb) + to_d(hc), "a + b + c with conflicts");
    }
  });
}

// ===========================================================================
// Reductions
// ===========================================================================

TEST_CASE("reductions over every axis subset of a 2-D array sharded on both axes", "[expr][reduction][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(4001);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 5; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g);
      INFO("shape " << r << "x" << c);
      using tessera::type_of;
      auto const hx = random_host<int>(shape_t<2>{r, c}, g);
      auto const hf = random_host<float>(shape_t<2>{r, c}, g);
      auto const x = put<P<"X", "Y">>(m, hx);
      auto const f = put<P<"X", "Y">>(m, hf);
      auto const dx = to_d(hx), df = to_d(hf);
      // sum: the result is replicated over the reduced dimension's axis.
      CHECK(type_of(tessera::sum<0>(x)) == ty("int32", {{c, "Y"}}));
      CHECK(type_of(tessera::sum<1>(x)) == ty("int32", {{r, "X"}}));
      CHECK(type_of(tessera::sum<0, 1>(x)) == "int32[]");
      CHECK(type_of(tessera::sum(x)) == "int32[]");
      expect(tessera::sum<0>(x), ref_reduce(dx, {0}, red::sum), "sum<0>");
      expect(tessera::sum<1>(x), ref_reduce(dx, {1}, red::sum), "sum<1>");
      expect(tessera::sum<0, 1>(x), ref_reduce(dx, {0, 1}, red::sum), "sum<0, 1>");
      expect(tessera::sum<1, 0>(x), ref_reduce(dx, {0, 1}, red::sum), "sum<1, 0>");
      expect(tessera::sum(x), ref_reduce(dx, {}, red::sum), "sum");
      expect(tessera::sum<1>(f), ref_reduce(df, {1}, red::sum), "sum<1> (float32)");
      // mean: floating, divided by the global count (NaN over nothing, as jnp).
      CHECK(type_of(tessera::mean<0>(x)) == ty("float32", {{c, "Y"}}));
      expect(tessera::mean<0>(x), ref_reduce(dx, {0}, red::mean), "mean<0>");
      expect(tessera::mean<1>(x), ref_reduce(dx, {1}, red::mean), "mean<1>");
      expect(tessera::mean(x), ref_reduce(dx, {}, red::mean), "mean");
      expect(tessera::mean<0>(f), ref_reduce(df, {0}, red::mean), "mean<0> (float32)");
      // max and min: no identity, so an empty reduced dimension is an error.
      if (c > 0) CHECK(type_of(tessera::max<1>(x)) == ty("int32", {{r, "X"}}));
      if (r > 0) {
        expect(tessera::max<0>(x), ref_reduce(dx, {0}, red::max), "max<0>");
        expect(tessera::min<0>(f), ref_reduce(df, {0}, red::min), "min<0> (float32)");
      } else {
        CHECK_THROWS_WITH(tessera::max<0>(x), Contains("tessera::max") && Contains("dimension 0") && Contains("is empty"));
        CHECK_THROWS_WITH(tessera::min<0>(f), Contains("tessera::min") && Contains("dimension 0") && Contains("is empty"));
      }
      if (c > 0) {
        expect(tessera::max<1>(f), ref_reduce(df, {1}, red::max), "max<1> (float32)");
        expect(tessera::min<1>(x), ref_reduce(dx, {1}, red::min), "min<1>");
      } else {
        CHECK_THROWS_WITH(tessera::max<1>(f), Contains("dimension 1") && Contains("is empty"));
        CHECK_THROWS_WITH(tessera::min<1>(x), Contains("dimension 1") && Contains("is empty"));
      }
      if (r > 0 && c > 0) {
        expect(tessera::max(x), ref_reduce(dx, {}, red::max), "max");
        expect(tessera::min<0, 1>(x), ref_reduce(dx, {}, red::min), "min<0, 1>");
      } else {
        CHECK_THROWS_WITH(tessera::max(x), Contains("is empty"));
      }
    }
    // prod: small values, so nothing overflows.
    for (int trial = 0; trial < 2; ++trial) {
      std::size_t const r = std::min<std::size_t>(draw_dim(g), 11), c = std::min<std::size_t>(draw_dim(g), 11);
      INFO("prod, shape " << r << "x" << c);
      auto const hx = random_host<int>(shape_t<2>{r, c}, g, kind::sign);
      auto const hf = random_host<float>(shape_t<2>{r, c}, g, kind::sign);
      auto const x = put<P<"X", "Y">>(m, hx);
      auto const f = put<P<"X", "Y">>(m, hf);
      CHECK(tessera::type_of(tessera::prod<0>(x)) == ty("int32", {{c, "Y"}}));
      expect(tessera::prod<0>(x), ref_reduce(to_d(hx), {0}, red::prod), "prod<0>");
      expect(tessera::prod<1>(x), ref_reduce(to_d(hx), {1}, red::prod), "prod<1>");
      expect(tessera::prod(x), ref_reduce(to_d(hx), {}, red::prod), "prod");
      expect(tessera::prod<1>(f), ref_reduce(to_d(hf), {1}, red::prod), "prod<1> (float32)");
      expect(tessera::prod<0, 1>(f), ref_reduce(to_d(hf), {}, red::prod), "prod<0, 1> (float32)");
    }
  });
}

TEST_CASE("reductions of 3-D arrays and other specs", "[expr][reduction][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(4002);
  for_each_mesh_2d<tessera::auto_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const k = std::min<std::size_t>(draw_dim(g), 12), r = std::min<std::size_t>(draw_dim(g), 12),
                        c = draw_dim(g);
      INFO("shape " << k << "x" << r << "x" << c);
      using tessera::type_of;
      auto const h3 = random_host<int>(shape_t<3>{k, r, c}, g);
      auto const d3 = to_d(h3);
      auto const x = put<P<"X", none, "Y">>(m, h3);
      CHECK(type_of(tessera::sum<0>(x)) == ty("int32", {{r, ""}, {c, "Y"}}));
      CHECK(type_of(tessera::sum<1>(x)) == ty("int32", {{k, "X"}, {c, "Y"}}));
      CHECK(type_of(tessera::sum<2>(x)) == ty("int32", {{k, "X"}, {r, ""}}));
      CHECK(type_of(tessera::sum<2, 0>(x)) == ty("int32", {{r, ""}}));
      CHECK(type_of(tessera::mean<0, 1>(x)) == ty("float32", {{c, "Y"}}));
      expect(tessera::sum<0>(x), ref_reduce(d3, {0}, red::sum), "sum<0>");
      expect(tessera::sum<1>(x), ref_reduce(d3, {1}, red::sum), "sum<1>");
      expect(tessera::sum<2>(x), ref_reduce(d3, {2}, red::sum), "sum<2>");
      expect(tessera::sum<0, 2>(x), ref_reduce(d3, {0, 2}, red::sum), "sum<0, 2>");
      expect(tessera::sum<2, 0>(x), ref_reduce(d3, {0, 2}, red::sum), "sum<2, 0>");
      expect(tessera::sum<1, 2>(x), ref_reduce(d3, {1, 2}, red::sum), "sum<1, 2>");
      expect(tessera::sum<0, 1, 2>(x), ref_reduce(d3, {}, red::sum), "sum<0, 1, 2>");
      expect(tessera::mean<0, 1>(x), ref_reduce(d3, {0, 1}, red::mean), "mean<0, 1>");
      if (r > 0) expect(tessera::max<1>(x), ref_reduce(d3, {1}, red::max), "max<1>");
      if (k > 0 && c > 0) expect(tessera::min<0, 2>(x), ref_reduce(d3, {0, 2}, red::min), "min<0, 2>");

      // Several axes in one entry: the all-reduce runs over both.
      std::size_t const n = draw_dim(g);
      auto const h2 = random_host<int>(shape_t<2>{n, c}, g);
      auto const d2 = to_d(h2);
      auto const y = put<P<axes<"X", "Y">, none>>(m, h2);
      CHECK(type_of(tessera::sum<0>(y)) == ty("int32", {{c, ""}}));
      CHECK(type_of(tessera::sum<1>(y)) == ty("int32", {{n, "(X,Y)"}}));
      expect(tessera::sum<0>(y), ref_reduce(d2, {0}, red::sum), "sum<0> over (X,Y)");
      expect(tessera::sum<1>(y), ref_reduce(d2, {1}, red::sum), "sum<1> beside (X,Y)");
      if (n > 0) expect(tessera::max<0>(y), ref_reduce(d2, {0}, red::max), "max<0> over (X,Y)");
      // Unsharded, and sharded on the minor entry only.
      auto const z = put<P<>>(m, h2);
      CHECK(type_of(tessera::sum<0>(z)) == ty("int32", {{c, ""}}));
      expect(tessera::sum<0>(z), ref_reduce(d2, {0}, red::sum), "sum<0> replicated");
      expect(tessera::sum(z), ref_reduce(d2, {}, red::sum), "sum replicated");
      auto const w = put<P<none, axes<"Y", "X">>>(m, h2);
      CHECK(type_of(tessera::sum<0>(w)) == ty("int32", {{c, "(Y,X)"}}));
      expect(tessera::sum<0>(w), ref_reduce(d2, {0}, red::sum), "sum<0> beside (Y,X)");
      expect(tessera::sum<1>(w), ref_reduce(d2, {1}, red::sum), "sum<1> over (Y,X)");
    }
  });
}

TEST_CASE("reductions on 1-D meshes, of rank-1 and rank-0 arrays", "[expr][reduction]") {
  tessera::runtime rt{8};
  std::mt19937 g(4003);
  for_each_mesh_1d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const n = draw_dim(g);
      INFO("n=" << n);
      auto const h = random_host<float>(shape_t<1>{n}, g);
      auto const x = put<P<"X">>(m, h);
      CHECK(tessera::type_of(tessera::sum(x)) == "float32[]");
      expect(tessera::sum(x), ref_reduce(to_d(h), {}, red::sum), "sum");
      tessera::array const total = tessera::sum(x);
      STATIC_REQUIRE(std::is_same_v<typename decltype(total)::value_type, float>);
      STATIC_REQUIRE(decltype(total)::rank == 0);
      check_array(total, ref_reduce(to_d(h), {}, red::sum), "tessera::array total = sum(x)");
      expect(tessera::sum<0>(x), ref_reduce(to_d(h), {0}, red::sum), "sum<0>");
      expect(tessera::mean(x), ref_reduce(to_d(h), {}, red::mean), "mean");
      if (n > 0) expect(tessera::max(x), ref_reduce(to_d(h), {}, red::max), "max");
      auto const h0 = random_host<int>(shape_t<0>{}, g);
      auto const s = put<P<>>(m, h0);
      CHECK(tessera::type_of(tessera::sum(s)) == "int32[]");
      expect(tessera::sum(s), to_d(h0), "sum of a rank-0 array");
      expect(tessera::max(s) + x, to_d(h0) + to_d(h), "max(rank 0) + x");
    }
  });
}

TEST_CASE("reductions of empty arrays: sum is 0, prod is 1, mean is NaN, max throws", "[expr][reduction][errors]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const h = zeros<float, 2>({0, 5});
  auto const x = put<P<"X", "Y">>(m, h);
  expect(tessera::sum<0>(x), xt::zeros<double>({5}), "sum<0> of (0, 5)");
  expect(tessera::prod<0>(x), xt::ones<double>({5}), "prod<0> of (0, 5)");
  expect(tessera::mean<0>(x), xt::xarray<double>(xt::zeros<double>({5}) / 0.0), "mean<0> of (0, 5)");
  expect(tessera::sum<1>(x), xt::zeros<double>({0}), "sum<1> of (0, 5)");
  expect(tessera::max<1>(x), xt::zeros<double>({0}), "max<1> of (0, 5): nothing to reduce, no error");
  CHECK_THROWS_AS(tessera::max<0>(x), std::invalid_argument);
  CHECK_THROWS_WITH(tessera::max<0>(x), Contains("tessera::max: dimension 0 of the operand of shape (0, 5) is empty"));
  CHECK_THROWS_WITH(tessera::min(x), Contains("tessera::min") && Contains("(0, 5)") && Contains("no identity"));
  // A device whose block is empty (5 over 4 shards: 2, 2, 1, 0) still takes part in the all-reduce.
  auto m4 = tessera::make_mesh<"X">({4}, tessera::explicit_axes);
  xt::xtensor<float, 1> const v{-3.f, -1.f, -2.f, -7.f, -0.5f};
  auto const y = put<P<"X">>(m4, v);
  expect(tessera::max(y), xt::xarray<double>(-0.5), "max over uneven blocks, one empty");
  expect(tessera::min(y), xt::xarray<double>(-7.0), "min over uneven blocks, one empty");
  expect(tessera::sum(y), xt::xarray<double>(-13.5), "sum over uneven blocks, one empty");
  expect(tessera::prod(y), xt::xarray<double>(-21.0), "prod over uneven blocks, one empty");
}

TEST_CASE("a sum of negative zeros is +0, as JAX's (the reduction starts from the identity 0)", "[expr][reduction]") {
  // Each device writes its first row as 0 + value rather than filling with 0 and adding: the
  // same bits, which a plain copy of the first row would not give (-0.0 + -0.0 is -0.0).
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> h = xt::zeros<float>({4, 8});
  h.fill(-0.0f);
  h(1, 5) = -2.5f;
  auto const x = put<P<"X", "Y">>(m, h);
  auto const local = put<P<tessera::none, "Y">>(m, h);
  for (auto const& r : {tessera::to_host(tessera::eval(tessera::sum<0>(x))),
                        tessera::to_host(tessera::eval(tessera::sum<0>(local)))}) {
    REQUIRE(r.size() == 8);
    for (std::size_t j = 0; j < 8; ++j) {
      if (j == 5) {
        CHECK(r(j) == -2.5f);
      } else {
        CHECK(r(j) == 0.0f);
        CHECK_FALSE(std::signbit(r(j)));
      }
    }
  }
  auto const rows = tessera::to_host(tessera::eval(tessera::sum<1>(local)));  // the innermost dimension reduced
  for (std::size_t i = 0; i < 4; ++i)
    if (i != 1) CHECK_FALSE(std::signbit(rows(i)));
}

TEST_CASE("NaN propagates through maximum, minimum, and max and min within a device", "[expr][reduction][nan]") {
  tessera::runtime rt{8};
  std::mt19937 g(4004);
  float const nan = std::numeric_limits<float>::quiet_NaN();
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    shape_t<2> const s{9, 37};
    auto h = random_host<float>(s, g);
    h(5, 20) = nan;
    h(0, 3) = nan;
    auto const d = to_d(h);
    auto const x = put<P<"X", "Y">>(m, h);
    expect(tessera::maximum(x, 0.f), xt::where(xt::isnan(d), d, xt::maximum(d, 0.0)), "maximum(x, 0)");
    expect(tessera::minimum(1.f, x), xt::where(xt::isnan(d), d, xt::minimum(d, 1.0)), "minimum(1, x)");
    expect(tessera::clip(x, -1, 1), xt::where(xt::isnan(d), d, xt::minimum(xt::maximum(d, -1.0), 1.0)), "clip(x, -1, 1)");
    // The reduced dimension is whole on every device: no all-reduce.
    auto const rows = put<P<"X", none>>(m, h);
    auto const cols = put<P<none, "Y">>(m, h);
    expect(tessera::max<1>(rows), ref_reduce(d, {1}, red::max), "max<1> of P(X, None)");
    expect(tessera::min<1>(rows), ref_reduce(d, {1}, red::min), "min<1> of P(X, None)");
    expect(tessera::max<0>(cols), ref_reduce(d, {0}, red::max), "max<0> of P(None, Y)");
    expect(tessera::min<0>(cols + 1), ref_reduce(d + 1.0, {0}, red::min), "min<0> of P(None, Y) + 1");
  });
}

TEST_CASE("NaN propagates through max and min across devices (the all-reduce)", "[expr][reduction][nan]") {
  // A NaN held by a later member of the all-reduce group used to be dropped (runtime/simd.hpp's
  // max_into / min_into kept `a` when `b` was NaN); jnp.max / jnp.min give NaN.
  tessera::runtime rt{8};
  std::mt19937 g(4006);
  float const nan = std::numeric_limits<float>::quiet_NaN();
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    shape_t<2> const s{9, 37};
    auto h = random_host<float>(s, g);
    h(5, 20) = nan;
    h(0, 3) = nan;
    auto const x = put<P<"X", "Y">>(m, h);
    auto const d = to_d(h);
    expect(tessera::max<0>(x), ref_reduce(d, {0}, red::max), "max<0>");
    expect(tessera::max<1>(x), ref_reduce(d, {1}, red::max), "max<1>");
    expect(tessera::min<1>(x), ref_reduce(d, {1}, red::min), "min<1>");
    expect(tessera::max(x), ref_reduce(d, {}, red::max), "max");
    expect(tessera::min(x), ref_reduce(d, {}, red::min), "min");
  });
}

TEST_CASE("reductions combined with element-wise operations", "[expr][reduction][broadcast]") {
  tessera::runtime rt{8};
  std::mt19937 g(4005);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 3; ++trial) {
      std::size_t const r = draw_dim_nonempty(g), c = draw_dim(g);
      INFO("shape " << r << "x" << c);
      auto const hx = random_host<float>(shape_t<2>{r, c}, g);
      auto const hp = random_host<float>(shape_t<2>{r, c}, g, kind::positive);
      auto const x = put<P<"X", "Y">>(m, hx);
      auto const p = put<P<"X", "Y">>(m, hp);
      auto const dx = to_d(hx), dp = to_d(hp);
      auto const centred = x - tessera::mean<0>(x);
      CHECK(tessera::type_of(centred) == ty("float32", {{r, "X"}, {c, "Y"}}));
      xt::xarray<double> const mean0 = ref_reduce(dx, {0}, red::mean);
      expect(centred, dx - mean0, "x - mean<0>(x)");
      // Along the other axis, through transposes.
      auto const centred1 = tessera::transpose(tessera::transpose(x) - tessera::mean<1>(x));
      CHECK(tessera::type_of(centred1) == ty("float32", {{r, "X"}, {c, "Y"}}));
      xt::xarray<double> const mean1 = ref_reduce(dx, {1}, red::mean);
      expect(centred1, xt::transpose(xt::transpose(dx) - mean1), "transpose(transpose(x) - mean<1>(x))");
      // softmax over axis 0: a reduction of an expression, and of an expression holding a reduction.
      auto const e = tessera::exp(x - tessera::max<0>(x));
      auto const softmax = e / tessera::sum<0>(e);
      CHECK(tessera::type_of(softmax) == ty("float32", {{r, "X"}, {c, "Y"}}));
      xt::xarray<double> const de = xt::exp(dx - ref_reduce(dx, {0}, red::max));
      expect(softmax, de / ref_reduce(de, {0}, red::sum), "softmax over axis 0");
      // Whole-array reductions broadcast as rank-0 operands.
      expect(p / tessera::sum(p), dp / ref_reduce(dp, {}, red::sum), "p / sum(p)");
      if (c > 0)
        expect(tessera::sum<1>(x * x) + tessera::max<1>(p), ref_reduce(dx * dx, {1}, red::sum) + ref_reduce(dp, {1}, red::max),
             "sum<1>(x * x) + max<1>(p)");
      expect(tessera::mean<1>(x > 0), ref_reduce(xt::greater(dx, 0.0), {1}, red::mean), "mean<1>(x > 0)");
      CHECK(tessera::type_of(tessera::sum<0>(x > 0)) == ty("int32", {{c, "Y"}}));
      expect(tessera::sum<0>(x > 0), ref_reduce(xt::greater(dx, 0.0), {0}, red::sum), "sum<0>(x > 0)");
      expect(tessera::sum<0>(tessera::where(x > 0, x, 0)) - tessera::sum<0>(tessera::relu(x)), xt::zeros<double>({c}),
             "sum<0>(where(x > 0, x, 0)) - sum<0>(relu(x))");
    }
    // A reduction of a broadcast expression.
    std::size_t const r = draw_dim(g), c = draw_dim(g);
    auto const ha = random_host<int>(shape_t<2>{r, 1}, g), hb = random_host<int>(shape_t<2>{1, c}, g);
    auto const a = put<P<"X", none>>(m, ha);
    auto const b = put<P<none, "Y">>(m, hb);
    CHECK(tessera::type_of(tessera::sum<0>(a * b)) == ty("int32", {{c, "Y"}}));
    expect(tessera::sum<0>(a * b), ref_reduce(to_d(ha) * to_d(hb), {0}, red::sum), "sum<0>(a * b)");
    expect(tessera::sum(a - b), ref_reduce(to_d(ha) - to_d(hb), {}, red::sum), "sum(a - b)");
  });
}

// ===========================================================================
// Transposes
// ===========================================================================

TEST_CASE("transpose of arrays and of expressions permutes the spec", "[expr][transpose][typeof]") {
  tessera::runtime rt{8};
  std::mt19937 g(5001);
  for_each_mesh_2d<tessera::explicit_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 4; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g), k = draw_dim(g);
      INFO("r=" << r << " c=" << c << " k=" << k);
      using tessera::transpose;
      using tessera::type_of;
      auto const hx = random_host<int>(shape_t<2>{r, c}, g);
      auto const x = put<P<"X", "Y">>(m, hx);
      auto const dx = to_d(hx);
      xt::xarray<double> const dxt = xt::transpose(dx);
      CHECK(type_of(transpose(x)) == ty("int32", {{c, "Y"}, {r, "X"}}));
      CHECK(type_of(transpose<0, 1>(x)) == ty("int32", {{r, "X"}, {c, "Y"}}));
      expect(transpose(x), dxt, "transpose(x)");
      expect(transpose<1, 0>(x), dxt, "transpose<1, 0>(x)");
      expect(transpose<0, 1>(x), dx, "transpose<0, 1>(x)");
      expect(transpose(transpose(x)), dx, "transpose(transpose(x))");
      expect(2 * transpose(x) + 1, 2.0 * dxt + 1.0, "2 * transpose(x) + 1");
      // A transposed operand next to one laid out the transposed way (no conflict).
      auto const hy = random_host<int>(shape_t<2>{c, r}, g);
      auto const y = put<P<"Y", "X">>(m, hy);
      CHECK(type_of(transpose(x) + y) == ty("int32", {{c, "Y"}, {r, "X"}}));
      expect(transpose(x) - y, dxt - to_d(hy), "transpose(x) - y");
      expect(x * transpose(y), dx * xt::transpose(to_d(hy)), "x * transpose(y)");
      // Of an expression, and reductions around it.
      CHECK(type_of(transpose(x + 1)) == ty("int32", {{c, "Y"}, {r, "X"}}));
      expect(transpose(x * x - 3), xt::transpose(dx * dx - 3.0), "transpose(x * x - 3)");
      CHECK(type_of(tessera::sum<0>(transpose(x))) == ty("int32", {{r, "X"}}));
      expect(tessera::sum<0>(transpose(x)), ref_reduce(dx, {1}, red::sum), "sum<0>(transpose(x))");
      expect(tessera::sum<1>(transpose(x + x)), ref_reduce(2.0 * dx, {0}, red::sum), "sum<1>(transpose(x + x))");
      // Rank 3.
      auto const h3 = random_host<float>(shape_t<3>{k, r, c}, g);
      auto const z = put<P<"X", none, "Y">>(m, h3);
      auto const d3 = to_d(h3);
      CHECK(type_of(transpose<1, 0, 2>(z)) == ty("float32", {{r, ""}, {k, "X"}, {c, "Y"}}));
      CHECK(type_of(transpose<2, 0, 1>(z)) == ty("float32", {{c, "Y"}, {k, "X"}, {r, ""}}));
      CHECK(type_of(transpose(z)) == ty("float32", {{c, "Y"}, {r, ""}, {k, "X"}}));
      expect(transpose<1, 0, 2>(z), xt::transpose(d3, {1, 0, 2}), "transpose<1, 0, 2>(z)");
      expect(transpose<2, 0, 1>(z), xt::transpose(d3, {2, 0, 1}), "transpose<2, 0, 1>(z)");
      expect(transpose(z), xt::transpose(d3), "transpose(z)");
      expect(transpose<1, 2, 0>(tessera::sin(z) * 2), xt::transpose(xt::xarray<double>(xt::sin(d3) * 2.0), {1, 2, 0}),
             "transpose<1, 2, 0>(sin(z) * 2)");
      CHECK(type_of(transpose(tessera::sum<1>(z))) == ty("float32", {{c, "Y"}, {k, "X"}}));
      expect(transpose(tessera::sum<1>(z)), xt::transpose(ref_reduce(d3, {1}, red::sum)), "transpose(sum<1>(z))");
      // Rank 1: nothing to permute.
      auto const h1 = random_host<int>(shape_t<1>{k}, g);
      auto const v = put<P<axes<"Y", "X">>>(m, h1);
      CHECK(type_of(transpose(v)) == ty("int32", {{k, "(Y,X)"}}));
      expect(transpose(v) + v, 2.0 * to_d(h1), "transpose(v) + v");
    }
  });
}

// ===========================================================================
// jit
// ===========================================================================

TEST_CASE("jit: computation follows data", "[expr][jit]") {
  tessera::runtime rt{8};
  std::mt19937 g(6001);
  for_each_mesh_2d<tessera::auto_axes_t>(g, [&](auto const& m) {
    std::size_t const r = draw_dim(g), c = draw_dim(g);
    INFO("shape " << r << "x" << c);
    auto const hx = random_host<float>(shape_t<2>{r, c}, g);
    auto const x = put<P<"Y", "X">>(m, hx);
    auto const dx = to_d(hx);
    auto f = tessera::jit([](auto a) { return 2 * tessera::sin(a) + 1; });
    auto const y = f(x);
    STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(y)>, std::remove_cvref_t<decltype(x)>>);
    CHECK(y.sharding() == x.sharding());
    check_array(y, 2.0 * xt::sin(dx) + 1.0, "jit(2 * sin(x) + 1)");
    // Two inputs, a reduction, and a function returning an array as it is.
    auto h = tessera::jit([](auto a, auto b) { return tessera::sum<1>(a * b) / 2; });
    auto const s = h(x, x);
    CHECK(tessera::type_of(s) == ty("float32", {{r, "Y"}}));
    check_array(s, ref_reduce(dx * dx, {1}, red::sum) / 2.0, "jit(sum<1>(a * b) / 2)");
    auto ident = tessera::jit([](auto a) { return a; });
    check_array(ident(x), dx, "jit(identity)");
    // Tuple results: each evaluated, each with its own propagated sharding.
    auto t = tessera::jit([](auto a) { return std::make_tuple(a + 1, tessera::max<0>(tessera::abs(a)), a); });
    if (r > 0) {
      auto const [p, q, same] = t(x);
      CHECK(tessera::type_of(p) == ty("float32", {{r, "Y"}, {c, "X"}}));
      CHECK(tessera::type_of(q) == ty("float32", {{c, "X"}}));
      check_array(p, dx + 1.0, "tuple: a + 1");
      check_array(q, ref_reduce(xt::abs(dx), {0}, red::max), "tuple: max<0>(abs(a))");
      check_array(same, dx, "tuple: a");
    }
  });
}

TEST_CASE("jit with in_shardings and out_shardings", "[expr][jit]") {
  tessera::runtime rt{8};
  std::mt19937 g(6002);
  for_each_mesh_2d<tessera::auto_axes_t>(g, [&](auto const& m) {
    for (int trial = 0; trial < 2; ++trial) {
      std::size_t const r = draw_dim(g), c = draw_dim(g);
      INFO("shape " << r << "x" << c);
      auto const ha = random_host<int>(shape_t<2>{r, c}, g), hb = random_host<int>(shape_t<2>{r, c}, g);
      auto const da = to_d(ha), db = to_d(hb);
      auto const rows = tessera::named_sharding(m, P<"X", none>{});
      auto const cols = tessera::named_sharding(m, P<none, "Y">{});
      auto const both = tessera::named_sharding(m, P<"Y", "X">{});
      auto const repl = tessera::named_sharding(m, P<>{});
      // Inputs that are not in their in_sharding are put there (an array on another sharding, a
      // host xtensor); one that is already there is passed as it is, without a copy.
      auto const a_elsewhere = put<P<"Y", "X">>(m, ha);
      auto const b_there = put<P<none, "Y">>(m, hb);
      int const* seen_b = nullptr;
      auto f = tessera::jit(
          [&](auto a, auto b) {
            STATIC_REQUIRE(std::is_same_v<typename decltype(a)::sharding_type, std::remove_cvref_t<decltype(rows)>>);
            STATIC_REQUIRE(std::is_same_v<typename decltype(b)::sharding_type, std::remove_cvref_t<decltype(cols)>>);
            seen_b = b.block_data(0);
            return a * b + 1;
          },
          tessera::in_shardings(rows, cols), tessera::out_shardings(repl));
      auto const out = f(a_elsewhere, b_there);
      STATIC_REQUIRE(std::is_same_v<typename decltype(out)::sharding_type, std::remove_cvref_t<decltype(repl)>>);
      CHECK(out.is_fully_replicated());
      CHECK(seen_b == b_there.block_data(0));
      check_array(out, da * db + 1.0, "a * b + 1 into P()");
      auto const out2 = f(ha, hb);
      check_array(out2, da * db + 1.0, "a * b + 1 from host xtensors");
      // out_shardings moves the result; tuple results each to their own.
      auto h = tessera::jit([](auto a) { return std::make_tuple(a - 1, tessera::sum<0>(a)); },
                            tessera::in_shardings(both), tessera::out_shardings(rows, tessera::named_sharding(m, P<"X">{})));
      auto const [p, q] = h(ha);
      CHECK(tessera::type_of(p) == ty("int32", {{r, "X"}, {c, ""}}));
      CHECK(tessera::type_of(q) == ty("int32", {{c, "X"}}));
      check_array(p, da - 1.0, "tuple: a - 1 into P(X)");
      check_array(q, ref_reduce(da, {0}, red::sum), "tuple: sum<0>(a) into P(X)");
    }
  });
}

// ===========================================================================
// Expressions outlive their operands' names
// ===========================================================================

namespace {

template <class M>
auto make_expression(M const& m, xt::xtensor<float, 2> const& ha, xt::xtensor<float, 2> const& hb) {
  auto a = put<P<"X", "Y">>(m, ha);
  auto b = put<P<none, "Y">>(m, hb);
  double const k = 2;
  return k * tessera::sin(a) + b * a - tessera::mean<0>(a);  // a, b and k go out of scope here
}

template <class M>
auto make_conflicting(M const& m, xt::xtensor<float, 2> const& ha) {
  auto a = put<P<"X", none>>(m, ha);
  auto b = put<P<"Y", none>>(m, ha);
  return tessera::transpose(a + b) * 2;  // b resharded (Auto), then a transpose of an expression
}

}  // namespace

TEST_CASE("an expression returned from a function owns its operands", "[expr][lifetime]") {
  tessera::runtime rt{8};
  std::mt19937 g(7001);
  auto m = tessera::make_mesh<"X", "Y">({2, 4});
  for (int trial = 0; trial < 4; ++trial) {
    std::size_t const r = draw_dim_nonempty(g), c = draw_dim(g);
    auto const ha = random_host<float>(shape_t<2>{r, c}, g), hb = random_host<float>(shape_t<2>{r, c}, g);
    auto const da = to_d(ha), db = to_d(hb);
    xt::xarray<double> const want = 2.0 * xt::sin(da) + db * da - ref_reduce(da, {0}, red::mean);
    auto e = make_expression(m, ha, hb);
    CHECK(tessera::type_of(e) == ty("float32", {{r, "X"}, {c, "Y"}}));
    expect(e, want, "returned expression");
    expect(e, want, "returned expression, evaluated again");
    auto copy = e;
    expect(copy, want, "a copy of it");
    expect(std::move(e) + 0, want, "moved into a bigger expression");
    auto t = make_conflicting(m, ha);
    expect(t, xt::transpose(4.0 * da), "returned transpose of a resharded sum");
    // Temporaries as operands.
    auto s = tessera::sum<1>(put<P<"X", "Y">>(m, ha) * 3);
    expect(s, ref_reduce(3.0 * da, {1}, red::sum), "reduction of a temporary's expression");
  }
}

TEST_CASE("one expression evaluated from several host threads at once", "[expr][threads]") {
  tessera::runtime rt{8};
  std::mt19937 g(7002);
  auto m = tessera::make_mesh<"X", "Y">({2, 4});
  for (int trial = 0; trial < 4; ++trial) {
    std::size_t const r = draw_dim_nonempty(g), c = draw_dim(g);
    auto const h = random_host<float>(shape_t<2>{r, c}, g);
    auto const x = put<P<"X", "Y">>(m, h);
    auto const y = put<P<"Y", none>>(m, h);
    // A reduction, a transpose of an expression and a resharded operand: each is computed
    // once, on first use, and shared by the copies of the expression.
    auto const e = x - tessera::mean<0>(x) + tessera::transpose(tessera::transpose(x) * 2) + y;
    xt::xarray<double> const d = to_d(h);
    xt::xarray<double> const want = d - ref_reduce(d, {0}, red::mean) + 2.0 * d + d;
    std::vector<xt::xtensor<float, 2>> results(4);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < results.size(); ++i)
      threads.emplace_back([&, i, copy = e] { results[i] = tessera::to_host(tessera::eval(copy)); });
    for (auto& t : threads) t.join();
    for (auto const& res : results) CHECK(mismatch(res, want, 2e-5).empty());
  }
}

// ===========================================================================
// Run-time errors
// ===========================================================================

TEST_CASE("shapes that do not broadcast: the message names both shapes", "[expr][errors]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const a = put<P<"X", none>>(m, zeros<int, 2>({3, 4}));
  auto const b = put<P<"X", none>>(m, zeros<int, 2>({3, 5}));
  auto const v = put<P<none>>(m, zeros<int, 1>({3}));
  CHECK_THROWS_AS(a + b, std::invalid_argument);
  CHECK_THROWS_WITH(a + b, Contains("(3, 4)") && Contains("(3, 5)") && Contains("do not broadcast") &&
                               Contains("dimension 1"));
  CHECK_THROWS_WITH(b * a, Contains("(3, 5)") && Contains("(3, 4)"));
  CHECK_THROWS_WITH(a - v, Contains("(3, 4)") && Contains("(3,)") && Contains("do not broadcast"));
  CHECK_THROWS_WITH(tessera::where(a > 0, a, b), Contains("do not broadcast"));
  CHECK_THROWS_WITH(tessera::maximum(a, b) + 1, Contains("do not broadcast"));
  auto const a3 = put<P<>>(m, zeros<int, 3>({2, 3, 4}));
  auto const b3 = put<P<>>(m, zeros<int, 3>({3, 3, 4}));
  CHECK_THROWS_WITH(a3 + b3, Contains("(2, 3, 4)") && Contains("(3, 3, 4)") && Contains("dimension 0"));
}

TEST_CASE("operands on meshes with the same axes but other sizes or devices", "[expr][errors]") {
  tessera::runtime rt{8};
  auto m24 = tessera::make_mesh<"X", "Y">({2, 4});
  auto m42 = tessera::make_mesh<"X", "Y">({4, 2});
  auto const a = put<P<"X", "Y">>(m24, zeros<int, 2>({4, 8}));
  auto const b = put<P<"X", "Y">>(m42, zeros<int, 2>({4, 8}));
  CHECK_THROWS_AS(a + b, std::invalid_argument);
  CHECK_THROWS_WITH(a + b, Contains("different meshes") && Contains("Mesh('X': 2, 'Y': 4, axis_types=(Auto, Auto))") &&
                               Contains("Mesh('X': 4, 'Y': 2, axis_types=(Auto, Auto))") && Contains("device_put"));
  CHECK_THROWS_WITH(tessera::where(a > 0, b, 0), Contains("different meshes"));
  auto p = tessera::make_mesh<"X">({4});
  auto q = tessera::make_mesh<"X">({4}, std::vector<int>{4, 5, 6, 7});
  auto r = tessera::make_mesh<"X">({4}, std::vector<int>{3, 2, 1, 0});
  auto const u = put<P<"X">>(p, zeros<float, 1>({6}));
  auto const v = put<P<"X">>(q, zeros<float, 1>({6}));
  auto const w = put<P<"X">>(r, zeros<float, 1>({6}));
  CHECK_THROWS_WITH(u * v, Contains("different meshes") && Contains("4, 5, 6, 7"));
  CHECK_THROWS_WITH(u - w, Contains("different meshes") && Contains("3, 2, 1, 0"));
  CHECK_THROWS_WITH(tessera::sum(u) + tessera::sum(v), Contains("different meshes"));
  CHECK_NOTHROW(u + put<P<"X">>(tessera::make_mesh<"X">({4}), zeros<float, 1>({6})));
}

TEST_CASE("broadcasting a sharded size-1 dimension is an error", "[expr][errors][broadcast]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const one = put<P<"X", none>>(m, zeros<int, 2>({1, 4}));
  auto const full = put<P<>>(m, zeros<int, 2>({6, 4}));
  CHECK_THROWS_AS(one + full, std::invalid_argument);
  CHECK_THROWS_WITH(one + full, Contains("dimension 0") && Contains("(1, 4)") && Contains("has size 1 and broadcasts") &&
                                    Contains("replicate it"));
  CHECK_THROWS_WITH(full - one, Contains("has size 1 and broadcasts"));
  auto const col = put<P<none, "Y">>(m, zeros<int, 2>({6, 1}));
  CHECK_THROWS_WITH(full * col, Contains("dimension 1") && Contains("(6, 1)"));
  // Not an error when nothing broadcasts: size 1 against size 1 (one shard holds it, the others nothing).
  auto const other = put<P<>>(m, zeros<int, 2>({1, 4}));
  CHECK_NOTHROW(tessera::eval(one + other));
}

// ===========================================================================
// Regressions
// ===========================================================================

TEST_CASE("where() tests a non-bool condition for truth before converting it", "[expr][elementwise]") {
  // jnp.where(c, a, b) is a where c != 0 (NaN is true). The condition used to go through the
  // branches' type first, so a float32 condition of 0.5 with int32 branches was 0: false.
  tessera::runtime rt{2};
  auto m = tessera::make_mesh<"X">({2});
  float const nan = std::numeric_limits<float>::quiet_NaN();
  xt::xtensor<float, 1> const hc{0.5f, 0.f, -0.25f, nan};
  xt::xtensor<int, 1> const ha{1, 2, 3, 4}, hb{-1, -2, -3, -4};
  auto const c = put<P<"X">>(m, hc);
  auto const a = put<P<"X">>(m, ha);
  auto const b = put<P<"X">>(m, hb);
  expect(tessera::where(c, a, b), xt::xarray<double>{1, -2, 3, 4}, "where(float condition, int, int)");
  expect(tessera::where(c, 7, 9), xt::xarray<double>{7, 9, 7, 7}, "where(float condition, 7, 9)");
  xt::xtensor<int, 1> const hi{256, 0, -1, 512};
  xt::xtensor<std::uint8_t, 1> const hu{1, 2, 3, 4};
  auto const i = put<P<"X">>(m, hi);
  auto const u = put<P<"X">>(m, hu);
  expect(tessera::where(i, u, 0), xt::xarray<double>{1, 0, 3, 4}, "where(int condition 256, uint8, 0)");
  expect(tessera::where(0.5, a, b), xt::xarray<double>{1, 2, 3, 4}, "where(0.5, a, b)");
}

TEST_CASE("to_host takes an expression, as jax.device_get takes any computed array", "[expr]") {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 2> h = xt::zeros<float>({8, 6});
  for (std::size_t i = 0; i < h.size(); ++i) h.data()[i] = static_cast<float>(i % 13) * 0.5f - 2.0f;
  auto const a = tessera::device_put(h, tessera::named_sharding(mesh, P<"x", none>{}));
  // An element-wise expression, evaluated then gathered.
  xt::xtensor<float, 2> const want_ew = h * 2.0f + 1.0f;
  CHECK(tessera_test::same_array(tessera::to_host(a * 2.0f + 1.0f), want_ew));
  // A reduction over the sharded axis (partial sums over "x"), into an existing host array.
  xt::xtensor<float, 1> out;
  tessera::to_host(tessera::sum<0>(a), out);
  xt::xtensor<float, 1> const want_sum = xt::sum(h, {0});
  CHECK(tessera_test::same_array(out, want_sum));
  // A product contracting the sharded axis: summed before it is gathered.
  xt::xtensor<float, 2> const prod = tessera::to_host(tessera::matmul(tessera::transpose(a), a));
  REQUIRE(prod.shape()[0] == 6);
  REQUIRE(prod.shape()[1] == 6);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 6; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < 8; ++k) s += static_cast<double>(h(k, i)) * static_cast<double>(h(k, j));
      CHECK(prod(i, j) == Approx(s).margin(1e-4));
    }
}
