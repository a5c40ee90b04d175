// The seeds' neural-network layer, sigmoid(x @ W + b), run with shard_map:
// each of 8 devices holds 4 of x's 32 features and the matching 4 rows of W,
// computes its part of x @ W, and a psum adds the parts ("layer_sharded" in
// seeds 000, 001 and 002).
//
// Seeds 000 and 001 draw x, W, b from numpy's default_rng(0) and print no
// result; seed 002 draws them from jax.random.key(1701) and prints
//   [0.01422223 0.9701333  0.00124826 0.08572862]
// so we draw them as seed 002 does (jax_random.hpp) and compare with that.
#include <cstdio>
#include <iostream>

#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <tessera/tessera.hpp>

#include "jax_random.hpp"
#include "numpy_print.hpp"

namespace jr = examples::jax_random;
using tessera::none;
using tessera::P;

namespace {
// x @ W for a vector x and a matrix W (xt::linalg::dot needs xtensor-blas; this needs nothing).
template <class X, class W>
auto vecmat(X const& x, W const& w) {
  return xt::sum(xt::view(x, xt::all(), xt::newaxis()) * w, {0});
}

// jax.nn.sigmoid
template <class Z>
auto sigmoid(Z&& z) {
  return 1.0f / (1.0f + xt::exp(-std::forward<Z>(z)));
}
}  // namespace

int main() {
  tessera::runtime rt{8};

  // key = jax.random.key(1701); key, x_key, W_key, b_key = jax.random.split(key, 4)
  auto const keys = jr::split(jr::key(1701), 4);
  auto const x = jr::normal<1>(keys[1], {32});
  auto const W = jr::normal<2>(keys[2], {32, 4});
  auto const b = jr::normal<1>(keys[3], {4});

  // def layer(x, W, b): return jax.nn.sigmoid(x @ W + b), on one device.
  xt::xtensor<float, 1> const unsharded = sigmoid(vecmat(x, W) + b);
  std::printf("layer(x, W, b):\n");
  examples::print(unsharded, 6);

  // explicit_mesh = jax.make_mesh((8,), ("X",), axis_types=(AxisType.Explicit,)): typeof shows where
  // the data lives (tessera shows it on Auto meshes too).
  auto const explicit_mesh = tessera::make_mesh<"X">({8}, tessera::explicit_axes);
  auto const x_sharded = tessera::device_put(x, tessera::named_sharding(explicit_mesh, P<"X">{}));
  auto const W_replicated = tessera::device_put(W, tessera::named_sharding(explicit_mesh, P<>{}));
  std::cout << "x sharding: " << tessera::typeof(x_sharded) << "\n";
  std::cout << "W sharding: " << tessera::typeof(W_replicated) << "\n";
  std::cout << "b sharding: " << tessera::typeof(tessera::device_put(b)) << "\n";

  // mesh = jax.make_mesh((8,), ("X",))
  // @partial(jax.shard_map, mesh=mesh,
  //          in_specs=(P("X"), P("X", None), P(None)), out_specs=P(None))
  // def layer_sharded(x, W, b):
  //     return jax.nn.sigmoid(jax.lax.psum(x @ W, "X") + b)
  // Each device's x @ W is a partial sum over its 4 features; after the psum every device has the
  // whole x @ W, so the result is the same on all of them and out_specs may leave "X" out.
  auto const mesh = tessera::make_mesh<"X">({8});
  auto layer_sharded = tessera::shard_map(
      [](auto x, auto W, auto b) { return sigmoid(tessera::psum<"X">(vecmat(x, W)) + b); }, mesh,
      tessera::in_specs(P<"X">{}, P<"X", none>{}, P<none>{}), tessera::out_specs(P<none>{}));
  auto const out = layer_sharded(x, W, b);
  std::cout << "out sharding: " << tessera::typeof(out) << "\n";
  auto const sharded = tessera::to_host(out);
  std::printf("layer_sharded(x, W, b):\n");
  examples::print(sharded, 6);

  // The two sum the 32 products in different orders, so they agree to float32 rounding, not bit for bit.
  bool const matches_unsharded = xt::allclose(sharded, unsharded, 1e-6, 1e-7);
  std::printf("matches unsharded: %s\n", matches_unsharded ? "true" : "false");
  // JAX's printed result, from XLA's own order of summation and its exp and log1p.
  xt::xtensor<float, 1> const seed_002 = {0.01422223f, 0.9701333f, 0.00124826f, 0.08572862f};
  bool const matches_seed = xt::allclose(sharded, seed_002, 0.0, 1e-7);
  std::printf("matches seed 002 (to 1e-7): %s\n", matches_seed ? "true" : "false");
  return matches_unsharded && matches_seed ? 0 : 1;
}
