// Unit tests of tessera's core vocabulary: axis names, PartitionSpec, Mesh,
// NamedSharding, SingleDeviceSharding and the block arithmetic behind them.
// Expected values are written out by hand (or re-derived with plain loops).
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::mesh;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera::runtime;
using tessera::single_device_sharding;
using tessera::slice;
using Catch::Matchers::Contains;

namespace {

template <class T>
std::string str(T const& x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

// A slice made by hand (the expected value in checks).
slice sl(std::size_t a, std::size_t b) { return slice{a, b}; }

template <class M, class S>
constexpr bool can_make_sharding = requires(M m, S s) { named_sharding<M, S>(m, s); };

template <class S, class E>
constexpr bool can_device_put = requires(E e, S s) { tessera::device_put(e, s); };

}  // namespace

// ---------------------------------------------------------------------------
// axis_name, dim_spec, PartitionSpec
// ---------------------------------------------------------------------------

TEST_CASE("axis_name holds a compile-time name", "[core][axis_name]") {
  constexpr tessera::axis_name x("x");
  constexpr tessera::axis_name data("data");
  STATIC_REQUIRE(x.view().size() == 1);
  STATIC_REQUIRE(data.view().size() == 4);
  STATIC_REQUIRE(x.view() == "x");
  STATIC_REQUIRE(data.view() == "data");
  STATIC_REQUIRE(x == tessera::axis_name("x"));
  STATIC_REQUIRE(!(x == data));
  STATIC_REQUIRE(!(tessera::axis_name("xy") == tessera::axis_name("x")));
  STATIC_REQUIRE(tessera::axis_name{}.empty());
  STATIC_REQUIRE(!x.empty());
  STATIC_REQUIRE(tessera::axis_name::capacity == 32);
  constexpr tessera::axis_name longest("abcdefghijklmnopqrstuvwxyz01234");  // 31 characters
  STATIC_REQUIRE(longest.view().size() == 31);
  CHECK(std::string(data.view()) == "data");
}

TEST_CASE("dim_spec entries: None, one axis, several axes major to minor", "[core][partition_spec]") {
  constexpr tessera::dim_spec n = none;
  constexpr tessera::dim_spec x = "x";
  constexpr tessera::dim_spec xy = axes<"x", "y">;
  constexpr tessera::dim_spec yx = axes<"y", "x">;
  STATIC_REQUIRE(n.is_none());
  STATIC_REQUIRE(n.count() == 0);
  STATIC_REQUIRE(!x.is_none());
  STATIC_REQUIRE(x.count() == 1);
  STATIC_REQUIRE(x.axis(0).view() == "x");
  STATIC_REQUIRE(xy.count() == 2);
  STATIC_REQUIRE(xy.axis(0).view() == "x");
  STATIC_REQUIRE(xy.axis(1).view() == "y");
  STATIC_REQUIRE(yx.axis(0).view() == "y");
  STATIC_REQUIRE(yx.axis(1).view() == "x");
  STATIC_REQUIRE(xy.uses("x"));
  STATIC_REQUIRE(xy.uses("y"));
  STATIC_REQUIRE(!xy.uses("z"));
  STATIC_REQUIRE(!n.uses("x"));
  STATIC_REQUIRE(!(xy == yx));
  STATIC_REQUIRE(xy == axes<"x", "y">);
  STATIC_REQUIRE(x == tessera::dim_spec(tessera::axis_name("x")));
  STATIC_REQUIRE(!(x == n));
  STATIC_REQUIRE(axes<"a", "b", "c", "d">.count() == 4);
}

TEST_CASE("PartitionSpec entries and lengths", "[core][partition_spec]") {
  STATIC_REQUIRE(P<>::size == 0);
  STATIC_REQUIRE(P<"x">::size == 1);
  STATIC_REQUIRE(P<"x", none>::size == 2);
  STATIC_REQUIRE(P<axes<"x", "y">>::size == 1);
  STATIC_REQUIRE(P<"x", none>::dims[1].is_none());
  STATIC_REQUIRE(P<none, "y">::dims[1].axis(0).view() == "y");
  // Past the end every dimension is None (replicated).
  STATIC_REQUIRE(P<"x">::dim(0).axis(0).view() == "x");
  STATIC_REQUIRE(P<"x">::dim(1).is_none());
  STATIC_REQUIRE(P<"x">::dim(7).is_none());
  STATIC_REQUIRE(P<>::dim(0).is_none());
}

TEST_CASE("PartitionSpec prints exactly as JAX's repr", "[core][partition_spec][print]") {
  CHECK(str(P<"x", "y">{}) == "P('x', 'y')");
  CHECK(str(P<"x">{}) == "P('x',)");
  CHECK(str(P<"x", none>{}) == "P('x', None)");
  CHECK(str(P<none, "x">{}) == "P(None, 'x')");
  CHECK(str(P<axes<"x", "y">>{}) == "P(('x', 'y'),)");
  CHECK(str(P<none, axes<"y", "x">>{}) == "P(None, ('y', 'x'))");
  CHECK(str(P<axes<"x", "y">, "z">{}) == "P(('x', 'y'), 'z')");
  CHECK(str(P<>{}) == "P()");
  CHECK(str(P<none>{}) == "P(None,)");
  CHECK(str(P<"x", none, "z">{}) == "P('x', None, 'z')");
  CHECK(str(P<"data">{}) == "P('data',)");
}

TEST_CASE("same_layout ignores trailing Nones only", "[core][partition_spec]") {
  STATIC_REQUIRE(tessera::same_layout(P<"x">::dims, P<"x", none>::dims));
  STATIC_REQUIRE(tessera::same_layout(P<"x", none>::dims, P<"x">::dims));
  STATIC_REQUIRE(tessera::same_layout(P<>::dims, P<none, none>::dims));
  STATIC_REQUIRE(tessera::same_layout(P<"x", "y">::dims, P<"x", "y">::dims));
  STATIC_REQUIRE(!tessera::same_layout(P<"x">::dims, P<none, "x">::dims));
  STATIC_REQUIRE(!tessera::same_layout(P<"x", "y">::dims, P<"y", "x">::dims));
  STATIC_REQUIRE(!tessera::same_layout(P<axes<"x", "y">>::dims, P<axes<"y", "x">>::dims));
  STATIC_REQUIRE(!tessera::same_layout(P<axes<"x", "y">>::dims, P<"x", "y">::dims));
  STATIC_REQUIRE(!tessera::same_layout(P<>::dims, P<"x">::dims));
}

// ---------------------------------------------------------------------------
// Mesh
// ---------------------------------------------------------------------------

TEST_CASE("mesh axes are known at compile time", "[core][mesh]") {
  using M = mesh<"x", "y">;
  STATIC_REQUIRE(M::rank == 2);
  STATIC_REQUIRE(M::has_axis("x"));
  STATIC_REQUIRE(M::has_axis("y"));
  STATIC_REQUIRE(!M::has_axis("z"));
  STATIC_REQUIRE(!M::has_axis("xy"));
  STATIC_REQUIRE(M::index_of("x") == 0u);
  STATIC_REQUIRE(M::index_of("y") == 1u);
  STATIC_REQUIRE(!M::index_of("z").has_value());
  STATIC_REQUIRE(M::type_of(0) == tessera::axis_type::auto_);
  STATIC_REQUIRE(M::axes[1].name.view() == "y");

  using M3 = mesh<"data", "model", "pipe">;
  STATIC_REQUIRE(M3::rank == 3);
  STATIC_REQUIRE(M3::index_of("pipe") == 2u);
  STATIC_REQUIRE(M3::index_of("model") == 1u);

  using E = mesh<tessera::mesh_axis("X", tessera::axis_type::explicit_), tessera::mesh_axis("Y", tessera::axis_type::manual)>;
  STATIC_REQUIRE(E::type_of(0) == tessera::axis_type::explicit_);
  STATIC_REQUIRE(E::type_of(1) == tessera::axis_type::manual);
  STATIC_REQUIRE(E::has_axis("X"));
  STATIC_REQUIRE(!E::has_axis("x"));

  STATIC_REQUIRE(tessera::mesh_type<M>);
  STATIC_REQUIRE(tessera::mesh_type<M const&>);
  STATIC_REQUIRE(!tessera::mesh_type<int>);
  STATIC_REQUIRE(tessera::partition_spec_type<P<"x">>);
  STATIC_REQUIRE(!tessera::partition_spec_type<M>);
}

TEST_CASE("axis_type names", "[core][mesh]") {
  STATIC_REQUIRE(tessera::to_string(tessera::axis_type::auto_) == "Auto");
  STATIC_REQUIRE(tessera::to_string(tessera::axis_type::explicit_) == "Explicit");
  STATIC_REQUIRE(tessera::to_string(tessera::axis_type::manual) == "Manual");
  STATIC_REQUIRE(tessera::explicit_axes_t::value == tessera::axis_type::explicit_);
  STATIC_REQUIRE(tessera::auto_axes_t::value == tessera::axis_type::auto_);
  STATIC_REQUIRE(tessera::manual_axes_t::value == tessera::axis_type::manual);
}

TEST_CASE("mesh run-time answers", "[core][mesh]") {
  mesh<"x", "y"> m({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(m.size(0) == 2);
  CHECK(m.size(1) == 4);
  CHECK(m.sizes() == std::array<int, 2>{2, 4});
  CHECK(m.num_devices() == 8);
  CHECK(m.device_ids() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(m.devices_needed() == 8);
  // Row-major coordinates, re-derived: pos = x * 4 + y.
  for (std::size_t pos = 0; pos < 8; ++pos) {
    CHECK(m.coordinate(pos, 0) == static_cast<int>(pos / 4));
    CHECK(m.coordinate(pos, 1) == static_cast<int>(pos % 4));
  }

  mesh<"a", "b", "c"> m3({2, 3, 4}, [] {
    std::vector<int> v(24);
    for (int i = 0; i < 24; ++i) v[static_cast<std::size_t>(i)] = 23 - i;
    return v;
  }());
  for (std::size_t pos = 0; pos < 24; ++pos) {
    CHECK(m3.coordinate(pos, 0) == static_cast<int>(pos / 12));
    CHECK(m3.coordinate(pos, 1) == static_cast<int>((pos / 4) % 3));
    CHECK(m3.coordinate(pos, 2) == static_cast<int>(pos % 4));
    CHECK(m3.position_of(23 - static_cast<int>(pos)) == pos);
  }
  CHECK(!m3.position_of(24).has_value());
  CHECK(m3.devices_needed() == 24);

  mesh<"x"> sparse({3}, {9, 2, 5});
  CHECK(sparse.devices_needed() == 10);
  CHECK(sparse.position_of(5) == 2u);
  CHECK(sparse.position_of(9) == 0u);
  CHECK(!sparse.position_of(0).has_value());
}

TEST_CASE("mesh prints exactly as JAX's repr", "[core][mesh][print]") {
  runtime rt{8};
  CHECK(str(tessera::make_mesh<"x", "y">({2, 4})) == "Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto))");
  CHECK(str(tessera::make_mesh<"x">({8})) == "Mesh('x': 8, axis_types=(Auto,))");
  CHECK(str(tessera::make_mesh<"a", "b", "c">({2, 2, 2})) ==
        "Mesh('a': 2, 'b': 2, 'c': 2, axis_types=(Auto, Auto, Auto))");
  CHECK(str(tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes)) ==
        "Mesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit))");
  CHECK(str(tessera::make_mesh<"X">({4}, tessera::explicit_axes)) == "Mesh('X': 4, axis_types=(Explicit,))");
  CHECK(str(tessera::make_mesh<"X", "Y">({2, 4}, tessera::manual_axes)) ==
        "Mesh('X': 2, 'Y': 4, axis_types=(Manual, Manual))");
  CHECK(str(tessera::make_mesh<"X", "Y">({2, 4}, tessera::auto_axes)) ==
        "Mesh('X': 2, 'Y': 4, axis_types=(Auto, Auto))");
  CHECK(str(tessera::make_mesh<"X", "y">(
            {2, 4}, tessera::axis_types<tessera::axis_type::explicit_, tessera::axis_type::auto_>{})) ==
        "Mesh('X': 2, 'y': 4, axis_types=(Explicit, Auto))");
  CHECK(str(tessera::make_mesh<"x">({4}, std::vector<int>{3, 1, 2, 0})) == "Mesh('x': 4, axis_types=(Auto,))");
  CHECK(str(tessera::make_mesh<"X">({2}, std::vector<int>{1, 0}, tessera::explicit_axes)) ==
        "Mesh('X': 2, axis_types=(Explicit,))");
}

TEST_CASE("make_mesh takes the first prod(sizes) devices, or the grid given", "[core][mesh]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 3});
  CHECK(m.device_ids() == std::vector<int>{0, 1, 2, 3, 4, 5});
  auto e = tessera::make_mesh<"x">({4}, std::vector<int>{3, 1, 2, 0});
  CHECK(e.device_ids() == std::vector<int>{3, 1, 2, 0});
  auto t = tessera::make_mesh<"X", "Y">({2, 2}, tessera::explicit_axes);
  STATIC_REQUIRE(decltype(t)::type_of(0) == tessera::axis_type::explicit_);
  STATIC_REQUIRE(decltype(t)::type_of(1) == tessera::axis_type::explicit_);
  auto mixed = tessera::make_mesh<"a", "b">({1, 2}, tessera::axis_types<tessera::axis_type::manual, tessera::axis_type::auto_>{});
  STATIC_REQUIRE(decltype(mixed)::type_of(0) == tessera::axis_type::manual);
  STATIC_REQUIRE(decltype(mixed)::type_of(1) == tessera::axis_type::auto_);
  CHECK(mixed.device_ids() == std::vector<int>{0, 1});
}

TEST_CASE("mesh construction errors name the offending values", "[core][mesh][errors]") {
  using M = mesh<"x", "y">;
  REQUIRE_THROWS_AS(M({2, 4}, {0, 1, 2}), std::invalid_argument);
  REQUIRE_THROWS_WITH(M({2, 4}, {0, 1, 2}),
                      Contains("axis sizes (2, 4) make 8 devices but 3 device ids were given"));
  REQUIRE_THROWS_WITH(mesh<"x">({3}, {0, 1}), Contains("axis sizes (3,) make 3 devices but 2 device ids were given"));
  REQUIRE_THROWS_WITH(M({2, 0}, {}), Contains("axis 'y' has size 0") && Contains("at least 1"));
  REQUIRE_THROWS_WITH(M({-2, 4}, {0, 1, 2, 3}), Contains("axis 'x' has size -2") && Contains("at least 1"));
  REQUIRE_THROWS_AS(M({2, 2}, {0, 1, 1, 3}), std::invalid_argument);
  REQUIRE_THROWS_WITH(M({2, 2}, {0, 1, 1, 3}), Contains("device id 1 appears twice"));
  REQUIRE_THROWS_WITH(M({2, 2}, {7, 2, 5, 7}), Contains("device id 7 appears twice"));
  REQUIRE_THROWS_WITH(M({2, 2}, {0, -1, 2, 3}), Contains("device id -1 is negative"));
  REQUIRE_NOTHROW(M({2, 2}, {3, 0, 2, 1}));
}

TEST_CASE("make_mesh errors name the sizes and the runtime", "[core][mesh][errors]") {
  runtime rt{4};
  REQUIRE_THROWS_AS((tessera::make_mesh<"x", "y">({2, 4})), std::invalid_argument);
  REQUIRE_THROWS_WITH((tessera::make_mesh<"x", "y">({2, 4})),
                      Contains("axis sizes (2, 4) need 8 devices but the runtime has 4") &&
                          Contains("tessera::runtime{8}") && Contains("TESSERA_NUM_DEVICES"));
  REQUIRE_THROWS_WITH(tessera::make_mesh<"x">({5}), Contains("axis sizes (5,) need 5 devices but the runtime has 4"));
  REQUIRE_THROWS_WITH((tessera::make_mesh<"x", "y">({2, 0})), Contains("axis 'y' has size 0"));
  REQUIRE_THROWS_WITH((tessera::make_mesh<"x", "y">({-1, 2})), Contains("axis 'x' has size -1"));
  REQUIRE_THROWS_WITH(tessera::make_mesh<"x">({2}, std::vector<int>{0, 6}),
                      Contains("the device grid uses device id 6 but the runtime has 4 devices"));
  REQUIRE_THROWS_WITH(tessera::make_mesh<"x">({2}, std::vector<int>{0, 0}), Contains("device id 0 appears twice"));
  REQUIRE_THROWS_WITH(tessera::make_mesh<"x">({3}, std::vector<int>{0, 1}),
                      Contains("make 3 devices but 2 device ids were given"));
  REQUIRE_NOTHROW((tessera::make_mesh<"x", "y">({2, 2})));
  REQUIRE_NOTHROW(tessera::make_mesh<"x">({2}, std::vector<int>{3, 1}));
}

TEST_CASE("mesh equality: sizes, device order and axis types", "[core][mesh]") {
  runtime rt{8};
  auto a = tessera::make_mesh<"x", "y">({2, 4});
  auto b = tessera::make_mesh<"x", "y">({2, 4});
  auto c = tessera::make_mesh<"x", "y">({4, 2});
  auto d = tessera::make_mesh<"x", "y">({2, 4}, std::vector<int>{1, 0, 2, 3, 4, 5, 6, 7});
  auto e = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  auto f = tessera::make_mesh<"y", "x">({2, 4});
  CHECK(a == b);
  CHECK_FALSE(a == c);
  CHECK_FALSE(a == d);
  CHECK_FALSE(a == e);
  CHECK_FALSE(e == a);
  CHECK_FALSE(a == f);
  CHECK(a != c);
}

// ---------------------------------------------------------------------------
// NamedSharding
// ---------------------------------------------------------------------------

TEST_CASE("named_sharding prints exactly as JAX's repr", "[core][named_sharding][print]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  CHECK(str(named_sharding(m, P<"x", "y">{})) ==
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x', 'y'), memory_kind=device)");
  CHECK(str(named_sharding(m, P<"x", none>{})) ==
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('x', None), memory_kind=device)");
  CHECK(str(named_sharding(m, P<>{})) ==
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P(), memory_kind=device)");
  CHECK(str(named_sharding(m, P<axes<"x", "y">>{})) ==
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P(('x', 'y'),), memory_kind=device)");
  auto e = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  CHECK(str(named_sharding(e, P<"X">{})) ==
        "NamedSharding(mesh=Mesh('X': 2, 'Y': 4, axis_types=(Explicit, Explicit)), spec=P('X',), memory_kind=device)");
  // The spec defaults from the type when only the mesh is given.
  CHECK(str(named_sharding<decltype(m), P<"y">>(m)) ==
        "NamedSharding(mesh=Mesh('x': 2, 'y': 4, axis_types=(Auto, Auto)), spec=P('y',), memory_kind=device)");
}

TEST_CASE("named_sharding P('x','y') on a 2x4 mesh: blocks, shard shape, replica ids", "[core][named_sharding]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  named_sharding s(m, P<"x", "y">{});
  STATIC_REQUIRE(decltype(s)::spec_size == 2);
  STATIC_REQUIRE(tessera::sharding<decltype(s)>);
  tessera::shape_t<2> const shape{4, 8};
  CHECK(s.num_devices() == 8);
  CHECK(s.num_shards(0) == 2);
  CHECK(s.num_shards(1) == 4);
  CHECK(s.num_shards(2) == 1);  // past the spec: replicated
  CHECK(s.shard_shape(shape) == tessera::shape_t<2>{2, 2});
  CHECK_FALSE(s.is_fully_replicated());
  for (std::size_t pos = 0; pos < 8; ++pos) {
    std::size_t const x = pos / 4, y = pos % 4;
    CHECK(s.shard_index(pos, 0) == x);
    CHECK(s.shard_index(pos, 1) == y);
    CHECK(s.block(pos, shape) == std::array<slice, 2>{sl(2 * x, 2 * x + 2), sl(2 * y, 2 * y + 2)});
    CHECK(s.replica_id(pos) == 0);
  }
  auto const map = s.devices_indices_map(shape);
  REQUIRE(map.size() == 8);
  CHECK(map.at(0) == std::array<slice, 2>{sl(0, 2), sl(0, 2)});
  CHECK(map.at(5) == std::array<slice, 2>{sl(2, 4), sl(2, 4)});
  CHECK(map.at(7) == std::array<slice, 2>{sl(2, 4), sl(6, 8)});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(0, 2), sl(6, 8)}, shape) == std::vector<int>{3});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(0, 1), sl(6, 8)}, shape).empty());
  CHECK(s.uses_axis("x"));
  CHECK(s.uses_axis("y"));
  CHECK(s.mesh() == m);
  CHECK(s.device_ids() == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("named_sharding P('x', None): rows held by the devices along 'y'", "[core][named_sharding]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  named_sharding s(m, P<"x", none>{});
  tessera::shape_t<2> const shape{4, 8};
  CHECK(s.shard_shape(shape) == tessera::shape_t<2>{2, 8});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(0, 2), sl(0, 8)}, shape) == std::vector<int>{0, 1, 2, 3});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(2, 4), sl(0, 8)}, shape) == std::vector<int>{4, 5, 6, 7});
  for (std::size_t pos = 0; pos < 8; ++pos) {
    CHECK(s.replica_id(pos) == static_cast<int>(pos % 4));  // index along the unused 'y'
    CHECK(s.block(pos, shape) == std::array<slice, 2>{sl(2 * (pos / 4), 2 * (pos / 4) + 2), sl(0, 8)});
  }
  CHECK_FALSE(s.is_fully_replicated());
  CHECK(s.uses_axis("x"));
  CHECK_FALSE(s.uses_axis("y"));

  named_sharding t(m, P<none, "x">{});
  for (std::size_t pos = 0; pos < 8; ++pos) CHECK(t.replica_id(pos) == static_cast<int>(pos % 4));
  named_sharding u(m, P<"y">{});
  for (std::size_t pos = 0; pos < 8; ++pos) CHECK(u.replica_id(pos) == static_cast<int>(pos / 4));
  named_sharding r(m, P<>{});
  for (std::size_t pos = 0; pos < 8; ++pos) {
    CHECK(r.replica_id(pos) == static_cast<int>(pos));
    CHECK(r.block(pos, shape) == std::array<slice, 2>{sl(0, 4), sl(0, 8)});
  }
  CHECK(r.devices_holding(std::array<slice, 2>{sl(0, 4), sl(0, 8)}, shape) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("named_sharding: several axes on one dimension are major to minor", "[core][named_sharding]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  tessera::shape_t<1> const shape{16};
  named_sharding xy(m, P<axes<"x", "y">>{});
  named_sharding yx(m, P<axes<"y", "x">>{});
  CHECK(xy.num_shards(0) == 8);
  CHECK(yx.num_shards(0) == 8);
  CHECK(xy.is_fully_replicated() == false);
  for (std::size_t pos = 0; pos < 8; ++pos) {
    std::size_t const x = pos / 4, y = pos % 4;
    std::size_t const i_xy = x * 4 + y;  // 'x' major
    std::size_t const i_yx = y * 2 + x;  // 'y' major
    CHECK(xy.shard_index(pos, 0) == i_xy);
    CHECK(yx.shard_index(pos, 0) == i_yx);
    CHECK(xy.block(pos, shape)[0] == sl(2 * i_xy, 2 * i_xy + 2));
    CHECK(yx.block(pos, shape)[0] == sl(2 * i_yx, 2 * i_yx + 2));
    CHECK(xy.replica_id(pos) == 0);
  }
  // Device 1 sits at (x=0, y=1): block 1 under ('x','y'), block 2 under ('y','x').
  CHECK(yx.devices_indices_map(shape).at(1)[0] == sl(4, 6));
  CHECK(yx.devices_indices_map(shape).at(4)[0] == sl(2, 4));

  auto m3 = tessera::make_mesh<"a", "b", "c">({2, 2, 2});
  named_sharding s3(m3, P<axes<"c", "a">, "b">{});
  tessera::shape_t<2> const shape2{8, 4};
  for (std::size_t pos = 0; pos < 8; ++pos) {
    std::size_t const a = pos / 4, b = (pos / 2) % 2, c = pos % 2;
    CHECK(s3.shard_index(pos, 0) == c * 2 + a);
    CHECK(s3.shard_index(pos, 1) == b);
    CHECK(s3.block(pos, shape2) == std::array<slice, 2>{sl(2 * (c * 2 + a), 2 * (c * 2 + a) + 2), sl(2 * b, 2 * b + 2)});
  }
}

TEST_CASE("named_sharding over an explicit device grid", "[core][named_sharding]") {
  runtime rt{4};
  auto m = tessera::make_mesh<"x">({4}, std::vector<int>{3, 1, 2, 0});
  named_sharding s(m, P<"x">{});
  tessera::shape_t<1> const shape{8};
  CHECK(s.device_ids() == std::vector<int>{3, 1, 2, 0});
  auto const map = s.devices_indices_map(shape);
  CHECK(map.at(3)[0] == sl(0, 2));
  CHECK(map.at(1)[0] == sl(2, 4));
  CHECK(map.at(2)[0] == sl(4, 6));
  CHECK(map.at(0)[0] == sl(6, 8));
  CHECK(s.devices_holding(std::array<slice, 1>{sl(6, 8)}, shape) == std::vector<int>{0});
  CHECK(s.devices_holding(std::array<slice, 1>{sl(0, 2)}, shape) == std::vector<int>{3});

  auto m2 = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{3, 0, 2, 1});
  named_sharding r(m2, P<"x">{});
  tessera::shape_t<2> const shape2{4, 4};
  CHECK(r.devices_holding(std::array<slice, 2>{sl(0, 2), sl(0, 4)}, shape2) == std::vector<int>{0, 3});  // sorted
  CHECK(r.devices_holding(std::array<slice, 2>{sl(2, 4), sl(0, 4)}, shape2) == std::vector<int>{1, 2});
}

