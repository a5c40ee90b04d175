// tessera::random against JAX itself: tests/golden/random.json was written by JAX 0.12 on 8 CPU
// devices (tools/jax_reference/gen_random.py), floats as their bit patterns. Keys, split and
// fold_in, bits, uniform, bernoulli, randint, normal and truncated_normal must match bit for bit
// (normal's erf_inv and truncated_normal's erf are XLA's own, random/erf_inv.hpp). Then: the same numbers under every sharding of random meshes, more than 2^32 elements
// at sampled indices, no collective, per-device keys in shard_map, and errors that name values.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "support.hpp"
#include "tessera/tessera.hpp"

namespace rnd = tessera::random;
using Catch::Matchers::Contains;
using tessera::axes;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera::runtime;
using tessera::shape_t;
using json = nlohmann::json;

namespace {

json const& golden() {
  static json const g = [] {
    std::ifstream in(TESSERA_GOLDEN_DIR "/random.json");
    REQUIRE(in.good());
    return json::parse(in);
  }();
  return g;
}

rnd::prng_key key_of(json const& j) { return rnd::wrap_key_data({j[0].get<std::uint32_t>(), j[1].get<std::uint32_t>()}); }

/// The element's bits, as the golden file stores them (bool as 0/1, ints as their values).
template <class T>
std::uint64_t bits_of(T v) {
  if constexpr (std::is_same_v<T, float>) return std::bit_cast<std::uint32_t>(v);
  else if constexpr (std::is_same_v<T, double>) return std::bit_cast<std::uint64_t>(v);
  else return static_cast<std::uint64_t>(v);
}

/// Distance in ulps between two finite floats of one sign convention (0 when equal).
template <class F>
std::uint64_t ulps(F a, F b) {
  using I = std::conditional_t<sizeof(F) == 8, std::int64_t, std::int32_t>;
  auto ordered = [](F x) {
    I i = std::bit_cast<I>(x);
    return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i : static_cast<std::int64_t>(i);
  };
  std::int64_t const d = ordered(a) - ordered(b);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

/// Compares host values with a golden case: exactly for `max_ulps` 0, else within that many ulps;
/// returns the largest distance seen.
template <class T, std::size_t N>
std::uint64_t check_values(xt::xtensor<T, N> const& got, json const& c, std::uint64_t max_ulps = 0) {
  auto const& want = c["values"];
  REQUIRE(got.size() == want.size());
  std::uint64_t worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
      T const w = std::bit_cast<T>(static_cast<U>(want[i].get<std::uint64_t>()));
      std::uint64_t const d = ulps(got.data()[i], w);
      worst = std::max(worst, d);
      if (d > max_ulps) {
        INFO("element " << i << " of " << c["shape"].dump() << ": tessera " << got.data()[i] << ", JAX " << w << " ("
                        << d << " ulps)");
        CHECK(d <= max_ulps);
        return worst;
      }
    } else {
      if (bits_of(got.data()[i]) != want[i].get<std::uint64_t>()) {
        INFO("element " << i << " of " << c["shape"].dump() << ": tessera " << +got.data()[i] << ", JAX "
                        << want[i].dump());
        CHECK(bits_of(got.data()[i]) == want[i].get<std::uint64_t>());
        return worst;
      }
    }
  }
  return worst;
}

/// Calls f(shape_t<N>) with the case's shape at its rank (0 to 3).
template <class F>
void with_shape(json const& c, F&& f) {
  auto const& s = c["shape"];
  auto dim = [&](std::size_t i) { return s[i].get<std::size_t>(); };
  switch (s.size()) {
    case 0: f(shape_t<0>{}); break;
    case 1: f(shape_t<1>{dim(0)}); break;
    case 2: f(shape_t<2>{dim(0), dim(1)}); break;
    case 3: f(shape_t<3>{dim(0), dim(1), dim(2)}); break;
    default: FAIL("golden shape of rank " << s.size());
  }
}

