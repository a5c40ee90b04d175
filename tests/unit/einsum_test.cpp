// tessera::einsum (jnp.einsum) of one and two operands: values against a naive host einsum in
// double (every assignment of every index, written independently of the library's grouping
// into dot_general), result types against what JAX prints (the goldens of
// tests/jax/einsum_golden_test.cpp cover more), collectives against explain(), run-time errors,
// out_sharding, and grad against finite differences. Each spec combination is one
// instantiation, so the set is chosen; shapes and meshes vary at run time.

#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "grad_support.hpp"

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::none;
using tessera::P;

namespace {

/// einsum on the host, the slow way: every assignment of every index, explicit "->" required.
xt::xarray<double> host_einsum(std::string const& subscripts, std::vector<xt::xarray<double>> const& xs) {
  auto const arrow = subscripts.find("->");
  std::string const lhs = subscripts.substr(0, arrow), out = subscripts.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : lhs) {
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  }
  std::map<char, std::size_t> size;
  for (std::size_t t = 0; t < terms.size(); ++t)
    for (std::size_t i = 0; i < terms[t].size(); ++i) size[terms[t][i]] = xs[t].shape()[i];
  std::vector<std::size_t> oshape;
  for (char c : out) oshape.push_back(size[c]);
  xt::xarray<double> r = xt::zeros<double>(oshape);
  std::vector<char> labels;
  for (auto const& [c, n] : size) labels.push_back(c);
  std::map<char, std::size_t> at;
  for (char c : labels) at[c] = 0;
  std::size_t total = 1;
  for (char c : labels) total *= size[c];
  for (std::size_t step = 0; step < total; ++step) {
    std::size_t rest = step;
    for (char c : labels) {
      at[c] = rest % size[c];
      rest /= size[c];
    }
    double p = 1;
    for (std::size_t t = 0; t < terms.size(); ++t) {
      std::vector<std::size_t> idx;
      for (char c : terms[t]) idx.push_back(at[c]);
      p *= xs[t].element(idx.begin(), idx.end());
    }
    std::vector<std::size_t> oidx;
    for (char c : out) oidx.push_back(at[c]);
    r.element(oidx.begin(), oidx.end()) += p;
  }
  return r;
}

template <std::size_t N>
xt::xtensor<float, N> input(std::array<std::size_t, N> const& shape, double seed) {
  return xt::cast<float>(tessera_test::values<N>(shape, seed));
}

template <class E, class H>
void check_values(E const& e, H const& expected, double tol = 1e-4) {
  auto const r = tessera::eval(e);
  auto const h = tessera::to_host(r);
  CHECK(tessera_test::max_abs_diff(h, expected) < tol);
  // Every device's shard holds its block of the same values.
  auto const& s = r.sharding();
  for (std::size_t pos = 0; pos < s.num_devices(); ++pos) {
    auto const block = s.block(pos, r.shape());
    auto const* d = r.block_data(pos);
    std::size_t n = 1;
    for (auto const& b : block) n *= b.size();
    if (n == 0 || d == nullptr) continue;
    std::vector<std::size_t> idx(block.size());
    for (std::size_t k = 0; k < block.size(); ++k) idx[k] = block[k].start;
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(std::abs(double(d[i]) - double(h.element(idx.begin(), idx.end()))) < 1e-6);
      for (std::size_t k = block.size(); k-- > 0;) {
        if (++idx[k] < block[k].stop) break;
        idx[k] = block[k].start;
      }
    }
  }
}

template <class... X>
std::vector<xt::xarray<double>> hosts(X const&... x) {
  return {xt::xarray<double>(xt::cast<double>(x))...};
}

}  // namespace