TEST_CASE("named_sharding: uneven shapes give ceil-sized blocks, the last ones smaller or empty",
          "[core][named_sharding]") {
  runtime rt{4};
  auto m = tessera::make_mesh<"x">({4});
  named_sharding s(m, P<"x">{});
  CHECK(s.shard_shape(tessera::shape_t<1>{5}) == tessera::shape_t<1>{2});
  CHECK(s.block(0, tessera::shape_t<1>{5})[0] == sl(0, 2));
  CHECK(s.block(1, tessera::shape_t<1>{5})[0] == sl(2, 4));
  CHECK(s.block(2, tessera::shape_t<1>{5})[0] == sl(4, 5));
  CHECK(s.block(3, tessera::shape_t<1>{5})[0] == sl(5, 5));
  CHECK(s.block(3, tessera::shape_t<1>{2})[0].size() == 0);
  CHECK(s.shard_shape(tessera::shape_t<1>{2}) == tessera::shape_t<1>{1});
  CHECK(s.shard_shape(tessera::shape_t<1>{0}) == tessera::shape_t<1>{0});
  CHECK(s.shard_shape(tessera::shape_t<1>{13}) == tessera::shape_t<1>{4});
  CHECK(s.block(3, tessera::shape_t<1>{13})[0] == sl(12, 13));

  STATIC_REQUIRE(tessera::block_range(10, 3, 0) == slice{0, 4});
  STATIC_REQUIRE(tessera::block_range(10, 3, 2) == slice{8, 10});
  STATIC_REQUIRE(tessera::block_range(3, 8, 5) == slice{3, 3});
  STATIC_REQUIRE(tessera::block_range(0, 2, 1) == slice{0, 0});
  STATIC_REQUIRE(tessera::block_range(7, 1, 0) == slice{0, 7});
  STATIC_REQUIRE(slice{2, 7}.size() == 5);
  CHECK(str(slice{0, 2}) == "slice(0, 2, None)");
}

