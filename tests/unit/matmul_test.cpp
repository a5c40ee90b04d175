// Matrix products, partial sums and resharding (issue 5): every form of jnp.matmul (vector,
// matrix and batched operands, NumPy-broadcast batch dimensions, uneven and empty sizes,
// float32, float64, int32 and int32 x float32) on Auto and Explicit meshes of 1 to 8 devices
// with many specs per form: the contracting dimension sharded on one side, on both alike
// (partial sums), on different axes (an Auto conflict, resharded), multi-axis entries and
// axes used twice. Every reshard pair of a rank-2 array (reshard, with_sharding_constraint,
// device_put), partial results summed into replicated and sharded targets (all-reduce vs
// reduce-scatter), jit out_shardings, and run-time errors.
//
// Each evaluation is checked three ways: the global value and every device's shard against a
// naive product computed in double on the host (to a tolerance relative to K); the result
// type against the string JAX would print; and the collectives a collective_counter saw
// against explain()'s plan, whose kinds and axes are also written out by hand for each case.
//
// To keep the build light (the file is compiled four times in CI), specs and dtypes are a
// chosen set of compile-time combinations, each one instantiation, and everything else
// (shapes, mesh sizes, device orders) is looped over at run time; the checks live in
// non-template functions that see the results as arrays of double.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

#include "support.hpp"

using Catch::Matchers::Contains;
using tessera::axes;
using tessera::none;
using tessera::P;

namespace {

using dims = std::vector<std::size_t>;

// ---------------------------------------------------------------------------
// Meshes: one C++ type per axis set, every size and device order at run time
// ---------------------------------------------------------------------------

using auto_2d = decltype(tessera::make_mesh<"X", "Y">({1, 1}, std::vector<int>{0}, tessera::auto_axes));
using explicit_2d = decltype(tessera::make_mesh<"X", "Y">({1, 1}, std::vector<int>{0}, tessera::explicit_axes));
using auto_1d = decltype(tessera::make_mesh<"X">({1}, std::vector<int>{0}, tessera::auto_axes));

/// n distinct device ids out of 8: the first n in order, or (half of the time) a random pick in random order.
std::vector<int> pick_devices(std::size_t n, std::mt19937& g) {
  std::vector<int> ids(8);
  std::iota(ids.begin(), ids.end(), 0);
  if (g() % 2) std::shuffle(ids.begin(), ids.end(), g);
  ids.resize(n);
  return ids;
}

/// Meshes ("X", "Y") of every shape the issue names, plus 8x1, 1x8 and 1x1 (one axis of size 1).
template <class Tag>
auto meshes_2d(std::mt19937& g, Tag tag) {
  constexpr std::array<std::array<int, 2>, 6> sizes{{{2, 4}, {4, 2}, {2, 2}, {1, 8}, {8, 1}, {1, 1}}};
  std::vector<decltype(tessera::make_mesh<"X", "Y">({1, 1}, std::vector<int>{0}, tag))> out;
  for (auto const& s : sizes)
    out.push_back(tessera::make_mesh<"X", "Y">(s, pick_devices(static_cast<std::size_t>(s[0] * s[1]), g), tag));
  return out;
}
/// Meshes ("X") of 1, 2, 4 and 8 devices.
std::vector<auto_1d> meshes_1d(std::mt19937& g) {
  std::vector<auto_1d> out;
  for (int n : {1, 2, 4, 8})
    out.push_back(tessera::make_mesh<"X">({n}, pick_devices(static_cast<std::size_t>(n), g), tessera::auto_axes));
  return out;
}

template <class M>
std::string describe(M const& m) {
  std::ostringstream os;
  os << m << " on devices";
  for (int d : m.device_ids()) os << ' ' << d;
  return os.str();
}

// ---------------------------------------------------------------------------
// Random operands
// ---------------------------------------------------------------------------

int draw(std::mt19937& g, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }

/// A dimension size: the uneven 7 and 13 often, 0 and 1 now and then, else small or (rarely) longer.
std::size_t draw_size(std::mt19937& g) {
  int const p = draw(g, 0, 99);
  if (p < 6) return 0;
  if (p < 16) return 1;
  if (p < 31) return 7;
  if (p < 46) return 13;
  if (p < 92) return static_cast<std::size_t>(draw(g, 2, 11));
  return static_cast<std::size_t>(draw(g, 14, 40));
}
/// A batch size: kept small, so the batched products stay cheap under the sanitizers.
std::size_t draw_batch(std::mt19937& g) {
  int const p = draw(g, 0, 99);
  if (p < 5) return 0;
  if (p < 20) return 1;
  if (p < 35) return 7;
  return static_cast<std::size_t>(draw(g, 2, 5));
}

/// Values exact in every dtype and in any sum the tests make: integers in [-9, 9], or
/// multiples of 0.25 in [-4, 4] for floating types.
template <class T, std::size_t R>
xt::xtensor<T, R> random_host(dims const& shape, std::mt19937& g) {
  tessera::shape_t<R> s{};
  std::copy(shape.begin(), shape.end(), s.begin());
  auto h = xt::xtensor<T, R>::from_shape(s);
  for (auto& x : h) x = std::is_floating_point_v<T> ? static_cast<T>(draw(g, -16, 16) * 0.25) : static_cast<T>(draw(g, -9, 9));
  return h;
}

/// Random float operands of a product [rows, k] @ [k, cols] (b drawn as [cols, k] when `b_transposed`).
struct product_operands {
  std::size_t rows, cols, k;
  xt::xtensor<float, 2> a, b;
};
product_operands draw_product(std::mt19937& g, bool b_transposed = false) {
  product_operands o{draw_size(g), draw_size(g), draw_size(g), {}, {}};
  o.a = random_host<float, 2>({o.rows, o.k}, g);
  o.b = b_transposed ? random_host<float, 2>({o.cols, o.k}, g) : random_host<float, 2>({o.k, o.cols}, g);
  return o;
}

/// Shapes of matmul operands of ranks ra and rb: batch dimensions drawn per result dimension,
/// a batch dimension of one operand set to 1 (it broadcasts) only where that operand does not
/// shard it. `broadcast`: in every batch dimension both operands have, one of them is 1
/// (b's in even dimensions, a's in odd ones, where unsharded); else now and then.
std::pair<dims, dims> draw_shapes(std::size_t ra, std::size_t rb, std::vector<bool> const& sharded_a,
                                  std::vector<bool> const& sharded_b, bool broadcast, std::mt19937& g) {
  std::size_t const ba = ra >= 2 ? ra - 2 : 0, bb = rb >= 2 ? rb - 2 : 0, nb = std::max(ba, bb);
  std::size_t const m = draw_size(g), k = draw_size(g), n = draw_size(g);
  dims a, b;
  for (std::size_t d = 0; d < nb; ++d) {
    std::size_t const size = draw_batch(g);
    bool const in_a = d + ba >= nb, in_b = d + bb >= nb;
    bool const free_a = in_a && !sharded_a[d + ba - nb], free_b = in_b && !sharded_b[d + bb - nb];
    std::size_t sa = size, sb = size;
    if (broadcast && in_a && in_b) {
      bool const b_first = d % 2 == 0;
      if (b_first ? free_b : free_a) (b_first ? sb : sa) = 1;
      else if (b_first ? free_a : free_b) (b_first ? sa : sb) = 1;
    } else if (!broadcast) {
      if (free_a && draw(g, 0, 4) == 0) sa = 1;
      if (free_b && draw(g, 0, 4) == 0) sb = 1;
    }
    if (in_a) a.push_back(sa);
    if (in_b) b.push_back(sb);
  }
  if (ra >= 2) a.push_back(m);
  a.push_back(k);
  b.push_back(k);
  if (rb >= 2) b.push_back(n);
  return {a, b};
}

// ---------------------------------------------------------------------------
// The host reference: jnp.matmul in double, naively
// ---------------------------------------------------------------------------

/// The product and, per element, the sum of |a_ik * b_kj| (the scale of its rounding error).
struct reference {
  xt::xarray<double> value, scale;
  std::size_t k = 0;
};

reference reference_matmul(xt::xarray<double> const& a, xt::xarray<double> const& b) {
  std::size_t const ra = a.dimension(), rb = b.dimension();
  std::size_t const ba = ra >= 2 ? ra - 2 : 0, bb = rb >= 2 ? rb - 2 : 0, nb = std::max(ba, bb);
  std::size_t const k = a.shape()[ra - 1];
  std::size_t const m = ra >= 2 ? a.shape()[ra - 2] : 1, n = rb >= 2 ? b.shape()[rb - 1] : 1;
  dims out, batch;
  for (std::size_t d = 0; d < nb; ++d) {
    std::size_t const x = d + ba >= nb ? a.shape()[d + ba - nb] : 1, y = d + bb >= nb ? b.shape()[d + bb - nb] : 1;
    batch.push_back(x == 1 ? y : x);
  }
  out = batch;
  if (ra >= 2) out.push_back(m);
  if (rb >= 2) out.push_back(n);
  reference r;
  r.k = k;
  r.value = xt::zeros<double>(out);
  r.scale = xt::zeros<double>(out);
  std::size_t batches = 1;
  for (auto s : batch) batches *= s;
  std::size_t const a_mat = m * k, b_mat = k * n;
  for (std::size_t t = 0; t < batches; ++t) {
    // Offsets of the batch's matrices: the index in each batch dimension, 0 where an operand broadcasts.
    std::size_t rest = t, ao = 0, bo = 0, a_stride = a_mat, b_stride = b_mat;
    for (std::size_t d = nb; d-- > 0;) {
      std::size_t const i = rest % batch[d];
      rest /= batch[d];
      if (d + ba >= nb) {
        std::size_t const s = a.shape()[d + ba - nb];
        ao += (s == 1 ? 0 : i) * a_stride;
        a_stride *= s;
      }
      if (d + bb >= nb) {
        std::size_t const s = b.shape()[d + bb - nb];
        bo += (s == 1 ? 0 : i) * b_stride;
        b_stride *= s;
      }
    }
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double v = 0, s = 0;
        for (std::size_t q = 0; q < k; ++q) {
          double const p = a.data()[ao + i * k + q] * b.data()[bo + q * n + j];
          v += p;
          s += std::abs(p);
        }
        r.value.data()[t * m * n + i * n + j] = v;
        r.scale.data()[t * m * n + i * n + j] = s;
      }
  }
  return r;
}

