// Integer arithmetic wraps around (two's complement) as it does in JAX, and never through
// undefined behaviour: element-wise + - * and negation, the sum and prod reductions, the matmul
// partial sums and every collective that adds, for each integer dtype, on SIMD bodies and scalar
// tails (37 elements over 1 to 4 devices). Every expected value is computed here on the host
// through the unsigned type, independently of tessera. Built with -fsanitize=undefined, the test
// also proves that no signed overflow happens on the way. Last, NaN and infinities through
// psum, pmax, pmin and pmean in float and double, as XLA propagates them.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xadapt.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

namespace {

// ---------------------------------------------------------------------------
// Reference side: two's complement arithmetic through the unsigned type
// ---------------------------------------------------------------------------

/// The unsigned type T's arithmetic is done in: at least unsigned int, so that uint16 * uint16
/// does not promote to (overflowing) int.
template <class T>
using ref_unsigned_t =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <class T>
T ref_add(T a, T b) {
  using U = ref_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <class T>
T ref_sub(T a, T b) {
  using U = ref_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
}
template <class T>
T ref_mul(T a, T b) {
  using U = ref_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}
template <class T>
T ref_neg(T a) {
  using U = ref_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
}

/// n values of T drawn from all bit patterns, with the extremes (min, max, -1 or max, 0, 1) first
/// and last (the SIMD body and the scalar tail); odd values only when `odd` (products of them
/// never collapse to 0 modulo 2^bits).
template <class T>
std::vector<T> draw(std::size_t n, std::uint64_t seed, bool odd = false) {
  std::mt19937_64 g(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(g());
  T const extremes[] = {std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), static_cast<T>(-1), T(0), T(1)};
  for (std::size_t i = 0; i < std::size(extremes) && i < n; ++i) v[i] = v[n - 1 - i] = extremes[i];
  if (odd)
    for (auto& x : v) x = static_cast<T>(x | T(1));
  return v;
}

template <class T, std::size_t N>
xt::xtensor<T, N> host(std::vector<T> const& v, std::array<std::size_t, N> const& shape) {
  auto h = xt::xtensor<T, N>::from_shape(shape);
  std::copy(v.begin(), v.end(), h.begin());
  return h;
}

/// Element-wise equality (xtensor's == would clash with Catch's decomposer); names the first mismatch.
template <class A, class B>
std::string mismatch(A const& got, B const& want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
  auto g = got.begin();
  auto w = want.begin();
  for (std::size_t i = 0; g != got.end(); ++g, ++w, ++i) {
    bool const same = [&] {
      if constexpr (std::is_floating_point_v<std::decay_t<decltype(*w)>>)
        return (std::isnan(*g) && std::isnan(*w)) || *g == *w;
      else return *g == *w;
    }();
    if (!same) {
      std::ostringstream os;
      os << "element " << i << ": got " << +*g << ", expected " << +*w;
      return os.str();
    }
  }
  return "";
}

/// The element type of tessera's reduction of T (int8 sums are int32, as in jnp).
template <class Op, class T>
using reduced_t = typename tessera::detail::reduction_type<Op, T>::type;

/// The sum (or product) at result type V of h (rows x cols) over dimension `dim`, or over both when dim == 2.
template <class V, class T, class F>
std::vector<V> ref_reduce(xt::xtensor<T, 2> const& h, std::size_t dim, V identity, F f) {
  std::size_t const rows = h.shape()[0], cols = h.shape()[1];
  std::vector<V> out(dim == 2 ? 1 : dim == 0 ? cols : rows, identity);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      V& o = out[dim == 2 ? 0 : dim == 0 ? j : i];
      o = f(o, static_cast<V>(h(i, j)));
    }
  return out;
}

}  // namespace

#define TESSERA_INTEGER_TYPES std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t, std::uint16_t, \
                              std::uint32_t, std::uint64_t

// ---------------------------------------------------------------------------
// Element-wise arithmetic
// ---------------------------------------------------------------------------

