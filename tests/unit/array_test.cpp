// Property tests of tessera's sharded arrays: for many shapes, meshes, device
// orders and PartitionSpecs, device_put / make_array_from_callback / to_host and
// every shard are checked against a layout re-derived here from first principles
// (row-major mesh coordinates, ceil(n/k) blocks, replica ids over unused axes),
// with the expected block contents taken from plain xt::view of the host array.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using tessera::axes;
using tessera::none;
using tessera::P;
using tessera::shape_t;
using tessera_test::same_array;

namespace {

// ---------------------------------------------------------------------------
// The reference layout, derived independently of tessera's block arithmetic
// ---------------------------------------------------------------------------

struct rng {
  std::size_t start = 0, stop = 0;
  std::size_t size() const { return stop - start; }
  friend bool operator==(rng const&, rng const&) = default;
  friend std::ostream& operator<<(std::ostream& os, rng const& r) { return os << r.start << ':' << r.stop; }
};
using block_t = std::vector<rng>;

struct mesh_cfg {
  std::vector<int> sizes;
  std::vector<int> ids;  // row-major device grid
};
using spec_desc = std::vector<std::vector<std::string>>;  // per dimension: its mesh axes, major to minor

struct expected_layout {
  std::vector<std::size_t> num_shards;            // per array dimension
  std::vector<block_t> blocks;                    // per mesh position
  std::vector<std::vector<std::size_t>> shard_idx;  // per mesh position, per dimension
  std::vector<int> replica;                       // per mesh position
};

std::string describe(std::vector<std::string> const& names, mesh_cfg const& m, spec_desc const& spec,
                     std::vector<std::size_t> const& shape) {
  std::ostringstream os;
  os << "mesh (";
  for (std::size_t a = 0; a < names.size(); ++a) os << (a ? ", " : "") << names[a] << '=' << m.sizes[a];
  os << ") ids [";
  for (std::size_t i = 0; i < m.ids.size(); ++i) os << (i ? "," : "") << m.ids[i];
  os << "] spec (";
  for (std::size_t i = 0; i < spec.size(); ++i) {
    os << (i ? ", " : "");
    if (spec[i].empty()) os << "None";
    for (std::size_t a = 0; a < spec[i].size(); ++a) os << (a ? "+" : "") << spec[i][a];
  }
  os << ") shape (";
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ')';
  return os.str();
}

expected_layout reference_layout(std::vector<std::string> const& names, mesh_cfg const& m, spec_desc const& spec,
                                 std::vector<std::size_t> const& shape) {
  std::size_t const R = names.size();
  auto axis = [&](std::string const& n) {
    for (std::size_t a = 0; a < R; ++a)
      if (names[a] == n) return a;
    throw std::logic_error("test bug: axis " + n + " not in the mesh");
  };
  std::size_t ndev = 1;
  for (int s : m.sizes) ndev *= static_cast<std::size_t>(s);
  if (ndev != m.ids.size()) throw std::logic_error("test bug: mesh ids do not match the sizes");

  expected_layout e;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    std::size_t k = 1;
    if (i < spec.size())
      for (auto const& n : spec[i]) k *= static_cast<std::size_t>(m.sizes[axis(n)]);
    e.num_shards.push_back(k);
  }
  std::vector<bool> used(R, false);
  for (auto const& d : spec)
    for (auto const& n : d) used[axis(n)] = true;

