#pragma once
// Where a layer's parameters come from: Flax's Scope for the 'params' RNG stream (the root key,
// the module path, a counter of the keys made so far), the mesh the parameters live on and the
// logical axis rules that place them. Flax derives each parameter's key as
// fold_in(root, first 4 bytes of SHA-1(path names + counter)) (flax/core/scope.py,
// LazyRng and _fold_in_static), so tessera's layers make Flax's keys, and with them Flax's
// initial values, for the same module names.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/core/named_sharding.hpp"
#include "tessera/nn/partitioning.hpp"
#include "tessera/nn/initializers.hpp"
#include "tessera/random/key.hpp"

namespace tessera::nn {

namespace detail {

/// SHA-1 (FIPS 180-4), only as far as Flax's key derivation needs it: a running state that can
/// be copied, so a module path is hashed once and each parameter adds its counter.
class sha1 {
 public:
  void update(std::string_view data) {
    for (char c : data) {
      block_[fill_++] = static_cast<std::uint8_t>(c);
      if (fill_ == 64) compress();
    }
    length_ += data.size();
  }
  /// The first 4 bytes of the digest, big-endian (Flax's `int.from_bytes(d[:4], 'big')`).
  std::uint32_t digest_prefix() const {
    sha1 s = *this;
    std::uint64_t const bits = s.length_ * 8;
    s.block_[s.fill_++] = 0x80;
    if (s.fill_ > 56) {
      while (s.fill_ < 64) s.block_[s.fill_++] = 0;
      s.compress();
    }
    while (s.fill_ < 56) s.block_[s.fill_++] = 0;
    for (int i = 7; i >= 0; --i) s.block_[s.fill_++] = static_cast<std::uint8_t>(bits >> (8 * i));
    s.compress();
    return s.h_[0];
  }

 private:
  static std::uint32_t rotl(std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
  void compress() {
    std::array<std::uint32_t, 80> w{};
    for (std::size_t i = 0; i < 16; ++i)
      w[i] = std::uint32_t{block_[4 * i]} << 24 | std::uint32_t{block_[4 * i + 1]} << 16 |
             std::uint32_t{block_[4 * i + 2]} << 8 | std::uint32_t{block_[4 * i + 3]};
    for (std::size_t i = 16; i < 80; ++i) w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4];
    for (std::size_t i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) f = (b & c) | (~b & d), k = 0x5A827999u;
      else if (i < 40) f = b ^ c ^ d, k = 0x6ED9EBA1u;
      else if (i < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDCu;
      else f = b ^ c ^ d, k = 0xCA62C1D6u;
      std::uint32_t const t = rotl(a, 5) + f + e + k + w[i];
      e = d, d = c, c = rotl(b, 30), b = a, a = t;
    }
    h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e;
    fill_ = 0;
  }
  std::array<std::uint32_t, 5> h_{0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
  std::array<std::uint8_t, 64> block_{};
  std::size_t fill_ = 0;
  std::uint64_t length_ = 0;
};

/// Python's `x.to_bytes((x.bit_length() + 7) // 8, 'big')` for a counter.
inline std::string_view counter_bytes(std::uint64_t x, std::array<char, 8>& buf) {
  std::size_t n = 0;
  for (std::uint64_t t = x; t != 0; t >>= 8) ++n;
  for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<char>(x >> (8 * (n - 1 - i)));
  return {buf.data(), n};
}

}  // namespace detail

/// Flax's Scope as layers see it during init: a position in the module tree (`push("query")`
/// is the child module named "query"), the 'params' RNG stream there (`make_rng()`, the next
/// parameter's key, Flax's `self.make_rng('params')`), the mesh the parameters are created on and
/// the logical axis rules (a logical_axis_rules type) that place them.
template <mesh_type Mesh, class Rules = no_rules>
class scope {
  static_assert(is_logical_axis_rules<Rules>::value,
                "tessera::nn::scope: the rules must be a tessera::nn::logical_axis_rules<rule<...>, ...>");

 public:
  using mesh_type = Mesh;
  using rules_type = Rules;

  /// The root scope: `model.init(key, x)` in Flax, parameters on `mesh` placed by `Rules`.
  scope(random::prng_key root, Mesh mesh, Rules = {}) : root_(root), mesh_(std::move(mesh)) {}

  /// The scope of the child module `name` (Flax's scope.push(name)): its own counter.
  scope push(std::string_view name) const {
    scope child = *this;
    child.path_.update(name);
    child.counter_ = 0;
    return child;
  }
  /// The next key of the 'params' stream: fold_in(root, SHA-1(path + counter)[:4]).
  random::prng_key make_rng() {
    ++counter_;
    detail::sha1 h = path_;
    std::array<char, 8> buf{};
    h.update(detail::counter_bytes(counter_, buf));
    return random::fold_in(root_, h.digest_prefix());
  }
  Mesh const& mesh() const { return mesh_; }
  random::prng_key root_key() const { return root_; }

 private:
  random::prng_key root_;
  Mesh mesh_;
  detail::sha1 path_{};
  std::uint64_t counter_ = 0;
};

template <class T>
struct is_scope : std::false_type {};
template <class M, class R>
struct is_scope<scope<M, R>> : std::true_type {};

namespace detail {
/// The mesh of a layer's example input (a tessera::array or an expression of arrays).
template <class X>
auto const& mesh_of_input(X const& x) {
  if constexpr (requires { x.sharding().mesh(); }) return x.sharding().mesh();
  else return x.mesh();
}
/// A layer's init argument as a scope: a scope as it is, or a key (the root scope on the example
/// input's mesh, without rules).
template <class K, class X>
auto scope_of(K const& k, X const& x) {
  if constexpr (is_scope<K>::value) {
    return k;
  } else {
    static_assert(std::is_same_v<K, random::prng_key>,
                  "tessera::nn: a layer's init takes a random key (tessera::random::key(0)) or a tessera::nn::scope");
    using M = std::remove_cvref_t<decltype(mesh_of_input(x))>;
    return scope<M>(k, mesh_of_input(x));
  }
}
}  // namespace detail

/// Flax's `self.param(name, init_fn, shape)` inside a module's init: the scope's next key, and
/// the sharding `init`'s partitioning resolves to under the scope's rules (replicated without one).
template <class Init, class Scope, std::size_t N>
auto param(Scope& s, Init const& init, shape_t<N> const& shape) {
  auto const key = s.make_rng();
  auto const sharding = detail::param_sharding<Init, N, typename Scope::rules_type>(s.mesh());
  return detail::unboxed_init(init)(key, shape, sharding);
}

/// param() of `shape` whose initializer sees `fan_shape`, a shape of as many elements (Flax's
/// DenseGeneral initializes its kernel flattened to 2-D, then reshapes it): element i of the
/// row-major order is the same number either way, so it is made in place in `shape`'s sharding.
template <class Init, class Scope, std::size_t N, std::size_t M>
auto param(Scope& s, Init const& init, shape_t<N> const& shape, shape_t<M> const& fan_shape) {
  auto const key = s.make_rng();
  auto const sharding = detail::param_sharding<Init, N, typename Scope::rules_type>(s.mesh());
  auto const& i = detail::unboxed_init(init);
  static_assert(requires { i.template plan<float>(fan_shape); },
                "tessera::nn: a DenseGeneral kernel of more than two dimensions needs one of "
                "tessera::nn::initializers' initializers (their values follow the flattened shape)");
  return initializers::detail::make_sharded<float>(i.template plan<float>(fan_shape), key, shape, sharding, i.where());
}

}  // namespace tessera::nn