// ---------------------------------------------------------------------------
// Results as the checks see them: arrays of double, and the collectives as text
// ---------------------------------------------------------------------------

/// An evaluated array, element type and rank erased.
struct observed {
  std::string type;
  xt::xarray<double> host;
  struct piece {
    int device;
    std::vector<std::size_t> start, stop;
    xt::xarray<double> data;
  };
  std::vector<piece> shards;
};

template <class T, std::size_t N, class S>
observed observe(tessera::array<T, N, S> const& r) {
  observed o{tessera::type_of(r), xt::cast<double>(tessera::to_host(r)), {}};
  for (auto const& sh : r.addressable_shards()) {
    observed::piece p{sh.device, {}, {}, xt::cast<double>(sh.data)};
    for (auto const& s : sh.index) {
      p.start.push_back(s.start);
      p.stop.push_back(s.stop);
    }
    o.shards.push_back(std::move(p));
  }
  return o;
}

/// `all-gather(Y), all-reduce(X)`: the kinds and axes of a list of collectives.
std::string kinds(std::vector<tessera::collective_event> const& events) {
  std::string s;
  for (auto const& e : events) {
    if (!s.empty()) s += ", ";
    s += e.kind + '(';
    for (std::size_t i = 0; i < e.axes.size(); ++i) s += (i ? "," : "") + e.axes[i];
    s += ')';
  }
  return s;
}

std::string text(dims const& d) {
  std::string s = "(";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + ")";
}

/// "" when `got` equals `want` element by element, within `tol` times `scale` (0: exactly).
std::string difference(xt::xarray<double> const& got, xt::xarray<double> const& want, xt::xarray<double> const& scale,
                       double tol) {
  dims const gs(got.shape().begin(), got.shape().end()), ws(want.shape().begin(), want.shape().end());
  if (gs != ws) return "shape " + text(gs) + ", expected " + text(ws);
  for (std::size_t i = 0; i < got.size(); ++i) {
    double const x = got.data()[i], w = want.data()[i];
    if (!(std::abs(x - w) <= tol * scale.data()[i])) {
      std::ostringstream os;
      os << "element " << i << " (row-major) is " << x << ", expected " << w;
      return os.str();
    }
  }
  return {};
}

/// The global value and every shard against `want` (with `scale` the per-element error scale).
void check_values(observed const& o, xt::xarray<double> const& want, xt::xarray<double> const& scale, double tol,
                  std::string const& what) {
  std::string err = difference(o.host, want, scale, tol);
  if (!err.empty()) err = "to_host: " + err;
  // An empty want has no data to view (xtensor would offset its null pointer); nothing to compare.
  for (std::size_t s = 0; err.empty() && want.size() != 0 && s < o.shards.size(); ++s) {
    auto const& p = o.shards[s];
    xt::xstrided_slice_vector sv;
    for (std::size_t d = 0; d < p.start.size(); ++d) sv.push_back(xt::range(p.start[d], p.stop[d]));
    xt::xarray<double> const w = xt::strided_view(want, sv), sc = xt::strided_view(scale, sv);
    std::string const e = difference(p.data, w, sc, tol);
    if (!e.empty()) err = "the shard on device " + std::to_string(p.device) + " at " + text(p.start) + ": " + e;
  }
  if (!err.empty()) FAIL_CHECK(what << ": " << err);
  else SUCCEED(what);
}

/// What one evaluation must give: its type, its plan (by hand), and the plan it ran.
void check_run(observed const& o, tessera::communication_plan const& plan, std::vector<tessera::collective_event> const& ran,
               std::string const& want_type, std::string const& want_plan, std::string const& what) {
  INFO(what << "\n" << plan);
  CHECK(o.type == want_type);
  CHECK(plan.result == want_type);
  CHECK(kinds(plan.collectives) == want_plan);
  CHECK(ran == plan.collectives);  // every collective that ran, and nothing else
}

/// `float32[13@X,7]`: a dtype, a shape and each dimension's mesh axes ("" for none, "(X,Y)" for two).
std::string type_text(std::string dtype, dims const& shape, std::vector<std::string> const& axes) {
  dtype += '[';
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) dtype += ',';
    dtype += std::to_string(shape[i]);
    if (i < axes.size() && !axes[i].empty()) dtype += '@' + axes[i];
  }
  return dtype + ']';
}

/// Which dimensions a named sharding of rank R shards.
template <class S, std::size_t R>
std::vector<bool> sharded_dims() {
  std::vector<bool> v(R, false);
  for (std::size_t i = 0; i < S::spec_size && i < R; ++i) v[i] = !S::spec_dims[i].is_none();
  return v;
}