  for (std::size_t p = 0; p < ndev; ++p) {
    // Row-major coordinates: the last axis varies fastest.
    std::vector<std::size_t> c(R);
    std::size_t rest = p;
    for (std::size_t a = R; a-- > 0;) {
      c[a] = rest % static_cast<std::size_t>(m.sizes[a]);
      rest /= static_cast<std::size_t>(m.sizes[a]);
    }
    block_t b;
    std::vector<std::size_t> idx;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      std::size_t j = 0;
      if (i < spec.size())
        for (auto const& n : spec[i]) j = j * static_cast<std::size_t>(m.sizes[axis(n)]) + c[axis(n)];
      std::size_t const n = shape[i], k = e.num_shards[i];
      std::size_t const per = (n + k - 1) / k;  // ceil(n / k)
      std::size_t const start = std::min(j * per, n);
      std::size_t const stop = std::min(start + per, n);
      b.push_back({start, stop});
      idx.push_back(j);
    }
    int r = 0;
    for (std::size_t a = 0; a < R; ++a)
      if (!used[a]) r = r * m.sizes[a] + static_cast<int>(c[a]);
    e.blocks.push_back(b);
    e.shard_idx.push_back(idx);
    e.replica.push_back(r);
  }
  return e;
}

std::size_t volume(block_t const& b) {
  std::size_t v = 1;
  for (auto const& r : b) v *= r.size();
  return v;
}

template <std::size_t N>
block_t to_block(std::array<tessera::slice, N> const& s) {
  block_t b;
  for (auto const& x : s) b.push_back({x.start, x.stop});
  return b;
}
template <std::size_t N>
std::array<tessera::slice, N> to_slices(block_t const& b) {
  std::array<tessera::slice, N> s{};
  for (std::size_t i = 0; i < N; ++i) s[i] = {b[i].start, b[i].stop};
  return s;
}

// ---------------------------------------------------------------------------
// Host data and plain-xtensor expectations
// ---------------------------------------------------------------------------

template <class T>
T value_at(std::size_t i) {
  if constexpr (std::is_same_v<T, bool>) return (i * 7 + 3) % 5 < 2;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return static_cast<T>((i * 37 + 11) % 251);
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(i) * T(0.5) - T(3.25);
  else return static_cast<T>(static_cast<long long>(i) * 3 - 7);
}

template <class T, std::size_t N>
xt::xtensor<T, N> make_host(shape_t<N> const& shape) {
  auto h = xt::xtensor<T, N>::from_shape(shape);
  std::size_t i = 0;
  for (auto& x : h) x = value_at<T>(i++);
  return h;
}

template <class T, std::size_t N, std::size_t... I>
xt::xtensor<T, N> view_of_impl(xt::xtensor<T, N> const& h, block_t const& b, std::index_sequence<I...>) {
  return xt::view(h, xt::range(b[I].start, b[I].stop)...);
}
/// The block `b` of the host array, cut with plain xt::view.
template <class T, std::size_t N>
xt::xtensor<T, N> view_of(xt::xtensor<T, N> const& h, block_t const& b) {
  if constexpr (N == 0) {
    return h;
  } else {
    // An empty block cut from an empty array: xtensor's view would offset its null data
    // pointer (undefined behaviour, which clang's UBSan reports).
    if (h.size() == 0) {
      std::array<std::size_t, N> shape{};
      for (std::size_t i = 0; i < N; ++i) shape[i] = b[i].stop - b[i].start;
      return xt::xtensor<T, N>::from_shape(shape);
    }
    return view_of_impl(h, b, std::make_index_sequence<N>{});
  }
}

template <std::size_t N, std::size_t... I>
void add_one_impl(xt::xtensor<int, N>& cover, block_t const& b, std::index_sequence<I...>) {
  if (cover.size() == 0) return;  // nothing to cover (and xt::view would offset a null pointer)
  auto v = xt::view(cover, xt::range(b[I].start, b[I].stop)...);
  v += 1;
}

std::vector<int> sorted(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return v;
}

struct dev_block {
  int device;
  block_t block;
  friend bool operator==(dev_block const&, dev_block const&) = default;
  friend std::ostream& operator<<(std::ostream& os, dev_block const& d) {
    os << d.device << ":(";
    for (std::size_t i = 0; i < d.block.size(); ++i) os << (i ? "," : "") << d.block[i];
    return os << ')';
  }
};

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------

