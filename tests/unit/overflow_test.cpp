// Sizes that overflow (reliability, part 1): a shape whose element count, or byte count, is
// more than std::ptrdiff_t can count is refused where it first comes in (device_put,
// make_array_from_callback, a broadcast, a matmul, a shard_map result), with the shape in
// the message. Before, the count wrapped to a small number (often 0): a span of 0 elements
// passed the length check, and the devices wrote their blocks past buffers of 64 bytes.
//
// Every operand here can really exist: it is small, or it has a dimension of size 0. The
// overflowing results are only constructed (or, where the old code went on to evaluate them
// into a short buffer, evaluated), never allocated. Shapes with a 0 dimension follow NumPy:
// the product of the other dimensions must still fit (so must every stride).

#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <vector>

#include <xtensor/xbroadcast.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using Catch::Matchers::Contains;
using tessera::none;
using tessera::P;
using tessera::shape_t;

namespace {

constexpr std::size_t two_to(int k) { return std::size_t{1} << k; }
/// The most elements of one byte, or bytes, an array may have.
constexpr std::size_t max_size = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

/// A replicated array of T of `shape` (all zero), from a host vector of its size.
template <class T, std::size_t N, class Mesh>
auto zeros(Mesh const& m, shape_t<N> const& shape) {
  std::size_t n = 1;
  for (auto x : shape) n *= x;  // the shapes below are small, or have a 0
  auto const host = std::make_unique<T[]>(n);  // not std::vector: vector<bool> has no span
  return tessera::device_put(std::span<T const>(host.get(), n), shape, tessera::named_sharding(m, P<>{}));
}

}  // namespace

TEST_CASE("device_put refuses a shape whose element count overflows", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  tessera::named_sharding const s(m, P<"X">{});
  shape_t<3> const huge{two_to(32), two_to(32), 2};  // 2^65 elements: wraps to 0
  std::vector<float> empty;
  float one = 1;

  SECTION("a span, whose expected length wrapped to 0") {
    REQUIRE_THROWS_AS(tessera::device_put(std::span<float const>(empty), huge, s), std::length_error);
    REQUIRE_THROWS_WITH(tessera::device_put(std::span<float const>(empty), huge, s),
                        Contains("tessera::device_put: shape (4294967296, 4294967296, 2) has more elements than "
                                 "std::ptrdiff_t can count"));
    // The same as a braced list of signed sizes.
    REQUIRE_THROWS_WITH(tessera::device_put(std::span<float const>(empty), {1LL << 32, 1LL << 32, 2LL}, s),
                        Contains("shape (4294967296, 4294967296, 2) has more elements"));
  }
  SECTION("a pointer") {
    REQUIRE_THROWS_AS(tessera::device_put(&one, huge, s), std::length_error);
    REQUIRE_THROWS_WITH(tessera::device_put(&one, huge, s),
                        Contains("tessera::device_put: shape (4294967296, 4294967296, 2) has more elements"));
    REQUIRE_THROWS_WITH(tessera::device_put(static_cast<float const*>(nullptr), huge, s),
                        Contains("shape (4294967296, 4294967296, 2) has more elements"));
  }
  SECTION("an xtensor container with a 0 dimension, whose other dimensions overflow") {
    auto const host = xt::xtensor<float, 3>::from_shape({two_to(32), two_to(32), 0});
    REQUIRE_THROWS_AS(tessera::device_put(host, s), std::length_error);
    REQUIRE_THROWS_WITH(tessera::device_put(host, s),
                        Contains("tessera::device_put: shape (4294967296, 4294967296, 0) has more elements"));
  }
  SECTION("a lazy xtensor expression, refused before it is evaluated on the host") {
    auto const lazy = xt::broadcast(xt::xtensor<float, 1>{1.0f}, std::array<std::size_t, 3>{huge});
    REQUIRE_THROWS_AS(tessera::device_put(lazy, s), std::length_error);
    REQUIRE_THROWS_WITH(tessera::device_put(lazy, s),
                        Contains("tessera::device_put: shape (4294967296, 4294967296, 2) has more elements"));
  }
}