TEST_CASE("named_sharding::is_fully_replicated", "[core][named_sharding]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  auto one = tessera::make_mesh<"x", "y">({1, 4});
  auto ones = tessera::make_mesh<"x", "y">({1, 1});
  CHECK(named_sharding(m, P<>{}).is_fully_replicated());
  CHECK(named_sharding(m, P<none, none>{}).is_fully_replicated());
  CHECK(named_sharding(one, P<"x">{}).is_fully_replicated());   // 'x' has size 1
  CHECK_FALSE(named_sharding(m, P<"x">{}).is_fully_replicated());  // 'x' has size 2
  CHECK_FALSE(named_sharding(one, P<"y">{}).is_fully_replicated());
  CHECK_FALSE(named_sharding(one, P<none, axes<"x", "y">>{}).is_fully_replicated());
  CHECK(named_sharding(ones, P<axes<"x", "y">>{}).is_fully_replicated());
}

TEST_CASE("named_sharding equality", "[core][named_sharding]") {
  runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 4});
  auto m_same = tessera::make_mesh<"x", "y">({2, 4});
  auto m_sizes = tessera::make_mesh<"x", "y">({4, 2});
  auto m_order = tessera::make_mesh<"x", "y">({2, 4}, std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  auto m_explicit = tessera::make_mesh<"x", "y">({2, 4}, tessera::explicit_axes);
  auto m1 = tessera::make_mesh<"x">({8});

  CHECK(named_sharding(m, P<"x">{}) == named_sharding(m, P<"x", none>{}));
  CHECK(named_sharding(m, P<"x", none>{}) == named_sharding(m, P<"x">{}));
  CHECK(named_sharding(m, P<"x">{}) == named_sharding(m_same, P<"x">{}));
  CHECK(named_sharding(m, P<>{}) == named_sharding(m, P<none, none>{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m, P<"y">{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m, P<none, "x">{}));
  CHECK_FALSE(named_sharding(m, P<"x", "y">{}) == named_sharding(m, P<"y", "x">{}));
  CHECK_FALSE(named_sharding(m, P<axes<"x", "y">>{}) == named_sharding(m, P<axes<"y", "x">>{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m_sizes, P<"x">{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m_order, P<"x">{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m_explicit, P<"x">{}));
  CHECK_FALSE(named_sharding(m, P<"x">{}) == named_sharding(m1, P<"x">{}));
  CHECK(named_sharding(m, P<"x">{}) != named_sharding(m, P<"y">{}));
}

TEST_CASE("named_sharding: what must not compile is rejected by overload resolution", "[core][named_sharding]") {
  using M = mesh<"x", "y">;
  STATIC_REQUIRE(can_make_sharding<M, P<"x">>);
  STATIC_REQUIRE(!tessera::sharding<int>);
  STATIC_REQUIRE(!tessera::sharding<M>);
  STATIC_REQUIRE(tessera::sharding<single_device_sharding>);
  STATIC_REQUIRE(tessera::sharding<named_sharding<M, P<"x", none>>>);
  STATIC_REQUIRE(std::is_constructible_v<M, std::array<int, 2>, std::vector<int>>);
  STATIC_REQUIRE(!std::is_constructible_v<M, std::array<int, 3>, std::vector<int>>);
  STATIC_REQUIRE(!std::is_convertible_v<int, single_device_sharding>);  // explicit
  STATIC_REQUIRE(!can_device_put<int, std::vector<float>>);
  STATIC_REQUIRE(!can_device_put<M, std::vector<float>>);
}

// ---------------------------------------------------------------------------
// SingleDeviceSharding
// ---------------------------------------------------------------------------

TEST_CASE("single_device_sharding", "[core][single_device_sharding]") {
  CHECK(str(single_device_sharding{}) == "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)");
  CHECK(str(single_device_sharding(0)) == "SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=unpinned_host)");
  CHECK(str(single_device_sharding(5)) == "SingleDeviceSharding(device=CpuDevice(id=5), memory_kind=unpinned_host)");
  single_device_sharding s(3);
  tessera::shape_t<2> const shape{4, 7};
  CHECK(s.device() == 3);
  CHECK(s.device_ids() == std::vector<int>{3});
  CHECK(s.num_devices() == 1);
  CHECK(s.num_shards(0) == 1);
  CHECK(s.num_shards(1) == 1);
  CHECK(s.shard_index(0, 1) == 0);
  CHECK(s.block(0, shape) == std::array<slice, 2>{sl(0, 4), sl(0, 7)});
  CHECK(s.shard_shape(shape) == shape);
  CHECK(s.replica_id(0) == 0);
  CHECK(s.is_fully_replicated());
  auto const map = s.devices_indices_map(shape);
  REQUIRE(map.size() == 1);
  CHECK(map.begin()->first == 3);
  CHECK(map.begin()->second == std::array<slice, 2>{sl(0, 4), sl(0, 7)});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(0, 4), sl(0, 7)}, shape) == std::vector<int>{3});
  CHECK(s.devices_holding(std::array<slice, 2>{sl(0, 2), sl(0, 7)}, shape).empty());
  CHECK(s == single_device_sharding(3));
  CHECK_FALSE(s == single_device_sharding(0));
  REQUIRE_THROWS_AS(single_device_sharding(-1), std::invalid_argument);
  REQUIRE_THROWS_WITH(single_device_sharding(-2), Contains("device id -2 is negative"));
}

// ---------------------------------------------------------------------------
// dtypes
// ---------------------------------------------------------------------------

TEST_CASE("dtype names are JAX's", "[core][dtype]") {
  STATIC_REQUIRE(tessera::dtype_name<float>() == "float32");
  STATIC_REQUIRE(tessera::dtype_name<double>() == "float64");
  STATIC_REQUIRE(tessera::dtype_name<bool>() == "bool");
  STATIC_REQUIRE(tessera::dtype_name<std::int8_t>() == "int8");
  STATIC_REQUIRE(tessera::dtype_name<std::int16_t>() == "int16");
  STATIC_REQUIRE(tessera::dtype_name<std::int32_t>() == "int32");
  STATIC_REQUIRE(tessera::dtype_name<std::int64_t>() == "int64");
  STATIC_REQUIRE(tessera::dtype_name<std::uint8_t>() == "uint8");
  STATIC_REQUIRE(tessera::dtype_name<std::uint16_t>() == "uint16");
  STATIC_REQUIRE(tessera::dtype_name<std::uint32_t>() == "uint32");
  STATIC_REQUIRE(tessera::dtype_name<std::uint64_t>() == "uint64");
  STATIC_REQUIRE(tessera::element_type<float>);
  STATIC_REQUIRE(tessera::element_type<bool>);
  STATIC_REQUIRE(!tessera::element_type<float const>);
  STATIC_REQUIRE(!tessera::element_type<std::string>);
  STATIC_REQUIRE(!tessera::element_type<float*>);
}

TEST_CASE("version macros agree", "[core][version]") {
  std::string const v = std::to_string(TESSERA_VERSION_MAJOR) + "." + std::to_string(TESSERA_VERSION_MINOR) + "." +
                        std::to_string(TESSERA_VERSION_PATCH);
  CHECK(v == TESSERA_VERSION_STRING);
}

// detail::apply and detail::unique_function stand in for std::apply and std::function in the
// expression and autodiff code (docs/headers.md): the same results, and the callable owned,
// moved and destroyed exactly once (ASan reports a leak or a double delete).
TEST_CASE("detail::apply unpacks a tuple as std::apply does") {
  std::tuple<int, double, std::string> t{2, 0.5, "ab"};
  auto const r = tessera::detail::apply([](int i, double d, std::string const& s) { return s + std::to_string(i * d); }, t);
  CHECK(r == std::apply([](int i, double d, std::string const& s) { return s + std::to_string(i * d); }, t));
  int x = 0;
  tessera::detail::apply([](int& a, int b) { a = b; }, std::tie(x, std::get<0>(t)));  // references pass through
  CHECK(x == 2);
  CHECK(tessera::detail::apply([] { return 7; }, std::tuple<>{}) == 7);
}

TEST_CASE("detail::unique_function owns its callable, moves it and destroys it once") {
  struct counted {
    int* live;
    int k;
    explicit counted(int* l, int kk) : live(l), k(kk) { ++*live; }
    counted(counted&& o) noexcept : live(o.live), k(o.k) { ++*live; }
    counted(counted const&) = delete;  // never copied
    ~counted() { --*live; }
    int operator()(int v) { return v + k++; }  // called as non-const, as std::function's target
  };
  int live = 0;
  {
    tessera::detail::unique_function<int(int)> f = counted(&live, 10);
    CHECK(live == 1);
    CHECK(static_cast<bool>(f));
    CHECK(f(1) == 11);
    CHECK(f(1) == 12);  // state kept between calls
    auto g = std::move(f);
    CHECK(live == 1);
    CHECK_FALSE(static_cast<bool>(f));  // NOLINT(bugprone-use-after-move): moved-from is empty
    CHECK_THROWS_AS(f(1), std::bad_function_call);
    CHECK(g(0) == 12);
    tessera::detail::unique_function<int(int)> h;
    h = std::move(g);
    CHECK(h(0) == 13);
    h = counted(&live, 0);  // the old callable is destroyed
    CHECK(live == 1);
    h = nullptr;
    CHECK(live == 0);
    CHECK_FALSE(static_cast<bool>(h));
  }
  CHECK(live == 0);
  // A callable whose result is dropped, for a void signature, as std::function allows.
  int calls = 0;
  tessera::detail::unique_function<void()> v = [&calls] { return ++calls; };
  v();
  CHECK(calls == 1);
}
