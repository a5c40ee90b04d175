#pragma once
// jax.nn.initializers for sharded arrays: zeros, ones, constant, normal, uniform, truncated_normal,
// variance_scaling with JAX's fan rules, and its named cases (lecun_*, glorot_*/xavier_*,
// he_*/kaiming_*). Each is a small value type; calling it makes the parameter directly in its
// sharding, every device filling its own block from the key and the global indices (no gather),
// with JAX's numbers for the same key, shape and dtype, bit for bit wherever tessera::random is
// (docs/initializers.md).
//
//   auto w = nn::initializers::lecun_normal{}(key, {1024, 4096}, named_sharding(mesh, P<"data", "model">{}));
//   auto h = nn::initializers::he_uniform{}(key, {3, 3, 64, 128});          // an xt::xtensor on the host
//   auto d = nn::initializers::glorot_normal{}.apply<double>(key, {8, 8});  // float64 (JAX with x64)
//
// The arithmetic follows jax/_src/nn/initializers.py step by step in the sample's precision: the
// fans in double precision as Python computes them, the variance rounded to the dtype, its square
// root and the truncated-normal correction in the dtype, one product per element.

#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/shape.hpp"
#include "tessera/core/sharding.hpp"
#include "tessera/random/samplers.hpp"

namespace tessera::nn::initializers {

// ---------------------------------------------------------------------------------------------
// machinery: what an initializer makes per element, and the calls every initializer shares
// ---------------------------------------------------------------------------------------------

namespace detail {

namespace rd = tessera::random::detail;

/// Every element is `value` (zeros, ones, constant): no cipher runs.
template <class T>
struct constant_plan {
  T value;
};

/// Every element comes from the cipher of its global index under the key, through `kernel`.
template <class Kernel>
struct random_plan {
  Kernel kernel;
};

/// uniform(key, shape, dtype, minval, maxval) * post: the uniform initializer and
/// variance_scaling's "uniform".
template <class T>
struct scaled_uniform_kernel {
  rd::uniform_kernel<T> u;
  T post;
  T operator()(std::array<rd::word_pair, 1> const& p) const { return u(p) * post; }
  void fill(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, T* out) const {
    u.fill(w0, w1, m, out);
    for (std::size_t e = 0; e < m; ++e) out[e] *= post;
  }
};

/// Makes an array of `shape` in sharding `s` (or on the host) from a plan.
template <class T, std::size_t N, sharding S, class Plan>
tessera::array<T, N, S> make_sharded(Plan const& plan, random::prng_key key, shape_t<N> const& shape, S const& s,
                                     char const* where) {
  if constexpr (requires { plan.value; }) {
    T const v = plan.value;
    return tessera::detail::build_array<T, N, S, false>(
        s, shape, where, [&](std::size_t, std::array<slice, N> const& block, T* out) {
          std::size_t const n = tessera::detail::element_count(tessera::detail::block_shape(block));
          for (std::size_t i = 0; i < n; ++i) out[i] = v;
        });
  } else {
    return random::detail::sample_sharded<T>(std::array{key}, shape, s, where, plan.kernel);
  }
}

template <class T, std::size_t N, class Plan>
xt::xtensor<T, N> make_host(Plan const& plan, random::prng_key key, shape_t<N> const& shape, char const* where) {
  if constexpr (requires { plan.value; }) {
    (void)tessera::detail::checked_element_count<T>(shape, where);
    auto out = xt::xtensor<T, N>::from_shape(shape);
    for (auto& x : out) x = plan.value;
    return out;
  } else {
    return random::detail::sample_host<T>(std::array{key}, shape, where, plan.kernel);
  }
}

/// The calls every initializer has (CRTP): `init(key, shape, sharding)`, `init(key, shape)`, and
/// the same as `init.apply<T>(...)` for another dtype. Derived provides
/// `template <class T, std::size_t N> auto plan(shape_t<N> const&) const` and `where()`.
template <class Derived>
struct initializer_interface {
  /// The initializer's values as an array of dtype T in sharding `s`, each device making its block.
  template <class T = float, std::size_t N, sharding S>
  tessera::array<T, N, S> apply(random::prng_key key, shape_t<N> const& shape, S const& s) const {
    static_assert(rd::sample_float<T>, "tessera::nn::initializers: the dtype must be float or double");
    Derived const& self = static_cast<Derived const&>(*this);
    return make_sharded<T>(self.template plan<T>(shape), key, shape, s, self.where());
  }
  /// The initializer's values as a host array of dtype T (what a shard_map body calls).
  template <class T = float, std::size_t N>
  xt::xtensor<T, N> apply(random::prng_key key, shape_t<N> const& shape) const {
    static_assert(rd::sample_float<T>, "tessera::nn::initializers: the dtype must be float or double");
    Derived const& self = static_cast<Derived const&>(*this);
    return make_host<T>(self.template plan<T>(shape), key, shape, self.where());
  }
  /// apply with a braced shape ({4, 8}) and a sharding.
  template <class T = float, std::integral I, std::size_t N, sharding S>
  tessera::array<T, N, S> apply(random::prng_key key, I const (&shape)[N], S const& s) const {
    Derived const& self = static_cast<Derived const&>(*this);
    return apply<T>(key, tessera::detail::checked_shape<I, N>(shape, self.where()), s);
  }
  /// apply with a braced shape, on the host.
  template <class T = float, std::integral I, std::size_t N>
  xt::xtensor<T, N> apply(random::prng_key key, I const (&shape)[N]) const {
    Derived const& self = static_cast<Derived const&>(*this);
    return apply<T>(key, tessera::detail::checked_shape<I, N>(shape, self.where()));
  }