TEMPLATE_TEST_CASE("element-wise + - * and negation wrap around as in JAX", "[wrap][expr]", TESSERA_INTEGER_TYPES) {
  using T = TestType;
  tessera::runtime rt{8};
  for (int n = 1; n <= 4; ++n) {
    auto const m = tessera::make_mesh<"x">({n});
    for (std::size_t len : {std::size_t{37}, std::size_t{64}}) {
      INFO(n << " devices, " << len << " elements of " << tessera::dtype_name<T>());
      auto const va = draw<T>(len, 11 * len + static_cast<std::size_t>(n));
      // At the start b pairs min with -1 and max with max (min * -1 and max + max wrap); at
      // the end, each extreme meets itself (min + min, max * max).
      auto vb = draw<T>(len, 13 * len + static_cast<std::size_t>(n));
      T const pairs[] = {static_cast<T>(-1), std::numeric_limits<T>::max(), std::numeric_limits<T>::min(), T(1), T(0)};
      std::copy(std::begin(pairs), std::end(pairs), vb.begin());
      auto const ha = host<T, 1>(va, {len});
      auto const hb = host<T, 1>(vb, {len});
      auto const a = tessera::device_put(ha, tessera::named_sharding(m, P<"x">{}));
      auto const b = tessera::device_put(hb, tessera::named_sharding(m, P<"x">{}));
      std::vector<T> sum(len), diff(len), prod(len), neg(len), mixed(len), absv(len), pw(len);
      auto he = xt::xtensor<T, 1>::from_shape({len});
      for (std::size_t i = 0; i < len; ++i) he(i) = static_cast<T>(i % 10);
      auto const e = tessera::device_put(he, tessera::named_sharding(m, P<"x">{}));
      for (std::size_t i = 0; i < len; ++i) {
        sum[i] = ref_add(va[i], vb[i]);
        diff[i] = ref_sub(va[i], vb[i]);
        prod[i] = ref_mul(va[i], vb[i]);
        neg[i] = ref_neg(va[i]);
        mixed[i] = ref_sub(ref_mul(ref_add(va[i], T(3)), vb[i]), ref_neg(vb[i]));
        absv[i] = std::is_signed_v<T> && va[i] < 0 ? ref_neg(va[i]) : va[i];
        pw[i] = T(1);
        for (std::size_t p = 0; p < i % 10; ++p) pw[i] = ref_mul(pw[i], va[i]);
      }
      static_assert(std::is_same_v<typename decltype(a + b)::value_type, T>);
      CHECK(mismatch(tessera::to_host(tessera::jit([](auto x, auto y) { return x + y; })(a, b)), sum) == "");
      CHECK(mismatch(tessera::to_host((a + b).evaluate()), sum) == "");
      CHECK(mismatch(tessera::to_host((a - b).evaluate()), diff) == "");
      CHECK(mismatch(tessera::to_host((a * b).evaluate()), prod) == "");
      CHECK(mismatch(tessera::to_host((-a).evaluate()), neg) == "");
      CHECK(mismatch(tessera::to_host(((a + 3) * b - (-b)).evaluate()), mixed) == "");
      // jnp.abs of the minimum is the minimum (its negation wraps to itself).
      CHECK(mismatch(tessera::to_host(tessera::abs(a).evaluate()), absv) == "");
      // jnp.power of integers: repeated products, wrapping around.
      CHECK(mismatch(tessera::to_host(tessera::pow(a, e).evaluate()), pw) == "");
    }
  }
}

// ---------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------