/// The sharding's own answers against the reference.
template <class S, std::size_t N>
void check_sharding_answers(S const& s, shape_t<N> const& shape, std::vector<int> const& ids,
                            expected_layout const& e) {
  CHECK(s.device_ids() == ids);
  CHECK(s.num_devices() == ids.size());
  std::vector<std::size_t> ns, ss, want_ss;
  bool fully = true;
  for (std::size_t i = 0; i < N; ++i) {
    ns.push_back(s.num_shards(i));
    fully = fully && e.num_shards[i] == 1;
    std::size_t const per = (shape[i] + e.num_shards[i] - 1) / e.num_shards[i];
    want_ss.push_back(std::min(per, shape[i]));
  }
  auto const got_ss = s.shard_shape(shape);
  ss.assign(got_ss.begin(), got_ss.end());
  CHECK(ns == e.num_shards);
  CHECK(ss == want_ss);
  CHECK(s.is_fully_replicated() == fully);

  std::vector<block_t> blocks;
  std::vector<int> reps;
  std::vector<std::vector<std::size_t>> idx;
  for (std::size_t p = 0; p < ids.size(); ++p) {
    blocks.push_back(to_block(s.block(p, shape)));
    reps.push_back(s.replica_id(p));
    std::vector<std::size_t> ip;
    for (std::size_t i = 0; i < N; ++i) ip.push_back(s.shard_index(p, i));
    idx.push_back(ip);
  }
  CHECK(blocks == e.blocks);
  CHECK(reps == e.replica);
  CHECK(idx == e.shard_idx);

  std::vector<dev_block> got_map, want_map;
  for (auto const& [d, b] : s.devices_indices_map(shape)) got_map.push_back({d, to_block(b)});
  for (std::size_t p = 0; p < ids.size(); ++p) want_map.push_back({ids[p], e.blocks[p]});
  std::sort(want_map.begin(), want_map.end(), [](auto const& a, auto const& b) { return a.device < b.device; });
  CHECK(got_map == want_map);

  for (std::size_t p = 0; p < ids.size(); ++p) {
    std::vector<int> holders;
    for (std::size_t q = 0; q < ids.size(); ++q)
      if (e.blocks[q] == e.blocks[p]) holders.push_back(ids[q]);
    auto const got = s.devices_holding(to_slices<N>(e.blocks[p]), shape);
    if (got != sorted(holders)) {
      INFO("block of mesh position " << p);
      CHECK(got == sorted(holders));
    }
  }
}

/// Every shard against the reference and the host array; tiling and replication.
template <class T, std::size_t N>
void check_shards(std::vector<tessera::shard<T, N>> const& shards, xt::xtensor<T, N> const& host,
                  std::vector<int> const& ids, expected_layout const& e) {
  REQUIRE(shards.size() == ids.size());
  for (std::size_t p = 0; p < ids.size(); ++p) {
    auto const& sh = shards[p];
    INFO("shard " << p << " on device " << ids[p]);
    CHECK(sh.device == ids[p]);
    CHECK(to_block(sh.index) == e.blocks[p]);
    CHECK(sh.replica_id == e.replica[p]);
    auto const want = view_of(host, e.blocks[p]);
    CHECK(same_array(sh.data, want));
    if (sh.data.size() != 0) CHECK(reinterpret_cast<std::uintptr_t>(sh.data.data()) % 64 == 0);
  }
  if constexpr (N > 0) {
    // The first replicas of the blocks tile the global array exactly once.
    auto cover = xt::xtensor<int, N>::from_shape(host.shape());
    cover.fill(0);
    for (auto const& sh : shards)
      if (sh.replica_id == 0) add_one_impl(cover, to_block(sh.index), std::make_index_sequence<N>{});
    CHECK(std::all_of(cover.begin(), cover.end(), [](int c) { return c == 1; }));
  }
  // Devices with the same shard indices hold the same block, with replica ids 0..r-1 once each,
  // r = devices / distinct blocks.
  std::map<std::vector<std::size_t>, std::vector<std::size_t>> groups;
  for (std::size_t p = 0; p < ids.size(); ++p) groups[e.shard_idx[p]].push_back(p);
  std::size_t distinct = 1;
  for (std::size_t k : e.num_shards) distinct *= k;
  CHECK(groups.size() == distinct);
  REQUIRE(ids.size() % groups.size() == 0);
  std::size_t const r = ids.size() / groups.size();
  for (auto const& [key, members] : groups) {
    CHECK(members.size() == r);
    std::vector<int> reps;
    for (std::size_t p : members) {
      reps.push_back(shards[p].replica_id);
      CHECK(shards[p].index == shards[members.front()].index);
    }
    std::vector<int> want(r);
    std::iota(want.begin(), want.end(), 0);
    CHECK(sorted(reps) == want);
  }
}