/// Evaluates `e` under a collective_counter; the result and the collectives that ran.
template <class E>
std::pair<observed, std::vector<tessera::collective_event>> run_counted(E const& e) {
  tessera::collective_counter counter;
  auto const r = tessera::eval(e);
  auto ran = counter.events();
  return {observe(r), std::move(ran)};
}

// ---------------------------------------------------------------------------
// One matmul combination: operand dtypes, specs and ranks
// ---------------------------------------------------------------------------

/// What a combination must give, by hand: the result's mesh axes per dimension and the plan.
struct expected {
  std::vector<std::string> axes;
  std::string plan;
};

/// matmul(a, b) with a: TA[RA] laid out by SA and b: TB[RB] by SB, on `trials` random shape
/// pairs, against the host reference, the hand-written type and plan, and the counter.
template <class TA, class TB, class SA, class SB, std::size_t RA, std::size_t RB, class M>
void check_matmul(M const& m, std::mt19937& g, expected const& want, bool broadcast = false, int trials = 2) {
  auto const sa = tessera::named_sharding(m, SA{});
  auto const sb = tessera::named_sharding(m, SB{});
  using T = std::common_type_t<TA, TB>;
  double const eps = std::is_floating_point_v<T> ? std::numeric_limits<T>::epsilon() : 0.0;
  for (int t = 0; t < trials; ++t) {
    auto const [da, db] = draw_shapes(RA, RB, sharded_dims<decltype(sa), RA>(), sharded_dims<decltype(sb), RB>(),
                                      broadcast, g);
    auto const ha = random_host<TA, RA>(da, g);
    auto const hb = random_host<TB, RB>(db, g);
    auto const a = tessera::device_put(ha, sa);
    auto const b = tessera::device_put(hb, sb);
    std::string const what = tessera::type_of(a) + " @ " + tessera::type_of(b);
    auto const e = tessera::matmul(a, b);
    auto const plan = tessera::explain(e);
    auto const [o, ran] = run_counted(e);
    reference const ref = reference_matmul(xt::cast<double>(ha), xt::cast<double>(hb));
    dims const shape(ref.value.shape().begin(), ref.value.shape().end());
    check_run(o, plan, ran, type_text(std::string(tessera::dtype_name<T>()), shape, want.axes), want.plan, what);
    CHECK(tessera::type_of(e) == o.type);
    check_values(o, ref.value, ref.scale, 4.0 * static_cast<double>(ref.k + 1) * eps, what);
  }
}

}  // namespace

// ===========================================================================
// The seed's example and hand-checked plans
// ===========================================================================

TEST_CASE("the seed's x @ W: float32[32@X] @ float32[32,4] is float32[4], one all-reduce", "[matmul][typeof][plan]") {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X">({8}, tessera::explicit_axes);
  xt::xtensor<float, 1> const x = xt::arange<float>(32.0f);
  xt::xtensor<float, 2> const w = xt::reshape_view(xt::arange<float>(128.0f) * 0.25f, {32, 4});
  auto xs = tessera::device_put(x, tessera::named_sharding(mesh, P<"X">{}));
  auto ws = tessera::device_put(w, tessera::named_sharding(mesh, P<>{}));
  CHECK(tessera::type_of(xs) == "float32[32@X]");
  CHECK(tessera::type_of(ws) == "float32[32,4]");
  auto e = tessera::matmul(xs, ws);
  STATIC_REQUIRE(decltype(e)::unreduced.count() == 1);
  CHECK(tessera::type_of(e) == "float32[4]");
  auto const plan = tessera::explain(e);
  REQUIRE(plan.collectives.size() == 1);
  CHECK(plan.collectives[0] == tessera::collective_event{"all-reduce", {"X"}, 16});
  std::ostringstream os;
  os << plan;
  CHECK(os.str() == "result: float32[4]\ncollectives:\n  all-reduce over ('X',): 16 bytes per device\n");
  tessera::collective_counter c;
  tessera::array r = e;
  CHECK(c.events() == plan.collectives);
  CHECK(c.count() == 1);
  CHECK(c.count("all-reduce") == 1);
  CHECK(c.count("all-gather") == 0);
  CHECK(tessera::type_of(r) == "float32[4]");
  auto const h = tessera::to_host(r);
  for (std::size_t j = 0; j < 4; ++j) {
    double want = 0;
    for (std::size_t k = 0; k < 32; ++k) want += static_cast<double>(x(k)) * w(k, j);
    CHECK(h(j) == want);
  }
  // dot is matmul for ranks up to 2.
  tessera::array d = tessera::dot(xs, ws);
  CHECK(tessera_test::same_array(tessera::to_host(d), h));
}

TEST_CASE("hand-checked plans: all-reduce, reduce-scatter, none, and how explain prints them", "[matmul][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(501);
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4});
  auto const ha = random_host<float, 2>({6, 16}, g);
  auto const hb = random_host<float, 2>({16, 5}, g);
  reference const ref = reference_matmul(xt::cast<double>(ha), xt::cast<double>(hb));
  auto const b = tessera::device_put(hb, tessera::named_sharding(mesh, P<>{}));

  SECTION("K sharded on X: exactly one all-reduce over ('X',) of M*N*4 bytes") {
    auto const a = tessera::device_put(ha, tessera::named_sharding(mesh, P<none, "X">{}));
    auto const e = tessera::matmul(a, b);
    auto const plan = tessera::explain(e);
    REQUIRE(plan.collectives.size() == 1);
    CHECK(plan.collectives[0] == tessera::collective_event{"all-reduce", {"X"}, 6 * 5 * 4});
    CHECK(plan.count("all-reduce") == 1);
    CHECK(plan.count("reduce-scatter") == 0);
    auto const [o, ran] = run_counted(e);
    CHECK(ran == plan.collectives);
    CHECK(o.type == "float32[6,5]");
    check_values(o, ref.value, ref.scale, 1e-6, "K on X");
  }
  SECTION("with_sharding_constraint(matmul, P<X>) with K on X: one reduce-scatter, no all-reduce") {
    auto const a = tessera::device_put(ha, tessera::named_sharding(mesh, P<none, "X">{}));
    auto const e = tessera::with_sharding_constraint(tessera::matmul(a, b), tessera::named_sharding(mesh, P<"X">{}));
    auto const plan = tessera::explain(e);
    REQUIRE(plan.collectives.size() == 1);
    // max(input block: the whole 6x5 partial product, output block: 3x5) float32.
    CHECK(plan.collectives[0] == tessera::collective_event{"reduce-scatter", {"X"}, 6 * 5 * 4});
    auto const [o, ran] = run_counted(e);
    CHECK(ran == plan.collectives);
    CHECK(o.type == "float32[6@X,5]");
    check_values(o, ref.value, ref.scale, 1e-6, "K on X, constrained to rows on X");
  }
  SECTION("rows of a sharded, b replicated: no collectives") {
    auto const a = tessera::device_put(ha, tessera::named_sharding(mesh, P<axes<"X", "Y">, none>{}));
    auto const e = tessera::matmul(a, b);
    STATIC_REQUIRE(decltype(e)::unreduced.is_none());
    CHECK(tessera::explain(e).collectives.empty());
    auto const [o, ran] = run_counted(e);
    CHECK(ran.empty());
    CHECK(o.type == "float32[6@(X,Y),5]");
    check_values(o, ref.value, ref.scale, 1e-6, "rows on (X,Y)");
  }
  SECTION("explain prints the result type and one line per collective") {
    auto m42 = tessera::make_mesh<"X", "Y">({4, 2});
    auto const a8 = tessera::device_put(random_host<float, 2>({8, 10}, g), tessera::named_sharding(m42, P<"X", "Y">{}));
    auto const b8 = tessera::device_put(random_host<float, 2>({10, 6}, g), tessera::named_sharding(m42, P<>{}));
    std::ostringstream os;
    os << tessera::explain(tessera::matmul(a8, b8));
    CHECK(os.str() == "result: float32[8@X,6]\ncollectives:\n  all-reduce over ('Y',): 48 bytes per device\n");
    std::ostringstream none_os;
    none_os << tessera::explain(a8);
    CHECK(none_os.str() == "result: float32[8@X,10@Y]\ncollectives: none\n");
  }
  SECTION("the counter: nested counters, reset, and nothing recorded once it is gone") {
    auto const a = tessera::device_put(ha, tessera::named_sharding(mesh, P<none, "Y">{}));
    tessera::collective_counter outer;
    {
      tessera::collective_counter inner;
      tessera::array r = tessera::matmul(a, b);
      CHECK(inner.count() == 1);
      CHECK(inner.count("all-reduce") == 1);
      inner.reset();
      CHECK(inner.count() == 0);
      CHECK(inner.events().empty());
    }
    CHECK(kinds(outer.events()) == "all-reduce(Y)");
    std::size_t constrained = 0;
    {
      tessera::collective_counter c;
      // Copies of an expression share its result: a second evaluation runs nothing, and
      // explain() then plans nothing either (it leaves out what cached nodes already ran).
      auto const e = tessera::matmul(a, b);
      auto const copy = e;
      CHECK(kinds(tessera::explain(copy).collectives) == "all-reduce(Y)");
      tessera::array r1 = e;
      CHECK(tessera::explain(copy).collectives.empty());
      tessera::array r2 = copy;
      CHECK(c.count() == 1);
      // A constraint on the evaluated product still runs what it plans.
      auto const w = tessera::with_sharding_constraint(e, tessera::named_sharding(mesh, P<"X">{}));
      auto const w_plan = tessera::explain(w);
      auto const [o, ran] = run_counted(w);
      CHECK(ran == w_plan.collectives);
      constrained = ran.size();
      check_values(o, ref.value, ref.scale, 1e-6, "a constraint on an evaluated product");
    }
    CHECK(outer.count() == 2 + constrained);
  }
}