/// The sharded array holds the host array, to_host and every shard, bit for bit.
template <class A, class T, std::size_t N>
void check_sharded(A const& a, xt::xtensor<T, N> const& host) {
  auto const back = tessera::to_host(a);
  REQUIRE(back.shape() == host.shape());
  CHECK(std::equal(back.begin(), back.end(), host.begin(), [](T x, T y) { return bits_of(x) == bits_of(y); }));
  for (auto const& sh : a.addressable_shards()) {
    std::size_t k = 0;
    bool ok = true;
    auto const& blk = sh.data;
    // Walk the block in row-major order next to the host array's slice.
    std::array<std::size_t, N> at{};
    std::size_t const count = blk.size();
    for (std::size_t e = 0; e < count; ++e, ++k) {
      std::array<std::size_t, N> g{};
      for (std::size_t d = 0; d < N; ++d) g[d] = sh.index[d].start + at[d];
      if (bits_of(blk.data()[e]) != bits_of(host[g])) ok = false;
      for (std::size_t d = N; d-- > 0;) {
        if (++at[d] < sh.index[d].size()) break;
        at[d] = 0;
      }
    }
    INFO("device " << sh.device);
    CHECK(ok);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// The cipher and the keys
// ---------------------------------------------------------------------------

TEST_CASE("threefry2x32 known answers (Salmon et al. 2011, JAX's random_test)", "[random]") {
  using rnd::detail::threefry2x32;
  using rnd::detail::word_pair;
  STATIC_REQUIRE(threefry2x32({0, 0}, {0, 0}) == word_pair{0x6b200159u, 0x99ba4efeu});
  STATIC_REQUIRE(threefry2x32({~0u, ~0u}, {~0u, ~0u}) == word_pair{0x1cb996fcu, 0xbb002be7u});
  STATIC_REQUIRE(threefry2x32({0x13198a2eu, 0x03707344u}, {0x243f6a88u, 0x85a308d3u}) ==
                 word_pair{0xc4923a9cu, 0x483df7a0u});
  // The vectorised runs equal the scalar cipher, across the 2^32 carry into the high word.
  for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{4294967290u}, std::uint64_t{1} << 40}) {
    std::uint32_t a[37], b[37];
    rnd::detail::threefry_run({7, 9}, first, 37, a, b);
    for (std::size_t i = 0; i < 37; ++i) {
      auto const c = first + i;
      auto const r = threefry2x32({7, 9}, {static_cast<std::uint32_t>(c >> 32), static_cast<std::uint32_t>(c)});
      CHECK(a[i] == r.w0);
      CHECK(b[i] == r.w1);
    }
  }
}

TEST_CASE("key(seed) as JAX makes it, without and with x64", "[random][golden]") {
  auto const& seeds = golden()["seeds"];
  REQUIRE(seeds.size() >= 10);
  for (auto const& c : seeds) {
    auto const seed = static_cast<std::int64_t>(std::stoll(c["seed"].get<std::string>()));
    INFO("seed " << seed);
    CHECK(rnd::key(seed) == key_of(c["x32"]));
    CHECK(rnd::PRNGKey(seed) == key_of(c["x32"]));
    CHECK(rnd::key(seed, rnd::x64) == key_of(c["x64"]));
  }
  constexpr auto k = rnd::key(1701);
  STATIC_REQUIRE(rnd::key_data(k) == std::array<std::uint32_t, 2>{0, 1701});
  STATIC_REQUIRE(rnd::wrap_key_data(rnd::key_data(k)) == k);
  std::ostringstream os;
  os << rnd::key(42);
  CHECK(os.str() == "key<fry>[0 42]");
}

TEST_CASE("split and fold_in as JAX does them", "[random][golden]") {
  std::size_t n = 0;
  for (auto const& c : golden()["split"]) {
    auto const k = key_of(c["key"]);
    auto const keys = rnd::split(k, c["n"].get<std::size_t>());
    REQUIRE(keys.size() == c["keys"].size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      CHECK(keys[i] == key_of(c["keys"][i]));
      CHECK(rnd::fold_in(k, static_cast<std::uint32_t>(i)) == keys[i]);  // JAX's split/fold_in symmetry
    }
    if (keys.size() == 2) {
      auto const [a, b] = rnd::split(k);
      CHECK(a == keys[0]);
      CHECK(b == keys[1]);
    }
    ++n;
  }
  for (auto const& c : golden()["fold_in"]) {
    auto const data = c["data"].get<std::uint64_t>();
    CHECK(rnd::fold_in(key_of(c["key"]), static_cast<std::uint32_t>(data)) == key_of(c["key_out"]));
    CHECK(rnd::fold_in(key_of(c["key"]), static_cast<long long>(data)) == key_of(c["key_out"]));
    ++n;
  }
  CHECK(n >= 40);
  REQUIRE_THROWS_WITH(rnd::fold_in(rnd::key(0), -1), Contains("fold_in: data -1 does not fit in uint32"));
  REQUIRE_THROWS_WITH(rnd::fold_in(rnd::key(0), 1LL << 32), Contains("data 4294967296 does not fit in uint32"));
}