  /// init(key, shape, sharding): float32, JAX's default dtype.
  template <std::size_t N, sharding S>
  tessera::array<float, N, S> operator()(random::prng_key key, shape_t<N> const& shape, S const& s) const {
    return apply<float>(key, shape, s);
  }
  /// init(key, shape): float32 on the host.
  template <std::size_t N>
  xt::xtensor<float, N> operator()(random::prng_key key, shape_t<N> const& shape) const {
    return apply<float>(key, shape);
  }
  /// init(key, {a, b}, sharding).
  template <std::integral I, std::size_t N, sharding S>
  tessera::array<float, N, S> operator()(random::prng_key key, I const (&shape)[N], S const& s) const {
    return apply<float>(key, shape, s);
  }
  /// init(key, {a, b}).
  template <std::integral I, std::size_t N>
  xt::xtensor<float, N> operator()(random::prng_key key, I const (&shape)[N]) const {
    return apply<float>(key, shape);
  }
};

}  // namespace detail

/// Something that makes parameters of dtype T, rank N in sharding S as jax.nn.initializers'
/// functions do: `init.template apply<T>(key, shape, s)` gives a tessera::array<T, N, S>.
template <class I, class T, std::size_t N, class S>
concept initializer_for = sharding<S> && requires(I const& init, random::prng_key key, shape_t<N> const& shape,
                                                  S const& s) {
  { init.template apply<T>(key, shape, s) } -> std::same_as<tessera::array<T, N, S>>;
  { init.template apply<T>(key, shape) } -> std::same_as<xt::xtensor<T, N>>;
};

/// Any of this header's initializers (or one of the same form): what a layer stores for its
/// kernel_init / bias_init (jax.nn.initializers.Initializer).
template <class I>
concept initializer = std::copy_constructible<I> && requires(I const& init, random::prng_key key, shape_t<2> shape) {
  { init.template apply<float>(key, shape) } -> std::same_as<xt::xtensor<float, 2>>;
};

// ---------------------------------------------------------------------------------------------
// constants
// ---------------------------------------------------------------------------------------------

/// jax.nn.initializers.zeros: the key is ignored.
struct zeros : detail::initializer_interface<zeros> {
  template <class T, std::size_t N>
  detail::constant_plan<T> plan(shape_t<N> const&) const {
    return {T(0)};
  }
  static constexpr char const* where() { return "nn::initializers::zeros"; }
};

/// jax.nn.initializers.ones: the key is ignored.
struct ones : detail::initializer_interface<ones> {
  template <class T, std::size_t N>
  detail::constant_plan<T> plan(shape_t<N> const&) const {
    return {T(1)};
  }
  static constexpr char const* where() { return "nn::initializers::ones"; }
};

/// jax.nn.initializers.constant(value): every element `value` rounded to the dtype.
struct constant : detail::initializer_interface<constant> {
  double value = 0.0;
  constexpr constant() = default;
  constexpr explicit constant(double v) : value(v) {}
  template <class T, std::size_t N>
  detail::constant_plan<T> plan(shape_t<N> const&) const {
    return {static_cast<T>(value)};
  }
  static constexpr char const* where() { return "nn::initializers::constant"; }
};

// ---------------------------------------------------------------------------------------------
// normal, uniform, truncated_normal
// ---------------------------------------------------------------------------------------------

/// jax.nn.initializers.normal(stddev=1e-2): mean 0, standard deviation `stddev`.
struct normal : detail::initializer_interface<normal> {
  double stddev = 1e-2;
  constexpr normal() = default;
  constexpr explicit normal(double s) : stddev(s) {}
  template <class T, std::size_t N>
  detail::random_plan<random::detail::normal_kernel<T>> plan(shape_t<N> const&) const {
    return {random::detail::normal_kernel<T>::scaled(static_cast<T>(stddev))};
  }
  static constexpr char const* where() { return "nn::initializers::normal"; }
};

/// jax.nn.initializers.uniform(scale=1e-2): uniform in [0, scale).
struct uniform : detail::initializer_interface<uniform> {
  double scale = 1e-2;
  constexpr uniform() = default;
  constexpr explicit uniform(double s) : scale(s) {}
  template <class T, std::size_t N>
  detail::random_plan<detail::scaled_uniform_kernel<T>> plan(shape_t<N> const&) const {
    return {{{T(0), T(1)}, static_cast<T>(scale)}};
  }
  static constexpr char const* where() { return "nn::initializers::uniform"; }
};

/// jax.nn.initializers.truncated_normal(stddev=1e-2, lower=-2, upper=2): a unit normal truncated
/// to (lower, upper), then times stddev (no correction of the standard deviation, as in JAX).
struct truncated_normal : detail::initializer_interface<truncated_normal> {
  double stddev = 1e-2, lower = -2.0, upper = 2.0;
  constexpr truncated_normal() = default;
  constexpr explicit truncated_normal(double s, double lo = -2.0, double hi = 2.0) : stddev(s), lower(lo), upper(hi) {}
  template <class T, std::size_t N>
  detail::random_plan<random::detail::truncated_normal_kernel<T>> plan(shape_t<N> const&) const {
    return {random::detail::truncated_normal_kernel<T>(static_cast<T>(lower), static_cast<T>(upper),
                                                       static_cast<T>(stddev))};
  }
  static constexpr char const* where() { return "nn::initializers::truncated_normal"; }
};

// ---------------------------------------------------------------------------------------------
// variance_scaling and its named cases
// ---------------------------------------------------------------------------------------------

/// An axis or a list of axes of a weight's shape for the fan rules (JAX's `int | Sequence[int]`):
/// `-2`, `{0, 1}`, or `{}` for none. Negative axes count from the end, as Python indexes.
struct fan_axes {
  static constexpr std::size_t capacity = 8;
  std::array<int, capacity> axis{};
  std::size_t count = 0;

