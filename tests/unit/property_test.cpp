// Differential property test: random meshes (1 to 8 devices over 1 to 3 axes, devices in
// random order), random specs, random shapes (0, 1, primes, uneven against every mesh) and
// random expressions (element-wise with broadcasting and numbers, reductions, transposes,
// matrix products, and short chains of them), each evaluated on the devices and compared with
// the same computation on plain xt::xarray<double> on the host: the result's shape, its global
// value (to_host) and every device's shard (so a wrong replica shows up too).
//
// The run prints `property seed: N`; TESSERA_PROPERTY_SEED=N repeats it, and a failure names
// its case, which TESSERA_PROPERTY_SEED=N TESSERA_PROPERTY_CASE=i runs alone.
// TESSERA_PROPERTY_CASES sets the number of cases (1000 by default).
//
// Compile time: mesh axis names, specs and operations are types, so every combination is an
// instantiation, and each node of each expression type costs about 0.2 s of g++ -O0. The file
// keeps them to about 200 expression types (g++ 12 -O0: about 60 s; clang++ 14: about 35 s):
// three mesh types of Auto axes (one, two and three axes; sizes and device orders are run-time
// values), three specs per (mesh, rank) (two on the one-axis mesh), one element type (double).
// A form over two operands instantiates every pair of their specs, or two specs of the second
// per spec of the first, and one operation per pair, picked by a fixed rotation over the
// specs' indices, so that each operation still meets many spec pairs across ranks and meshes.
// The checks are plain functions over arrays of double.
//
// Values are multiples of 0.5 in [-4, 4], so sums, differences, products and matrix products
// are exact in double; the transcendental functions and means are compared to a relative
// tolerance.
//
// What counts as a correct outcome besides a value: std::invalid_argument for a size-1
// dimension that broadcasts while its operand shards it (tessera replicates nothing behind the
// user's back; see expression.hpp), and for max over an empty dimension (no identity).

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

namespace {

namespace t = tessera;
using t::axes;
using t::none;
using t::P;
using host = xt::xarray<double>;
using dims = std::vector<std::size_t>;

// ---------------------------------------------------------------------------
// Random choices
// ---------------------------------------------------------------------------

struct rng {
  std::mt19937_64 g;
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); }
  std::size_t index(std::size_t n) { return static_cast<std::size_t>(between(0, static_cast<int>(n) - 1)); }
  bool chance(int percent) { return between(0, 99) < percent; }
};

/// A dimension size: 0 now and then, else one of 1, 2, 3, 5, 7, 8, 13.
std::size_t draw_size(rng& r) {
  constexpr std::array<std::size_t, 7> sizes{1, 2, 3, 5, 7, 8, 13};
  return r.chance(5) ? 0 : sizes[r.index(sizes.size())];
}
dims draw_shape(rng& r, std::size_t rank) {
  dims s(rank);
  for (auto& d : s) d = draw_size(r);
  return s;
}

/// Multiples of 0.5 in [-4, 4] (without 0 for divisors): exact in every sum and product here.
host random_values(dims const& shape, rng& r, bool nonzero = false) {
  host h = host::from_shape(shape);
  for (auto& x : h) {
    int v = 0;
    while (v == 0) {
      v = r.between(-8, 8);
      if (!nonzero) break;
    }
    x = 0.5 * v;
  }
  return h;
}

std::string fmt(dims const& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

// ---------------------------------------------------------------------------
// Meshes and specs
// ---------------------------------------------------------------------------

using mesh1 = decltype(t::make_mesh<"X">({1}, std::vector<int>{0}, t::auto_axes));
using mesh2 = decltype(t::make_mesh<"X", "Y">({1, 1}, std::vector<int>{0}, t::auto_axes));
using mesh3 = decltype(t::make_mesh<"X", "Y", "Z">({1, 1, 1}, std::vector<int>{0}, t::auto_axes));

/// Three specs per (mesh, rank) (two on the one-axis mesh), chosen so that operands meet
/// alike, on different axes of one dimension (an Auto conflict: one is resharded), on one
/// axis in two dimensions (the merged spec would repeat it), replicated, on multi-axis
/// entries, and written differently for one layout (P<> and P<none>).
template <class M, std::size_t R>
struct spec_list;
template <> struct spec_list<mesh1, 1> { using type = std::tuple<P<>, P<"X">>; };
template <> struct spec_list<mesh1, 2> { using type = std::tuple<P<"X">, P<none, "X">>; };
template <> struct spec_list<mesh1, 3> { using type = std::tuple<P<"X">, P<none, none, "X">>; };
template <> struct spec_list<mesh2, 1> { using type = std::tuple<P<axes<"X", "Y">>, P<"Y">, P<>>; };
template <> struct spec_list<mesh2, 2> { using type = std::tuple<P<"X", "Y">, P<"Y">, P<none, axes<"Y", "X">>>; };
template <> struct spec_list<mesh2, 3> { using type = std::tuple<P<"X", none, "Y">, P<none, "Y", "X">, P<>>; };
template <> struct spec_list<mesh3, 1> { using type = std::tuple<P<"Z">, P<axes<"Y", "X">>, P<none>>; };
template <> struct spec_list<mesh3, 2> { using type = std::tuple<P<"X", "Z">, P<axes<"Z", "X">, "Y">, P<>>; };
template <> struct spec_list<mesh3, 3> { using type = std::tuple<P<"X", "Y", "Z">, P<"Z", none, "X">, P<none, axes<"X", "Y">>>; };

template <class M, std::size_t R>
using specs_t = typename spec_list<M, R>::type;
template <class M, std::size_t R>
inline constexpr std::size_t n_specs = std::tuple_size_v<specs_t<M, R>>;

template <std::size_t I>
using index_c = std::integral_constant<std::size_t, I>;

/// f(spec, index_c<i>) with the i-th spec of (M, R) as a value of its type.
template <class M, std::size_t R, class F>
void with_spec(std::size_t i, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((i == I ? (f(std::tuple_element_t<I, specs_t<M, R>>{}, index_c<I>{}), 0) : 0), ...);
  }(std::make_index_sequence<n_specs<M, R>>{});
}