// ===========================================================================
// Every form, over many specs, on Auto meshes ("X", "Y") of 1 to 8 devices, then on 1-D
// meshes and Explicit meshes. The comment of each call: the rule that applies.
// ===========================================================================

TEST_CASE("vector . vector: rank-0 results, partial over the contracting axes", "[matmul][forms]") {
  tessera::runtime rt{8};
  std::mt19937 g(511);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    check_matmul<int, int, P<>, P<>, 1, 1>(m, g, {{}, ""});
    check_matmul<float, float, P<"X">, P<>, 1, 1>(m, g, {{}, "all-reduce(X)"});  // b's K sliced in place
    check_matmul<double, double, P<>, P<"Y">, 1, 1>(m, g, {{}, "all-reduce(Y)"});
    check_matmul<int, float, P<"X">, P<"X">, 1, 1>(m, g, {{}, "all-reduce(X)"});  // alike: partial
    // An Auto conflict: b's K gives way (an all-gather), a's axis stays partial.
    check_matmul<float, float, P<"X">, P<"Y">, 1, 1>(m, g, {{}, "all-gather(Y), all-reduce(X)"});
  }
}

TEST_CASE("matrix . vector and vector . matrix", "[matmul][forms]") {
  tessera::runtime rt{8};
  std::mt19937 g(512);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    // [M,K] @ [K] -> [M]
    check_matmul<float, float, P<"X", none>, P<>, 2, 1>(m, g, {{"X"}, ""});
    check_matmul<double, double, P<none, "X">, P<"X">, 2, 1>(m, g, {{""}, "all-reduce(X)"});
    check_matmul<int, int, P<"X", "Y">, P<>, 2, 1>(m, g, {{"X"}, "all-reduce(Y)"});
    // b's K on the axis of a's rows: b's K gives way.
    check_matmul<float, float, P<"Y", none>, P<"Y">, 2, 1>(m, g, {{"Y"}, "all-gather(Y)"});
    // [K] @ [K,N] -> [N]; a's K (one side only) on the axis of b's columns: a's K is gathered
    // (JAX's dot_general rule shards the result by its free dimensions).
    check_matmul<float, float, P<"Y">, P<none, "Y">, 1, 2>(m, g, {{"Y"}, "all-gather(Y)"});
    check_matmul<int, int, P<>, P<none, axes<"Y", "X">>, 1, 2>(m, g, {{"(Y,X)"}, ""});
  }
}

TEST_CASE("matrix . matrix: one side, both alike, rows and columns, multi-axis, Auto conflicts", "[matmul][forms]") {
  tessera::runtime rt{8};
  std::mt19937 g(513);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    check_matmul<int, int, P<>, P<>, 2, 2>(m, g, {{"", ""}, ""});
    check_matmul<float, float, P<none, "X">, P<>, 2, 2>(m, g, {{"", ""}, "all-reduce(X)"});     // K: left only
    check_matmul<double, double, P<>, P<"X", none>, 2, 2>(m, g, {{"", ""}, "all-reduce(X)"});   // right only
    check_matmul<int, float, P<none, "X">, P<"X", none>, 2, 2>(m, g, {{"", ""}, "all-reduce(X)"});  // alike
    check_matmul<float, float, P<"X", "Y">, P<"Y", none>, 2, 2>(m, g, {{"X", ""}, "all-reduce(Y)"});
    check_matmul<int, int, P<"X", none>, P<none, "Y">, 2, 2>(m, g, {{"X", "Y"}, ""});
    check_matmul<float, float, P<none, axes<"X", "Y">>, P<axes<"X", "Y">, none>, 2, 2>(m, g, {{"", ""}, "all-reduce(X,Y)"});
    // K on different axes: b's K is resharded to None, a's axes stay partial.
    check_matmul<float, float, P<none, "X">, P<"Y", none>, 2, 2>(m, g, {{"", ""}, "all-gather(Y), all-reduce(X)"});
    check_matmul<float, float, P<none, axes<"X", "Y">>, P<axes<"Y", "X">, none>, 2, 2>(
        m, g, {{"", ""}, "all-gather(X,Y), all-reduce(X,Y)"});
    // An axis used twice (a's rows and b's columns): b's columns give way.
    check_matmul<float, float, P<"X", none>, P<none, "X">, 2, 2>(m, g, {{"X", ""}, "all-gather(X)"});
    check_matmul<float, float, P<"Y", "X">, P<"X", "Y">, 2, 2>(m, g, {{"Y", ""}, "all-gather(Y), all-reduce(X)"});
    // a's K (one side only) on the axis of b's columns: a's K is gathered, as in JAX.
    check_matmul<int, int, P<"X", "Y">, P<none, "Y">, 2, 2>(m, g, {{"X", "Y"}, "all-gather(Y)"});
  }
}