TEST_CASE("device_put refuses a byte count of doubles that overflows where floats just fit", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  tessera::named_sharding const s(m, P<none, "X">{});
  // 2^60 elements: 2^63 bytes of double (one past the most), 2^62 bytes of float.
  shape_t<3> const shape{0, two_to(30), two_to(30)};
  std::vector<double> d;
  std::vector<float> f;
  REQUIRE_THROWS_AS(tessera::device_put(std::span<double const>(d), shape, s), std::length_error);
  REQUIRE_THROWS_WITH(tessera::device_put(std::span<double const>(d), shape, s),
                      Contains("tessera::device_put: shape (0, 1073741824, 1073741824) needs more bytes (8 per "
                               "element) than std::ptrdiff_t can count"));
  auto const x = tessera::device_put(std::span<float const>(f), shape, s);
  CHECK(x.shape() == shape);
  CHECK(x.size() == 0);
  CHECK(tessera::to_host(x).size() == 0);

  // Exactly the most elements (and bytes) of uint8 fits: 454279 * 20303320287433 = 2^63 - 1.
  std::vector<std::uint8_t> b;
  auto const just = tessera::device_put(std::span<std::uint8_t const>(b), shape_t<3>{0, 454279, 20303320287433}, s);
  CHECK(just.size() == 0);
  REQUIRE_THROWS_WITH(tessera::device_put(std::span<std::uint8_t const>(b), shape_t<3>{0, 454280, 20303320287433}, s),
                      Contains("shape (0, 454280, 20303320287433) has more elements"));
}

TEST_CASE("make_array_from_callback refuses a shape whose element count overflows", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  tessera::named_sharding const s(m, P<"X">{});
  bool called = false;
  auto block = [&](std::array<tessera::slice, 3> const& b) {
    called = true;
    return xt::xtensor<float, 3>::from_shape({b[0].size(), b[1].size(), b[2].size()});
  };
  REQUIRE_THROWS_AS(tessera::make_array_from_callback(shape_t<3>{two_to(32), two_to(32), 2}, s, block),
                    std::length_error);
  REQUIRE_THROWS_WITH(tessera::make_array_from_callback({1LL << 32, 1LL << 32, 2LL}, s, block),
                      Contains("tessera::make_array_from_callback: shape (4294967296, 4294967296, 2) has more "
                               "elements than std::ptrdiff_t can count"));
  // 2^61 floats are 2^63 bytes, one past the most.
  REQUIRE_THROWS_WITH(tessera::make_array_from_callback(shape_t<3>{two_to(61), 1, 0}, s, block),
                      Contains("shape (2305843009213693952, 1, 0) needs more bytes (4 per element)"));
  CHECK_FALSE(called);
  // Just fits: 2^61 - 1 floats (in a 0-sized array); the callback sees every (empty) block.
  auto const x = tessera::make_array_from_callback(shape_t<3>{two_to(61) - 1, 1, 0}, s, block);
  CHECK(called);
  CHECK(x.size() == 0);
}