/// device_put and make_array_from_callback of `host` on `s`, checked against the reference.
template <class T, std::size_t N, class S>
void check_put(S const& s, xt::xtensor<T, N> const& host, std::vector<int> const& ids, expected_layout const& e) {
  shape_t<N> shape{};
  for (std::size_t i = 0; i < N; ++i) shape[i] = host.shape()[i];

  auto a = tessera::device_put(host, s);
  CHECK(a.shape() == shape);
  CHECK(a.sharding() == s);
  CHECK(same_array(tessera::to_host(a), host));
  check_shards<T, N>(a.addressable_shards(), host, ids, e);

  std::mutex mu;
  std::vector<block_t> requested;
  auto b = tessera::make_array_from_callback(shape, s, [&](std::array<tessera::slice, N> const& index) {
    std::lock_guard lock(mu);
    requested.push_back(to_block(index));
    return view_of(host, to_block(index));
  });
  CHECK(same_array(tessera::to_host(b), host));
  check_shards<T, N>(b.addressable_shards(), host, ids, e);
  // Asked for every non-empty block, at most once per device.
  CHECK(requested.size() <= ids.size());
  std::multiset<std::vector<std::size_t>> want_blocks, got_blocks;
  auto flat = [](block_t const& bl) {
    std::vector<std::size_t> v;
    for (auto const& x : bl) v.insert(v.end(), {x.start, x.stop});
    return v;
  };
  for (auto const& bl : e.blocks)
    if (volume(bl) != 0) want_blocks.insert(flat(bl));
  for (auto const& bl : requested)
    if (volume(bl) != 0) got_blocks.insert(flat(bl));
  CHECK(got_blocks == want_blocks);
}

// ---------------------------------------------------------------------------
// Case lists: meshes (run-time sizes and device orders) and shapes
// ---------------------------------------------------------------------------

std::vector<int> iota_ids(std::size_t n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}
/// n distinct device ids out of 0..7 in a scrambled order (fixed seed).
std::vector<int> scrambled_ids(std::size_t n, unsigned seed) {
  std::vector<int> all = iota_ids(8);
  std::mt19937 gen(seed);
  std::shuffle(all.begin(), all.end(), gen);
  all.resize(n);
  return all;
}

