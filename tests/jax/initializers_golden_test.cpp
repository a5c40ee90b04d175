// tessera::nn::initializers against jax.nn.initializers itself (tests/golden/jax_initializers.json,
// written by tools/jax_reference/gen_initializers.py with JAX 0.12 op by op): every initializer
// (zeros, ones, constant, normal, uniform, truncated_normal, variance_scaling in its 4 modes x 3
// distributions and with in/out/batch axes, the named lecun/glorot/xavier/he/kaiming ones) on
// shapes of rank 1 to 4 (conv-like 3x3x4x8 among them), two keys, float32 and some float64.
//   - values bit for bit (kMaxUlps: 0, see below), on the host and made in place replicated and
//     sharded over a 2x4 mesh: the bits do not depend on the sharding;
//   - the shapes JAX refuses (rank 1 with the default in_axis) are refused with invalid_argument;
//   - bad modes, distributions and scales are refused with the value in the message.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>

#include <tessera/nn/initializers.hpp>
#include <tessera/array.hpp>
#include <tessera/random.hpp>

#include "golden.hpp"

namespace ini = tessera::nn::initializers;
using tessera::axes;
using tessera::named_sharding;
using tessera::none;
using tessera::P;
using tessera::shape_t;
using tessera_jax::json;

namespace {

/// Largest distance from JAX in ulps that a case may have: none (tessera::random reproduces XLA's
/// erf_inv with XLA's own log and log1p, and the initializers JAX's order of operations).
constexpr std::uint64_t kMaxUlps = 0;

using any_init = std::variant<ini::zeros, ini::ones, ini::constant, ini::normal, ini::uniform, ini::truncated_normal,
                              ini::variance_scaling>;

ini::fan_axes axes_of(json const& d, char const* key, ini::fan_axes fallback) {
  if (!d.contains(key)) return fallback;
  auto const& j = d[key];
  if (j.is_number_integer()) return ini::fan_axes(j.get<int>());
  ini::fan_axes a;
  for (auto const& x : j) a.axis[a.count++] = x.get<int>();
  return a;
}

/// The initializer a case describes, made through the C++ name it has in tessera.
any_init make(json const& d) {
  std::string const kind = d["kind"];
  if (kind == "zeros") return ini::zeros{};
  if (kind == "ones") return ini::ones{};
  if (kind == "constant") return ini::constant{d["value"].get<double>()};
  if (kind == "normal") return ini::normal{d["stddev"].get<double>()};
  if (kind == "uniform") return ini::uniform{d["scale"].get<double>()};
  if (kind == "truncated_normal")
    return ini::truncated_normal{d["stddev"].get<double>(), d["lower"].get<double>(), d["upper"].get<double>()};
  if (kind == "variance_scaling")
    return ini::variance_scaling(d["scale"].get<double>(), d["mode"].get<std::string>(),
                                 d["distribution"].get<std::string>(), axes_of(d, "in_axis", -2),
                                 axes_of(d, "out_axis", -1), axes_of(d, "batch_axis", {}));
  if (kind == "lecun_normal") return ini::lecun_normal{};
  if (kind == "lecun_uniform") return ini::lecun_uniform{};
  if (kind == "glorot_normal") return ini::glorot_normal{};
  if (kind == "glorot_uniform") return ini::glorot_uniform{};
  if (kind == "xavier_normal") return ini::xavier_normal{};
  if (kind == "xavier_uniform") return ini::xavier_uniform{};
  if (kind == "he_normal") return ini::he_normal{};
  if (kind == "he_uniform") return ini::he_uniform{};
  if (kind == "kaiming_normal") return ini::kaiming_normal{};
  if (kind == "kaiming_uniform") return ini::kaiming_uniform{};
  FAIL("unknown initializer kind " << kind);
  return ini::zeros{};
}

/// A float's position on the number line in ulps (-0 and +0 one apart, as bits differ).
template <class F>
std::int64_t ordered(F x) {
  using I = std::conditional_t<sizeof(F) == 8, std::int64_t, std::int32_t>;
  I const i = std::bit_cast<I>(x);
  return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<I>::min()) - i - 1 : static_cast<std::int64_t>(i);
}

/// The largest distance in ulps between `got` and the case's bit patterns.
template <class T, class C>
std::uint64_t distance(C const& got, json const& want) {
  using U = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
  REQUIRE(got.size() == want.size());
  std::uint64_t worst = 0;
  std::size_t i = 0;
  for (T g : got) {
    T const w = std::bit_cast<T>(static_cast<U>(want[i].get<std::uint64_t>()));
    std::int64_t const d = ordered(g) - ordered(w);
    std::uint64_t const ad = static_cast<std::uint64_t>(d < 0 ? -d : d);
    if (ad > worst) {
      worst = ad;
      INFO("element " << i << ": tessera " << g << ", JAX " << w << " (" << ad << " ulps)");
      CHECK(ad <= kMaxUlps);
    }
    ++i;
  }
  return worst;
}

template <class A, class B>
bool same_bits(A const& a, B const& b) {
  return a.shape() == b.shape() &&
         std::equal(a.begin(), a.end(), b.begin(), [](auto x, auto y) { return std::bit_cast<decltype(y)>(x) == y && ordered(x) == ordered(y); });
}