/// Which dimensions of a rank-R array the spec shards.
template <class S>
std::vector<bool> sharded_dims(std::size_t rank) {
  std::vector<bool> out(rank);
  for (std::size_t j = 0; j < rank; ++j) out[j] = !S::dim(j).is_none();
  return out;
}

template <class S>
std::string spec_text(S const& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

/// n distinct device ids out of 8: the first n in order, or (half of the time) a random pick in random order.
std::vector<int> pick_devices(std::size_t n, rng& r) {
  std::vector<int> ids(8);
  std::iota(ids.begin(), ids.end(), 0);
  if (r.chance(50)) std::shuffle(ids.begin(), ids.end(), r.g);
  ids.resize(n);
  return ids;
}

/// Axis sizes of K axes whose product is at most 8, uniformly among all such tuples.
template <std::size_t K>
std::array<int, K> pick_mesh_sizes(rng& r) {
  std::vector<std::array<int, K>> all;
  std::array<int, K> s{};
  auto rec = [&](auto& self, std::size_t i, int product) -> void {
    if (i == K) {
      all.push_back(s);
      return;
    }
    for (int v = 1; product * v <= 8; ++v) {
      s[i] = v;
      self(self, i + 1, product * v);
    }
  };
  rec(rec, 0, 1);
  return all[r.index(all.size())];
}

template <class M>
M random_mesh(rng& r) {
  auto const sizes = pick_mesh_sizes<M::rank>(r);
  std::size_t n = 1;
  for (int v : sizes) n *= static_cast<std::size_t>(v);
  auto ids = pick_devices(n, r);
  if constexpr (M::rank == 1) return t::make_mesh<"X">(sizes, std::move(ids), t::auto_axes);
  else if constexpr (M::rank == 2) return t::make_mesh<"X", "Y">(sizes, std::move(ids), t::auto_axes);
  else return t::make_mesh<"X", "Y", "Z">(sizes, std::move(ids), t::auto_axes);
}

template <class M>
std::string mesh_text(M const& m) {
  std::ostringstream os;
  os << m << " on devices (";
  for (std::size_t i = 0; i < m.device_ids().size(); ++i) os << (i ? ", " : "") << m.device_ids()[i];
  os << ')';
  return os.str();
}

// ---------------------------------------------------------------------------
// Host references
// ---------------------------------------------------------------------------

enum class red { sum, max, mean };
constexpr std::array<char const*, 3> red_name{"sum", "max", "mean"};

/// jnp.<op>(h, axis=ax) in double (every axis when `ax` is empty); mean of nothing is NaN.
host ref_reduce(host const& h, dims ax, red op) {
  std::size_t const n = h.dimension();
  if (ax.empty())
    for (std::size_t i = 0; i < n; ++i) ax.push_back(i);
  std::vector<bool> reduced(n, false);
  for (auto a : ax) reduced[a] = true;
  dims oshape;
  for (std::size_t i = 0; i < n; ++i)
    if (!reduced[i]) oshape.push_back(h.shape()[i]);
  host out = host::from_shape(oshape);
  std::fill(out.begin(), out.end(), op == red::max ? -std::numeric_limits<double>::infinity() : 0.0);
  std::vector<std::size_t> ostride(n, 0);
  std::size_t s = 1;
  for (std::size_t i = n; i-- > 0;)
    if (!reduced[i]) {
      ostride[i] = s;
      s *= h.shape()[i];
    }
  std::size_t count = 1;
  for (auto a : ax) count *= h.shape()[a];
  for (std::size_t flat = 0; flat < h.size(); ++flat) {
    std::size_t rest = flat, o = 0;
    for (std::size_t i = n; i-- > 0;) {
      o += (rest % h.shape()[i]) * ostride[i];
      rest /= h.shape()[i];
    }
    double& acc = out.data()[o];
    acc = op == red::max ? std::max(acc, h.data()[flat]) : acc + h.data()[flat];
  }
  if (op == red::mean)
    for (auto& x : out) x /= static_cast<double>(count);
  return out;
}

/// jnp.matmul for operands of rank 2 or 3 ([..., M, K] @ [..., K, N], batch dimensions broadcast).
host ref_matmul(host const& a, host const& b) {
  std::size_t const ra = a.dimension(), rb = b.dimension();
  std::size_t const m = a.shape()[ra - 2], k = a.shape()[ra - 1], n = b.shape()[rb - 1];
  std::size_t const ba = ra == 3 ? a.shape()[0] : 1, bb = rb == 3 ? b.shape()[0] : 1;
  bool const batched = ra == 3 || rb == 3;
  std::size_t const nb = ra == 3 && rb == 3 ? (ba == 1 ? bb : ba) : (ra == 3 ? ba : bb);
  host out = host::from_shape(batched ? dims{nb, m, n} : dims{m, n});
  for (std::size_t p = 0; p < nb; ++p) {
    double const* pa = a.data() + (ba == 1 ? 0 : p) * m * k;
    double const* pb = b.data() + (bb == 1 ? 0 : p) * k * n;
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::size_t l = 0; l < k; ++l) acc += pa[i * k + l] * pb[l * n + j];
        out.data()[(p * m + i) * n + j] = acc;
      }
  }
  return out;
}