TEST_CASE("broadcasting small operands into a result whose element count overflows", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});

  SECTION("three operands of one node (jnp.where): 2^22 * 2^21 * 2^21 = 2^64 wraps to 0") {
    auto const c = zeros<bool, 3>(m, {two_to(22), 1, 1});
    auto const x = zeros<std::uint8_t, 3>(m, {1, two_to(21), 1});
    auto const y = zeros<std::uint8_t, 3>(m, {1, 1, two_to(21)});
    REQUIRE_THROWS_AS(tessera::where(c, x, y), std::length_error);
    REQUIRE_THROWS_WITH(tessera::where(c, x, y),
                        Contains("operands of shapes (4194304, 1, 1) and (1, 2097152, 1) and (1, 1, 2097152) "
                                 "broadcast to shape (4194304, 2097152, 2097152), which has more elements than "
                                 "std::ptrdiff_t can count"));
    // Two nodes: the inner sum (2^43 elements) fits, the outer one does not.
    REQUIRE_THROWS_WITH(x + y + c, Contains("broadcast to shape (4194304, 2097152, 2097152), which has more elements"));
  }
  SECTION("the element count fits, the bytes of double do not: refused before evaluation writes past a buffer") {
    auto const a = zeros<double, 4>(m, {two_to(16), 1, 1, 1});
    auto const b = zeros<double, 4>(m, {1, two_to(16), 1, 1});
    auto const c = zeros<double, 4>(m, {1, 1, two_to(16), 1});
    auto const d = zeros<double, 4>(m, {1, 1, 1, two_to(13)});
    REQUIRE_THROWS_AS(((a + b) + (c + d)).evaluate(), std::length_error);
    REQUIRE_THROWS_WITH(((a + b) + (c + d)).evaluate(),
                        Contains("broadcast to shape (65536, 65536, 65536, 8192), which needs more bytes (8 per "
                                 "element) than std::ptrdiff_t can count"));
  }
  SECTION("just fits: 3577 * 42799 * 92737 * 649657 = 2^63 - 1 one-byte elements") {
    auto const a = zeros<std::uint8_t, 4>(m, {3577, 1, 1, 1});
    auto const b = zeros<std::uint8_t, 4>(m, {1, 42799, 1, 1});
    auto const c = zeros<std::uint8_t, 4>(m, {1, 1, 92737, 1});
    auto const d = zeros<std::uint8_t, 4>(m, {1, 1, 1, 649657});
    auto const e = (a + b) + (c + d);  // constructed, never evaluated
    CHECK(e.shape() == shape_t<4>{3577, 42799, 92737, 649657});
    auto const d1 = zeros<std::uint8_t, 4>(m, {1, 1, 1, 649658});
    REQUIRE_THROWS_WITH((a + b) + (c + d1), Contains("broadcast to shape (3577, 42799, 92737, 649658)"));
  }
}

TEST_CASE("matmul refuses a product whose element count overflows", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  std::vector<float> empty;
  auto put = [&](shape_t<2> const& shape, auto spec) {
    return tessera::device_put(std::span<float const>(empty), shape, tessera::named_sharding(m, spec));
  };
  // Empty operands (the contracting dimension is 0), a product of 2^32 x 2^32 zeros.
  auto const a = put({two_to(32), 0}, P<"X">{});
  auto const b = put({0, two_to(32)}, P<>{});
  REQUIRE_THROWS_AS(tessera::matmul(a, b).evaluate(), std::length_error);
  REQUIRE_THROWS_WITH(tessera::matmul(a, b).evaluate(),
                      Contains("tessera::matmul: the product of shapes (4294967296, 0) and (0, 4294967296) has "
                               "shape (4294967296, 4294967296), which has more elements than std::ptrdiff_t can "
                               "count"));
  // 2^61 elements fit, 2^63 bytes of float do not.
  auto const a2 = put({two_to(31), 0}, P<"X">{});
  auto const b2 = put({0, two_to(30)}, P<>{});
  REQUIRE_THROWS_WITH(tessera::matmul(a2, b2),
                      Contains("has shape (2147483648, 1073741824), which needs more bytes (4 per element) than "
                               "std::ptrdiff_t can count"));
  // Just fits (2^60 elements, 2^62 bytes); constructed, not evaluated.
  auto const b3 = put({0, two_to(29)}, P<>{});
  CHECK(tessera::matmul(a2, b3).shape() == shape_t<2>{two_to(31), two_to(29)});
}

