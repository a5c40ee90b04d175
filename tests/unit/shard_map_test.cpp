// shard_map and the collectives, checked against references computed on the host:
// every device's value is known in advance (a function of its mesh position), so the
// expected result of a collective on each device is built here with plain xtensor views
// from the devices of its group, found independently of the library's own group logic.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::axis_name;
using tessera::P;
using tessera::runtime;
using tessera_test::same_array;

namespace {

// ---------------------------------------------------------------------------
// Reference side
// ---------------------------------------------------------------------------

std::vector<std::size_t> coords_of(std::size_t p, std::vector<std::size_t> const& sizes) {
  std::vector<std::size_t> c(sizes.size());
  for (std::size_t i = sizes.size(); i-- > 0;) {
    c[i] = p % sizes[i];
    p /= sizes[i];
  }
  return c;
}

/// The mesh positions of p's group over `ax` (mesh axis indices), ordered by their index along `ax`.
std::vector<std::size_t> group_members(std::size_t p, std::vector<std::size_t> const& sizes,
                                       std::vector<std::size_t> const& ax) {
  std::size_t n = 1;
  for (auto s : sizes) n *= s;
  auto const cp = coords_of(p, sizes);
  std::vector<std::pair<std::size_t, std::size_t>> ranked;  // (index along ax, position)
  for (std::size_t q = 0; q < n; ++q) {
    auto const cq = coords_of(q, sizes);
    bool same_elsewhere = true;
    for (std::size_t a = 0; a < sizes.size(); ++a)
      if (std::find(ax.begin(), ax.end(), a) == ax.end() && cq[a] != cp[a]) same_elsewhere = false;
    if (!same_elsewhere) continue;
    std::size_t r = 0;
    for (auto a : ax) r = r * sizes[a] + cq[a];
    ranked.emplace_back(r, q);
  }
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::size_t> out;
  for (auto const& [r, q] : ranked) out.push_back(q);
  return out;
}

std::size_t rank_in(std::vector<std::size_t> const& members, std::size_t p) {
  return static_cast<std::size_t>(std::find(members.begin(), members.end(), p) - members.begin());
}

/// Device p's value: small integers (exact in float sums) that differ per device and per element.
template <class T, std::size_t N>
xt::xtensor<T, N> value_of(std::size_t p, std::array<std::size_t, N> const& shape) {
  auto v = xt::xtensor<T, N>::from_shape(shape);
  std::size_t i = 0;
  for (auto& x : v) {
    long const k = static_cast<long>((p * 37 + i * 11 + (i / 7) * 5) % 23) - 11;
    if constexpr (std::is_same_v<T, bool>) x = k > 0;
    else if constexpr (std::is_unsigned_v<T>) x = static_cast<T>(k + 11);
    else if constexpr (std::is_floating_point_v<T>) x = static_cast<T>(k) * T(0.25);
    else x = static_cast<T>(k);
    ++i;
  }
  return v;
}

using index_t = std::vector<std::size_t>;

/// Calls f(index) for every index of `shape`, row-major.
template <class F>
void for_each_index(index_t const& shape, F f) {
  for (auto n : shape)
    if (n == 0) return;
  index_t idx(shape.size(), 0);
  for (;;) {
    f(idx);
    std::size_t i = shape.size();
    for (;;) {
      if (i == 0) return;
      --i;
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}
template <class C>
index_t shape_of(C const& c) {
  return index_t(c.shape().begin(), c.shape().end());
}
index_t inserted(index_t v, std::size_t at, std::size_t value) {
  v.insert(v.begin() + static_cast<std::ptrdiff_t>(at), value);
  return v;
}
index_t shifted(index_t v, std::size_t at, std::size_t by) {
  v[at] += by;
  return v;
}
template <class C>
auto& at(C& c, index_t const& i) {
  return c.element(i.begin(), i.end());
}

// ---------------------------------------------------------------------------
// Library side: run a body on every device and collect each device's result
// ---------------------------------------------------------------------------

template <class Mesh>
constexpr tessera::dim_spec every_axis() {
  tessera::dim_spec d;
  for (auto const& a : Mesh::axes) d.push(a.name);
  return d;
}

/// Runs body() on every device; row p of the result is what the device at mesh position p returned.
template <class Mesh, class Body>
auto per_device(Mesh const& m, Body body) {
  auto f = tessera::shard_map(
      [body]() {
        auto r = [&] {
          auto v = body();
          if constexpr (tessera::detail::is_scalar_value<decltype(v)>) {
            using S = typename tessera::detail::scalar_type<decltype(v)>::type;
            return xt::xtensor<S, 0>(static_cast<S>(v));
          } else {
            return v;
          }
        }();
        using T = typename decltype(r)::value_type;
        constexpr std::size_t N = decltype(r)::rank;
        std::array<std::size_t, N + 1> shape{};
        shape[0] = 1;
        for (std::size_t i = 0; i < N; ++i) shape[i + 1] = r.shape()[i];
        auto lifted = xt::xtensor<T, N + 1>::from_shape(shape);
        std::copy(r.begin(), r.end(), lifted.begin());
        return lifted;
      },
      m, tessera::in_specs(), tessera::out_specs(P<every_axis<Mesh>()>{}));
  return tessera::to_host(f());
}

template <class T, std::size_t N>
xt::xtensor<T, N> row(auto const& all, std::size_t p) {
  return xt::view(all, p);
}

std::string where(std::vector<std::size_t> const& sizes, std::size_t p) {
  std::string s = "mesh sizes (";
  for (auto x : sizes) s += std::to_string(x) + " ";
  return s + ") position " + std::to_string(p);
}

/// Checks every reduction over the axes `A...` (mesh axis indices `ax`) for one mesh.
template <class T, axis_name... A, class Mesh, std::size_t N>
void check_reductions(Mesh const& m, std::vector<std::size_t> const& ax, std::array<std::size_t, N> shape) {
  std::vector<std::size_t> const sizes(m.sizes().begin(), m.sizes().end());
  auto sums = per_device(m, [shape] {
    auto const p = tessera::detail::current_frame->pos;  // the test's own notion of "which device"
    return tessera::psum<A...>(value_of<T, N>(p, shape));
  });
  auto maxs = per_device(m, [shape] { return tessera::pmax<A...>(value_of<T, N>(tessera::detail::current_frame->pos, shape)); });
  auto mins = per_device(m, [shape] { return tessera::pmin<A...>(value_of<T, N>(tessera::detail::current_frame->pos, shape)); });
  auto means = per_device(m, [shape] { return tessera::pmean<A...>(value_of<T, N>(tessera::detail::current_frame->pos, shape)); });
  for (std::size_t p = 0; p < m.num_devices(); ++p) {
    auto const members = group_members(p, sizes, ax);
    using V = typename decltype(sums)::value_type;
    xt::xtensor<T, N> s = value_of<T, N>(members[0], shape), mx = s, mn = s;
    static_assert(std::is_same_v<V, T>);
    for (std::size_t j = 1; j < members.size(); ++j) {
      auto const v = value_of<T, N>(members[j], shape);
      s = s + v;
      mx = xt::maximum(mx, v);
      mn = xt::minimum(mn, v);
    }
    INFO(where(sizes, p));
    CHECK(same_array(row<T, N>(sums, p), s));
    CHECK(same_array(row<T, N>(maxs, p), mx));
    CHECK(same_array(row<T, N>(mins, p), mn));
    using R = typename decltype(means)::value_type;
    xt::xtensor<R, N> const mean = xt::cast<R>(s) / static_cast<R>(members.size());
    CHECK(xt::allclose(row<R, N>(means, p), mean));
  }
}

/// Checks all_gather (untiled and tiled), psum_scatter, all_to_all and ppermute over `A...`.
template <class T, axis_name... A, class Mesh>
void check_data_movement(Mesh const& m, std::vector<std::size_t> const& ax) {
  std::vector<std::size_t> const sizes(m.sizes().begin(), m.sizes().end());
  std::size_t k = 1;
  for (auto a : ax) k *= sizes[a];
  auto pos = [] { return tessera::detail::current_frame->pos; };
  std::array<std::size_t, 2> const shape{3, 2};
  for (std::size_t axis = 0; axis <= 2; ++axis) {
    auto got = per_device(m, [&] { return tessera::all_gather<A...>(value_of<T, 2>(pos(), shape), axis); });
    for (std::size_t p = 0; p < m.num_devices(); ++p) {
      auto const members = group_members(p, sizes, ax);
      std::array<std::size_t, 3> out_shape{};
      for (std::size_t i = 0, j = 0; i < 3; ++i) out_shape[i] = i == axis ? k : shape[j++];
      auto want = xt::xtensor<T, 3>::from_shape(out_shape);
      for (std::size_t j = 0; j < k; ++j) {
        auto const v = value_of<T, 2>(members[j], shape);
        for_each_index(shape_of(v), [&](index_t const& i) { at(want, inserted(i, axis, j)) = at(v, i); });
      }
      INFO(where(sizes, p) << " all_gather axis " << axis);
      CHECK(same_array(row<T, 3>(got, p), want));
    }
  }
  for (std::size_t axis = 0; axis < 2; ++axis) {
    auto got = per_device(m, [&] { return tessera::all_gather<A...>(value_of<T, 2>(pos(), shape), axis, tessera::tiled); });
    for (std::size_t p = 0; p < m.num_devices(); ++p) {
      auto const members = group_members(p, sizes, ax);
      auto out_shape = shape;
      out_shape[axis] *= k;
      auto want = xt::xtensor<T, 2>::from_shape(out_shape);
      for (std::size_t j = 0; j < k; ++j) {
        auto const v = value_of<T, 2>(members[j], shape);
        for_each_index(shape_of(v), [&](index_t const& i) { at(want, shifted(i, axis, j * shape[axis])) = at(v, i); });
      }
      INFO(where(sizes, p) << " all_gather tiled axis " << axis);
      CHECK(same_array(row<T, 2>(got, p), want));
    }
  }
  if constexpr (!std::is_same_v<T, bool>) {
    // psum_scatter: untiled over a dimension of size k, tiled over one of 2k.
    for (std::size_t dim = 0; dim < 2; ++dim) {
      std::array<std::size_t, 2> sh{2, 3};
      sh[dim] = k;
      auto got = per_device(m, [&] { return tessera::psum_scatter<A...>(value_of<T, 2>(pos(), sh), dim); });
      std::array<std::size_t, 2> sht{2, 3};
      sht[dim] = 2 * k;
      auto got_tiled =
          per_device(m, [&] { return tessera::psum_scatter<A...>(value_of<T, 2>(pos(), sht), dim, tessera::tiled); });
      for (std::size_t p = 0; p < m.num_devices(); ++p) {
        auto const members = group_members(p, sizes, ax);
        std::size_t const r = rank_in(members, p);
        xt::xtensor<T, 2> total = value_of<T, 2>(members[0], sh), total_t = value_of<T, 2>(members[0], sht);
        for (std::size_t j = 1; j < k; ++j) {
          total = total + value_of<T, 2>(members[j], sh);
          total_t = total_t + value_of<T, 2>(members[j], sht);
        }
        // Untiled: index r of dimension dim, which disappears; tiled: rows [2r, 2r + 2) of it.
        auto want = xt::xtensor<T, 1>::from_shape({sh[1 - dim]});
        for_each_index(shape_of(want), [&](index_t const& i) { at(want, i) = at(total, inserted(i, dim, r)); });
        std::array<std::size_t, 2> wt_shape = sht;
        wt_shape[dim] = 2;
        auto want_t = xt::xtensor<T, 2>::from_shape(wt_shape);
        for_each_index(shape_of(want_t), [&](index_t const& i) { at(want_t, i) = at(total_t, shifted(i, dim, 2 * r)); });
        INFO(where(sizes, p) << " psum_scatter dim " << dim);
        CHECK(same_array(row<T, 1>(got, p), want));
        CHECK(same_array(row<T, 2>(got_tiled, p), want_t));
      }
    }
  }
  // all_to_all, rank 3, every (split, concat) pair, untiled and tiled.
  for (std::size_t split = 0; split < 3; ++split) {
    for (std::size_t concat = 0; concat < 3; ++concat) {
      std::array<std::size_t, 3> sh{2, 3, 2};
      sh[split] = k;
      auto got = per_device(m, [&] { return tessera::all_to_all<A...>(value_of<T, 3>(pos(), sh), split, concat); });
      std::array<std::size_t, 3> sht{2, 3, 2};
      sht[split] = 2 * k;
      auto got_t = per_device(
          m, [&] { return tessera::all_to_all<A...>(value_of<T, 3>(pos(), sht), split, concat, tessera::tiled); });
      for (std::size_t p = 0; p < m.num_devices(); ++p) {
        auto const members = group_members(p, sizes, ax);
        std::size_t const r = rank_in(members, p);
        // Untiled: piece i is member i's x[split = r] (rank 2), placed at index i of a new dimension `concat`.
        std::array<std::size_t, 2> piece{};
        for (std::size_t i = 0, j = 0; i < 3; ++i)
          if (i != split) piece[j++] = sh[i];
        std::array<std::size_t, 3> out_shape{};
        for (std::size_t i = 0, j = 0; i < 3; ++i) out_shape[i] = i == concat ? k : piece[j++];
        auto want = xt::xtensor<T, 3>::from_shape(out_shape);
        // Tiled: member i's chunk r along split, placed at chunk i along concat.
        auto tshape = sht;
        tshape[split] /= k;
        std::size_t const pc = tshape[concat];
        tshape[concat] *= k;
        auto want_t = xt::xtensor<T, 3>::from_shape(tshape);
        index_t tpiece(sht.begin(), sht.end());
        tpiece[split] = 2;
        for (std::size_t i = 0; i < k; ++i) {
          auto const v = value_of<T, 3>(members[i], sh);
          for_each_index(index_t(piece.begin(), piece.end()), [&](index_t const& y) {
            at(want, inserted(y, concat, i)) = at(v, inserted(y, split, r));
          });
          auto const vt = value_of<T, 3>(members[i], sht);
          for_each_index(tpiece, [&](index_t const& y) {
            at(want_t, shifted(y, concat, i * pc)) = at(vt, shifted(y, split, 2 * r));
          });
        }
        INFO(where(sizes, p) << " all_to_all split " << split << " concat " << concat);
        CHECK(same_array(row<T, 3>(got, p), want));
        CHECK(same_array(row<T, 3>(got_t, p), want_t));
      }
    }
  }
  // ppermute: a ring shift, and a partial permutation where some devices receive nothing.
  std::vector<std::pair<int, int>> ring, partial;
  for (std::size_t i = 0; i < k; ++i) ring.emplace_back(static_cast<int>(i), static_cast<int>((i + 1) % k));
  for (std::size_t i = 0; i + 1 < k; i += 2) partial.emplace_back(static_cast<int>(i + 1), static_cast<int>(i));
  for (auto const& perm : {ring, partial}) {
    auto got = per_device(m, [&] { return tessera::ppermute<A...>(value_of<T, 2>(pos(), shape), perm); });
    for (std::size_t p = 0; p < m.num_devices(); ++p) {
      auto const members = group_members(p, sizes, ax);
      std::size_t const r = rank_in(members, p);
      xt::xtensor<T, 2> want = xt::zeros<T>(shape);
      for (auto const& [s, d] : perm)
        if (static_cast<std::size_t>(d) == r) want = value_of<T, 2>(members[static_cast<std::size_t>(s)], shape);
      INFO(where(sizes, p) << " ppermute of " << perm.size() << " pairs");
      CHECK(same_array(row<T, 2>(got, p), want));
    }
  }
  // axis_index and axis_size.
  auto idx = per_device(m, [] { return xt::xtensor<int, 1>{tessera::axis_index<A...>(), tessera::axis_size<A...>()}; });
  for (std::size_t p = 0; p < m.num_devices(); ++p) {
    auto const members = group_members(p, sizes, ax);
    CHECK(idx(p, 0) == static_cast<int>(rank_in(members, p)));
    CHECK(idx(p, 1) == static_cast<int>(k));
  }
}

}  // namespace

TEST_CASE("the seeds' shard_map: per-block shapes, sums and psum on 8 devices", "[shard_map][seed]") {
  runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  auto const x = xt::arange<int>(32);
  std::vector<std::size_t> local_sizes(8);
  auto f = tessera::shard_map(
      [&](auto blk) {
        local_sizes[static_cast<std::size_t>(tessera::axis_index<"x">())] = blk.shape()[0];
        return tessera::psum<"x">(xt::sum(blk)());
      },
      mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  auto const total = f(x);
  CHECK(total.shape().size() == 0);
  CHECK(tessera::to_host(total)() == 496);
  CHECK(local_sizes == std::vector<std::size_t>(8, 4));
  for (auto const& sh : total.addressable_shards()) CHECK(sh.data() == 496);

  auto sums = tessera::shard_map([](auto blk) { return xt::xtensor<int, 1>{xt::sum(blk)()}; }, mesh,
                                 tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}))(x);
  CHECK(same_array(tessera::to_host(sums), xt::xtensor<int, 1>{6, 22, 38, 54, 70, 86, 102, 118}));

  // A lazy expression of a by-value block is safe to return: the block is held by value.
  auto y = tessera::shard_map([](auto blk) { return 2 * xt::sin(blk) + 1; }, mesh, tessera::in_specs(P<"x">{}),
                              tessera::out_specs(P<"x">{}))(xt::arange<float>(32.0f));
  xt::xtensor<float, 1> const want = 2 * xt::sin(xt::arange<float>(32.0f)) + 1;
  CHECK(same_array(tessera::to_host(y), want));
}

TEST_CASE("shard_map: several inputs and outputs, 2-D blocks, resharded array inputs", "[shard_map]") {
  runtime rt{8};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  xt::xtensor<double, 2> const a = xt::reshape_view(xt::arange<double>(48.0), {6, 8});
  xt::xtensor<double, 1> const b = xt::arange<double>(8.0) * 0.5;
  // An array laid out differently from the in_spec is resharded first, as JAX does.
  auto const a_rows = tessera::device_put(a, tessera::named_sharding(mesh, P<"y">{}));
  auto f = tessera::shard_map(
      [](auto ablk, auto bblk) {
        xt::xtensor<double, 2> scaled = ablk * bblk;  // broadcast over rows
        auto colsum = tessera::psum<"x">(xt::xtensor<double, 1>(xt::sum(ablk, {0})));
        return std::make_tuple(scaled, colsum);
      },
      mesh, tessera::in_specs(P<"x", "y">{}, P<"y">{}), tessera::out_specs(P<"x", "y">{}, P<"y">{}));
  auto [scaled, colsum] = f(a_rows, b);
  xt::xtensor<double, 2> const want_scaled = a * b;
  xt::xtensor<double, 1> const want_colsum = xt::sum(a, {0});
  CHECK(same_array(tessera::to_host(scaled), want_scaled));
  CHECK(same_array(tessera::to_host(colsum), want_colsum));
  CHECK(scaled.sharding() == tessera::named_sharding(mesh, P<"x", "y">{}));
  CHECK(colsum.sharding() == tessera::named_sharding(mesh, P<"y">{}));
}

TEST_CASE("a collective's result returned as it is becomes the output block without a copy", "[shard_map][collectives]") {
  runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 1> const h = xt::arange<float>(16.0f);
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<"x">{}));
  std::array<float const*, 4> made{};
  auto gather = tessera::shard_map(
      [&](auto blk) {
        auto r = tessera::all_gather<"x">(blk, 0, tessera::tiled);
        made[tessera::axis_index<"x">()] = r.data();
        return r;
      },
      mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  auto const g = gather(x);
  CHECK(same_array(tessera::to_host(g), h));
  for (std::size_t pos = 0; pos < 4; ++pos) CHECK(g.block_data(pos) == made[pos]);

  // A result still held elsewhere (here by a function kept past the shard_map) is copied, and
  // that holder still reads its values afterwards.
  std::array<std::function<xt::xtensor<float, 1>()>, 4> keep;
  auto held = tessera::shard_map(
      [&](auto blk) {
        auto r = tessera::all_gather<"x">(blk, 0, tessera::tiled);
        std::size_t const i = tessera::axis_index<"x">();
        made[i] = r.data();
        keep[i] = [r] { return xt::xtensor<float, 1>(r); };
        return r;
      },
      mesh, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
  auto const g2 = held(x);
  CHECK(same_array(tessera::to_host(g2), h));
  for (std::size_t pos = 0; pos < 4; ++pos) {
    CHECK(g2.block_data(pos) != made[pos]);
    CHECK(same_array(keep[pos](), h));
  }
  // A block of an argument returned as it is stays the argument's: copied.
  auto same = tessera::shard_map([](auto blk) { return blk; }, mesh, tessera::in_specs(P<"x">{}),
                                 tessera::out_specs(P<"x">{}));
  auto const y = same(x);
  for (std::size_t pos = 0; pos < 4; ++pos) CHECK(y.block_data(pos) != x.block_data(pos));
  CHECK(same_array(tessera::to_host(y), h));
}

TEST_CASE("reductions match the host on 1-D, 2-D and 3-D meshes of 1 to 8 devices", "[shard_map][collectives]") {
  runtime rt{8};
  std::array<std::size_t, 2> const small{3, 5};
  std::array<std::size_t, 2> const large{64, 160};  // 40 KiB of float: reduce-scatter + all-gather
  for (int n = 1; n <= 8; ++n) {
    auto const m = tessera::make_mesh<"x">({n});
    check_reductions<float, "x">(m, {0}, small);
    check_reductions<float, "x">(m, {0}, large);
    check_reductions<std::int32_t, "x">(m, {0}, std::array<std::size_t, 0>{});
  }
  for (auto [a, b] : {std::pair{2, 4}, std::pair{4, 2}, std::pair{2, 3}, std::pair{1, 5}, std::pair{3, 1}}) {
    auto const m = tessera::make_mesh<"x", "y">({a, b});
    check_reductions<std::int32_t, "x">(m, {0}, small);
    check_reductions<double, "y">(m, {1}, small);
    check_reductions<std::int64_t, "x", "y">(m, {0, 1}, small);
    check_reductions<float, "y", "x">(m, {1, 0}, large);
  }
  for (auto [a, b, c] : {std::tuple{2, 2, 2}, std::tuple{1, 2, 3}}) {
    auto const m = tessera::make_mesh<"x", "y", "z">({a, b, c});
    check_reductions<float, "z">(m, {2}, small);
    check_reductions<std::int32_t, "x", "z">(m, {0, 2}, small);
    check_reductions<double, "z", "y", "x">(m, {2, 1, 0}, large);
  }
}

TEST_CASE("data-moving collectives match the host on 1-D, 2-D and 3-D meshes", "[shard_map][collectives]") {
  runtime rt{8};
  for (int n : {1, 2, 3, 4, 8}) {
    auto const m = tessera::make_mesh<"x">({n});
    check_data_movement<float, "x">(m, {0});
  }
  check_data_movement<std::uint8_t, "x">(tessera::make_mesh<"x">({5}), {0});
  for (auto [a, b] : {std::pair{2, 4}, std::pair{3, 2}}) {
    auto const m = tessera::make_mesh<"x", "y">({a, b});
    check_data_movement<std::int32_t, "y">(m, {1});
    check_data_movement<double, "y", "x">(m, {1, 0});
  }
  auto const m3 = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
  check_data_movement<std::int64_t, "x", "z">(m3, {0, 2});
  // An explicit device order: groups follow mesh positions, not device ids.
  auto const mr = tessera::make_mesh<"x", "y">({2, 2}, std::vector<int>{3, 1, 0, 2});
  check_data_movement<float, "x">(mr, {0});
}

TEST_CASE("one body's collectives over different axes and axis orders each run among their own devices",
          "[shard_map][collectives]") {
  // A body keeps the groups of its collectives by their axes in order (group_of): gathers over
  // ("x", "y") and ("y", "x") rank the same devices differently, and a repeat must find its own.
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y", "z">({2, 2, 2});
  std::vector<std::size_t> const sizes{2, 2, 2};
  auto got = per_device(m, [] {
    xt::xtensor<float, 1> const v{static_cast<float>(tessera::detail::current_frame->pos)};
    xt::xtensor<float, 1> out = xt::zeros<float>({34});
    auto put = [&out](std::size_t at, auto const& r) { std::copy(r.begin(), r.end(), out.begin() + static_cast<std::ptrdiff_t>(at)); };
    put(0, tessera::all_gather<"x", "y">(v, 0, tessera::tiled));
    put(4, tessera::all_gather<"y", "x">(v, 0, tessera::tiled));
    put(8, tessera::all_gather<"z">(v, 0, tessera::tiled));
    put(10, tessera::all_gather<"x", "y">(v, 0, tessera::tiled));
    put(14, tessera::all_gather<"y", "x">(v, 0, tessera::tiled));
    put(18, tessera::all_gather<"z", "x">(v, 0, tessera::tiled));
    // More orders than the frame keeps (4): the oldest give way and are computed again.
    put(22, tessera::all_gather<"y">(v, 0, tessera::tiled));
    put(24, tessera::all_gather<"x", "z">(v, 0, tessera::tiled));
    put(28, tessera::all_gather<"x", "y">(v, 0, tessera::tiled));
    put(32, tessera::all_gather<"x">(v, 0, tessera::tiled));  // one axis, as "y" before it
    return out;
  });
  std::vector<std::vector<std::size_t>> const orders{{0, 1}, {1, 0}, {2}, {0, 1}, {1, 0}, {2, 0}, {1}, {0, 2}, {0, 1}, {0}};
  for (std::size_t p = 0; p < 8; ++p) {
    std::size_t at = 0;
    for (auto const& ax : orders) {
      auto const members = group_members(p, sizes, ax);
      for (std::size_t j = 0; j < members.size(); ++j) {
        INFO("device " << p << ", gather at " << at << ", member " << j);
        CHECK(got(p, at + j) == static_cast<float>(members[j]));
      }
      at += members.size();
    }
    CHECK(at == 34);
  }
}

TEST_CASE("bool reductions are any (pmax) and all (pmin)", "[shard_map][collectives]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  auto const any = per_device(m, [] { return tessera::pmax<"x">(xt::xtensor<bool, 1>{tessera::axis_index<"x">() == 2, false}); });
  auto const all = per_device(m, [] { return tessera::pmin<"x">(xt::xtensor<bool, 1>{tessera::axis_index<"x">() != 2, true}); });
  for (std::size_t p = 0; p < 4; ++p) {
    CHECK(any(p, 0));
    CHECK_FALSE(any(p, 1));
    CHECK_FALSE(all(p, 0));
    CHECK(all(p, 1));
  }
}

TEST_CASE("shard_map errors name the values", "[shard_map][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x", "y">({2, 2});
  auto id = [](auto blk) { return xt::xtensor<float, 1>(blk); };
  SECTION("a shape not divisible by its axes") {
    auto f = tessera::shard_map(id, m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(7.0f))),
                        Contains("argument 0 has shape (7,)") && Contains("splits dimension 0 over 2 devices") &&
                            Contains("not evenly divisible by 2; consider padding"));
  }
  SECTION("a collective over an axis the mesh lacks, on a value whose type does not know the mesh") {
    // On a block this fails to compile (tests/compile_fail/collective_axis_not_in_mesh.cpp); a plain
    // container does not carry the mesh, so the check runs when the collective does.
    auto f = tessera::shard_map([](auto blk) { return tessera::psum<"z">(xt::xtensor<float, 1>(blk)); }, m,
                                tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(4.0f))),
                        Contains("psum: mesh axis 'z' is not in the shard_map's mesh, whose axes are ('x', 'y')"));
  }
  SECTION("a collective outside shard_map") {
    REQUIRE_THROWS_WITH(tessera::psum<"x">(1.0f), Contains("psum was called outside a shard_map body"));
  }
  SECTION("psum_scatter and all_to_all sizes") {
    auto f = tessera::shard_map([](auto blk) { return tessera::psum_scatter<"x">(blk, 0); }, m,
                                tessera::in_specs(P<>{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 2>(xt::zeros<float>({3, 2}))),
                        Contains("psum_scatter: dimension 0 has size 3 but must equal the axis size 2"));
    auto g = tessera::shard_map([](auto blk) { return tessera::all_to_all<"y">(blk, 0, 1, tessera::tiled); }, m,
                                tessera::in_specs(P<>{}), tessera::out_specs(P<"y">{}));
    REQUIRE_THROWS_WITH(g(xt::xtensor<float, 2>(xt::zeros<float>({3, 2}))),
                        Contains("split_axis 0 has size 3, which is not evenly divisible by the axis size 2"));
  }
  SECTION("all_gather's axis, blocking and asynchronous") {
    auto f = tessera::shard_map([](auto blk) { return tessera::all_gather<"x">(xt::xtensor<float, 1>(blk), 2); }, m,
                                tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(4.0f))),
                        Contains("tessera::all_gather: axis 2 is out of range for a rank-1 value (0 to 1)"));
    auto g = tessera::shard_map(
        [](auto blk) { return tessera::all_gather_async<"x">(xt::xtensor<float, 1>(blk), 1, tessera::tiled).wait(); }, m,
        tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(g(xt::xtensor<float, 1>(xt::arange<float>(4.0f))),
                        Contains("tessera::all_gather_async(tiled): axis 1 is out of range for a rank-1 value (0 to 0)"));
  }
  SECTION("ppermute pairs") {
    auto f = tessera::shard_map(
        [](auto blk) { return tessera::ppermute<"x">(blk, {{0, 1}, {1, 1}}); }, m, tessera::in_specs(P<"x">{}),
        tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(4.0f))),
                        Contains("ppermute: destination 1 appears twice in perm"));
  }