// ---------------------------------------------------------------------------
// The samplers on the host, against JAX
// ---------------------------------------------------------------------------

TEST_CASE("bits of every width match JAX", "[random][golden]") {
  std::size_t n = 0;
  for (auto const& c : golden()["bits"]) {
    auto const k = key_of(c["key"]);
    auto const dt = c["dtype"].get<std::string>();
    with_shape(c, [&](auto shape) {
      if (dt == "uint8") check_values(rnd::bits<std::uint8_t>(k, shape), c);
      else if (dt == "uint16") check_values(rnd::bits<std::uint16_t>(k, shape), c);
      else if (dt == "uint32") check_values(rnd::bits<std::uint32_t>(k, shape), c);
      else check_values(rnd::bits<std::uint64_t>(k, shape), c);
    });
    ++n;
  }
  CHECK(n >= 200);
}

TEST_CASE("uniform in float32 and float64 matches JAX bit for bit", "[random][golden]") {
  std::size_t n = 0;
  for (auto const& c : golden()["uniform"]) {
    auto const k = key_of(c["key"]);
    double const lo = c["minval"], hi = c["maxval"];
    with_shape(c, [&](auto shape) {
      if (c["dtype"] == "float32") check_values(rnd::uniform<float>(k, shape, float(lo), float(hi)), c);
      else check_values(rnd::uniform<double>(k, shape, lo, hi), c);
    });
    ++n;
  }
  CHECK(n >= 300);
}

TEST_CASE("normal and truncated_normal match JAX bit for bit", "[random][golden]") {
  // erf_inv's log1p and log are XLA's (expr/xla_log.hpp), and every fused multiply-add is where
  // XLA's is: the bits are JAX's in float32 and float64 (before, up to 3 ulps from the C library's log).
  std::uint64_t worst32 = 0, worst64 = 0, total = 0;
  for (auto const& c : golden()["normal"]) {
    auto const k = key_of(c["key"]);
    with_shape(c, [&](auto shape) {
      if (c["dtype"] == "float32") {
        auto const v = rnd::normal<float>(k, shape);
        worst32 = std::max(worst32, check_values(v, c, 0));
      } else {
        auto const v = rnd::normal<double>(k, shape);
        worst64 = std::max(worst64, check_values(v, c, 0));
      }
    });
    ++total;
  }
  std::uint64_t tworst32 = 0, tworst64 = 0;
  for (auto const& c : golden()["truncated_normal"]) {
    auto const k = key_of(c["key"]);
    double const lo = c["lower"], hi = c["upper"];
    with_shape(c, [&](auto shape) {
      if (c["dtype"] == "float32")
        tworst32 = std::max(tworst32, check_values(rnd::truncated_normal<float>(k, float(lo), float(hi), shape), c, 0));
      else
        tworst64 = std::max(tworst64, check_values(rnd::truncated_normal<double>(k, lo, hi, shape), c, 0));
    });
    ++total;
  }
  INFO("largest distance from JAX in ulps: normal float32 " << worst32 << ", float64 " << worst64
                                                            << "; truncated_normal float32 " << tworst32
                                                            << ", float64 " << tworst64 << " (" << total << " cases)");
  CHECK(worst32 == 0);
  CHECK(worst64 == 0);
  CHECK(tworst32 == 0);
  CHECK(tworst64 == 0);
  CHECK(total >= 400);
}