  constexpr fan_axes() = default;
  constexpr fan_axes(int a) : count(1) { axis[0] = a; }  // NOLINT: an int is an axis, as in JAX
  constexpr fan_axes(std::initializer_list<int> list) {
    if (list.size() > capacity)
      throw std::invalid_argument("nn::initializers::fan_axes: at most 8 axes, got " + std::to_string(list.size()));
    for (int a : list) axis[count++] = a;
  }
  /// The product of the sizes of these axes of `shape` (1 for none), as _compute_fans's math.prod.
  template <std::size_t N>
  std::size_t size_in(shape_t<N> const& shape, char const* where, char const* role) const {
    std::size_t n = 1;
    for (std::size_t i = 0; i < count; ++i) {
      long const r = static_cast<long>(N), a = axis[i];
      if (a < -r || a >= r) {
        std::ostringstream m;
        m << where << ": " << role << " " << a << " is not an axis of a weight of rank " << N << " (shape ";
        write_shape(m, shape);
        m << ")";
        throw std::invalid_argument(m.str());
      }
      n *= shape[static_cast<std::size_t>(a < 0 ? a + r : a)];
    }
    return n;
  }
  template <std::size_t N>
  static void write_shape(std::ostream& m, shape_t<N> const& shape) {
    m << "(";
    for (std::size_t d = 0; d < N; ++d) m << (d ? ", " : "") << shape[d];
    m << (N == 1 ? ",)" : ")");
  }
  constexpr bool is_default_in_axis() const { return count == 1 && axis[0] == -2; }
};

/// JAX's _compute_fans: (fan_in, fan_out) of a weight of `shape`, in double precision as Python
/// computes them (the receptive field is the product of the other axes, a float).
template <std::size_t N>
std::pair<double, double> compute_fans(shape_t<N> const& shape, fan_axes const& in_axis = -2,
                                       fan_axes const& out_axis = -1, fan_axes const& batch_axis = {},
                                       char const* where = "nn::initializers::compute_fans") {
  if (N <= 1 && in_axis.is_default_in_axis()) {
    std::ostringstream m;
    m << where << ": cannot compute the fan-in and fan-out of a weight of rank " << N << " (shape ";
    fan_axes::write_shape(m, shape);
    m << ") with the default in_axis -2: give a shape of rank 2 or more, or name in_axis";
    throw std::invalid_argument(m.str());
  }
  std::size_t const in_size = in_axis.size_in(shape, where, "in_axis");
  std::size_t const out_size = out_axis.size_in(shape, where, "out_axis");
  std::size_t const batch_size = batch_axis.size_in(shape, where, "batch_axis");
  std::size_t total = 1;
  for (std::size_t d = 0; d < N; ++d) total *= shape[d];
  double const denominator = static_cast<double>(in_size) * static_cast<double>(out_size) * static_cast<double>(batch_size);
  double const receptive = denominator != 0 ? static_cast<double>(total) / denominator : 0.0;
  return {static_cast<double>(in_size) * receptive, static_cast<double>(out_size) * receptive};
}

/// The denominators of variance_scaling's `mode`.
enum class fan_mode { fan_in, fan_out, fan_avg, fan_geo_avg };
/// The distributions of variance_scaling's `distribution`.
enum class fan_distribution { truncated_normal, normal, uniform };

/// jax.nn.initializers.variance_scaling(scale, mode, distribution, in_axis=-2, out_axis=-1,
/// batch_axis=()): samples of variance scale / n, n the fan-in, fan-out, their mean or their
/// geometric mean. mode: "fan_in", "fan_out", "fan_avg", "fan_geo_avg"; distribution:
/// "truncated_normal" (truncated to two standard deviations, rescaled by .87962566103423978),
/// "normal", "uniform". A bad mode or distribution, or a scale that is not positive, is refused
/// when the initializer is made; a shape without the axes of the fan rules, when it is called.
struct variance_scaling : detail::initializer_interface<variance_scaling> {
  double scale = 1.0;
  fan_mode mode = fan_mode::fan_in;
  fan_distribution distribution = fan_distribution::truncated_normal;
  fan_axes in_axis = -2, out_axis = -1, batch_axis = {};