TEST_CASE("batched products: 3-D with 3-D, 2-D and 1-D operands, 4-D with size-1 batch dimensions",
          "[matmul][forms][broadcast]") {
  tessera::runtime rt{8};
  std::mt19937 g(514);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    // [B,M,K] @ [B,K,N]; an unsharded batch dimension is now and then 1 and broadcasts.
    check_matmul<float, float, P<"X">, P<"X">, 3, 3>(m, g, {{"X", "", ""}, ""});
    check_matmul<float, float, P<"X", none, "Y">, P<"X", "Y", none>, 3, 3>(m, g, {{"X", "", ""}, "all-reduce(Y)"});
    check_matmul<double, double, P<>, P<"Y">, 3, 3>(m, g, {{"Y", "", ""}, ""});
    check_matmul<float, float, P<"X">, P<"Y">, 3, 3>(m, g, {{"X", "", ""}, "all-gather(Y)"});  // batch conflict
    check_matmul<int, float, P<none, "X", none>, P<none, none, "Y">, 3, 3>(m, g, {{"", "X", "Y"}, ""});
    // [B,M,K] @ [K,N] and [M,K] @ [B,K,N]; in the last, X on b's batch and a's rows: b's batch gives way.
    check_matmul<float, float, P<"X", none, "Y">, P<"Y", none>, 3, 2>(m, g, {{"X", "", ""}, "all-reduce(Y)"});
    check_matmul<float, float, P<"X", none>, P<"Y", none, none>, 2, 3>(m, g, {{"Y", "X", ""}, ""});
    check_matmul<int, int, P<none, "X">, P<none, "X", none>, 2, 3>(m, g, {{"", "", ""}, "all-reduce(X)"});
    check_matmul<float, float, P<"X", none>, P<"X">, 2, 3>(m, g, {{"", "X", ""}, "all-gather(X)"});
    // [B,M,K] @ [K] and [K] @ [B,K,N]
    check_matmul<float, float, P<"X", none, "Y">, P<"Y">, 3, 1>(m, g, {{"X", ""}, "all-reduce(Y)"});
    check_matmul<double, double, P<"X">, P<"Y", none, none>, 1, 3>(m, g, {{"Y", ""}, "all-reduce(X)"});
    // [B1,1,M,K] @ [1,B2,K,N] -> [B1,B2,M,N]: each operand broadcasts one batch dimension.
    check_matmul<float, float, P<"X">, P<none, "Y">, 4, 4>(m, g, {{"X", "Y", "", ""}, ""}, true);
    check_matmul<float, float, P<"X", none, none, "Y">, P<none, none, "Y", none>, 4, 4>(
        m, g, {{"X", "", "", ""}, "all-reduce(Y)"}, true);
    // [B,1,M,K] @ [B2,K,N]: b gains a leading batch dimension.
    check_matmul<float, float, P<"Y", none, "X">, P<>, 4, 3>(m, g, {{"Y", "", "X", ""}, ""}, true);
  }
}

TEST_CASE("matmul on 1-D meshes of 1, 2, 4 and 8 devices", "[matmul][forms]") {
  tessera::runtime rt{8};
  std::mt19937 g(515);
  for (auto const& m : meshes_1d(g)) {
    INFO(describe(m));
    check_matmul<float, float, P<"X">, P<>, 1, 1>(m, g, {{}, "all-reduce(X)"}, false, 3);
    check_matmul<float, float, P<none, "X">, P<"X">, 2, 1>(m, g, {{""}, "all-reduce(X)"}, false, 3);
    check_matmul<int, int, P<>, P<"X", none>, 1, 2>(m, g, {{""}, "all-reduce(X)"}, false, 3);
    check_matmul<double, double, P<none, "X">, P<"X", none>, 2, 2>(m, g, {{"", ""}, "all-reduce(X)"}, false, 3);
    check_matmul<float, float, P<"X", none>, P<none, "X">, 2, 2>(m, g, {{"X", ""}, "all-gather(X)"}, false, 3);
    check_matmul<float, float, P<"X">, P<"X">, 3, 3>(m, g, {{"X", "", ""}, ""}, false, 3);
    check_matmul<float, float, P<"X">, P<>, 4, 4>(m, g, {{"X", "", "", ""}, ""}, true, 3);
  }
}

TEST_CASE("matmul on Explicit meshes (the cases without a conflict)", "[matmul][forms][explicit]") {
  tessera::runtime rt{8};
  std::mt19937 g(516);
  for (auto const& m : meshes_2d(g, tessera::explicit_axes)) {
    INFO(describe(m));
    check_matmul<float, float, P<"X">, P<"X">, 1, 1>(m, g, {{}, "all-reduce(X)"});
    check_matmul<float, float, P<"X", "Y">, P<"Y", none>, 2, 2>(m, g, {{"X", ""}, "all-reduce(Y)"});
    check_matmul<int, float, P<none, axes<"X", "Y">>, P<axes<"X", "Y">, none>, 2, 2>(m, g, {{"", ""}, "all-reduce(X,Y)"});
    check_matmul<int, int, P<"X", none, "Y">, P<"X", "Y", none>, 3, 3>(m, g, {{"X", "", ""}, "all-reduce(Y)"});
    check_matmul<double, double, P<"X", none, none, "Y">, P<none, none, "Y", none>, 4, 4>(
        m, g, {{"X", "", "", ""}, "all-reduce(Y)"}, true);
    // JAX accepts these on Explicit axes (its pjit_test dot_general cases): a contracting
    // dimension sharded on one side gives way to a result dimension on its axis.
    check_matmul<float, float, P<"X", none>, P<"X", none>, 2, 2>(m, g, {{"X", ""}, "all-gather(X)"});  // FSDP
    check_matmul<float, float, P<none, "Y">, P<none, "Y">, 2, 2>(m, g, {{"", "Y"}, "all-gather(Y)"});
  }
}

// ===========================================================================
// Reshard pairs: every source and target spec of a rank-2 array
// ===========================================================================

namespace {

template <class... S>
struct spec_list {};

/// x laid out by From, moved to To by reshard, with_sharding_constraint and device_put: the
/// values unchanged, and each way runs the plan explain() gives for reshard.
template <class From, class To, class M>
void check_reshard_pair(M const& m, xt::xtensor<float, 2> const& h) {
  auto const x = tessera::device_put(h, tessera::named_sharding(m, From{}));
  auto const to = tessera::named_sharding(m, To{});
  std::string const what = tessera::type_of(x) + " to " + tessera::type_of(tessera::device_put(h, to));
  xt::xarray<double> const want = xt::cast<double>(h);
  xt::xarray<double> const scale = xt::ones<double>(want.shape());
  auto const e = tessera::reshard(x, To{});
  auto const plan = tessera::explain(e);
  auto const [o1, ran1] = run_counted(e);
  check_run(o1, plan, ran1, plan.result, kinds(plan.collectives), "reshard: " + what);
  check_values(o1, want, scale, 0, "reshard: " + what);
  auto const c = tessera::with_sharding_constraint(x, to);
  auto const c_plan = tessera::explain(c);  // before it runs: explain() leaves out what already ran
  auto const [o2, ran2] = run_counted(c);
  check_run(o2, c_plan, ran2, plan.result, kinds(plan.collectives), "with_sharding_constraint: " + what);
  check_values(o2, want, scale, 0, "with_sharding_constraint: " + what);
  std::vector<tessera::collective_event> ran3;
  observed o3;
  {
    tessera::collective_counter counter;
    auto const r = tessera::device_put(x, to);
    ran3 = counter.events();
    o3 = observe(r);
  }
  check_run(o3, plan, ran3, plan.result, kinds(plan.collectives), "device_put: " + what);
  check_values(o3, want, scale, 0, "device_put: " + what);
}

template <class From, class... To, class M>
void check_reshards_from(spec_list<To...>, M const& m, xt::xtensor<float, 2> const& h) {
  (check_reshard_pair<From, To>(m, h), ...);
}

/// Every (source, target) pair of `specs`.
template <class... S, class M>
void check_reshard_pairs(spec_list<S...> specs, M const& m, xt::xtensor<float, 2> const& h) {
  (check_reshards_from<S>(specs, m, h), ...);
}

}  // namespace