namespace {

template <class T, class Spec, class Mesh>
void check_sum_and_prod(Mesh const& m, std::uint64_t seed) {
  std::array<std::size_t, 2> const shape{6, 37};
  std::size_t const count = shape[0] * shape[1];
  auto const hs = host<T, 2>(draw<T>(count, seed), shape);
  auto const hp = host<T, 2>(draw<T>(count, seed + 1, true), shape);
  auto const xs = tessera::device_put(hs, tessera::named_sharding(m, Spec{}));
  auto const xp = tessera::device_put(hp, tessera::named_sharding(m, Spec{}));
  using S = reduced_t<tessera::op::sum, T>;
  using R = reduced_t<tessera::op::prod, T>;
  auto add = [](S a, S b) { return ref_add(a, b); };
  auto mul = [](R a, R b) { return ref_mul(a, b); };
  static_assert(std::is_same_v<typename decltype(tessera::sum<0>(xs))::value_type, S>);
  static_assert(std::is_same_v<typename decltype(tessera::prod<0>(xp))::value_type, R>);
  CHECK(mismatch(tessera::to_host(tessera::sum<0>(xs).evaluate()), ref_reduce<S>(hs, 0, S(0), add)) == "");
  CHECK(mismatch(tessera::to_host(tessera::sum<1>(xs).evaluate()), ref_reduce<S>(hs, 1, S(0), add)) == "");
  CHECK(mismatch(tessera::to_host(tessera::sum(xs).evaluate()), ref_reduce<S>(hs, 2, S(0), add)) == "");
  CHECK(mismatch(tessera::to_host(tessera::prod<0>(xp).evaluate()), ref_reduce<R>(hp, 0, R(1), mul)) == "");
  CHECK(mismatch(tessera::to_host(tessera::prod<1>(xp).evaluate()), ref_reduce<R>(hp, 1, R(1), mul)) == "");
  CHECK(mismatch(tessera::to_host(tessera::prod(xp).evaluate()), ref_reduce<R>(hp, 2, R(1), mul)) == "");
  // Two partial sums added before they are summed over the mesh.
  std::vector<S> twice = ref_reduce<S>(hs, 0, S(0), add);
  for (auto& v : twice) v = ref_add(v, v);
  CHECK(mismatch(tessera::to_host((tessera::sum<0>(xs) + tessera::sum<0>(xs)).evaluate()), twice) == "");
  // A reduction of an expression: -x is negated in T (uint8 wraps at 8 bits), then summed at the wider S.
  xt::xtensor<T, 2> hn = hs;
  for (auto& v : hn) v = ref_neg(v);
  CHECK(mismatch(tessera::to_host(tessera::sum<1>(-xs).evaluate()), ref_reduce<S>(hn, 1, S(0), add)) == "");
  // jnp.mean of integers is floating: computed without wrapping.
  using F = reduced_t<tessera::op::mean, T>;
  auto const mean = tessera::to_host(tessera::mean<1>(xs).evaluate());
  for (std::size_t i = 0; i < shape[0]; ++i) {
    double want = 0, scale = 0;
    for (std::size_t j = 0; j < shape[1]; ++j) {
      want += static_cast<double>(hs(i, j));
      scale += std::abs(static_cast<double>(hs(i, j)));
    }
    want /= static_cast<double>(shape[1]);
    double const tol = (std::is_same_v<F, float> ? 1e-5 : 1e-13) * scale;
    INFO("mean of row " << i);
    CHECK(std::abs(static_cast<double>(mean(i)) - want) <= tol);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("sum and prod wrap around at their result type over sharded and unsharded axes", "[wrap][reduction]",
                   TESSERA_INTEGER_TYPES) {
  using T = TestType;
  tessera::runtime rt{8};
  for (int n = 1; n <= 4; ++n) {
    INFO(n << " devices, " << tessera::dtype_name<T>());
    auto const m = tessera::make_mesh<"x">({n});
    check_sum_and_prod<T, P<"x">>(m, 100 + static_cast<std::uint64_t>(n));
    check_sum_and_prod<T, P<none, "x">>(m, 200 + static_cast<std::uint64_t>(n));
    check_sum_and_prod<T, P<>>(m, 300 + static_cast<std::uint64_t>(n));
  }
  auto const m2 = tessera::make_mesh<"x", "y">({2, 2});
  check_sum_and_prod<T, P<"x", "y">>(m2, 400);
}

TEMPLATE_TEST_CASE("matmul partial sums over a sharded contracting dimension wrap around", "[wrap][matmul]",
                   TESSERA_INTEGER_TYPES) {
  using T = TestType;
  tessera::runtime rt{8};
  for (int n = 1; n <= 4; ++n) {
    INFO(n << " devices, " << tessera::dtype_name<T>());
    auto const m = tessera::make_mesh<"x">({n});
    std::size_t const M = 3, K = 8, N = 37;
    auto const va = draw<T>(M * K, 500 + static_cast<std::uint64_t>(n));
    auto const vb = draw<T>(K * N, 600 + static_cast<std::uint64_t>(n));
    auto const ha = host<T, 2>(va, {M, K});
    auto const hb = host<T, 2>(vb, {K, N});
    auto const a = tessera::device_put(ha, tessera::named_sharding(m, P<none, "x">{}));
    auto const b = tessera::device_put(hb, tessera::named_sharding(m, P<"x">{}));
    std::vector<T> want(M * N, T(0));
    for (std::size_t i = 0; i < M; ++i)
      for (std::size_t j = 0; j < N; ++j)
        for (std::size_t k = 0; k < K; ++k) want[i * N + j] = ref_add(want[i * N + j], ref_mul(ha(i, k), hb(k, j)));
    CHECK(mismatch(tessera::to_host(tessera::matmul(a, b).evaluate()), want) == "");
  }
}

// ---------------------------------------------------------------------------
// Collectives in shard_map bodies
// ---------------------------------------------------------------------------

namespace {

/// Every collective over "x" on a mesh of k devices, device d's input being row d of `h` (k rows).
template <class T, class Mesh>
void check_collectives(Mesh const& m, std::size_t k, std::size_t len, std::uint64_t seed) {
  auto const v = draw<T>(k * len, seed);
  auto const h = host<T, 2>(v, {k, len});
  auto const rows = P<"x">{};
  // psum, pmax, pmin: every device gets the reduction of every row.
  std::vector<T> sum(len), mx(len), mn(len);
  for (std::size_t i = 0; i < len; ++i) {
    sum[i] = h(0, i);
    mx[i] = h(0, i);
    mn[i] = h(0, i);
    for (std::size_t d = 1; d < k; ++d) {
      sum[i] = ref_add(sum[i], h(d, i));
      mx[i] = std::max(mx[i], h(d, i));
      mn[i] = std::min(mn[i], h(d, i));
    }
  }
  auto row = [](auto blk) { return xt::xtensor<T, 1>(xt::view(blk, 0)); };
  auto psum = tessera::shard_map([&](auto blk) { return tessera::psum<"x">(row(blk)); }, m, tessera::in_specs(rows),
                                 tessera::out_specs(P<>{}));
  CHECK(mismatch(tessera::to_host(psum(h)), sum) == "");
  auto pmax = tessera::shard_map([&](auto blk) { return tessera::pmax<"x">(row(blk)); }, m, tessera::in_specs(rows),
                                 tessera::out_specs(P<>{}));
  CHECK(mismatch(tessera::to_host(pmax(h)), mx) == "");
  auto pmin = tessera::shard_map([&](auto blk) { return tessera::pmin<"x">(row(blk)); }, m, tessera::in_specs(rows),
                                 tessera::out_specs(P<>{}));
  CHECK(mismatch(tessera::to_host(pmin(h)), mn) == "");
  // psum of a number (a local_scalar).
  auto psum0 = tessera::shard_map([](auto blk) { return tessera::psum<"x">(static_cast<T>(blk(0, 0))); }, m,
                                  tessera::in_specs(rows), tessera::out_specs(P<>{}));
  CHECK(tessera::to_host(psum0(h))() == sum[0]);
  // pmean of integers is floating (float, double for 64 bits), summed without wrapping.
  auto pmean = tessera::shard_map([&](auto blk) { return tessera::pmean<"x">(row(blk)); }, m, tessera::in_specs(rows),
                                  tessera::out_specs(P<>{}));
  auto const means = tessera::to_host(pmean(h));
  using F = typename decltype(means)::value_type;
  static_assert(std::is_same_v<F, std::conditional_t<(sizeof(T) > 4), double, float>>);
  for (std::size_t i = 0; i < len; ++i) {
    double want = 0, scale = 0;
    for (std::size_t d = 0; d < k; ++d) {
      want += static_cast<double>(h(d, i));
      scale += std::abs(static_cast<double>(h(d, i)));
    }
    want /= static_cast<double>(k);
    INFO("pmean element " << i);
    CHECK(std::abs(static_cast<double>(means(i)) - want) <= (std::is_same_v<F, float> ? 1e-6 : 1e-14) * scale);
  }
  // psum_scatter: device r gets the sum over devices of their r-th chunk of `len` elements.
  auto const hs = host<T, 2>(draw<T>(k * k * len, seed + 1), {k * k, len});
  std::vector<T> scattered(k * len);
  for (std::size_t r = 0; r < k; ++r)
    for (std::size_t i = 0; i < len; ++i) {
      T s = hs(r, i);
      for (std::size_t d = 1; d < k; ++d) s = ref_add(s, hs(d * k + r, i));
      scattered[r * len + i] = s;
    }
  auto scatter = tessera::shard_map([](auto blk) { return tessera::psum_scatter<"x">(xt::xtensor<T, 2>(blk), 0); }, m,
                                    tessera::in_specs(rows), tessera::out_specs(P<"x">{}));
  CHECK(mismatch(tessera::to_host(scatter(hs)), scattered) == "");
  auto scatter_t = tessera::shard_map(
      [](auto blk) { return tessera::psum_scatter<"x">(xt::xtensor<T, 2>(blk), 0, tessera::tiled); }, m,
      tessera::in_specs(rows), tessera::out_specs(P<"x">{}));
  CHECK(mismatch(tessera::to_host(scatter_t(hs)), scattered) == "");
  // all_gather: every device gets every row, extremes included.
  auto gather = tessera::shard_map([&](auto blk) { return tessera::all_gather<"x">(row(blk), 0); }, m,
                                   tessera::in_specs(rows), tessera::out_specs(P<>{}));
  CHECK(mismatch(tessera::to_host(gather(h)), v) == "");
  // all_to_all: device r's row d is device d's row r.
  std::vector<T> swapped(k * k * len);
  for (std::size_t r = 0; r < k; ++r)
    for (std::size_t d = 0; d < k; ++d)
      for (std::size_t i = 0; i < len; ++i) swapped[(r * k + d) * len + i] = hs(d * k + r, i);
  auto a2a = tessera::shard_map([](auto blk) { return tessera::all_to_all<"x">(xt::xtensor<T, 2>(blk), 0, 0, tessera::tiled); },
                                m, tessera::in_specs(rows), tessera::out_specs(P<"x">{}));
  CHECK(mismatch(tessera::to_host(a2a(hs)), swapped) == "");
  // ppermute: a ring shift, device d + 1 receiving device d's row.
  std::vector<std::pair<int, int>> ring;
  for (std::size_t d = 0; d < k; ++d) ring.emplace_back(static_cast<int>(d), static_cast<int>((d + 1) % k));
  std::vector<T> shifted(k * len);
  for (std::size_t d = 0; d < k; ++d)
    for (std::size_t i = 0; i < len; ++i) shifted[((d + 1) % k) * len + i] = h(d, i);
  auto permute = tessera::shard_map([&](auto blk) { return tessera::ppermute<"x">(row(blk), ring); }, m,
                                    tessera::in_specs(rows), tessera::out_specs(P<"x">{}));
  CHECK(mismatch(tessera::to_host(permute(h)), shifted) == "");
}

}  // namespace

TEMPLATE_TEST_CASE("every collective in a shard_map body wraps around as in JAX", "[wrap][shard_map]",
                   TESSERA_INTEGER_TYPES) {
  using T = TestType;
  tessera::runtime rt{8};
  for (int n = 1; n <= 4; ++n) {
    auto const m = tessera::make_mesh<"x">({n});
    auto const k = static_cast<std::size_t>(n);
    // 37 elements: SIMD body and scalar tail; the large row passes the 32 KiB at which an
    // all-reduce splits into a reduce-scatter and an all-gather.
    for (std::size_t len : {std::size_t{37}, 33 * 1024 / sizeof(T) + 3}) {
      INFO(n << " devices, rows of " << len << " " << tessera::dtype_name<T>());
      check_collectives<T>(m, k, len, 700 + 10 * k + len);
    }
  }
}

// ---------------------------------------------------------------------------
// NaN and infinities through the floating reductions
// ---------------------------------------------------------------------------

TEMPLATE_TEST_CASE("psum pmax pmin and pmean propagate NaN and +Inf + -Inf is NaN", "[wrap][shard_map][nan]", float,
                   double) {
  using T = TestType;
  tessera::runtime rt{8};
  T const nan = std::numeric_limits<T>::quiet_NaN();
  T const inf = std::numeric_limits<T>::infinity();
  for (int n = 2; n <= 4; ++n) {
    auto const m = tessera::make_mesh<"x">({n});
    auto const k = static_cast<std::size_t>(n);
    std::size_t const len = 37;
    auto h = xt::xtensor<T, 2>::from_shape({k, len});
    for (std::size_t d = 0; d < k; ++d)
      for (std::size_t i = 0; i < len; ++i) h(d, i) = static_cast<T>(1.5 * static_cast<double>(i) - static_cast<double>(d));
    // NaN on the first device, on the last, and in the scalar tail; infinities of both signs.
    h(0, 0) = nan;
    h(k - 1, 1) = nan;
    h(0, 2) = inf;
    h(1, 2) = -inf;
    h(0, 3) = inf;
    h(1, 3) = inf;
    h(k - 1, 4) = -inf;
    h(1, 5) = nan;
    h(0, 5) = inf;
    h(k - 1, 36) = nan;
    h(0, 35) = -inf;
    h(1, 35) = nan;
    std::vector<T> sum(len), mx(len), mn(len), mean(len);
    for (std::size_t i = 0; i < len; ++i) {
      T s = h(0, i);
      bool any_nan = std::isnan(h(0, i));
      T hi = h(0, i), lo = h(0, i);
      for (std::size_t d = 1; d < k; ++d) {
        s += h(d, i);
        any_nan = any_nan || std::isnan(h(d, i));
        hi = std::max(hi, h(d, i));
        lo = std::min(lo, h(d, i));
      }
      sum[i] = s;
      mx[i] = any_nan ? nan : hi;
      mn[i] = any_nan ? nan : lo;
      mean[i] = s / static_cast<T>(k);
    }
    // The references spell out IEEE's rules on the cells set above.
    CHECK(std::isnan(sum[0]));
    CHECK(std::isnan(sum[2]));
    CHECK(sum[3] == inf);
    CHECK(std::isnan(mx[5]));
    CHECK(std::isnan(mn[35]));
    INFO(n << " devices");
    auto row = [](auto blk) { return xt::xtensor<T, 1>(xt::view(blk, 0)); };
    auto const in = tessera::in_specs(P<"x">{});
    auto const out = tessera::out_specs(P<>{});
    CHECK(mismatch(tessera::to_host(tessera::shard_map([&](auto b) { return tessera::psum<"x">(row(b)); }, m, in, out)(h)), sum) == "");
    CHECK(mismatch(tessera::to_host(tessera::shard_map([&](auto b) { return tessera::pmax<"x">(row(b)); }, m, in, out)(h)), mx) == "");
    CHECK(mismatch(tessera::to_host(tessera::shard_map([&](auto b) { return tessera::pmin<"x">(row(b)); }, m, in, out)(h)), mn) == "");
    CHECK(mismatch(tessera::to_host(tessera::shard_map([&](auto b) { return tessera::pmean<"x">(row(b)); }, m, in, out)(h)), mean) == "");
  }
}
