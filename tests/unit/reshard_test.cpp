// device_put of an array onto another sharding (every pair from a list, across
// meshes and single devices), the host inputs device_put accepts, to_host into an
// existing array, and the run-time errors of the array factories.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera_test::same_array;
using tessera::axes;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera::runtime;
using tessera::shape_t;
using tessera::single_device_sharding;

namespace {

template <class T, std::size_t N>
xt::xtensor<T, N> make_host(shape_t<N> const& shape) {
  auto h = xt::xtensor<T, N>::from_shape(shape);
  T v = T(1);
  for (auto& x : h) {
    x = v;
    v = static_cast<T>(v * T(3) % T(1009));
  }
  return h;
}

template <class T, std::size_t N, std::size_t... I>
xt::xtensor<T, N> view_of(xt::xtensor<T, N> const& h, std::array<tessera::slice, N> const& b,
                          std::index_sequence<I...>) {
  if (h.size() == 0) {  // an empty block of an empty array: xt::view would offset a null pointer
    std::array<std::size_t, N> shape{};
    for (std::size_t i = 0; i < N; ++i) shape[i] = b[i].stop - b[i].start;
    return xt::xtensor<T, N>::from_shape(shape);
  }
  return xt::view(h, xt::range(b[I].start, b[I].stop)...);
}

/// Every shard's data equals the host array cut at the shard's index, and the shards are
/// the sharding's blocks in its device order.
template <class T, std::size_t N, class S>
bool shards_match(tessera::array<T, N, S> const& a, xt::xtensor<T, N> const& host) {
  auto const shards = a.addressable_shards();
  auto const& s = a.sharding();
  if (shards.size() != s.num_devices()) return false;
  for (std::size_t p = 0; p < shards.size(); ++p) {
    if (shards[p].device != s.device_ids()[p]) return false;
    if (shards[p].index != s.block(p, a.shape())) return false;
    if (!same_array(shards[p].data, view_of(host, shards[p].index, std::make_index_sequence<N>{}))) return false;
  }
  return true;
}

template <class S1, class S2>
bool same_sharding(S1 const& a, S2 const& b) {
  if constexpr (std::is_same_v<S1, S2>) return a == b;
  else return false;
}

/// device_put(x, dst) for every (src, dst) pair of `shardings`, from every shape.
template <class T, std::size_t N, class... S>
void check_all_pairs(std::tuple<S...> const& shardings, std::vector<shape_t<N>> const& shapes) {
  for (auto const& shape : shapes) {
    auto const host = make_host<T, N>(shape);
    std::apply(
        [&](auto const&... src) {
          std::size_t si = 0;
          (
              [&](auto const& from) {
                auto const a = tessera::device_put(host, from);
                std::size_t di = 0;
                std::apply(
                    [&](auto const&... dst) {
                      (
                          [&](auto const& to) {
                            INFO("shape " << Catch::Detail::stringify(shape) << " from sharding #" << si << " "
                                          << from << " to #" << di << " " << to);
                            auto const b = tessera::device_put(a, to);
                            CHECK(same_sharding(b.sharding(), to));
                            CHECK(b.shape() == shape);
                            CHECK(same_array(tessera::to_host(b), host));
                            CHECK(shards_match(b, host));
                            // And back again.
                            auto const c = tessera::device_put(b, from);
                            CHECK(same_array(tessera::to_host(c), host));
                            ++di;
                          }(dst),
                          ...);
                    },
                    shardings);
                ++si;
              }(src),
              ...);
        },
        shardings);
  }
}

}  // namespace

TEST_CASE("device_put(array, sharding) between every pair of shardings keeps the values", "[array][reshard]") {
  runtime rt{8};
  auto const m8 = tessera::make_mesh<"x">({8});
  auto const m3 = tessera::make_mesh<"x">({3}, std::vector<int>{5, 2, 7});
  auto const m24 = tessera::make_mesh<"x", "y">({2, 4});
  auto const m42 = tessera::make_mesh<"x", "y">({4, 2}, std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  auto const m22 = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{1, 3, 0, 2});
  auto const m222 = tessera::make_mesh<"a", "b", "c">({2, 2, 2});
  auto const shardings = std::make_tuple(single_device_sharding(0), single_device_sharding(6),
                                         named_sharding(m8, P<"x">{}), named_sharding(m3, P<none, "x">{}),
                                         named_sharding(m24, P<"x", "y">{}), named_sharding(m24, P<"y", none>{}),
                                         named_sharding(m42, P<none, axes<"y", "x">>{}), named_sharding(m22, P<>{}),
                                         named_sharding(m222, P<"a", axes<"c", "b">>{}));
  check_all_pairs<std::int32_t, 2>(shardings,
                                   {{8, 8}, {7, 5}, {3, 13}, {1, 1}, {0, 4}, {5, 0}, {16, 9}});
}