TEST_CASE("reshard pairs: every source and target spec, by reshard, with_sharding_constraint and device_put",
          "[matmul][reshard][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(521);
  using specs_2d = spec_list<P<>, P<"X">, P<none, "X">, P<"X", "Y">, P<"Y", "X">, P<axes<"X", "Y">>, P<none, axes<"Y", "X">>>;
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    if (m.num_devices() < 4) continue;  // {2,2}, {2,4}, {4,2}, {1,8}, {8,1}
    INFO(describe(m));
    for (int t = 0; t < 2; ++t) {
      auto const h = random_host<float, 2>({draw_size(g), draw_size(g)}, g);
      INFO("shape " << text({h.shape()[0], h.shape()[1]}));
      check_reshard_pairs(specs_2d{}, m, h);
    }
  }
  for (auto const& m : meshes_1d(g)) {
    if (m.num_devices() != 8) continue;
    INFO(describe(m));
    auto const h = random_host<float, 2>({draw_size(g), draw_size(g)}, g);
    INFO("shape " << text({h.shape()[0], h.shape()[1]}));
    check_reshard_pairs(spec_list<P<>, P<"X">, P<none, "X">>{}, m, h);
  }
}

TEST_CASE("reshard pairs: hand-checked plans", "[matmul][reshard][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(522);
  auto m = tessera::make_mesh<"X", "Y">({2, 4});
  auto const h = random_host<float, 2>({8, 12}, g);
  auto const x = tessera::device_put(h, tessera::named_sharding(m, P<"X">{}));
  auto const xy = tessera::device_put(h, tessera::named_sharding(m, P<"X", "Y">{}));
  auto const both = tessera::device_put(h, tessera::named_sharding(m, P<axes<"X", "Y">>{}));
  auto plan_of = [](auto const& e) { return kinds(tessera::explain(e).collectives); };
  CHECK(plan_of(tessera::reshard(x, P<"X">{})) == "");
  CHECK(plan_of(tessera::reshard(x, P<>{})) == "all-gather(X)");
  CHECK(plan_of(tessera::reshard(x, P<none, "X">{})) == "all-to-all(X)");
  CHECK(plan_of(tessera::reshard(x, P<"X", "Y">{})) == "");  // a slice: free
  CHECK(plan_of(tessera::reshard(xy, P<"Y", "X">{})) == "all-to-all(X,Y)");
  CHECK(plan_of(tessera::reshard(xy, P<"X">{})) == "all-gather(Y)");
  CHECK(plan_of(tessera::reshard(both, P<"X">{})) == "all-gather(Y)");  // X keeps its place in the entry
  CHECK(plan_of(tessera::reshard(both, P<"X", "Y">{})) == "all-to-all(Y)");
  // bytes: max(input block, output block): 4x12 and 8x12 floats.
  auto const g_plan = tessera::explain(tessera::reshard(x, P<>{}));
  REQUIRE(g_plan.collectives.size() == 1);
  CHECK(g_plan.collectives[0].bytes_per_device == 8 * 12 * 4);
  CHECK(g_plan.result == "float32[8,12]");
  // Uneven blocks count whole (ceil division): [7,13] from P(X) (blocks 4x13) to P(None, X) (7x7).
  auto const u = tessera::device_put(random_host<float, 2>({7, 13}, g), tessera::named_sharding(m, P<"X">{}));
  auto const a2a = tessera::explain(tessera::reshard(u, P<none, "X">{}));
  REQUIRE(a2a.collectives.size() == 1);
  CHECK(a2a.collectives[0] == tessera::collective_event{"all-to-all", {"X"}, 4 * 13 * 4});
  // Several axes in one event, printed as a Python tuple.
  std::ostringstream os;
  os << tessera::explain(tessera::reshard(xy, P<>{})).collectives.at(0);
  CHECK(os.str() == "all-gather over ('X', 'Y'): 384 bytes per device");
}

// ===========================================================================
// Partial results summed into a target: reduce-scatter or all-reduce
// ===========================================================================

namespace {

/// Sums of a matrix over dimension `dim` (0: a row of column sums), of its values or of their
/// magnitudes (xt::sum is not used: UBSan flags it on empty arrays).
xt::xarray<double> sum_over(xt::xarray<double> const& x, std::size_t dim, bool magnitudes) {
  std::size_t const r = x.shape()[0], c = x.shape()[1];
  xt::xarray<double> out = xt::zeros<double>(dims{dim == 0 ? c : r});
  for (std::size_t i = 0; i < r; ++i)
    for (std::size_t j = 0; j < c; ++j) {
      double const v = x.data()[i * c + j];
      out.data()[dim == 0 ? j : i] += magnitudes ? std::abs(v) : v;
    }
  return out;
}

/// x + c, element by element.
xt::xarray<double> plus(xt::xarray<double> x, double c) {
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] += c;
  return x;
}

/// Evaluates `e` (a constrained partial result), checks its values, type, plan and counter.
template <class E>
void check_partial(E const& e, xt::xarray<double> const& want, xt::xarray<double> const& scale, double tol,
                   std::string const& want_plan, std::string const& what) {
  auto const plan = tessera::explain(e);
  auto const [o, ran] = run_counted(e);
  check_run(o, plan, ran, tessera::type_of(e), want_plan, what);
  check_values(o, want, scale, tol, what);
}

}  // namespace