  variance_scaling(double scale_, std::string_view mode_, std::string_view distribution_, fan_axes in = -2,
                   fan_axes out = -1, fan_axes batch = {})
      : scale(scale_), mode(parse_mode(mode_)), distribution(parse_distribution(distribution_)), in_axis(in),
        out_axis(out), batch_axis(batch) {
    if (!(scale > 0) || !std::isfinite(scale)) {
      std::ostringstream m;
      m << where() << ": scale must be a positive number, got " << scale;
      throw std::invalid_argument(m.str());
    }
  }

  static fan_mode parse_mode(std::string_view m) {
    if (m == "fan_in") return fan_mode::fan_in;
    if (m == "fan_out") return fan_mode::fan_out;
    if (m == "fan_avg") return fan_mode::fan_avg;
    if (m == "fan_geo_avg") return fan_mode::fan_geo_avg;
    throw std::invalid_argument(std::string(where()) + ": invalid mode \"" + std::string(m) +
                                "\" (one of \"fan_in\", \"fan_out\", \"fan_avg\", \"fan_geo_avg\")");
  }
  static fan_distribution parse_distribution(std::string_view d) {
    if (d == "truncated_normal") return fan_distribution::truncated_normal;
    if (d == "normal") return fan_distribution::normal;
    if (d == "uniform") return fan_distribution::uniform;
    throw std::invalid_argument(std::string(where()) + ": invalid distribution \"" + std::string(d) +
                                "\" (one of \"truncated_normal\", \"normal\", \"uniform\")");
  }