TEST_CASE("resharding rank-1 and rank-3 arrays", "[array][reshard]") {
  runtime rt{8};
  auto const m8 = tessera::make_mesh<"x">({8}, std::vector<int>{3, 5, 7, 1, 0, 2, 4, 6});
  auto const m24 = tessera::make_mesh<"x", "y">({2, 4});
  auto const m222 = tessera::make_mesh<"a", "b", "c">({2, 2, 2});
  check_all_pairs<std::int64_t, 1>(std::make_tuple(single_device_sharding(3), named_sharding(m8, P<"x">{}),
                                                   named_sharding(m24, P<axes<"y", "x">>{}), named_sharding(m24, P<"y">{})),
                                   {{0}, {1}, {7}, {8}, {13}, {64}});
  check_all_pairs<std::int64_t, 3>(std::make_tuple(single_device_sharding(1), named_sharding(m222, P<"a", "b", "c">{}),
                                                   named_sharding(m222, P<"c", none, axes<"a", "b">>{}),
                                                   named_sharding(m24, P<none, "x">{})),
                                   {{2, 3, 4}, {5, 1, 7}, {0, 2, 2}, {4, 4, 4}});
}

TEST_CASE("resharding under another current runtime", "[array][reshard]") {
  runtime big{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  auto const host = make_host<std::int32_t, 2>({6, 10});
  auto const a = tessera::device_put(host, named_sharding(m, P<"x", "y">{}));
  runtime small{2};
  auto const m2 = tessera::make_mesh<"x">({2}, std::vector<int>{1, 0});
  auto const b = tessera::device_put(a, named_sharding(m2, P<none, "x">{}));
  CHECK(b.pool().get() == &small.pool());
  CHECK(same_array(tessera::to_host(b), host));
  CHECK(shards_match(b, host));
  // A sharding names its runtime, as a JAX sharding names its devices: putting onto the big
  // runtime's mesh moves the array there even while the small runtime is current.
  auto const back = tessera::device_put(b, named_sharding(m, P<"x", "y">{}));
  CHECK(back.pool().get() == &big.pool());
  CHECK(same_array(tessera::to_host(back), host));
  CHECK(shards_match(back, host));
  // A device number alone means the current runtime's device.
  REQUIRE_THROWS_WITH(tessera::device_put(host, 7),
                      Contains("tessera::device_put: the sharding uses device 7 but runtime") &&
                          Contains("(2 devices) has devices 0 to 1; create tessera::runtime{8}"));
}

// ---------------------------------------------------------------------------
// Host inputs
// ---------------------------------------------------------------------------

TEST_CASE("device_put accepts pointers, spans, lazy expressions, views and xarrays", "[array][inputs]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  named_sharding const s(m, P<"x", "y">{});
  xt::xtensor<float, 2> want = xt::zeros<float>({3, 4});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 4; ++j) want(i, j) = static_cast<float>(i * 4 + j) + 1.0f;
  std::vector<float> buffer(want.begin(), want.end());

  SECTION("pointer and shape") {
    auto a = tessera::device_put(static_cast<float const*>(buffer.data()), shape_t<2>{3, 4}, s);
    CHECK(same_array(tessera::to_host(a), want));
    auto b = tessera::device_put(buffer.data(), shape_t<2>{3, 4}, s);  // non-const pointer
    CHECK(same_array(tessera::to_host(b), want));
    auto c = tessera::device_put(buffer.data(), {3, 4}, s);  // braced shape
    CHECK(same_array(tessera::to_host(c), want));
    STATIC_REQUIRE(std::is_same_v<decltype(c), decltype(a)>);
    // The host buffer is copied, not referenced.
    buffer[0] = -100.0f;
    CHECK(tessera::to_host(a)(0, 0) == 1.0f);
  }
  SECTION("std::span, const and not") {
    auto a = tessera::device_put(std::span<float>(buffer), shape_t<2>{3, 4}, s);
    CHECK(same_array(tessera::to_host(a), want));
    auto b = tessera::device_put(std::span<float const>(buffer), shape_t<2>{3, 4}, s);
    STATIC_REQUIRE(std::is_same_v<decltype(b)::value_type, float>);
    CHECK(same_array(tessera::to_host(b), want));
    auto c = tessera::device_put(std::span<float const>(buffer), {3, 4}, s);
    CHECK(same_array(tessera::to_host(c), want));
  }
  SECTION("lazy expressions") {
    auto a = tessera::device_put(xt::reshape_view(xt::arange<float>(12.0f) + 1.0f, {3, 4}), s);
    CHECK(same_array(tessera::to_host(a), want));
    auto b = tessera::device_put(xt::arange<std::int32_t>(16) * 2 + 1, named_sharding(m, P<axes<"y", "x">>{}));
    xt::xtensor<std::int32_t, 1> const wb = xt::arange<std::int32_t>(16) * 2 + 1;
    CHECK(same_array(tessera::to_host(b), wb));
    // An element-wise expression over row-major containers (want * 2.0f) reports a contiguous
    // row-major static layout but has no data(): device_put must evaluate it, not read data().
    xt::xtensor<float, 2> const w2 = want * 2.0f;
    static_assert(!tessera::detail::row_major_contiguous<decltype(want * 2.0f)>);
    auto c = tessera::device_put(want * 2.0f, s);
    CHECK(same_array(tessera::to_host(c), w2));
    auto d = tessera::device_put(xt::xtensor<float, 2>(want * 2.0f), s);  // evaluated first: always fine
    CHECK(same_array(tessera::to_host(d), w2));
  }
  SECTION("non-contiguous views") {
    xt::xtensor<float, 2> const t = xt::transpose(want);  // 4x3, evaluated by xtensor
    auto a = tessera::device_put(xt::transpose(want), s);
    CHECK(a.shape() == shape_t<2>{4, 3});
    CHECK(same_array(tessera::to_host(a), t));
    CHECK(shards_match(a, t));
    auto b = tessera::device_put<2>(xt::view(want, xt::range(0, 3, 2), xt::all()), s);
    xt::xtensor<float, 2> const wb = xt::view(want, xt::range(0, 3, 2), xt::all());
    CHECK(same_array(tessera::to_host(b), wb));
    CHECK(b.shape() == shape_t<2>{2, 4});
  }
  SECTION("xt::xarray with the rank named") {
    xt::xarray<float> const x = want;
    auto a = tessera::device_put<2>(x, s);
    CHECK(same_array(tessera::to_host(a), want));
    xt::xarray<float, xt::layout_type::column_major> const cm = want;  // not row-major in memory
    auto b = tessera::device_put<2>(cm, s);
    CHECK(same_array(tessera::to_host(b), want));
    CHECK(shards_match(b, want));
  }
  SECTION("single device: device_put(x) and device_put(x, d)") {
    auto a = tessera::device_put(want);
    STATIC_REQUIRE(std::is_same_v<std::decay_t<decltype(a.sharding())>, single_device_sharding>);
    CHECK(a.sharding().device() == 0);
    CHECK(a.devices() == std::vector<int>{0});
    CHECK(same_array(tessera::to_host(a), want));
    auto b = tessera::device_put(want, 5);
    CHECK(b.sharding().device() == 5);
    CHECK(same_array(b.addressable_shards()[0].data, want));
    auto c = tessera::device_put<2>(xt::xarray<float>(want), 7);
    CHECK(c.sharding().device() == 7);
    CHECK(same_array(tessera::to_host(c), want));
  }
}