TEST_CASE("partial sums: sum<0>, sum<1>, mean and matmul with sharded K, constrained to every kind of target",
          "[matmul][partial][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(531);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    for (int t = 0; t < 2; ++t) {
      auto const [rows, cols, k, ha, hb] = draw_product(g);
      INFO("rows " << rows << ", cols " << cols << ", k " << k);
      auto const h = random_host<float, 2>({rows, cols}, g);
      xt::xarray<double> const d = xt::cast<double>(h);
      xt::xarray<double> const col_sums = sum_over(d, 0, false), row_sums = sum_over(d, 1, false);
      xt::xarray<double> const col_scale = plus(sum_over(d, 0, true), 1), row_scale = plus(sum_over(d, 1, true), 1);
      double const tol = 4.0 * static_cast<double>(std::max(rows, cols) + 1) * std::numeric_limits<float>::epsilon();
      auto const x = tessera::device_put(h, tessera::named_sharding(m, P<"X", "Y">{}));
      auto const to = [&](auto spec) { return tessera::named_sharding(m, spec); };
      // sum over X (dimension 0): partial over X, its result float32[cols@Y].
      auto const s0 = tessera::sum<0>(x);
      STATIC_REQUIRE(decltype(s0)::unreduced.count() == 1);  // partial over X
      check_partial(s0, col_sums, col_scale, tol, "all-reduce(X)", "sum<0>(x)");
      check_partial(tessera::with_sharding_constraint(s0, to(P<>{})), col_sums, col_scale, tol,
                    "all-reduce(X), all-gather(Y)", "sum<0>(x) to P()");
      check_partial(tessera::with_sharding_constraint(s0, to(P<"X">{})), col_sums, col_scale, tol,
                    "reduce-scatter(X), all-gather(Y)", "sum<0>(x) to P(X)");
      check_partial(tessera::with_sharding_constraint(s0, to(P<axes<"Y", "X">>{})), col_sums, col_scale, tol,
                    "reduce-scatter(X)", "sum<0>(x) to P((Y,X))");
      check_partial(tessera::reshard(s0, P<axes<"X", "Y">>{}), col_sums, col_scale, tol,
                    "reduce-scatter(X), all-to-all(Y)", "sum<0>(x) to P((X,Y))");
      // sum over Y (dimension 1).
      auto const s1 = tessera::sum<1>(x);
      check_partial(tessera::reshard(s1, P<>{}), row_sums, row_scale, tol, "all-reduce(Y), all-gather(X)",
                    "sum<1>(x) to P()");
      check_partial(tessera::reshard(s1, P<"Y">{}), row_sums, row_scale, tol, "reduce-scatter(Y), all-gather(X)",
                    "sum<1>(x) to P(Y)");
      // mean is a sum divided after the reduce-scatter.
      if (rows > 0) {
        xt::xarray<double> col_means = col_sums;
        for (std::size_t i = 0; i < col_means.size(); ++i) col_means.data()[i] /= static_cast<double>(rows);
        check_partial(tessera::with_sharding_constraint(tessera::mean<0>(x), to(P<"X">{})), col_means, col_scale, tol,
                      "reduce-scatter(X), all-gather(Y)", "mean<0>(x) to P(X)");
      }
      // matmul with K sharded on X, then on (X, Y).
      reference const ref = reference_matmul(xt::cast<double>(ha), xt::cast<double>(hb));
      double const mtol = 4.0 * static_cast<double>(k + 1) * std::numeric_limits<float>::epsilon();
      auto const a = tessera::device_put(ha, tessera::named_sharding(m, P<none, "X">{}));
      auto const b = tessera::device_put(hb, tessera::named_sharding(m, P<>{}));
      auto const p = tessera::matmul(a, b);
      check_partial(tessera::with_sharding_constraint(p, to(P<>{})), ref.value, ref.scale, mtol, "all-reduce(X)",
                    "a@b to P()");
      check_partial(tessera::with_sharding_constraint(p, to(P<"X">{})), ref.value, ref.scale, mtol,
                    "reduce-scatter(X)", "a@b to P(X)");
      check_partial(tessera::with_sharding_constraint(p, to(P<"Y", "X">{})), ref.value, ref.scale, mtol,
                    "reduce-scatter(X)", "a@b to P(Y, X)");
      auto const a2 = tessera::device_put(ha, tessera::named_sharding(m, P<none, axes<"X", "Y">>{}));
      auto const b2 = tessera::device_put(hb, tessera::named_sharding(m, P<axes<"X", "Y">>{}));
      auto const p2 = tessera::matmul(a2, b2);
      STATIC_REQUIRE(decltype(p2)::unreduced.count() == 2);  // partial over (X, Y)
      check_partial(tessera::reshard(p2, P<"X", "Y">{}), ref.value, ref.scale, mtol, "reduce-scatter(X,Y)",
                    "a@b over (X,Y) to P(X, Y)");
      check_partial(tessera::reshard(p2, P<"X">{}), ref.value, ref.scale, mtol, "reduce-scatter(X), all-reduce(Y)",
                    "a@b over (X,Y) to P(X)");
      check_partial(tessera::reshard(p2, P<>{}), ref.value, ref.scale, mtol, "all-reduce(X,Y)", "a@b over (X,Y) to P()");
    }
  }
}

TEST_CASE("matmul inside larger expressions: operands that are expressions, results that are operands",
          "[matmul][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(532);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    auto const [rows, cols, k, ha, hb] = draw_product(g, true);
    INFO("rows " << rows << ", cols " << cols << ", k " << k);
    auto const a = tessera::device_put(ha, tessera::named_sharding(m, P<"X", "Y">{}));
    auto const b = tessera::device_put(hb, tessera::named_sharding(m, P<none, "Y">{}));
    xt::xarray<double> const da = xt::cast<double>(ha), db = xt::cast<double>(hb);
    // (2a) @ b.T + 1: the transpose puts b's K (on Y) first, alike with a's: partial over Y.
    xt::xarray<double> a2 = da, bt = xt::zeros<double>(dims{k, cols});  // 2a and b.T, by hand (empty ones too)
    for (std::size_t i = 0; i < a2.size(); ++i) a2.data()[i] *= 2;
    for (std::size_t i = 0; i < cols; ++i)
      for (std::size_t j = 0; j < k; ++j) bt.data()[j * cols + i] = db.data()[i * k + j];
    reference const ref = reference_matmul(a2, bt);
    double const tol = 8.0 * static_cast<double>(k + 1) * std::numeric_limits<float>::epsilon();
    auto const e = tessera::matmul(2 * a, tessera::transpose(b)) + 1;
    check_partial(e, plus(ref.value, 1), plus(ref.scale, 1), tol, "all-reduce(Y)", "(2a) @ b.T + 1");
    // A sum of the product's rows: the product summed first (all-reduce), then the sum over X.
    xt::xarray<double> const rs = sum_over(ref.value, 1, false);
    xt::xarray<double> const rs_scale = plus(sum_over(ref.scale, 1, false), 1);
    check_partial(tessera::sum<1>(tessera::matmul(2 * a, tessera::transpose(b))), rs, rs_scale, tol, "all-reduce(Y)",
                  "sum<1>((2a) @ b.T)");
    // Linear operations keep a partial sum partial: 2 p - p is summed once; reshard(2 p) reduce-scatters.
    auto const hk = random_host<float, 2>({k, cols}, g);
    reference const pk = reference_matmul(da, xt::cast<double>(hk));
    auto const ak = tessera::device_put(ha, tessera::named_sharding(m, P<none, "X">{}));
    auto const bk = tessera::device_put(hk, tessera::named_sharding(m, P<>{}));
    auto const p = tessera::matmul(ak, bk);
    double const ptol = 16.0 * static_cast<double>(k + 1) * std::numeric_limits<float>::epsilon();
    check_partial(2.0f * p - tessera::matmul(ak, bk), pk.value, plus(pk.scale, 1), ptol, "all-reduce(X)", "2 p - p");
    xt::xarray<double> twice = pk.value, twice_scale = pk.scale;
    for (std::size_t i = 0; i < twice.size(); ++i) twice.data()[i] *= 2, twice_scale.data()[i] *= 2;
    check_partial(tessera::reshard(2 * p, P<"X">{}), twice, twice_scale, ptol, "reduce-scatter(X)", "reshard(2 p, P(X))");
    // A non-linear use sums p first (into its replicated layout), then reads its rows on X.
    auto const hc = random_host<float, 2>({rows, cols}, g);
    auto const c = tessera::device_put(hc, tessera::named_sharding(m, P<"X", none>{}));
    xt::xarray<double> with_c = xt::cast<double>(hc);
    for (std::size_t i = 0; i < with_c.size(); ++i) with_c.data()[i] += pk.value.data()[i];
    check_partial(p + c, with_c, plus(pk.scale, 4), ptol, "all-reduce(X)", "p + c, c on X");
  }
}

// ===========================================================================
// jit
// ===========================================================================