TEST_CASE("shard_map refuses results whose shapes overflow", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});

  SECTION("the global shape: the block's dimension times the number of shards") {
    auto f = tessera::shard_map([] { return xt::xtensor<std::uint8_t, 2>::from_shape({0, two_to(62)}); }, m,
                                tessera::in_specs(), tessera::out_specs(P<none, "X">{}));
    REQUIRE_THROWS_AS(f(), std::length_error);
    REQUIRE_THROWS_WITH(f(), Contains("tessera::shard_map: result 0 has blocks of shape (0, 4611686018427387904) and "
                                      "out_specs[0] = P(None, 'X') makes dimension 1 of the global shape "
                                      "4611686018427387904 * 4, more than std::ptrdiff_t can count"));
  }
  SECTION("the global element count") {
    auto f = tessera::shard_map([] { return xt::xtensor<std::uint8_t, 3>::from_shape({two_to(31), two_to(31), 0}); }, m,
                                tessera::in_specs(), tessera::out_specs(P<"X">{}));
    REQUIRE_THROWS_AS(f(), std::length_error);
    REQUIRE_THROWS_WITH(f(), Contains("tessera::shard_map: result 0 has blocks of shape (2147483648, 2147483648, 0) "
                                      "and out_specs[0] = P('X',) makes the global shape (8589934592, 2147483648, "
                                      "0), which has more elements than std::ptrdiff_t can count"));
  }
  SECTION("a body's block itself") {
    auto f = tessera::shard_map([] { return xt::xtensor<float, 3>::from_shape({two_to(32), two_to(32), 0}); }, m,
                                tessera::in_specs(), tessera::out_specs(P<"X">{}));
    // Found on the devices, so it comes as a device_error that carries the length_error.
    REQUIRE_THROWS_WITH(f(), Contains("tessera::shard_map: shape (4294967296, 4294967296, 0) has more elements than "
                                      "std::ptrdiff_t can count"));
  }
}

TEST_CASE("all_gather and all_to_all refuse results whose dimension overflows", "[overflow]") {
  tessera::runtime rt{4};
  auto const m = tessera::make_mesh<"X">({4});
  auto gather = tessera::shard_map(
      [] {
        auto z = xt::xtensor<std::uint8_t, 2>::from_shape({0, two_to(62)});
        return tessera::all_gather<"X">(z, 1, tessera::tiled);
      },
      m, tessera::in_specs(), tessera::out_specs(P<>{}), tessera::no_check_vma);
  REQUIRE_THROWS_WITH(gather(), Contains("tessera::all_gather: an input of shape (0, 4611686018427387904) over 4 "
                                         "devices has a result dimension of 4611686018427387904 x 4 elements"));
  auto exchange = tessera::shard_map(
      [] {
        auto z = xt::xtensor<std::uint8_t, 3>::from_shape({two_to(62), 4, 0});
        return tessera::all_to_all<"X">(z, 1, 0, tessera::tiled);
      },
      m, tessera::in_specs(), tessera::out_specs(P<>{}), tessera::no_check_vma);
  REQUIRE_THROWS_WITH(exchange(), Contains("tessera::all_to_all: an input of shape (4611686018427387904, 4, 0) over 4 "
                                           "devices has a result dimension of 4611686018427387904 x 4 elements"));
}

TEST_CASE("device buffers and device memory refuse byte counts that overflow", "[overflow]") {
  // 2^61 elements fit std::size_t; 2^64 bytes of double do not (they wrapped to 0).
  REQUIRE_THROWS_AS(tessera::device_buffer<double>(two_to(61)), std::length_error);
  REQUIRE_THROWS_WITH(tessera::device_buffer<double>(two_to(61)),
                      Contains("tessera::device_buffer: 2305843009213693952 elements of 8 bytes need more bytes "
                               "than std::ptrdiff_t can count"));
  tessera::detail::device_memory memory;
  REQUIRE_THROWS_AS(tessera::device_buffer<double>(two_to(61), tessera::device_buffer<double>::uninitialized, &memory),
                    std::length_error);
  // A request of nearly 2^64 bytes: its size class wrapped to 0, and a 64-byte block came back.
  std::size_t const near_max = std::numeric_limits<std::size_t>::max() - 5;
  REQUIRE_THROWS_AS(memory.allocate(near_max), std::length_error);
  REQUIRE_THROWS_WITH(memory.allocate(near_max), Contains("18446744073709551610 bytes"));
  // The largest request has a size class at least as large.
  CHECK(tessera::detail::device_memory::size_class(max_size) >= max_size);
  tessera::device_buffer<double> ok(1000);
  CHECK(ok.size() == 1000);
}