std::vector<mesh_cfg> meshes_1d() {
  std::vector<mesh_cfg> out;
  for (int n = 1; n <= 8; ++n) {
    out.push_back({{n}, iota_ids(static_cast<std::size_t>(n))});
    out.push_back({{n}, scrambled_ids(static_cast<std::size_t>(n), 100u + static_cast<unsigned>(n))});
  }
  return out;
}
std::vector<mesh_cfg> meshes_2d() {
  std::vector<mesh_cfg> out;
  for (auto sz : std::vector<std::vector<int>>{{1, 1}, {1, 4}, {2, 2}, {2, 4}, {4, 2}, {2, 3}, {3, 2}, {1, 8}, {8, 1}, {3, 1}})
    out.push_back({sz, iota_ids(static_cast<std::size_t>(sz[0] * sz[1]))});
  out.push_back({{2, 4}, {7, 6, 5, 4, 3, 2, 1, 0}});
  out.push_back({{2, 3}, scrambled_ids(6, 7)});
  out.push_back({{4, 2}, scrambled_ids(8, 8)});
  return out;
}
std::vector<mesh_cfg> meshes_3d() {
  std::vector<mesh_cfg> out;
  for (auto sz : std::vector<std::vector<int>>{{2, 2, 2}, {1, 2, 4}, {2, 1, 3}, {1, 1, 1}, {2, 2, 1}})
    out.push_back({sz, iota_ids(static_cast<std::size_t>(sz[0] * sz[1] * sz[2]))});
  out.push_back({{2, 2, 2}, scrambled_ids(8, 3)});
  out.push_back({{1, 2, 3}, scrambled_ids(6, 4)});
  return out;
}

std::vector<shape_t<1>> shapes_1d() {
  return {{0}, {1}, {2}, {3}, {5}, {7}, {8}, {11}, {13}, {16}, {24}};
}
std::vector<shape_t<2>> shapes_2d() {
  return {{0, 0}, {0, 5}, {3, 0}, {1, 1}, {1, 7}, {2, 3}, {5, 5}, {7, 2}, {8, 8}, {11, 13}, {4, 6}, {16, 3}, {13, 1}, {6, 12}};
}
std::vector<shape_t<3>> shapes_3d() {
  return {{0, 2, 3}, {1, 1, 1}, {2, 3, 5}, {3, 5, 7}, {4, 4, 4}, {8, 2, 6}, {5, 0, 2}, {2, 13, 3}, {6, 6, 2}};
}
template <std::size_t N>
std::vector<shape_t<N>> shapes_for() {
  if constexpr (N == 1) return shapes_1d();
  else if constexpr (N == 2) return shapes_2d();
  else return shapes_3d();
}