TEST_CASE("jit of a matmul with in_shardings and out_shardings: partial results go straight to the target",
          "[matmul][jit][plan]") {
  tessera::runtime rt{8};
  std::mt19937 g(541);
  for (auto const& m : meshes_2d(g, tessera::auto_axes)) {
    INFO(describe(m));
    auto const [rows, cols, k, ha, hb] = draw_product(g);
    INFO("rows " << rows << ", cols " << cols << ", k " << k);
    reference const ref = reference_matmul(xt::cast<double>(ha), xt::cast<double>(hb));
    double const tol = 4.0 * static_cast<double>(k + 1) * std::numeric_limits<float>::epsilon();
    auto const sa = tessera::named_sharding(m, P<none, "X">{});
    auto const sb = tessera::named_sharding(m, P<"X", none>{});
    auto const a = tessera::device_put(ha, sa);
    auto const b = tessera::device_put(hb, sb);
    auto const mm = [](auto x, auto y) { return tessera::matmul(x, y); };
    auto const run = [&](auto f, std::string const& want_type, std::string const& want_plan, std::string const& what) {
      tessera::collective_counter counter;
      auto const r = f(a, b);
      auto const ran = counter.events();
      observed const o = observe(r);
      INFO(what);
      CHECK(o.type == want_type);
      CHECK(kinds(ran) == want_plan);
      check_values(o, ref.value, ref.scale, tol, what);
    };
    std::string const r_x = type_text("float32", {rows, cols}, {"X", ""});
    run(tessera::jit(mm, tessera::in_shardings(sa, sb), tessera::out_shardings(tessera::named_sharding(m, P<"X">{}))),
        r_x, "reduce-scatter(X)", "out_shardings P(X)");
    run(tessera::jit(mm, tessera::in_shardings(sa, sb), tessera::out_shardings(tessera::named_sharding(m, P<>{}))),
        type_text("float32", {rows, cols}, {}), "all-reduce(X)", "out_shardings P()");
    run(tessera::jit(mm, tessera::in_shardings(sa, sb),
                     tessera::out_shardings(tessera::named_sharding(m, P<none, "Y">{}))),
        type_text("float32", {rows, cols}, {"", "Y"}), "all-reduce(X)", "out_shardings P(None, Y)");
    run(tessera::jit(mm), type_text("float32", {rows, cols}, {}), "all-reduce(X)", "no shardings");
    // Inputs elsewhere are put in their in_shardings first (an all-gather of X each; Y slices for
    // free), then the partial product over Y is reduce-scattered (X slices the columns for free).
    run(tessera::jit(mm, tessera::in_shardings(tessera::named_sharding(m, P<none, "Y">{}),
                                               tessera::named_sharding(m, P<"Y">{})),
                     tessera::out_shardings(tessera::named_sharding(m, P<"Y", "X">{}))),
        type_text("float32", {rows, cols}, {"Y", "X"}), "all-gather(X), all-gather(X), reduce-scatter(Y)",
        "inputs moved");
  }
}

// ===========================================================================
// Concurrency, and run-time errors
// ===========================================================================

TEST_CASE("one matmul evaluated from several host threads: computed and summed once", "[matmul][threads]") {
  tessera::runtime rt{8};
  std::mt19937 g(551);
  auto m = tessera::make_mesh<"X", "Y">({2, 4});
  auto const ha = random_host<float, 2>({13, 7}, g);
  auto const hb = random_host<float, 2>({7, 13}, g);
  reference const ref = reference_matmul(xt::cast<double>(ha), xt::cast<double>(hb));
  auto const a = tessera::device_put(ha, tessera::named_sharding(m, P<"X", "Y">{}));
  auto const b = tessera::device_put(hb, tessera::named_sharding(m, P<"Y", none>{}));
  auto const e = tessera::matmul(a, b);
  auto const plan = tessera::explain(e);
  REQUIRE(kinds(plan.collectives) == "all-reduce(Y)");
  tessera::collective_counter counter;
  std::vector<observed> got(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = observe(tessera::eval(e)); });
  for (auto& t : threads) t.join();
  CHECK(counter.events() == plan.collectives);
  for (auto const& o : got) check_values(o, ref.value, ref.scale, 1e-5, "from a host thread");
}

namespace {

/// An array of ones of rank R on `m`.
template <std::size_t R, class M, class S>
auto ones_on(M const& m, dims const& shape, S spec) {
  tessera::shape_t<R> s{};
  std::copy(shape.begin(), shape.end(), s.begin());
  return tessera::device_put(xt::xtensor<float, R>(xt::ones<float>(s)), tessera::named_sharding(m, spec));
}

}  // namespace

TEST_CASE("matmul and with_sharding_constraint errors: shapes, batch dimensions, meshes", "[matmul][errors]") {
  tessera::runtime rt{8};
  auto m = tessera::make_mesh<"X", "Y">({2, 4});
  auto const a = ones_on<2>(m, {3, 4}, P<"X", none>{});
  auto const b = ones_on<2>(m, {5, 6}, P<none, "Y">{});
  REQUIRE_THROWS_AS(tessera::matmul(a, b), std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::matmul(a, b), Contains("(3, 4)") && Contains("(5, 6)") && Contains("do not contract") &&
                                                 Contains("has size 4") && Contains("has size 5"));
  REQUIRE_THROWS_WITH(tessera::dot(b, a), Contains("(5, 6)") && Contains("(3, 4)") && Contains("has size 6") &&
                                              Contains("has size 3"));
  auto const v = ones_on<1>(m, {5}, P<"X">{});
  REQUIRE_THROWS_WITH(tessera::matmul(a, v), Contains("(3, 4)") && Contains("(5,)") && Contains("do not contract"));
  REQUIRE_THROWS_WITH(tessera::matmul(v, a), Contains("(5,)") && Contains("(3, 4)") && Contains("do not contract"));
  // Batch dimensions that do not broadcast, and a sharded size-1 batch dimension that would.
  auto const x3 = ones_on<3>(m, {2, 3, 4}, P<"X">{});
  auto const y3 = ones_on<3>(m, {3, 4, 5}, P<>{});
  REQUIRE_THROWS_AS(tessera::matmul(x3, y3), std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::matmul(x3, y3),
                      Contains("(2, 3, 4)") && Contains("(3, 4, 5)") && Contains("do not broadcast"));
  auto const one = ones_on<3>(m, {1, 3, 4}, P<"Y">{});
  auto const many = ones_on<3>(m, {2, 4, 5}, P<>{});
  REQUIRE_THROWS_AS(tessera::matmul(one, many), std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::matmul(one, many), Contains("(1, 3, 4)") && Contains("has size 1 and broadcasts"));
  // A sharding on another mesh of the same type: other device ids.
  auto other = tessera::make_mesh<"X", "Y">({2, 4}, std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  auto const sq = ones_on<2>(m, {4, 4}, P<"X", none>{});
  REQUIRE_THROWS_AS(tessera::with_sharding_constraint(sq, tessera::named_sharding(other, P<"Y">{})),
                    std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::with_sharding_constraint(tessera::matmul(sq, sq), tessera::named_sharding(other, P<>{})),
                      Contains("with_sharding_constraint") && Contains("device_put"));
  auto const elsewhere = ones_on<2>(other, {4, 4}, P<"X", none>{});
  REQUIRE_THROWS_AS(tessera::matmul(sq, elsewhere), std::invalid_argument);
  REQUIRE_THROWS_WITH(tessera::matmul(sq, elsewhere), Contains("different meshes"));
  // The same sharding on the value's own mesh is accepted.
  tessera::array ok = tessera::with_sharding_constraint(tessera::matmul(sq, sq), tessera::named_sharding(m, P<"X">{}));
  CHECK(tessera::type_of(ok) == "float32[4@X,4]");
}