TEST_CASE("einsum: subscripts parsed at compile time", "[einsum]") {
  using tessera::detail::einsum_error;
  using tessera::detail::parse_einsum;
  constexpr auto attn = parse_einsum("bqhd,bkhd->bhqk");
  STATIC_REQUIRE(attn.operands == 2);
  STATIC_REQUIRE(attn.a.rank == 4);
  STATIC_REQUIRE(attn.out.rank == 4);
  STATIC_REQUIRE(attn.out.labels[1] == 'h');
  // Implicit output: the indices seen once, alphabetical (NumPy's rule).
  constexpr auto implicit = parse_einsum("ji,jk");
  STATIC_REQUIRE(implicit.out.rank == 2);
  STATIC_REQUIRE(implicit.out.labels[0] == 'i');
  STATIC_REQUIRE(implicit.out.labels[1] == 'k');
  STATIC_REQUIRE(parse_einsum("ij->").out.rank == 0);
  STATIC_REQUIRE(parse_einsum(" i j , j k -> i k ").error == einsum_error::none);
  STATIC_REQUIRE(parse_einsum("ij,jk->iz").error == einsum_error::output_index_missing);
  STATIC_REQUIRE(parse_einsum("ij,jk->ii").error == einsum_error::output_index_repeated);
  STATIC_REQUIRE(parse_einsum("ii->i").error == einsum_error::diagonal);
  STATIC_REQUIRE(parse_einsum("...i->i").error == einsum_error::ellipsis);
  STATIC_REQUIRE(parse_einsum("i,i,i->i").error == einsum_error::too_many_operands);
  STATIC_REQUIRE(parse_einsum("ij-ji").error == einsum_error::arrow);
  STATIC_REQUIRE(parse_einsum("ij->i->j").error == einsum_error::arrow);
  STATIC_REQUIRE(parse_einsum("i1->i").error == einsum_error::bad_character);
}