#ifndef NDEBUG
  SECTION("an out_spec that claims replication the result does not have (debug builds)") {
    // The compile-time check is switched off (JAX's check_vma=False), so the run-time one fires.
    auto f = tessera::shard_map([](auto blk) { return xt::xtensor<float, 1>(blk); }, m, tessera::in_specs(P<"x">{}),
                                tessera::out_specs(P<>{}), tessera::no_check_vma);
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(4.0f))),
                        Contains("out_specs[0] = P() promises the result is the same") &&
                            Contains("differ along 'x'"));
    // A value that left the tessera types (a plain int from axis_index) escapes the compile-time
    // check: the input is replicated, so the untracked result counts as the same everywhere.
    auto g = tessera::shard_map(
        [](auto blk) {
          int const i = tessera::axis_index<"y">();
          return xt::xtensor<float, 1>(blk * static_cast<float>(i));
        },
        m, tessera::in_specs(P<>{}), tessera::out_specs(P<>{}));
    REQUIRE_THROWS_WITH(g(xt::xtensor<float, 1>(xt::arange<float>(4.0f))), Contains("differ along 'y'"));
    auto ok = tessera::shard_map([](auto blk) { return tessera::psum<"x">(xt::xtensor<float, 1>(blk)); }, m,
                                 tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
    CHECK(same_array(tessera::to_host(ok(xt::xtensor<float, 1>(xt::arange<float>(4.0f)))),
                     xt::xtensor<float, 1>{2.0f, 4.0f}));
  }