TEST_CASE("lax.erf in float32 and lax.erf_inv bit for bit", "[random][golden]") {
  auto const& e = golden()["erf"];
  std::size_t erf_diff = 0, tail_diff = 0;
  for (std::size_t i = 0; i < e["x"].size(); ++i) {
    float const x = std::bit_cast<float>(e["x"][i].get<std::uint32_t>());
    float const want = std::bit_cast<float>(e["float32"][i].get<std::uint32_t>());
    auto const d = ulps(rnd::detail::xla_erf(x), want);
    // Past |x| = 3.8 erf is 1 to within 2 ulps, and JAX sometimes rounds to 1 where we do not.
    if (std::fabs(x) < 3.8f) erf_diff += d != 0;
    else tail_diff += d > 2;
  }
  CHECK(e["x"].size() == 4001);
  CHECK(erf_diff == 0);
  CHECK(tail_diff == 0);
  auto const& v = golden()["erf_inv"];
  std::uint64_t worst32 = 0, worst64 = 0, exact32 = 0, exact64 = 0;
  for (std::size_t i = 0; i < v["x32"].size(); ++i) {
    float const x = std::bit_cast<float>(v["x32"][i].get<std::uint32_t>());
    float const want = std::bit_cast<float>(v["float32"][i].get<std::uint32_t>());
    auto const d = ulps(rnd::detail::erf_inv(x), want);
    worst32 = std::max(worst32, d);
    exact32 += d == 0;
    double const x64 = std::bit_cast<double>(v["x64"][i].get<std::uint64_t>());
    double const want64 = std::bit_cast<double>(v["float64"][i].get<std::uint64_t>());
    auto const d64 = ulps(rnd::detail::erf_inv(x64), want64);
    worst64 = std::max(worst64, d64);
    exact64 += d64 == 0;
  }
  INFO("erf_inv: " << exact32 << " of 4001 float32 and " << exact64 << " of 4001 float64 points exact; at most "
                   << worst32 << " and " << worst64 << " ulps");
  CHECK(worst32 == 0);
  CHECK(worst64 == 0);
}

TEST_CASE("bernoulli and randint match JAX", "[random][golden]") {
  std::size_t n = 0;
  for (auto const& c : golden()["bernoulli"]) {
    auto const k = key_of(c["key"]);
    float const p = c["p"].get<float>();
    with_shape(c, [&](auto shape) { check_values(rnd::bernoulli(k, p, shape), c); });
    ++n;
  }
  for (auto const& c : golden()["randint"]) {
    auto const k = key_of(c["key"]);
    auto const dt = c["dtype"].get<std::string>();
    long long const lo = c["minval"].get<long long>(), hi = c["maxval"].get<long long>();
    INFO(dt << " [" << lo << ", " << hi << ")");
    with_shape(c, [&](auto shape) {
      if (dt == "int32") check_values(rnd::randint<std::int32_t>(k, shape, lo, hi), c);
      else if (dt == "uint32") check_values(rnd::randint<std::uint32_t>(k, shape, lo, hi), c);
      else if (dt == "int64") check_values(rnd::randint<std::int64_t>(k, shape, lo, hi), c);
      else if (dt == "uint64") check_values(rnd::randint<std::uint64_t>(k, shape, lo, hi), c);
      else if (dt == "uint8") check_values(rnd::randint<std::uint8_t>(k, shape, lo, hi), c);
      else if (dt == "int8") check_values(rnd::randint<std::int8_t>(k, shape, lo, hi), c);
      else if (dt == "int16") check_values(rnd::randint<std::int16_t>(k, shape, lo, hi), c);
      else FAIL("dtype " << dt);
    });
    ++n;
  }
  CHECK(n >= 300);
}

TEST_CASE("more than 2^32 elements: the 64-bit counters at sampled indices", "[random][golden]") {
  for (auto const& c : golden()["bits_at"]) {
    auto const k = key_of(c["key"]);
    for (std::size_t i = 0; i < c["index"].size(); ++i) {
      auto const at = c["index"][i].get<std::uint64_t>();
      // The block a device would hold: one element of a 1-D array of 2^41 elements, and the
      // same element of a 2-D array of 2^20 x 2^21 (row-major index at).
      std::uint32_t u32 = 0;
      std::uint64_t u64 = 0;
      rnd::detail::fill_block(std::array{k}, shape_t<1>{std::size_t{1} << 41}, std::array{tessera::slice{at, at + 1}},
                              &u32, rnd::detail::bits_kernel<std::uint32_t>{});
      rnd::detail::fill_block(std::array{k}, shape_t<2>{std::size_t{1} << 20, std::size_t{1} << 21},
                              std::array{tessera::slice{at >> 21, (at >> 21) + 1},
                                         tessera::slice{at & ((1u << 21) - 1), (at & ((1u << 21) - 1)) + 1}},
                              &u64, rnd::detail::bits_kernel<std::uint64_t>{});
      INFO("index " << at);
      CHECK(u32 == c["uint32"][i].get<std::uint32_t>());
      CHECK(u64 == c["uint64"][i].get<std::uint64_t>());
    }
  }
}