TEST_CASE("einsum: two operands on an Auto mesh, against a host einsum", "[einsum]") {
  tessera::runtime rt{8};
  for (std::array<std::size_t, 2> shape : {std::array<std::size_t, 2>{2, 4}, {4, 2}, {1, 8}, {2, 2}}) {
    auto mesh = tessera::make_mesh<"X", "Y">({static_cast<int>(shape[0]), static_cast<int>(shape[1])});
    auto on = [&](auto spec) { return tessera::named_sharding(mesh, spec); };
    auto const q = input<4>({2, 8, 4, 4}, 0.1), k = input<4>({2, 8, 4, 4}, 0.7), v = input<4>({2, 8, 4, 4}, 1.3);
    auto const m1 = input<2>({8, 6}, 0.2), m2 = input<2>({6, 8}, 0.5);
    auto const t3 = input<3>({8, 4, 6}, 0.9);
    auto const v8 = input<1>({8}, 1.1), v6 = input<1>({6}, 2.1);
    SECTION("attention scores and values") {
      auto const qs = tessera::device_put(q, on(P<"X", none, "Y">{}));
      auto const ks = tessera::device_put(k, on(P<"X", none, "Y">{}));
      auto const s = tessera::einsum<"bqhd,bkhd->bhqk">(qs, ks);
      CHECK(tessera::type_of(s) == "float32[2@X,4@Y,8,8]");
      STATIC_REQUIRE(decltype(s)::spec[0] == tessera::dim_spec("X"));
      STATIC_REQUIRE(decltype(s)::spec[1] == tessera::dim_spec("Y"));
      check_values(s, host_einsum("bqhd,bkhd->bhqk", hosts(q, k)));
      auto const vs = tessera::device_put(v, on(P<"X", none, none, "Y">{}));
      auto const o = tessera::einsum<"bhqk,bkhd->bqhd">(tessera::eval(s), vs);
      auto const sh = host_einsum("bqhd,bkhd->bhqk", hosts(q, k));
      check_values(o, host_einsum("bhqk,bkhd->bqhd", {sh, xt::xarray<double>(xt::cast<double>(v))}), 1e-3);
    }
    SECTION("contracting sharded on one side: partial sums, one all-reduce") {
      auto const a = tessera::device_put(m1, on(P<none, "Y">{}));
      auto const b = tessera::device_put(m2, on(P<>{}));
      auto const e = tessera::einsum<"ij,jk->ik">(a, b);
      STATIC_REQUIRE(decltype(e)::unreduced == tessera::dim_spec("Y"));
      auto const plan = tessera::explain(e);
      CHECK(plan.count("all-reduce") == (shape[1] > 1 ? 1u : 0u));
      check_values(e, host_einsum("ij,jk->ik", hosts(m1, m2)));
      // Under a sharded constraint the partial sums are reduce-scattered instead.
      auto const rs = tessera::reshard(e, P<"Y">{});
      CHECK(tessera::explain(rs).count("all-reduce") == 0);
      check_values(rs, host_einsum("ij,jk->ik", hosts(m1, m2)));
    }
    SECTION("several contracting and free indices, sums of unique indices, outer products") {
      auto const a = tessera::device_put(t3, on(P<"X", none, "Y">{}));
      auto const b = tessera::device_put(m1, on(P<"Y", "X">{}));
      check_values(tessera::einsum<"ijk,ik->j">(a, b), host_einsum("ijk,ik->j", hosts(t3, m1)));
      check_values(tessera::einsum<"ijk,lk->jli">(a, b), host_einsum("ijk,lk->jli", hosts(t3, m1)));
      check_values(tessera::einsum<"ijk,ab->kb">(a, b), host_einsum("ijk,ab->kb", hosts(t3, m1)), 1e-3);
      auto const x = tessera::device_put(v8, on(P<"X">{}));
      auto const y = tessera::device_put(v6, on(P<"Y">{}));
      check_values(tessera::einsum<"i,j->ij">(x, y), host_einsum("i,j->ij", hosts(v8, v6)));
      check_values(tessera::einsum<"i,j->ji">(x, y), host_einsum("i,j->ji", hosts(v8, v6)));
      check_values(tessera::einsum<"i,i->">(x, x), host_einsum("i,i->", hosts(v8, v8)));
      check_values(tessera::einsum<"ij,j->i">(b, y), host_einsum("ij,j->i", hosts(m1, v6)));
      // Implicit output, and int32 with float32 (promoted as jnp.einsum does).
      check_values(tessera::einsum<"ji,jk">(b, b), host_einsum("ji,jk->ik", hosts(m1, m1)));
      xt::xtensor<int, 1> iv = {1, 2, 3, 4, 5, 6};
      auto const ii = tessera::device_put(iv, on(P<"X">{}));
      auto const mixed = tessera::einsum<"j,ij->i">(ii, b);
      STATIC_REQUIRE(std::is_same_v<typename decltype(mixed)::value_type, float>);
      check_values(mixed, host_einsum("j,ij->i", hosts(iv, m1)));
    }
  }
}

TEST_CASE("einsum: one operand (transposes and sums)", "[einsum]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto const h = input<3>({4, 8, 2}, 0.3);
  auto const a = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", "Y">{}));
  auto const t = tessera::einsum<"ijk->kij">(a);
  CHECK(tessera::type_of(t) == "float32[2,4@X,8@Y]");
  check_values(t, host_einsum("ijk->kij", hosts(h)));
  auto const s = tessera::einsum<"ijk->j">(a);
  CHECK(tessera::type_of(s) == "float32[8@Y]");
  check_values(s, host_einsum("ijk->j", hosts(h)));
  auto const all = tessera::einsum<"ijk->">(a);
  CHECK(tessera::type_of(all) == "float32[]");
  check_values(all, host_einsum("ijk->", hosts(h)), 1e-3);
  auto const same = tessera::einsum<"ijk">(a);  // implicit: every index once, already in order
  CHECK(tessera::type_of(same) == "float32[4@X,8@Y,2]");
  auto const outs = tessera::einsum<"ijk->ki">(a, P<none, "Y">{});
  CHECK(tessera::type_of(outs) == "float32[2,4@Y]");
  check_values(outs, host_einsum("ijk->ki", hosts(h)));
}