#endif
}

TEST_CASE("a device that throws before, inside or after a collective hangs no one", "[shard_map][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  struct boom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  for (int where_it_throws : {0, 1, 2}) {
    auto f = tessera::shard_map(
        [where_it_throws](auto blk) {
          bool const me = tessera::axis_index<"x">() == 2;
          if (me && where_it_throws == 0) throw boom("device failed before the psum");
          auto s = tessera::psum<"x">(xt::sum(blk)());
          // Inside: the failing device's ppermute rejects its pairs while the others wait in theirs.
          std::vector<std::pair<int, int>> perm{{0, 1}, {1, 0}};
          if (me && where_it_throws == 1) perm.emplace_back(2, 0);
          auto t = tessera::ppermute<"x">(s, perm);
          auto u = tessera::psum<"x">(t);
          if (me && where_it_throws == 2) throw boom("device failed after the psum");
          return u;
        },
        m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
    INFO("throw point " << where_it_throws);
    try {
      (void)f(xt::xtensor<float, 1>(xt::arange<float>(8.0f)));
      FAIL("no exception");
    } catch (tessera::device_error const& e) {
      REQUIRE(e.failures().size() == 1);  // the others' abandoned collectives are not reported
      CHECK(e.device() == 2);
      if (where_it_throws == 1) {
        CHECK_THAT(e.what(), Contains("device 2 threw: tessera::ppermute: destination 0 appears twice in perm"));
        REQUIRE_THROWS_AS(e.rethrow_first(), std::invalid_argument);
      } else {
        CHECK_THAT(e.what(), Contains("device 2 threw: device failed"));
        REQUIRE_THROWS_AS(e.rethrow_first(), boom);
      }
    }
    // The pool and the mesh stay usable.
    auto g = tessera::shard_map([](auto blk) { return tessera::psum<"x">(xt::sum(blk)()); }, m,
                                tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
    CHECK(tessera::to_host(g(xt::xtensor<float, 1>(xt::arange<float>(8.0f))))() == 28.0f);
  }
}

TEST_CASE("devices that call different collectives get an error naming them, not a hang", "[shard_map][errors]") {
  runtime rt{4};
  auto const m = tessera::make_mesh<"x">({4});
  SECTION("different collectives") {
    auto f = tessera::shard_map(
        [](auto blk) {
          if (tessera::axis_index<"x">() == 1) return tessera::pmax<"x">(xt::sum(blk)());
          return tessera::psum<"x">(xt::sum(blk)());
        },
        m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<>{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(8.0f))),
                        Contains("is in psum over ('x',)") && Contains("device 1 is in pmax over ('x',)"));
  }
  SECTION("one device returns while the others are in a collective") {
    auto f = tessera::shard_map(
        [](auto blk) {
          float s = xt::sum(blk)();
          if (tessera::axis_index<"x">() != 3) s = tessera::psum<"x">(s);
          return xt::xtensor<float, 1>{s};
        },
        m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(8.0f))),
                        Contains("device 3 is in the end of the shard_map body"));
  }
  SECTION("different sizes in one psum") {
    auto f = tessera::shard_map(
        [](auto) {
          std::size_t const n = tessera::axis_index<"x">() == 0 ? 3 : 2;
          return tessera::psum<"x">(xt::xtensor<float, 1>(xt::zeros<float>({n})));
        },
        m, tessera::in_specs(P<"x">{}), tessera::out_specs(P<"x">{}));
    REQUIRE_THROWS_WITH(f(xt::xtensor<float, 1>(xt::arange<float>(8.0f))),
                        Contains("psum over ('x',) of 3 float32 elements per device") &&
                            Contains("psum over ('x',) of 2 float32 elements per device"));
  }
}