TEST_CASE("to_host into an existing array reuses or resizes it", "[array][to_host]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x", "y">({2, 2});
  auto const host = make_host<std::int32_t, 2>({5, 7});
  auto const a = tessera::device_put(host, named_sharding(m, P<"y", "x">{}));
  xt::xtensor<std::int32_t, 2> out = xt::zeros<std::int32_t>({5, 7});
  auto const* before = out.data();
  tessera::to_host(a, out);
  CHECK(out.data() == before);  // same shape: written in place
  CHECK(same_array(out, host));
  xt::xtensor<std::int32_t, 2> small = xt::zeros<std::int32_t>({2, 2});
  tessera::to_host(a, small);
  CHECK(small.shape() == shape_t<2>{5, 7});
  CHECK(same_array(small, host));
  xt::xtensor<std::int32_t, 2> empty_out;
  auto const z = tessera::device_put(make_host<std::int32_t, 2>({0, 3}), named_sharding(m, P<"x">{}));
  tessera::to_host(z, empty_out);
  CHECK(empty_out.shape() == shape_t<2>{0, 3});
}

// ---------------------------------------------------------------------------
// Run-time errors of the factories
// ---------------------------------------------------------------------------

TEST_CASE("device_put errors name the values", "[array][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x", "y">({2, 2});
  named_sharding const s(m, P<"x", "y">{});
  std::vector<float> buffer(11, 1.0f);

  SECTION("rank of an xarray") {
    xt::xarray<float> const x = xt::zeros<float>({2, 3, 4});
    REQUIRE_THROWS_AS(tessera::device_put<2>(x, s), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::device_put<2>(x, s),
                        Contains("device_put<2>: the host array has rank 3 (shape (2, 3, 4))"));
    xt::xarray<float> const v = xt::zeros<float>({5});
    REQUIRE_THROWS_WITH(tessera::device_put<2>(v, s), Contains("has rank 1 (shape (5,))"));
  }
  SECTION("span of the wrong length") {
    REQUIRE_THROWS_AS(tessera::device_put(std::span<float>(buffer), shape_t<2>{3, 4}, s), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::device_put(std::span<float>(buffer), shape_t<2>{3, 4}, s),
                        Contains("the host buffer has 11 elements but shape (3, 4) needs 12"));
    REQUIRE_THROWS_WITH(tessera::device_put(std::span<float const>(buffer), {2, 2}, s),
                        Contains("the host buffer has 11 elements but shape (2, 2) needs 4"));
    REQUIRE_NOTHROW(tessera::device_put(std::span<float>(buffer), shape_t<2>{1, 11}, s));
  }
  SECTION("negative sizes in a braced shape") {
    REQUIRE_THROWS_AS(tessera::device_put(buffer.data(), {3, -4}, s), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::device_put(buffer.data(), {3, -4}, s),
                        Contains("shape (3, -4) has a negative size -4 in dimension 1"));
    REQUIRE_THROWS_WITH(tessera::device_put(std::span<float>(buffer), {-1, 2}, s),
                        Contains("shape (-1, 2) has a negative size -1 in dimension 0"));
  }
  SECTION("null pointer") {
    REQUIRE_THROWS_WITH(tessera::device_put(static_cast<float const*>(nullptr), shape_t<2>{2, 2}, s),
                        Contains("null data pointer for shape (2, 2)"));
    auto const e = tessera::device_put(static_cast<float const*>(nullptr), shape_t<2>{0, 2}, s);  // nothing to read
    CHECK(e.size() == 0);
  }
  SECTION("a sharding made on a bigger runtime") {
    runtime big{8};
    auto const m8 = tessera::make_mesh<"x">({8}, std::vector<int>{0, 1, 2, 3, 7, 6, 5, 4});
    named_sharding const s8(m8, P<"x">{});
    xt::xtensor<float, 1> const x = xt::arange<float>(16.0f);
    REQUIRE_NOTHROW(tessera::device_put(x, s8));
    runtime small{4};
    // The mesh names the big runtime, so a smaller current runtime does not matter...
    auto const on_big = tessera::device_put(x, s8);
    CHECK(on_big.pool().get() == &big.pool());
    CHECK(same_array(tessera::to_host(on_big), x));
    // ...but a device number alone means the current runtime's device.
    REQUIRE_THROWS_AS(tessera::device_put(x, 6), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::device_put(x, 6),
                        Contains("tessera::device_put: the sharding uses device 6 but runtime") &&
                            Contains("(4 devices) has devices 0 to 3; create tessera::runtime{7}"));
    // A mesh made while the small runtime is current cannot name device 7.
    REQUIRE_THROWS_WITH((tessera::make_mesh<"x">({8})),
                        Contains("axis sizes (8,) need 8 devices but the runtime has 4"));
  }
}