TEST_CASE("einsum: Explicit axes follow dot_general's rule; out_sharding settles conflicts", "[einsum]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto on = [&](auto spec) { return tessera::named_sharding(mesh, spec); };
  auto const m1 = input<2>({8, 8}, 0.2), m2 = input<2>({8, 8}, 0.5);
  auto const rows = tessera::device_put(m1, on(P<"X", none>{}));
  auto const cols = tessera::device_put(m2, on(P<none, "Y">{}));
  auto const rows2 = tessera::device_put(m2, on(P<"X", none>{}));
  auto const k = tessera::device_put(m1, on(P<"X", "Y">{}));
  CHECK(tessera::type_of(tessera::einsum<"ij,jk->ik">(rows, cols)) == "float32[8@X,8@Y]");
  CHECK(tessera::type_of(tessera::einsum<"ij,jk->ki">(rows, cols)) == "float32[8@Y,8@X]");
  CHECK(tessera::type_of(tessera::einsum<"ji,jk">(rows, cols)) == "float32[8,8@Y]");
  // b's contracting X is gathered: the result's rows use X (JAX: float32[8@X,8]).
  auto const fsdp = tessera::einsum<"ij,jk->ik">(rows, rows2);
  CHECK(tessera::type_of(fsdp) == "float32[8@X,8]");
  check_values(fsdp, host_einsum("ij,jk->ik", hosts(m1, m2)));
  // a's contracting Y gathered for b's columns on Y.
  auto const kc = tessera::einsum<"ij,jk->ik">(k, cols);
  CHECK(tessera::type_of(kc) == "float32[8@X,8@Y]");
  check_values(kc, host_einsum("ij,jk->ik", hosts(m1, m2)));
  // Contracting sharded on both sides: JAX asks for an out_sharding, and accepts it.
  auto const both = tessera::einsum<"ij,jk->ik">(tessera::device_put(m1, on(P<none, "X">{})), rows2, P<none, "Y">{});
  CHECK(tessera::type_of(both) == "float32[8,8@Y]");
  check_values(both, host_einsum("ij,jk->ik", hosts(m1, m2)));
  // A batch index sharded differently, settled by out_sharding.
  auto const batch = tessera::einsum<"ij,ij->i">(rows, tessera::device_put(m2, on(P<none, "Y">{})), P<"X">{});
  CHECK(tessera::type_of(batch) == "float32[8@X]");
  check_values(batch, host_einsum("ij,ij->i", hosts(m1, m2)));
}

TEST_CASE("einsum: run-time errors name the index and the sizes", "[einsum]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X">({2});
  auto const a = tessera::device_put(input<2>({4, 6}, 0.1), tessera::named_sharding(mesh, P<"X">{}));
  auto const b = tessera::device_put(input<2>({5, 4}, 0.2), tessera::named_sharding(mesh, P<>{}));
  CHECK_THROWS_WITH(tessera::einsum<"ij,jk->ik">(a, b),
                    Contains("index 'j' has size 6 in operand 0") && Contains("size 5 in operand 1"));
  CHECK_NOTHROW(tessera::einsum<"ij,ki->jk">(a, b));
}