TEST_CASE("soak: thousands of back-to-back collectives", "[shard_map][soak]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({4, 2});
  auto f = tessera::shard_map(
      [](auto blk) {
        xt::xtensor<std::int64_t, 1> v = blk;
        for (int i = 0; i < 500; ++i) {
          v = tessera::psum<"x">(v) - tessera::psum<"x">(v) + v;  // unchanged, two all-reduces per step
          v = tessera::ppermute<"y">(v, {{0, 1}, {1, 0}});
        }
        return tessera::all_gather<"x", "y">(v, 0, tessera::tiled);
      },
      m, tessera::in_specs(P<axes<"x", "y">>{}), tessera::out_specs(P<>{}));
  xt::xtensor<std::int64_t, 1> const x = xt::arange<std::int64_t>(16);
  auto const r = tessera::to_host(f(x));
  // 500 swaps along 'y' (an even number) leave every block where it started.
  CHECK(same_array(r, x));
}

TEST_CASE("the mesh axes a value varies over are in its type, through expressions and collectives", "[shard_map][vma]") {
  runtime rt{8};
  auto const m = tessera::make_mesh<"x", "y">({2, 4});
  std::vector<std::string> seen;
  auto f = tessera::shard_map(
      [&seen](auto a, auto b) {
        using tessera::type_of;
        auto const psum_x = tessera::psum<"x">(a);
        std::vector<std::string> t{
            type_of(a),                                                   // 0
            type_of(b),                                                   // 1
            type_of(2.0f * a + 1.0f),                                     // 2: literals are the same everywhere
            type_of(a + b),                                               // 3: broadcast joins the axes
            type_of(psum_x),                                              // 4
            type_of(tessera::psum<"y">(a)),                               // 5: reducing an invariant axis
            type_of(tessera::psum<"x">(a + b)),                           // 6
            type_of(tessera::all_gather<"x">(a, 0, tessera::tiled)),      // 7
            type_of(tessera::ppermute<"y">(psum_x, {{0, 1}, {1, 0}})),    // 8: varies again
            type_of(tessera::psum_scatter<"y">(a, 1, tessera::tiled)),    // 9
            type_of(tessera::all_to_all<"x">(psum_x, 0, 1, tessera::tiled)),  // 10
            type_of(tessera::axis_index<"y">()),                          // 11
            type_of(tessera::psum<"x">(xt::sum(a)())),                    // 12: a plain number went in
            type_of(xt::xtensor<float, 2>(a)),                            // 13: a plain container
            type_of(xt::transpose(a)),                                    // 14
            type_of(xt::sum(a, {1})),                                     // 15
            type_of(xt::view(a, 0, xt::all())),                           // 16
            type_of(xt::zeros<float>({3})),                               // 17
            type_of(tessera::psum<"x">(xt::xtensor<float, 2>(a))),        // 18
            type_of(tessera::pmean<"x", "y">(a + b)),                     // 19
            type_of(psum_x * tessera::axis_index<"x">()),                 // 20: a tessera scalar in an expression
        };
        if (tessera::axis_index<"x">() == 0 && tessera::axis_index<"y">() == 0) seen = t;
        return a;
      },
      m, tessera::in_specs(P<"x">{}, P<"y">{}), tessera::out_specs(P<"x">{}));
  xt::xtensor<float, 2> const a = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto const r = f(a, xt::xtensor<float, 1>(xt::arange<float>(32.0f)));
  CHECK(same_array(tessera::to_host(r), a));
  std::vector<std::string> const want{
      "float32[2,8]{V:x}",  "float32[8]{V:y}",   "float32[2,8]{V:x}",   "float32[2,8]{V:(x,y)}", "float32[2,8]",
      "float32[2,8]{V:x}",  "float32[2,8]{V:y}", "float32[4,8]",        "float32[2,8]{V:y}",     "float32[2,2]{V:(x,y)}",
      "float32[1,16]{V:x}", "int32[]{V:y}",      "float32[]{V:?-x}",    "float32[2,8]",          "float32[8,2]{V:x}",
      "float32[2]{V:x}",    "float32[8]{V:x}",   "float32[3]",          "float32[2,8]{V:?-x}",   "float32[2,8]",
      "float32[2,8]{V:x}"};
  REQUIRE(seen.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("value " << i);
    CHECK(seen[i] == want[i]);
  }
}