// ---------------------------------------------------------------------------
// Sharded: the same numbers under every sharding, made where the blocks live
// ---------------------------------------------------------------------------

TEST_CASE("every sampler on a 4x2 mesh equals the host array, shard by shard", "[random][sharded]") {
  runtime rt{8};
  auto const mesh = tessera::make_mesh<"a", "b">({4, 2});
  auto const k = rnd::key(1701);
  named_sharding const s2(mesh, P<"a", "b">{});
  named_sharding const s1(mesh, P<axes<"b", "a">>{});
  check_sharded(rnd::bits<std::uint8_t>(k, {13, 7}, s2), rnd::bits<std::uint8_t>(k, {13, 7}));
  check_sharded(rnd::bits<std::uint64_t>(k, {1031}, s1), rnd::bits<std::uint64_t>(k, {1031}));
  check_sharded(rnd::uniform(k, {9, 5}, s2), rnd::uniform(k, {9, 5}));
  check_sharded(rnd::uniform<double>(k, {9, 5}, -2.0, 3.0, s2), rnd::uniform<double>(k, {9, 5}, -2.0, 3.0));
  check_sharded(rnd::normal(k, {1031}, s1), rnd::normal(k, {1031}));
  check_sharded(rnd::normal<double>(k, {6, 6}, s2), rnd::normal<double>(k, {6, 6}));
  check_sharded(rnd::truncated_normal(k, -1.0f, 2.0f, {17}, s1), rnd::truncated_normal(k, -1.0f, 2.0f, {17}));
  check_sharded(rnd::bernoulli(k, 0.25f, {10, 3}, s2), rnd::bernoulli(k, 0.25f, {10, 3}));
  check_sharded(rnd::randint(k, {11, 4}, -7, 99, s2), rnd::randint(k, {11, 4}, -7, 99));
  check_sharded(rnd::randint<std::uint8_t>(k, {33}, 0, 256, s1), rnd::randint<std::uint8_t>(k, {33}, 0, 256));
  // JAX's own sharded values (its out_sharding agrees with its unsharded ones: the generator checks it).
  auto const& c = golden()["normal"][3];
  with_shape(c, [&](auto shape) {
    if constexpr (std::tuple_size_v<decltype(shape)> == 1) check_values(tessera::to_host(rnd::normal(key_of(c["key"]), shape, s1)), c, 0);
  });
}