/// Every (mesh config, shape) for one mesh type (axis names), spec type, rank and element type.
template <class T, std::size_t N, class Spec, tessera::axis_name... Names>
void check_layouts(spec_desc const& spec, std::vector<mesh_cfg> const& meshes) {
  std::vector<std::string> const names{std::string(Names.view())...};
  for (auto const& mc : meshes) {
    std::array<int, sizeof...(Names)> sizes{};
    std::copy(mc.sizes.begin(), mc.sizes.end(), sizes.begin());
    auto const m = tessera::make_mesh<Names...>(sizes, mc.ids);
    tessera::named_sharding const s(m, Spec{});
    for (auto const& shape : shapes_for<N>()) {
      std::vector<std::size_t> const sv(shape.begin(), shape.end());
      INFO(describe(names, mc, spec, sv) << " dtype " << tessera::dtype_name<T>());
      auto const e = reference_layout(names, mc, spec, sv);
      check_sharding_answers(s, shape, mc.ids, e);
      check_put<T, N>(s, make_host<T, N>(shape), mc.ids, e);
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// The property tests
// ---------------------------------------------------------------------------

TEST_CASE("layouts over 1-D meshes match the reference", "[array][property]") {
  tessera::runtime rt{8};
  auto const meshes = meshes_1d();
  check_layouts<float, 1, P<>, "x">({}, meshes);
  check_layouts<float, 1, P<"x">, "x">({{"x"}}, meshes);
  check_layouts<float, 2, P<"x">, "x">({{"x"}}, meshes);
  check_layouts<float, 2, P<none, "x">, "x">({{}, {"x"}}, meshes);
  check_layouts<float, 3, P<none, none, "x">, "x">({{}, {}, {"x"}}, meshes);
}

TEST_CASE("layouts over 2-D meshes match the reference", "[array][property]") {
  tessera::runtime rt{8};
  auto const meshes = meshes_2d();
  SECTION("rank 1") {
    check_layouts<float, 1, P<"x">, "x", "y">({{"x"}}, meshes);
    check_layouts<float, 1, P<axes<"x", "y">>, "x", "y">({{"x", "y"}}, meshes);
    check_layouts<float, 1, P<axes<"y", "x">>, "x", "y">({{"y", "x"}}, meshes);
  }
  SECTION("rank 2") {
    check_layouts<float, 2, P<>, "x", "y">({}, meshes);
    check_layouts<float, 2, P<"x", "y">, "x", "y">({{"x"}, {"y"}}, meshes);
    check_layouts<float, 2, P<"y", "x">, "x", "y">({{"y"}, {"x"}}, meshes);
    check_layouts<float, 2, P<"x", none>, "x", "y">({{"x"}, {}}, meshes);
    check_layouts<float, 2, P<none, "y">, "x", "y">({{}, {"y"}}, meshes);
    check_layouts<float, 2, P<axes<"x", "y">>, "x", "y">({{"x", "y"}}, meshes);
    check_layouts<float, 2, P<none, axes<"y", "x">>, "x", "y">({{}, {"y", "x"}}, meshes);
  }
  SECTION("rank 3") {
    check_layouts<float, 3, P<"x", none, "y">, "x", "y">({{"x"}, {}, {"y"}}, meshes);
    check_layouts<float, 3, P<none, axes<"x", "y">>, "x", "y">({{}, {"x", "y"}}, meshes);
  }
}

TEST_CASE("layouts over 3-D meshes match the reference", "[array][property]") {
  tessera::runtime rt{8};
  auto const meshes = meshes_3d();
  check_layouts<float, 2, P<"x", "z">, "x", "y", "z">({{"x"}, {"z"}}, meshes);
  check_layouts<float, 2, P<none, "y">, "x", "y", "z">({{}, {"y"}}, meshes);  // two unused axes: replica order
  check_layouts<float, 2, P<axes<"x", "z">, "y">, "x", "y", "z">({{"x", "z"}, {"y"}}, meshes);
  check_layouts<float, 3, P<"x", none, "z">, "x", "y", "z">({{"x"}, {}, {"z"}}, meshes);
  check_layouts<float, 3, P<"x", "y", "z">, "x", "y", "z">({{"x"}, {"y"}, {"z"}}, meshes);
  check_layouts<float, 3, P<"z", "y", "x">, "x", "y", "z">({{"z"}, {"y"}, {"x"}}, meshes);
  check_layouts<float, 3, P<axes<"x", "y", "z">>, "x", "y", "z">({{"x", "y", "z"}}, meshes);
}

TEMPLATE_TEST_CASE("layouts hold for every element type", "[array][property][dtype]", float, double, std::int32_t,
                   std::int64_t, std::uint8_t, bool) {
  tessera::runtime rt{8};
  check_layouts<TestType, 1, P<"x">, "x">({{"x"}}, meshes_1d());
  auto const m2 = meshes_2d();
  check_layouts<TestType, 2, P<"x", "y">, "x", "y">({{"x"}, {"y"}}, m2);
  check_layouts<TestType, 2, P<none, axes<"y", "x">>, "x", "y">({{}, {"y", "x"}}, m2);
  check_layouts<TestType, 3, P<"x", none, "z">, "x", "y", "z">({{"x"}, {}, {"z"}}, meshes_3d());
}

TEST_CASE("the reference layout itself: spot checks written out by hand", "[array][property]") {
  // Guards the test's own arithmetic: 2x4 mesh, P('x', None), 5x3 array.
  auto const e = reference_layout({"x", "y"}, {{2, 4}, iota_ids(8)}, {{"x"}, {}}, {5, 3});
  CHECK(e.num_shards == std::vector<std::size_t>{2, 1});
  CHECK(e.blocks[0] == block_t{{0, 3}, {0, 3}});
  CHECK(e.blocks[5] == block_t{{3, 5}, {0, 3}});
  CHECK(e.replica == std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3});
  // ('y','x') on one dimension of 16: device at (x=1, y=2) (position 6) holds block 2*2+1 = 5.
  auto const f = reference_layout({"x", "y"}, {{2, 4}, iota_ids(8)}, {{"y", "x"}}, {16});
  CHECK(f.blocks[6] == block_t{{10, 12}});
  // 3 over 8: blocks of 1, then empty ones at the end.
  auto const g = reference_layout({"x"}, {{8}, iota_ids(8)}, {{"x"}}, {3});
  CHECK(g.blocks[2] == block_t{{2, 3}});
  CHECK(g.blocks[3] == block_t{{3, 3}});
  CHECK(g.blocks[7] == block_t{{3, 3}});
}

TEST_CASE("rank-0 arrays", "[array][rank0]") {
  tessera::runtime rt{4};
  xt::xtensor<double, 0> host = xt::xtensor<double, 0>::from_shape({});
  host() = 2.5;
  auto m = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{3, 1, 0, 2});
  auto a = tessera::device_put(host, tessera::named_sharding(m, P<>{}));
  CHECK(a.shape() == shape_t<0>{});
  CHECK(a.size() == 1);
  CHECK(a.is_fully_replicated());
  auto const back = tessera::to_host(a);
  CHECK(back() == 2.5);
  auto const shards = a.addressable_shards();
  REQUIRE(shards.size() == 4);
  std::vector<int> reps;
  for (auto const& sh : shards) {
    CHECK(sh.data() == 2.5);
    reps.push_back(sh.replica_id);
  }
  CHECK(sorted(reps) == std::vector<int>{0, 1, 2, 3});
  auto b = tessera::make_array_from_callback(shape_t<0>{}, tessera::single_device_sharding(2),
                                             [&](std::array<tessera::slice, 0> const&) { return host; });
  CHECK(tessera::to_host(b)() == 2.5);
  auto c = tessera::device_put(b, tessera::named_sharding(m, P<>{}));
  CHECK(tessera::to_host(c)() == 2.5);
}

TEST_CASE("array accessors", "[array]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{6, 2, 4, 1});
  tessera::named_sharding s(m, P<"x">{});
  auto const host = make_host<std::int64_t, 2>({6, 5});
  auto a = tessera::device_put(host, s);
  STATIC_REQUIRE(decltype(a)::rank == 2);
  STATIC_REQUIRE(decltype(a)::ndim() == 2);
  STATIC_REQUIRE(decltype(a)::dtype() == "int64");
  STATIC_REQUIRE(std::is_same_v<decltype(a)::value_type, std::int64_t>);
  STATIC_REQUIRE(tessera::array_type<decltype(a)>);
  STATIC_REQUIRE(!tessera::array_type<xt::xtensor<float, 2>>);
  CHECK(a.shape() == shape_t<2>{6, 5});
  CHECK(a.size() == 30);
  CHECK(a.nbytes() == 30 * sizeof(std::int64_t));
  CHECK(a.devices() == std::vector<int>{1, 2, 4, 6});
  CHECK_FALSE(a.is_fully_replicated());
  CHECK(a.sharding() == s);
  CHECK(a.pool().get() == &rt.pool());
  // Copies share the blocks (arrays are immutable values, like jax.Array).
  auto b = a;
  for (std::size_t p = 0; p < 4; ++p) CHECK(b.block_data(p) == a.block_data(p));
  auto r = tessera::device_put(host, tessera::named_sharding(m, P<>{}));
  CHECK(r.is_fully_replicated());
  auto one = tessera::device_put(host, 5);
  CHECK(one.devices() == std::vector<int>{5});
  CHECK(one.is_fully_replicated());
  CHECK(one.nbytes() == 30 * sizeof(std::int64_t));
}