TEST_CASE("vma set logic: joins, reductions and untracked values", "[vma]") {
  using namespace tessera::detail;
  constexpr auto xy = make_axis_set<"x", "y">();
  constexpr auto x = make_axis_set<"x">();
  constexpr vma_state block{xy, x, false, {}};
  constexpr vma_state raw = vma_state_of<untracked_vma>::value;
  STATIC_REQUIRE(resolve(reduced_over(block, x), xy).size == 0);
  STATIC_REQUIRE(resolve(varied_over(reduced_over(block, x), make_axis_set<"y">()), xy).subset_of(make_axis_set<"y">()));
  // An untracked value counts as varying over whatever the inputs vary over, minus what was reduced since.
  STATIC_REQUIRE(resolve(raw, xy).size == 2);
  STATIC_REQUIRE(resolve(reduced_over(raw, x), xy).size == 1);
  STATIC_REQUIRE(resolve(reduced_over(raw, x), xy).contains("y"));
  STATIC_REQUIRE(resolve(join(reduced_over(raw, x), reduced_over(raw, make_axis_set<"y">())), xy).size == 2);
  STATIC_REQUIRE(join(block, raw).mesh.size == 2);
  STATIC_REQUIRE(first_outside(xy, x) == axis_name("y"));
  STATIC_REQUIRE(first_outside(x, xy).empty());
  STATIC_REQUIRE(std::is_same_v<vma_type_t<block>, tessera::vma<tessera::in_mesh<"x", "y">, tessera::varying<"x">>>);
}