host ref_transpose(host const& h, dims const& perm) {
  host out = xt::transpose(h, perm);
  return out;
}

// ---------------------------------------------------------------------------
// Results, seen as arrays of double
// ---------------------------------------------------------------------------

struct shard_values {
  int device = 0;
  std::vector<std::pair<std::size_t, std::size_t>> index;
  std::vector<double> values;
};
struct result_values {
  std::string type;
  dims shape;
  std::vector<double> values;  // to_host, row-major
  std::vector<shard_values> shards;
};

template <class A>
result_values collect(A const& r) {
  result_values out;
  out.type = t::type_of(r);
  auto const h = t::to_host(r);
  out.shape.assign(h.shape().begin(), h.shape().end());
  out.values.assign(h.begin(), h.end());
  for (auto const& sh : r.addressable_shards()) {
    shard_values s;
    s.device = sh.device;
    for (auto const& sl : sh.index) s.index.emplace_back(sl.start, sl.stop);
    for (auto v : sh.data) s.values.push_back(static_cast<double>(v));
    out.shards.push_back(std::move(s));
  }
  return out;
}

bool close_to(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= 1e-9 * (1 + std::abs(want));
}

/// want[index], row-major.
std::vector<double> block_of(host const& want, std::vector<std::pair<std::size_t, std::size_t>> const& index) {
  std::size_t const n = want.dimension();
  dims ext(n);
  std::size_t count = 1;
  for (std::size_t i = 0; i < n; ++i) {
    ext[i] = index[i].second > index[i].first ? index[i].second - index[i].first : 0;
    count *= ext[i];
  }
  std::vector<double> out;
  out.reserve(count);
  dims idx(n, 0);
  for (std::size_t c = 0; c < count; ++c) {
    std::size_t flat = 0;
    for (std::size_t i = 0; i < n; ++i) flat = flat * want.shape()[i] + index[i].first + idx[i];
    out.push_back(want.data()[flat]);
    for (std::size_t i = n; i-- > 0;) {
      if (++idx[i] < ext[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

std::string first_difference(std::vector<double> const& got, std::vector<double> const& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " elements, expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!close_to(got[i], want[i])) {
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << " (row-major) is " << got[i] << ", expected " << want[i];
      return os.str();
    }
  return {};
}

/// "" when the result matches `want` (shape, global value, every shard), else what differs.
std::string mismatch(result_values const& got, host const& want) {
  dims const wshape(want.shape().begin(), want.shape().end());
  if (got.shape != wshape) return "shape " + fmt(got.shape) + ", expected " + fmt(wshape);
  std::string e = first_difference(got.values, std::vector<double>(want.begin(), want.end()));
  if (!e.empty()) return "to_host: " + e;
  for (auto const& s : got.shards) {
    e = first_difference(s.values, block_of(want, s.index));
    if (!e.empty()) {
      std::string blk;
      for (auto const& [a, b] : s.index) blk += (blk.empty() ? "" : ", ") + std::to_string(a) + ":" + std::to_string(b);
      return "the shard on device " + std::to_string(s.device) + " (block [" + blk + "]): " + e;
    }
  }
  return {};
}

// ---------------------------------------------------------------------------
// One case: its description, the expected outcome, the check
// ---------------------------------------------------------------------------

/// What a case may do besides giving the reference value.
enum class outcome {
  value,            // must give the value
  may_throw,        // may throw std::invalid_argument instead (a size-1 dimension that broadcasts is sharded)
  must_throw,       // must throw std::invalid_argument (max over an empty dimension)
};

struct tally {
  std::size_t cases = 0, values = 0, errors = 0, failures = 0;
  std::array<std::size_t, 6> per_form{};
};

struct state {
  rng r;
  std::string text;  // mesh, operands, expression: shown with every failure
  tally* counts = nullptr;

  void line(std::string const& s) { text += "\n  " + s; }
  template <class S, class A>
  void operand(char const* name, S const& s, A const& a) {
    line(std::string(name) + ": " + t::type_of(a) + ", " + spec_text(s));
  }

  /// Runs `compute` (which builds and evaluates the expression) and checks its result.
  template <class F>
  void check(std::string const& expr, F&& compute, host const& want, outcome expected = outcome::value) {
    line("expression: " + expr);
    ++counts->cases;
    INFO(text);
    std::optional<result_values> got;
    std::string error;
    try {
      got = collect(compute());
    } catch (std::invalid_argument const& e) {
      error = e.what();
    } catch (std::exception const& e) {
      ++counts->failures;
      FAIL_CHECK("unexpected exception: " << e.what());
      return;
    }
    if (got) {
      std::string const e = expected == outcome::must_throw ? "gave a value, expected std::invalid_argument"
                                                            : mismatch(*got, want);
      if (!e.empty()) {
        ++counts->failures;
        FAIL_CHECK("result " << got->type << ": " << e);
      } else {
        ++counts->values;
        SUCCEED();
      }
    } else if (expected == outcome::value) {
      ++counts->failures;
      FAIL_CHECK("unexpected std::invalid_argument: " << error);
    } else {
      // The error this case allows, not another one.
      char const* const about = expected == outcome::may_throw ? "has size 1 and broadcasts" : "has no identity";
      if (error.find(about) == std::string::npos) {
        ++counts->failures;
        FAIL_CHECK("std::invalid_argument, but not about what this case allows (\"" << about << "\"): " << error);
      } else {
        ++counts->errors;
        SUCCEED();
      }
    }
  }
};

/// The shape of an operand of rank `rank` taking part in a result of shape `rs` (its last
/// `rank` dimensions), some of them 1 to broadcast: often where the spec leaves the dimension
/// whole, rarely where it shards it (an error, or a reshard that replicates it).
dims broadcast_operand(dims const& rs, std::size_t rank, std::vector<bool> const& sharded, rng& r) {
  dims s(rs.end() - static_cast<std::ptrdiff_t>(rank), rs.end());
  for (std::size_t j = 0; j < rank; ++j)
    if (r.chance(sharded[j] ? 3 : 20)) s[j] = 1;
  return s;
}

/// NumPy's broadcast shape.
dims broadcast_shapes(dims const& a, dims const& b) {
  dims out(std::max(a.size(), b.size()), 1);
  for (std::size_t k = 0; k < out.size(); ++k) {
    std::size_t const x = k < a.size() ? a[a.size() - 1 - k] : 1, y = k < b.size() ? b[b.size() - 1 - k] : 1;
    out[out.size() - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

/// Whether an operand of shape `s`, sharded where `sharded` says, has a size-1 dimension that
/// broadcasts in a result of shape `rs` while it is sharded.
bool broadcasts_sharded(dims const& s, std::vector<bool> const& sharded, dims const& rs) {
  for (std::size_t j = 0; j < s.size(); ++j)
    if (s[j] == 1 && rs[j + rs.size() - s.size()] != 1 && sharded[j]) return true;
  return false;
}

template <class S, std::size_t R, class M>
auto put(M const& m, host const& h) {
  t::shape_t<R> s{};
  std::copy(h.shape().begin(), h.shape().end(), s.begin());
  auto x = xt::xtensor<double, R>::from_shape(s);
  std::copy(h.begin(), h.end(), x.begin());
  return t::device_put(x, t::named_sharding(m, S{}));
}

// ---------------------------------------------------------------------------
// Forms
// ---------------------------------------------------------------------------

template <class F>
void with_rank(std::size_t r, F&& f) {
  if (r == 1) f(index_c<1>{});
  else if (r == 2) f(index_c<2>{});
  else f(index_c<3>{});
}

/// Element-wise functions, and numbers on either side: one of five short chains per spec of
/// a rank-3 operand, rotating with the spec and the mesh.
template <class M>
void unary_case(M const& m, state& st) {
  with_spec<M, 3>(st.r.index(n_specs<M, 3>), [&](auto spec, auto si) {
    using S = decltype(spec);
    constexpr std::size_t k = (decltype(si)::value + 3 * M::rank) % 5;
    host const h = random_values(draw_shape(st.r, 3), st.r);
    auto const a = put<S, 3>(m, h);
    st.operand("a", spec, a);
    if constexpr (k == 0)
      st.check("2 * sin(a)", [&] { return t::eval(2.0 * t::sin(a)); }, 2.0 * xt::sin(h));
    else if constexpr (k == 1)
      st.check("exp(-a)", [&] { return t::eval(t::exp(-a)); }, xt::exp(-h));
    else if constexpr (k == 2)
      st.check("tanh(a) - sigmoid(a)", [&] { return t::eval(t::tanh(a) - t::sigmoid(a)); },
               xt::tanh(h) - 1.0 / (1.0 + xt::exp(-h)));
    else if constexpr (k == 3)
      st.check("maximum(a, 0.5) / 4", [&] { return t::eval(t::maximum(a, 0.5) / 4.0); }, xt::maximum(h, 0.5) / 4.0);
    else
      st.check("1 - sqrt(abs(a))", [&] { return t::eval(1.0 - t::sqrt(t::abs(a))); }, 1.0 - xt::sqrt(xt::abs(h)));
  });
}

constexpr std::array<char const*, 5> binary_name{"+", "-", "*", "/", "maximum"};

template <int Op, class A, class B>
auto apply_binary(A const& a, B const& b) {
  if constexpr (Op == 0) return a + b;
  else if constexpr (Op == 1) return a - b;
  else if constexpr (Op == 2) return a * b;
  else if constexpr (Op == 3) return a / b;
  else return t::maximum(a, b);
}
host apply_binary(int op, host const& a, host const& b) {
  switch (op) {
    case 0: return a + b;
    case 1: return a - b;
    case 2: return a * b;
    case 3: return a / b;
    default: return xt::maximum(a, b);
  }
}
std::string binary_text(int op, char const* x, char const* y) {
  if (op == 4) return std::string("maximum(") + x + ", " + y + ")";
  return std::string(x) + " " + binary_name[static_cast<std::size_t>(op)] + " " + y;
}

/// a op b, a of rank RA, b of rank RB <= RA (broadcast), both possibly with size-1
/// dimensions; the operation and which side the lower-rank operand is on rotate with the specs.
template <class M, std::size_t RA, std::size_t RB, std::size_t Pair>
void binary_case(M const& m, state& st) {
  with_spec<M, RA>(st.r.index(n_specs<M, RA>), [&](auto sa, auto ia) {
    // Every pair of specs for equal ranks; for a lower-rank b, two of its specs per spec of a.
    constexpr std::size_t nb = RA == RB ? n_specs<M, RB> : 2;
    std::size_t const pick = st.r.index(nb);
    auto one = [&](auto jc) {
      constexpr std::size_t IA = decltype(ia)::value;
      constexpr std::size_t IB = RA == RB ? decltype(jc)::value : (IA + decltype(jc)::value) % n_specs<M, RB>;
      using SA = decltype(sa);
      using SB = std::tuple_element_t<IB, specs_t<M, RB>>;
      SB const sb{};
      constexpr int op = static_cast<int>((2 * IA + IB + Pair) % 5);
      constexpr bool swapped = RA != RB && (IA + IB) % 2 == 1;  // the lower-rank operand on the left
      auto const mask_a = sharded_dims<SA>(RA), mask_b = sharded_dims<SB>(RB);
      dims const rs = draw_shape(st.r, RA);
      dims const shape_a = broadcast_operand(rs, RA, mask_a, st.r), shape_b = broadcast_operand(rs, RB, mask_b, st.r);
      dims const out = broadcast_shapes(shape_a, shape_b);
      host const ha = random_values(shape_a, st.r, op == 3 && swapped);
      host const hb = random_values(shape_b, st.r, op == 3 && !swapped);
      auto const a = put<SA, RA>(m, ha);
      auto const b = put<SB, RB>(m, hb);
      st.operand("a", sa, a);
      st.operand("b", sb, b);
      outcome const ex = broadcasts_sharded(shape_a, mask_a, out) || broadcasts_sharded(shape_b, mask_b, out)
                             ? outcome::may_throw
                             : outcome::value;
      if constexpr (swapped)
        st.check(binary_text(op, "b", "a"), [&] { return t::eval(apply_binary<op>(b, a)); }, apply_binary(op, hb, ha), ex);
      else
        st.check(binary_text(op, "a", "b"), [&] { return t::eval(apply_binary<op>(a, b)); }, apply_binary(op, ha, hb), ex);
    };
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((pick == J ? (one(index_c<J>{}), 0) : 0), ...);
    }(std::make_index_sequence<nb>{});
  });
}

template <class M>
void binary_case(M const& m, state& st) {
  switch (st.r.index(3)) {
    case 0: binary_case<M, 2, 2, 0>(m, st); break;
    case 1: binary_case<M, 3, 3, 1>(m, st); break;
    default: binary_case<M, 3, 2, 2>(m, st); break;
  }
}

/// The reductions of a rank-R operand: over one axis (J < R), over (0, 2) (rank 3), or all.
template <std::size_t R>
inline constexpr std::size_t reduction_choices = R == 3 ? 5 : R + 1;
template <std::size_t R, std::size_t J>
dims reduction_axes() {
  if constexpr (J < R) return {J};
  else if constexpr (R == 3 && J == 3) return {0, 2};
  else return {};
}

template <red Op, std::size_t R, std::size_t J, class X>
auto reduce(X const& x) {
  auto go = [&]<std::size_t... Ax>() {
    if constexpr (Op == red::sum) return t::sum<Ax...>(x);
    else if constexpr (Op == red::max) return t::max<Ax...>(x);
    else return t::mean<Ax...>(x);
  };
  if constexpr (J < R) return go.template operator()<J>();
  else if constexpr (R == 3 && J == 3) return go.template operator()<0, 2>();
  else return go.template operator()<>();
}

std::string reduction_text(red op, dims const& ax, std::string const& x) {
  std::string s = red_name[static_cast<std::size_t>(op)];
  if (!ax.empty()) {
    s += '<';
    for (std::size_t i = 0; i < ax.size(); ++i) s += (i ? ", " : "") + std::to_string(ax[i]);
    s += '>';
  }
  return s + "(" + x + ")";
}

/// Whether max over `ax` of an operand of shape `s` has an empty reduced dimension.
bool max_of_nothing(red op, dims const& s, dims ax) {
  if (op != red::max) return false;
  if (ax.empty())
    for (std::size_t i = 0; i < s.size(); ++i) ax.push_back(i);
  for (auto a : ax)
    if (s[a] == 0) return true;
  return false;
}

/// sum, max or mean of an array over one axis, two or all: two of the choices per (rank,
/// spec), the operation rotating with them.
template <class M>
void reduction_case(M const& m, state& st) {
  with_rank(1 + st.r.index(3), [&](auto rk) {
    constexpr std::size_t R = decltype(rk)::value;
    with_spec<M, R>(st.r.index(n_specs<M, R>), [&](auto spec, auto si) {
      using S = decltype(spec);
      host const h = random_values(draw_shape(st.r, R), st.r);
      dims const shape(h.shape().begin(), h.shape().end());
      auto const a = put<S, R>(m, h);
      st.operand("a", spec, a);
      auto one = [&](auto pc) {
        constexpr std::size_t C = reduction_choices<decltype(rk)::value>;
        constexpr std::size_t SI = decltype(si)::value;
        constexpr std::size_t J = (SI + decltype(pc)::value * 2) % C;
        constexpr red op = static_cast<red>(C == 2 ? SI % 3 : (SI + J) % 3);
        dims const ax = reduction_axes<decltype(rk)::value, J>();
        st.check(reduction_text(op, ax, "a"), [&] { return t::eval(reduce<op, decltype(rk)::value, J>(a)); },
                 ref_reduce(h, ax, op), max_of_nothing(op, shape, ax) ? outcome::must_throw : outcome::value);
      };
      if (R == 1 || st.r.chance(50)) one(index_c<0>{});
      else if constexpr (R > 1) one(index_c<1>{});
    });
  });
}

/// The Pc-th transpose of a rank-R operand: reversed, <1, 0, 2> or <2, 0, 1>.
template <std::size_t R, std::size_t Pc, class X>
auto transpose_by(X const& x) {
  if constexpr (R == 2 || Pc == 0) return t::transpose(x);
  else if constexpr (Pc == 1) return t::transpose<1, 0, 2>(x);
  else return t::transpose<2, 0, 1>(x);
}

/// A transpose of an array (free: strides permuted), of an expression (evaluated first), or
/// inside an element-wise chain: two of these per (rank, spec).
template <class M>
void transpose_case(M const& m, state& st) {
  with_rank(2 + st.r.index(2), [&](auto rk) {
    constexpr std::size_t R = decltype(rk)::value;
    if constexpr (R >= 2) {
      with_spec<M, R>(st.r.index(n_specs<M, R>), [&](auto spec, auto si) {
        using S = decltype(spec);
        host const h = random_values(draw_shape(st.r, R), st.r);
        auto const a = put<S, R>(m, h);
        st.operand("a", spec, a);
        auto one = [&](auto pc) {
          constexpr std::size_t Rc = decltype(rk)::value, SI = decltype(si)::value, p = decltype(pc)::value;
          constexpr std::size_t Pc = Rc == 2 ? 0 : (SI + p) % 3;
          constexpr std::size_t kind = Rc == 2 ? (SI + p) % 3 : (SI + 2 * p + 1) % 3;
          dims const perm = Rc == 2 ? dims{1, 0} : Pc == 0 ? dims{2, 1, 0} : Pc == 1 ? dims{1, 0, 2} : dims{2, 0, 1};
          std::string const pt = Rc == 2 || Pc == 0 ? "transpose" : Pc == 1 ? "transpose<1, 0, 2>" : "transpose<2, 0, 1>";
          if constexpr (kind == 0)
            st.check(pt + "(a)", [&] { return t::eval(transpose_by<Rc, Pc>(a)); }, ref_transpose(h, perm));
          else if constexpr (kind == 1)
            st.check(pt + "(a * 2 - 1)", [&] { return t::eval(transpose_by<Rc, Pc>(a * 2.0 - 1.0)); },
                     ref_transpose(h * 2.0 - 1.0, perm));
          else
            st.check(pt + "(a) * 0.5", [&] { return t::eval(transpose_by<Rc, Pc>(a) * 0.5); },
                     ref_transpose(h, perm) * 0.5);
        };
        if (R == 2 || st.r.chance(50)) one(index_c<0>{});
        else if constexpr (R == 3) one(index_c<1>{});
      });
    }
  });
}

/// Matrix products: [M, K] @ [K, N] plain or in a chain (a bias added, a difference of two
/// partial products, a transposed operand), and batched [B, M, K] @ [B, K, N] or @ [K, N].
template <class M>
void matmul_case(M const& m, state& st) {
  static_assert(n_specs<M, 2> == n_specs<M, 3>);
  std::size_t const mm = draw_size(st.r), kk = draw_size(st.r), nn = draw_size(st.r);
  if (st.r.chance(60)) {
    with_spec<M, 2>(st.r.index(n_specs<M, 2>), [&](auto sa, auto ia) {
      with_spec<M, 2>(st.r.index(n_specs<M, 2>), [&](auto sb, auto ib) {
        using SA = decltype(sa);
        using SB = decltype(sb);
        constexpr std::size_t IA = decltype(ia)::value;
        constexpr std::size_t IB = decltype(ib)::value;
        constexpr std::size_t kind = (IA + 2 * IB) % 4;
        host const hb = random_values({kk, nn}, st.r);
        auto const b = put<SB, 2>(m, hb);
        if constexpr (kind == 3) {
          // a drawn as [K, M] and transposed.
          host const ha = random_values({kk, mm}, st.r);
          auto const a = put<SA, 2>(m, ha);
          st.operand("a", sa, a);
          st.operand("b", sb, b);
          st.check("matmul(transpose(a), b)", [&] { return t::eval(t::matmul(t::transpose(a), b)); },
                   ref_matmul(ref_transpose(ha, {1, 0}), hb));
        } else {
          host const ha = random_values({mm, kk}, st.r);
          auto const a = put<SA, 2>(m, ha);
          st.operand("a", sa, a);
          st.operand("b", sb, b);
          if constexpr (kind == 0) {
            st.check("matmul(a, b)", [&] { return t::eval(t::matmul(a, b)); }, ref_matmul(ha, hb));
          } else if constexpr (kind == 1) {
            // c: a bias over the columns, its spec rotating with the operands'.
            using SC = std::tuple_element_t<(IA + IB) % n_specs<M, 1>, specs_t<M, 1>>;
            host const hc = random_values({nn}, st.r);
            auto const c = put<SC, 1>(m, hc);
            st.operand("c", SC{}, c);
            st.check("matmul(a, b) + c", [&] { return t::eval(t::matmul(a, b) + c); }, ref_matmul(ha, hb) + hc);
          } else {
            host const hb2 = random_values({kk, nn}, st.r);
            auto const b2 = put<SB, 2>(m, hb2);
            st.operand("b2", sb, b2);
            st.check("2 * matmul(a, b) - matmul(a, b2)", [&] { return t::eval(2.0 * t::matmul(a, b) - t::matmul(a, b2)); },
                     2.0 * ref_matmul(ha, hb) - ref_matmul(ha, hb2));
          }
        }
      });
    });
  } else {
    std::size_t const bsz = draw_size(st.r);
    with_spec<M, 3>(st.r.index(n_specs<M, 3>), [&](auto sa, auto ia) {
      using SA = decltype(sa);
      // b's rank (3, or 2: broadcast over the batch) rotates with the pair.
      auto one = [&](auto jc) {
        constexpr std::size_t IA = decltype(ia)::value, IB = (IA + decltype(jc)::value) % n_specs<M, 3>;
        constexpr std::size_t RB = (IA + decltype(jc)::value) % 2 == 0 ? 3 : 2;
        using SB = std::tuple_element_t<IB, specs_t<M, RB>>;
        auto const mask_a = sharded_dims<SA>(3), mask_b = sharded_dims<SB>(RB);
        // A batch of 1 on one side broadcasts (an error where that side shards it).
        std::size_t const ba = RB == 3 && st.r.chance(mask_a[0] ? 5 : 20) ? 1 : bsz;
        std::size_t const bb = RB == 3 && ba != 1 && st.r.chance(mask_b[0] ? 5 : 20) ? 1 : bsz;
        host const ha = random_values({ba, mm, kk}, st.r);
        host const hb = random_values(RB == 3 ? dims{bb, kk, nn} : dims{kk, nn}, st.r);
        auto const a = put<SA, 3>(m, ha);
        auto const b = put<SB, RB>(m, hb);
        st.operand("a", sa, a);
        st.operand("b", SB{}, b);
        bool const bad = RB == 3 && ((ba == 1 && bb != 1 && mask_a[0]) || (bb == 1 && ba != 1 && mask_b[0]));
        st.check("matmul(a, b)", [&] { return t::eval(t::matmul(a, b)); }, ref_matmul(ha, hb),
                 bad ? outcome::may_throw : outcome::value);
      };
      // Two of b's specs per spec of a: a's index and the next.
      if (st.r.chance(50)) one(index_c<0>{});
      else one(index_c<1>{});
    });
  }
}

/// Chains through a reduction: a reduction of an element-wise expression of two rank-2
/// operands, and a (partial) sum or mean of a rank-3 operand combined with a rank-2 one.
template <class M>
void chain_case(M const& m, state& st) {
  if (st.r.chance(60)) {
    with_spec<M, 2>(st.r.index(n_specs<M, 2>), [&](auto sa, auto ia) {
      // b: a's spec or the next one; the chain rotates with the pair.
      auto one = [&](auto jc) {
        constexpr std::size_t IA = decltype(ia)::value, J = decltype(jc)::value;
        using SA = decltype(sa);
        using SB = std::tuple_element_t<(IA + J) % n_specs<M, 2>, specs_t<M, 2>>;
        SB const sb{};
        constexpr std::size_t kind = (IA + 2 * J) % 3;
        dims const s = draw_shape(st.r, 2);
        host const ha = random_values(s, st.r), hb = random_values(s, st.r);
        auto const a = put<SA, 2>(m, ha);
        auto const b = put<SB, 2>(m, hb);
        st.operand("a", sa, a);
        st.operand("b", sb, b);
        host const x = ha * hb + 1.0;
        if constexpr (kind == 0)
          st.check("sum<0>(a * b + 1)", [&] { return t::eval(t::sum<0>(a * b + 1.0)); }, ref_reduce(x, {0}, red::sum));
        else if constexpr (kind == 1)
          st.check("max<1>(a * b + 1)", [&] { return t::eval(t::max<1>(a * b + 1.0)); }, ref_reduce(x, {1}, red::max),
                   s[1] == 0 ? outcome::must_throw : outcome::value);
        else
          st.check("mean(a * b + 1)", [&] { return t::eval(t::mean(a * b + 1.0)); }, ref_reduce(x, {}, red::mean));
      };
      if (st.r.chance(50)) one(index_c<0>{});
      else one(index_c<1>{});
    });
  } else {
    with_spec<M, 3>(st.r.index(n_specs<M, 3>), [&](auto sa, auto ia) {
      // b: the spec of a's index or the next; the chain rotates with a's spec.
      auto one = [&](auto jc) {
        constexpr std::size_t IA = decltype(ia)::value;
        using SA = decltype(sa);
        using SB = std::tuple_element_t<(IA + decltype(jc)::value) % n_specs<M, 2>, specs_t<M, 2>>;
        constexpr bool first = IA % 2 == 0;
        dims const s = draw_shape(st.r, 3);
        host const ha = random_values(s, st.r);
        host const hb = random_values(first ? dims{s[0], s[1]} : dims{s[1], s[2]}, st.r, !first);
        auto const a = put<SA, 3>(m, ha);
        auto const b = put<SB, 2>(m, hb);
        st.operand("a", sa, a);
        st.operand("b", SB{}, b);
        if constexpr (first)
          st.check("sum<2>(a) * b", [&] { return t::eval(t::sum<2>(a) * b); }, ref_reduce(ha, {2}, red::sum) * hb);
        else
          st.check("mean<0>(a) / b - 1", [&] { return t::eval(t::mean<0>(a) / b - 1.0); },
                   ref_reduce(ha, {0}, red::mean) / hb - 1.0);
      };
      if (st.r.chance(50)) one(index_c<0>{});
      else one(index_c<1>{});
    });
  }
}

/// One random case: a mesh type, a mesh, a form.
void run_case(state& st) {
  auto on = [&](auto tag) {
    using M = typename decltype(tag)::type;
    M const m = random_mesh<M>(st.r);
    st.text += "mesh: " + mesh_text(m);
    // Forms, by weight: unary 12, binary 30, reduction 18, transpose 10, matmul 18, chain 12.
    constexpr std::array<int, 6> upto{12, 42, 60, 70, 88, 100};
    int const pick = st.r.between(0, 99);
    std::size_t const f = static_cast<std::size_t>(std::upper_bound(upto.begin(), upto.end(), pick) - upto.begin());
    ++st.counts->per_form[f];
    switch (f) {
      case 0: unary_case(m, st); break;
      case 1: binary_case(m, st); break;
      case 2: reduction_case(m, st); break;
      case 3: transpose_case(m, st); break;
      case 4: matmul_case(m, st); break;
      default: chain_case(m, st); break;
    }
  };
  int const which = st.r.between(0, 99);
  if (which < 25) on(std::type_identity<mesh1>{});
  else if (which < 60) on(std::type_identity<mesh2>{});
  else on(std::type_identity<mesh3>{});
}

std::optional<std::uint64_t> env_number(char const* name) {
  char const* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return std::nullopt;
  return std::stoull(e);
}

}  // namespace

TEST_CASE("random expressions on random meshes and specs match the same computation on the host", "[property]") {
  t::runtime rt{8};
  std::uint64_t const seed = env_number("TESSERA_PROPERTY_SEED").value_or(
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  std::size_t const n = env_number("TESSERA_PROPERTY_CASES").value_or(1000);
  auto const only = env_number("TESSERA_PROPERTY_CASE");
  std::cout << "property seed: " << seed << " (TESSERA_PROPERTY_SEED=" << seed << " repeats this run)" << std::endl;
  tally counts;
  for (std::size_t i = only.value_or(0); i < (only ? *only + 1 : n); ++i) {
    std::seed_seq ss{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32), static_cast<std::uint32_t>(i)};
    state st{rng{std::mt19937_64(ss)}, {}, &counts};
    st.text = "case " + std::to_string(i) + " of property seed " + std::to_string(seed) +
              " (alone: TESSERA_PROPERTY_SEED=" + std::to_string(seed) + " TESSERA_PROPERTY_CASE=" + std::to_string(i) +
              ")\n  ";
    run_case(st);
    if (counts.failures >= 10) {
      FAIL_CHECK("stopping after 10 failing checks");
      break;
    }
  }
  std::cout << "property cases: " << counts.cases << " (" << counts.values << " values, " << counts.errors
            << " expected errors, " << counts.failures << " failures); per form (unary, binary, reduction, "
            << "transpose, matmul, chain):";
  for (auto c : counts.per_form) std::cout << ' ' << c;
  std::cout << std::endl;
  CHECK(counts.cases >= (only ? 1 : n));
}