  /// scale / n for `shape` in double precision, as JAX's Python computes it (0 when n is 0).
  template <std::size_t N>
  double variance_of(shape_t<N> const& shape) const {
    auto const [fan_in, fan_out] = compute_fans(shape, in_axis, out_axis, batch_axis, where());
    double const denominator = mode == fan_mode::fan_in    ? fan_in
                               : mode == fan_mode::fan_out ? fan_out
                               : mode == fan_mode::fan_avg ? (fan_in + fan_out) / 2
                                                           : std::pow(fan_in * fan_out, 0.5);  // Python's ** 0.5
    return denominator != 0 ? scale / denominator : 0.0;
  }

  /// The per-element kernel: truncated_normal(-2, 2) * (sqrt(v) / .879...), (sqrt(2) * sqrt(v)) *
  /// erf_inv(u), or uniform(-1, 1) * sqrt(3 * v), with v the variance rounded to T and every
  /// constant step rounded to T as JAX's eager jnp operations round it.
  template <class T>
  struct kernel {
    bool is_uniform;
    random::detail::erf_inv_kernel<T> normal;  // truncated_normal or normal
    detail::scaled_uniform_kernel<T> uniform;
    T operator()(std::array<random::detail::word_pair, 1> const& p) const {
      return is_uniform ? uniform(p) : normal(p);
    }
    void fill(std::uint32_t const* w0, std::uint32_t const* w1, std::size_t m, T* out) const {
      if (is_uniform) uniform.fill(w0, w1, m, out);
      else normal.fill(w0, w1, m, out);
    }
  };

  template <class T, std::size_t N>
  detail::random_plan<kernel<T>> plan(shape_t<N> const& shape) const {
    T const variance = static_cast<T>(variance_of(shape));
    switch (distribution) {
      case fan_distribution::truncated_normal:
        return {{false,
                 random::detail::truncated_normal_kernel<T>(T(-2), T(2),
                                                            std::sqrt(variance) / static_cast<T>(.87962566103423978)),
                 {}}};
      case fan_distribution::normal:
        return {{false, random::detail::normal_kernel<T>::scaled(std::sqrt(variance)), {}}};
      default: return {{true, {}, {{T(-1), T(1)}, std::sqrt(T(3) * variance)}}};
    }
  }
  static constexpr char const* where() { return "nn::initializers::variance_scaling"; }
};

/// jax.nn.initializers.lecun_normal: variance_scaling(1, "fan_in", "truncated_normal").
struct lecun_normal : variance_scaling {
  lecun_normal(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(1.0, "fan_in", "truncated_normal", in, out, batch) {}
};
/// jax.nn.initializers.lecun_uniform: variance_scaling(1, "fan_in", "uniform").
struct lecun_uniform : variance_scaling {
  lecun_uniform(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(1.0, "fan_in", "uniform", in, out, batch) {}
};
/// jax.nn.initializers.glorot_normal: variance_scaling(1, "fan_avg", "truncated_normal").
struct glorot_normal : variance_scaling {
  glorot_normal(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(1.0, "fan_avg", "truncated_normal", in, out, batch) {}
};
/// jax.nn.initializers.glorot_uniform: variance_scaling(1, "fan_avg", "uniform").
struct glorot_uniform : variance_scaling {
  glorot_uniform(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(1.0, "fan_avg", "uniform", in, out, batch) {}
};
/// jax.nn.initializers.xavier_normal (glorot_normal's other name).
struct xavier_normal : glorot_normal {
  using glorot_normal::glorot_normal;
};
/// jax.nn.initializers.xavier_uniform (glorot_uniform's other name).
struct xavier_uniform : glorot_uniform {
  using glorot_uniform::glorot_uniform;
};
/// jax.nn.initializers.he_normal: variance_scaling(2, "fan_in", "truncated_normal").
struct he_normal : variance_scaling {
  he_normal(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(2.0, "fan_in", "truncated_normal", in, out, batch) {}
};
/// jax.nn.initializers.he_uniform: variance_scaling(2, "fan_in", "uniform").
struct he_uniform : variance_scaling {
  he_uniform(fan_axes in = -2, fan_axes out = -1, fan_axes batch = {})
      : variance_scaling(2.0, "fan_in", "uniform", in, out, batch) {}
};
/// jax.nn.initializers.kaiming_normal (he_normal's other name).
struct kaiming_normal : he_normal {
  using he_normal::he_normal;
};
/// jax.nn.initializers.kaiming_uniform (he_uniform's other name).
struct kaiming_uniform : he_uniform {
  using he_uniform::he_uniform;
};

}  // namespace tessera::nn::initializers