TEST_CASE("make_array_from_callback errors name the values", "[array][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x", "y">({2, 2});
  named_sharding const s(m, P<"x", "y">{});
  auto const good = [](std::array<tessera::slice, 2> const& idx) {
    return xt::xtensor<float, 2>(xt::zeros<float>({idx[0].size(), idx[1].size()}));
  };

  SECTION("negative sizes") {
    REQUIRE_THROWS_AS(tessera::make_array_from_callback({4, -1}, s, good), std::invalid_argument);
    REQUIRE_THROWS_WITH(tessera::make_array_from_callback({4, -1}, s, good),
                        Contains("make_array_from_callback: shape (4, -1) has a negative size -1 in dimension 1"));
    named_sharding const s1(m, P<"x">{});
    auto const good1 = [](std::array<tessera::slice, 1> const& idx) {
      return xt::xtensor<float, 1>(xt::zeros<float>({idx[0].size()}));
    };
    REQUIRE_THROWS_WITH(tessera::make_array_from_callback({-3}, s1, good1),
                        Contains("shape (-3,) has a negative size -3 in dimension 0"));
    auto const ok = tessera::make_array_from_callback({4, 6}, s, good);
    CHECK(ok.shape() == shape_t<2>{4, 6});
  }
  SECTION("a block of the wrong shape") {
    auto const wrong = [](std::array<tessera::slice, 2> const& idx) {
      return xt::xtensor<float, 2>(xt::zeros<float>({idx[0].size() + 1, idx[1].size()}));
    };
    REQUIRE_THROWS_AS(tessera::make_array_from_callback({4, 4}, s, wrong), tessera::device_error);
    REQUIRE_THROWS_WITH(tessera::make_array_from_callback({4, 4}, s, wrong),
                        Contains("the callback returned shape (3, 2) for the block of device 0, which has shape (2, 2)"));
    // Only device 3's block is wrong: the error names it.
    auto const one_wrong = [](std::array<tessera::slice, 2> const& idx) {
      std::size_t const extra = idx[0].start == 2 && idx[1].start == 2 ? 1 : 0;
      return xt::xtensor<float, 2>(xt::zeros<float>({idx[0].size(), idx[1].size() + extra}));
    };
    try {
      (void)tessera::make_array_from_callback({4, 4}, s, one_wrong);
      FAIL("no error for a wrong block");
    } catch (tessera::device_error const& e) {
      CHECK(e.device() == 3);
      CHECK(e.failures().size() == 1);
      CHECK_THAT(e.what(), Contains("the callback returned shape (2, 3) for the block of device 3, which has shape (2, 2)"));
      REQUIRE_THROWS_AS(e.rethrow_first(), std::invalid_argument);
    }
  }
  SECTION("a block of the wrong rank is rejected") {
    // A rank-3 block of 2x2x1 for a 2x2 block: same element count, wrong rank.
    auto const rank3 = [](std::array<tessera::slice, 2> const& idx) {
      xt::xarray<float> r = xt::zeros<float>({idx[0].size(), idx[1].size(), std::size_t{1}});
      return r;
    };
    CHECK_THROWS_AS(tessera::make_array_from_callback({4, 4}, s, rank3), tessera::device_error);
    CHECK_THROWS_WITH(tessera::make_array_from_callback({4, 4}, s, rank3),
                      Contains("the callback returned shape (2, 2, 1) for the block of device 0, which has shape (2, 2)"));
    // A rank-1 block of 4 for a 2x2 block: the message shows the shape returned.
    auto const rank1 = [](std::array<tessera::slice, 2> const& idx) {
      xt::xarray<float> r = xt::zeros<float>({idx[0].size() * idx[1].size()});
      return r;
    };
    CHECK_THROWS_WITH(tessera::make_array_from_callback({4, 4}, s, rank1),
                        Contains("the callback returned shape (4,) for the block of device 0"));
  }
  SECTION("the callback runs once per device, empty blocks included") {
    // 3 rows over 2x2: ceil(3/2) = 2 rows, then 1; 1 column over 'y': blocks of 1 and 0 columns.
    std::vector<std::pair<std::size_t, std::size_t>> seen;
    auto const a = tessera::make_array_from_callback({3, 1}, s, [&](std::array<tessera::slice, 2> const& idx) {
      seen.emplace_back(idx[0].size(), idx[1].size());
      return xt::xtensor<float, 2>(xt::ones<float>({idx[0].size(), idx[1].size()}));
    });
    std::sort(seen.begin(), seen.end());
    using sz = std::pair<std::size_t, std::size_t>;
    CHECK(seen == std::vector<sz>{sz{1, 0}, sz{1, 1}, sz{2, 0}, sz{2, 1}});
    CHECK(same_array(tessera::to_host(a), xt::xtensor<float, 2>(xt::ones<float>({3, 1}))));
  }
  SECTION("a callback that throws") {
    auto const throws = [&](std::array<tessera::slice, 2> const& idx) -> xt::xtensor<float, 2> {
      if (idx[0].start == 2) throw std::runtime_error("cannot read rows 2:4");
      return good(idx);
    };
    try {
      (void)tessera::make_array_from_callback({4, 4}, s, throws);
      FAIL("no error");
    } catch (tessera::device_error const& e) {
      REQUIRE(e.failures().size() == 2);
      CHECK(e.failures()[0].first == 2);
      CHECK(e.failures()[1].first == 3);
      CHECK_THAT(e.what(), Contains("device 2 threw: cannot read rows 2:4"));
    }
  }
}