TEST_CASE("einsum: grad against finite differences", "[einsum][grad]") {
  tessera::runtime rt{8};
  using tessera_test::max_abs_diff;
  using tessera_test::numeric_gradient;
  using tessera_test::values;
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  auto on = [&](auto spec) { return tessera::named_sharding(mesh, spec); };
  auto const qh = values<3>({4, 2, 4}, 0.3), kh = values<3>({6, 2, 4}, 0.8), ch = values<3>({2, 4, 6}, 1.7);
  auto const q = tessera::device_put(qh, on(P<none, "X", "Y">{}));
  auto const k = tessera::device_put(kh, on(P<none, "X">{}));
  auto const c = tessera::device_put(ch, on(P<"X">{}));
  // loss = sum(einsum("qhd,khd->hqk", q, k) * c): d sharded on Y in q only (partial sums).
  auto loss = [&](auto const& x, auto const& y) { return tessera::sum(tessera::einsum<"qhd,khd->hqk">(x, y) * c); };
  auto const [gq, gk] = tessera::grad<0, 1>(loss)(q, k);
  STATIC_REQUIRE(std::is_same_v<std::remove_cvref_t<decltype(gq)>, std::remove_cvref_t<decltype(q)>>);
  auto host_loss = [&](xt::xtensor<double, 3> const& x, xt::xtensor<double, 3> const& y) {
    auto const s = host_einsum("qhd,khd->hqk", {xt::xarray<double>(x), xt::xarray<double>(y)});
    double t = 0;
    for (std::size_t i = 0; i < s.size(); ++i) t += s.flat(i) * ch.flat(i);
    return t;
  };
  auto const nq = numeric_gradient([&](xt::xtensor<double, 3> const& v) { return host_loss(v, kh); }, qh);
  auto const nk = numeric_gradient([&](xt::xtensor<double, 3> const& v) { return host_loss(qh, v); }, kh);
  CHECK(max_abs_diff(tessera::to_host(gq), nq) < 1e-7);
  CHECK(max_abs_diff(tessera::to_host(gk), nk) < 1e-7);

  // Unique indices summed first and a one-operand transpose, through grad too.
  auto const wh = values<2>({8, 4}, 0.6);
  auto const w = tessera::device_put(wh, on(P<"X", "Y">{}));
  auto const vh = values<1>({6}, 2.2);
  auto const vv = tessera::device_put(vh, on(P<>{}));
  auto loss2 = [&](auto const& x, auto const& y) {
    return tessera::sum(tessera::einsum<"ij,k->ki">(tessera::einsum<"ij->ji">(x), y));
  };
  auto const [gw, gv] = tessera::grad<0, 1>(loss2)(w, vv);
  auto host2 = [&](xt::xtensor<double, 2> const& x, xt::xtensor<double, 1> const& y) {
    double sx = 0, sy = 0;
    for (auto e : x) sx += e;
    for (auto e : y) sy += e;
    return sx * sy;
  };
  CHECK(max_abs_diff(tessera::to_host(gw), numeric_gradient([&](auto const& v) { return host2(v, vh); }, wh)) < 1e-7);
  CHECK(max_abs_diff(tessera::to_host(gv), numeric_gradient([&](auto const& v) { return host2(wh, v); }, vh)) < 1e-7);
}

TEST_CASE("einsum in a shard_map body: a local product on the blocks; psum sums the split contraction",
          "[einsum][shard_map]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"x", "y">({2, 4});
  auto on = [&](auto spec) { return tessera::named_sharding(mesh, spec); };
  auto const qh = input<3>({4, 8, 6}, 0.4), kh = input<3>({4, 8, 6}, 1.4);
  auto const q = tessera::device_put(qh, on(P<"x", "y">{}));
  auto const k = tessera::device_put(kh, on(P<"x", "y">{}));
  // Scores per batch row block: the q/k index is split over y, so each device's local product
  // is a partial sum, psum'd over y; 'bsd,btd->bst' with s and t both local needs no psum.
  auto scores = tessera::shard_map(
      [](auto qb, auto kb) { return tessera::psum<"y">(tessera::einsum<"bsd,bsd->bd">(qb, kb)); }, mesh,
      tessera::in_specs(P<"x", "y">{}, P<"x", "y">{}), tessera::out_specs(P<"x">{}));
  check_values(scores(q, k), host_einsum("bsd,bsd->bd", hosts(qh, kh)));
  auto local = tessera::shard_map([](auto qb, auto kb) { return tessera::einsum<"bsd,btd->bst">(qb, kb); }, mesh,
                                  tessera::in_specs(P<"x">{}, P<"x">{}), tessera::out_specs(P<"x">{}));
  check_values(local(q, k), host_einsum("bsd,btd->bst", hosts(qh, kh)));
  // One operand, unique indices, implicit output, and an int block with a float one.
  auto one = tessera::shard_map([](auto qb) { return tessera::einsum<"bsd->db">(qb); }, mesh,
                                tessera::in_specs(P<"x">{}), tessera::out_specs(P<none, "x">{}));
  check_values(one(q), host_einsum("bsd->db", hosts(qh)));
  auto const part = host_einsum("bsd,bse->de", hosts(qh, kh));
  // Each device along x holds half the batch: the out_spec P() would claim otherwise, so psum first.
  auto summed = tessera::shard_map(
      [](auto qb, auto kb) { return tessera::psum<"x">(tessera::einsum<"bsd,bse">(qb, kb)); }, mesh,
      tessera::in_specs(P<"x">{}, P<"x">{}), tessera::out_specs(P<>{}));
  check_values(summed(q, k), part);
  auto bad = tessera::shard_map(
      [](auto qb, auto kb) { return tessera::psum<"y">(tessera::einsum<"bsd,bsd->b">(qb, kb)); }, mesh,
      tessera::in_specs(P<"x">{}, P<"x", "y">{}), tessera::out_specs(P<"x">{}));
  CHECK_THROWS_WITH(bad(q, k),
                    Contains("tessera::einsum: index 's' has size 8 in operand 0") && Contains("size 2 in operand 1"));
}