/// The 2x4 mesh's sharding the generator checked JAX with, for a weight of rank N.
template <std::size_t N, class M>
auto sharded_spec(M const& mesh) {
  if constexpr (N == 1) return named_sharding(mesh, P<axes<"x", "y">>{});
  else if constexpr (N == 2) return named_sharding(mesh, P<"x", "y">{});
  else if constexpr (N == 3) return named_sharding(mesh, P<"x", none, "y">{});
  else return named_sharding(mesh, P<none, none, "x", "y">{});
}

template <std::size_t N>
shape_t<N> shape_of(json const& s) {
  shape_t<N> out{};
  for (std::size_t d = 0; d < N; ++d) out[d] = s[d].get<std::size_t>();
  return out;
}

std::uint64_t worst_seen = 0;

template <std::size_t N, class M>
void check_case(json const& c, M const& mesh) {
  auto const init = make(c["init"]);
  auto const key = tessera::random::wrap_key_data({c["key"][0].get<std::uint32_t>(), c["key"][1].get<std::uint32_t>()});
  auto const shape = shape_of<N>(c["shape"]);
  bool const f64 = c["dtype"] == "float64";
  std::visit(
      [&](auto const& i) {
        if (c.contains("error")) {
          INFO("JAX: " << c["jax_message"].get<std::string>());
          REQUIRE_THROWS_AS(i.template apply<float>(key, shape), std::invalid_argument);
          bool const default_in = c["jax_message"].get<std::string>().find("default in_axis") != std::string::npos;
          REQUIRE_THROWS_WITH(i.template apply<float>(key, shape),
                              Catch::Contains(default_in ? "with the default in_axis -2" : "is not an axis"));
          return;
        }
        if (f64) {
          worst_seen = std::max(worst_seen, distance<double>(i.template apply<double>(key, shape), c["values"]));
          return;
        }
        auto const host = i(key, shape);
        worst_seen = std::max(worst_seen, distance<float>(host, c["values"]));
        auto const rep = i(key, shape, named_sharding(mesh, P<>{}));
        auto const sh = i(key, shape, sharded_spec<N>(mesh));
        CHECK(same_bits(tessera::to_host(rep), host));
        CHECK(same_bits(tessera::to_host(sh), host));
      },
      init);
}

}  // namespace

TEST_CASE("jax.nn.initializers bit for bit, on the host, replicated and sharded", "[nn][initializers][golden]") {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  tessera_jax::checks cs;
  for (auto const& [name, c] : tessera_jax::golden("jax_initializers.json").at("cases").items()) {
    cs[name] = [&mesh](json const& k) {
      switch (k["shape"].size()) {
        case 1: check_case<1>(k, mesh); break;
        case 2: check_case<2>(k, mesh); break;
        case 3: check_case<3>(k, mesh); break;
        case 4: check_case<4>(k, mesh); break;
        default: FAIL("golden shape of rank " << k["shape"].size());
      }
    };
  }
  CHECK(tessera_jax::check_all("jax_initializers.json", cs) >= 400);
  CHECK(worst_seen <= kMaxUlps);
  WARN("largest distance from JAX: " << worst_seen << " ulps");
}

TEST_CASE("variance_scaling refuses bad modes, distributions, scales and axes, naming them", "[nn][initializers]") {
  using Catch::Contains;
  CHECK_THROWS_WITH(ini::variance_scaling(1.0, "fan_sum", "normal"), Contains("invalid mode \"fan_sum\""));
  CHECK_THROWS_WITH(ini::variance_scaling(1.0, "fan_in", "gamma"), Contains("invalid distribution \"gamma\""));
  CHECK_THROWS_WITH(ini::variance_scaling(0.0, "fan_in", "normal"), Contains("scale must be a positive number, got 0"));
  CHECK_THROWS_WITH(ini::variance_scaling(-2.0, "fan_in", "normal"), Contains("got -2"));
  auto const key = tessera::random::key(0);
  CHECK_THROWS_WITH(ini::lecun_normal{}(key, {5}), Contains("rank 1 (shape (5,)) with the default in_axis -2"));
  CHECK_THROWS_WITH(ini::he_uniform(0, 3)(key, {4, 5}), Contains("out_axis 3 is not an axis of a weight of rank 2 (shape (4, 5))"));
  CHECK_THROWS_WITH(ini::glorot_normal(ini::fan_axes{0, -4})(key, {2, 3, 4}), Contains("in_axis -4 is not an axis"));
  // The fan rules themselves: a 3x3 convolution from 64 to 128 channels (HWIO).
  auto const [fi, fo] = ini::compute_fans(shape_t<4>{3, 3, 64, 128});
  CHECK(fi == 9.0 * 64);
  CHECK(fo == 9.0 * 128);
  auto const [bi, bo] = ini::compute_fans(shape_t<3>{4, 6, 10}, -2, -1, 0);
  CHECK(bi == 6.0);
  CHECK(bo == 10.0);
  // Named types, the aliases derived from the names they alias.
  static_assert(std::is_base_of_v<ini::glorot_normal, ini::xavier_normal>);
  static_assert(std::is_base_of_v<ini::he_uniform, ini::kaiming_uniform>);
  static_assert(!std::is_same_v<ini::lecun_normal, ini::he_normal>);
  static_assert(ini::initializer<ini::kaiming_normal> && ini::initializer<ini::constant>);
  static_assert(!ini::initializer<int>);
}