TEST_CASE("sharding invariance: random meshes of 1 to 8 devices, 1 to 3 axes, uneven shapes", "[random][sharded]") {
  runtime rt{8};
  std::mt19937 gen(20261124);
  auto pick = [&](std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(gen); };
  auto order = [&](int n) {
    std::vector<int> ids(8);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), gen);
    ids.resize(static_cast<std::size_t>(n));
    return ids;
  };
  constexpr std::size_t dims[] = {0, 1, 2, 3, 5, 7, 8, 13};
  auto dim = [&] { return dims[pick(0, 7)]; };
  int cases = 0;
  for (int round = 0; round < 40; ++round) {
    auto const k = rnd::fold_in(rnd::key(7), round);
    {  // one axis
      int const n = static_cast<int>(pick(1, 8));
      auto const m = tessera::make_mesh<"x">({n}, order(n));
      shape_t<2> const sh{dim(), dim()};
      check_sharded(rnd::normal(k, sh, named_sharding(m, P<"x", none>{})), rnd::normal(k, sh));
      check_sharded(rnd::bits(k, sh, named_sharding(m, P<none, "x">{})), rnd::bits(k, sh));
      shape_t<1> const row{dim()};
      check_sharded(rnd::randint(k, row, -3, 40, named_sharding(m, P<"x">{})), rnd::randint(k, row, -3, 40));
      cases += 3;
    }
    {  // two axes
      int const a = static_cast<int>(pick(1, 4)), b = static_cast<int>(pick(1, 8 / a));
      auto const m = tessera::make_mesh<"x", "y">({a, b}, order(a * b));
      shape_t<3> const sh{dim(), dim(), dim()};
      check_sharded(rnd::uniform(k, sh, named_sharding(m, P<"y", none, "x">{})), rnd::uniform(k, sh));
      check_sharded(rnd::bernoulli(k, 0.5f, sh, named_sharding(m, P<axes<"x", "y">>{})), rnd::bernoulli(k, 0.5f, sh));
      check_sharded(rnd::bits<std::uint16_t>(k, sh, named_sharding(m, P<>{})), rnd::bits<std::uint16_t>(k, sh));
      cases += 3;
    }
    {  // three axes
      int const a = static_cast<int>(pick(1, 2)), b = static_cast<int>(pick(1, 2)), c = static_cast<int>(pick(1, 2));
      auto const m = tessera::make_mesh<"x", "y", "z">({a, b, c}, order(a * b * c));
      shape_t<2> const sh{dim(), dim()};
      check_sharded(rnd::normal<double>(k, sh, named_sharding(m, P<axes<"z", "x">, "y">{})), rnd::normal<double>(k, sh));
      check_sharded(rnd::truncated_normal(k, -0.5f, 0.5f, sh, named_sharding(m, P<none, axes<"x", "y", "z">>{})),
                    rnd::truncated_normal(k, -0.5f, 0.5f, sh));
      cases += 2;
    }
  }
  CHECK(cases == 320);
}

TEST_CASE("random numbers run no collective, and per-device keys work in shard_map", "[random][sharded]") {
  runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  auto const k = rnd::key(42);
  {
    tessera::collective_counter counter;
    auto const a = rnd::normal(k, {64, 8}, named_sharding(mesh, P<"x", none>{}));
    auto const b = rnd::randint(k, {64}, 0, 10, named_sharding(mesh, P<"x">{}));
    CHECK(a.size() == 512);
    CHECK(b.size() == 64);
    CHECK(counter.events().empty());
  }
  // Seed 004's pattern: each device folds its axis index into the key and draws its own block.
  auto f = tessera::shard_map(
      [&](auto blk) {
        auto const dk = rnd::fold_in(k, tessera::axis_index<"x">());
        return xt::xtensor<float, 1>(blk + rnd::normal(dk, shape_t<1>{blk.shape()[0]}));
      },
      mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
  auto const y = tessera::to_host(f(xt::xtensor<float, 1>(xt::zeros<float>({12}))));
  for (std::uint32_t d = 0; d < 4; ++d) {
    auto const want = rnd::normal(rnd::fold_in(k, d), shape_t<1>{3});
    for (std::size_t i = 0; i < 3; ++i) CHECK(bits_of(y(3 * d + i)) == bits_of(want(i)));
  }
}

TEST_CASE("random: bad shapes and dtypes are refused with the values", "[random][errors]") {
  runtime rt{2};
  auto const k = rnd::key(0);
  REQUIRE_THROWS_AS(rnd::normal(k, {3, -2}), std::invalid_argument);
  REQUIRE_THROWS_WITH(rnd::normal(k, {3, -2}), Contains("shape (3, -2) has a negative size -2 in dimension 1"));
  REQUIRE_THROWS_AS(rnd::bits(k, shape_t<2>{std::size_t{1} << 40, std::size_t{1} << 40}), std::length_error);
  auto const mesh = tessera::make_mesh<"x">({2});
  REQUIRE_THROWS_WITH(rnd::uniform(k, shape_t<3>{std::size_t{1} << 31, std::size_t{1} << 31, 8},
                                   named_sharding(mesh, P<"x">{})),
                      Contains("tessera::random::uniform") && Contains("(2147483648, 2147483648, 8)"));
  // Empty arrays have no elements to draw; JAX returns them too.
  CHECK(rnd::normal(k, {0, 5}).size() == 0);
  CHECK(rnd::normal(k, {0, 5}, named_sharding(mesh, P<"x">{})).size() == 0);
  // maxval <= minval gives minval (JAX's rule).
  auto const same = rnd::randint(k, {20}, 5, 5);
  CHECK(std::all_of(same.begin(), same.end(), [](int v) { return v == 5; }));
}