TEST_CASE("collectives in a shard_map body take negative dimensions, as JAX does", "[shard_map][collectives]") {
  tessera::runtime rt{4};
  auto mesh = tessera::make_mesh<"x">({4});
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto const x = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "x">{}));
  // all_gather(tiled) along -1 is along 1: the columns put back together.
  auto tiled_last = tessera::shard_map([](auto b) { return tessera::all_gather<"x">(b, -1, tessera::tiled); }, mesh,
                                       tessera::in_specs(P<none, "x">{}), tessera::out_specs(P<>{}));
  CHECK(tessera_test::max_abs_diff(tessera::to_host(tiled_last(x)), h) == 0);
  // Stacked, -1 is the new last dimension (rank + 1 positions): [4, 2, 4] with the device last.
  auto stacked = tessera::shard_map(
      [](auto b) {
        auto const g = tessera::all_gather<"x">(b, -1);
        auto const g2 = tessera::all_gather<"x">(b, 2);
        bool same = g.shape() == g2.shape();
        for (std::size_t i = 0; same && i < g.size(); ++i) same = g.data()[i] == g2.data()[i];
        return tessera::psum<"x">(same ? 0 : 1);
      },
      mesh, tessera::in_specs(P<none, "x">{}), tessera::out_specs(P<>{}));
  CHECK(tessera::to_host(stacked(x))() == 0);
  // psum_scatter over -1 and all_to_all(-1, -2) against their non-negative forms.
  auto scatter = tessera::shard_map(
      [](auto b) {
        auto const s = tessera::psum_scatter<"x">(b, -1, tessera::tiled);
        auto const s2 = tessera::psum_scatter<"x">(b, 1, tessera::tiled);
        auto const t = tessera::all_to_all<"x">(b, -2, -1, tessera::tiled);
        auto const t2 = tessera::all_to_all<"x">(b, 0, 1, tessera::tiled);
        bool same = s.shape() == s2.shape() && t.shape() == t2.shape();
        for (std::size_t i = 0; same && i < s.size(); ++i) same = s.data()[i] == s2.data()[i];
        for (std::size_t i = 0; same && i < t.size(); ++i) same = t.data()[i] == t2.data()[i];
        return tessera::psum<"x">(same ? 0 : 1);
      },
      mesh, tessera::in_specs(P<>{}), tessera::out_specs(P<>{}));
  CHECK(tessera::to_host(scatter(x))() == 0);
  auto out_of_range = tessera::shard_map([](auto b) { return tessera::all_gather<"x">(b, -3, tessera::tiled); }, mesh,
                                         tessera::in_specs(P<none, "x">{}), tessera::out_specs(P<>{}));
  CHECK_THROWS_WITH(out_of_range(x), Contains("tessera::all_gather(tiled): axis -3 is out of range for 2 dimensions"));
}
