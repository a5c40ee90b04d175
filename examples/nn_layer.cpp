// The seeds' neural-network layer, sigmoid(x @ W + b) with x: (32,), W: (32, 4),
// b: (4,), on 8 devices, the three ways seeds 000 and 002 compare:
//   (a) automatic: jit over sharded inputs, x on P("X") with W replicated
//       (seed 002) or with W's rows on P("X") too (seed 000), and seed 000's
//       layer_auto, which shards unsharded inputs with with_sharding_constraint;
//       the matmul's contracting dimension is sharded, so every device's
//       product is a partial sum over "X", completed by one all-reduce;
//   (b) explicit sharding: the same on an Explicit mesh, printing the types of
//       x, W, b and the result inside jit, as seed 002 does;
//   (c) manual: shard_map, each device multiplying its 4 features by its 4 rows
//       of W and a psum over "X" adding the parts:
//       the collective_counter sees the same one all-reduce that (a) planned.
// x, W and b are drawn as seed 002 draws them (jax.random.key(1701),
// tessera::random); all the results agree with each other and with the layer
// computed on the host, and with the numbers seed 002 prints.
#include <cstdio>
#include <iostream>
#include <string>

#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <tessera/parallel.hpp>
#include <tessera/random.hpp>

#include "numpy_print.hpp"

namespace jr = tessera::random;
using tessera::none;
using tessera::P;

namespace {
// x @ W for a vector x and a matrix W on the host or in a shard_map body (xtensor has no matmul).
template <class X, class W>
auto vecmat(X const& x, W const& w) {
  return xt::sum(xt::view(x, xt::all(), xt::newaxis()) * w, {0});
}

// jax.nn.sigmoid on xtensor expressions.
template <class Z>
auto host_sigmoid(Z&& z) {
  return 1.0f / (1.0f + xt::exp(-std::forward<Z>(z)));
}

// def layer(x, W, b): return jax.nn.sigmoid(x @ W + b), on tessera arrays or expressions.
auto const layer = [](auto const& x, auto const& W, auto const& b) {
  return tessera::sigmoid(tessera::matmul(x, W) + b);
};

bool all_ok = true;

// Prints a result with 6 decimals (the last digits of a float32 sum depend on its order) and checks
// it against the layer computed on the host.
void report(char const* what, xt::xtensor<float, 1> const& got, xt::xtensor<float, 1> const& host) {
  std::printf("%s:\n", what);
  examples::print(got, 6);
  bool const ok = xt::allclose(got, host, 1e-6, 1e-7);
  std::printf("matches the unsharded layer: %s\n", ok ? "yes" : "no");
  all_ok = all_ok && ok;
}

// explain(e), then e evaluated under a collective_counter: the collectives run must be the plan's.
template <class E>
tessera::communication_plan explain_and_check(char const* what, E const& e) {
  auto const plan = tessera::explain(e);
  std::printf("explain(%s):\n", what);
  std::cout << plan;
  tessera::collective_counter counter;
  tessera::array const r = e;
  (void)r;
  bool const ok = counter.events() == plan.collectives;
  std::printf("collectives run match the plan: %s\n", ok ? "yes" : "no");
  all_ok = all_ok && ok;
  return plan;
}
}  // namespace

int main() {
  tessera::runtime rt{8};

  // key = jax.random.key(1701); key, x_key, W_key, b_key = jax.random.split(key, 4)
  auto const keys = jr::split(jr::key(1701), 4);
  auto const x = jr::normal(keys[1], {32});
  auto const W = jr::normal(keys[2], {32, 4});
  auto const b = jr::normal(keys[3], {4});

  // The layer on one device, on the host.
  xt::xtensor<float, 1> const host = host_sigmoid(vecmat(x, W) + b);
  std::printf("layer(x, W, b) on the host:\n");
  examples::print(host, 6);

  // --- (a) Automatic parallelism: jit over sharded inputs -------------------------------------
  // mesh = jax.make_mesh((8,), ("X",))
  auto const mesh = tessera::make_mesh<"X">({8});
  auto const sharded = tessera::named_sharding(mesh, P<"X">{});
  auto const replicated = tessera::named_sharding(mesh, P<>{});
  auto const jit_layer = tessera::jit(layer);

  // Seed 002: x_sharded = device_put(x, P("X")); W_replicated = device_put(W, P()).
  auto const x_sharded = tessera::device_put(x, sharded);
  auto const W_replicated = tessera::device_put(W, replicated);
  auto const b_replicated = tessera::device_put(b, replicated);
  std::printf("\n(a) jit, x on P(\"X\"), W replicated (seed 002)\n");
  auto const plan_a = explain_and_check("layer", layer(x_sharded, W_replicated, b_replicated));
  auto const out_a = tessera::to_host(jit_layer(x_sharded, W_replicated, b_replicated));
  report("layer(x_sharded, W_replicated, b)", out_a, host);

  // Seed 000: "If you shard the leading axis of both x and weights in the same way, then the matrix
  // multiplication will automatically happen in parallel": W's rows on P("X") too.
  auto const W_sharded = tessera::device_put(W, tessera::named_sharding(mesh, P<"X", none>{}));
  std::printf("\n(a) jit, x and W's rows on P(\"X\") (seed 000)\n");
  auto const plan_a0 = explain_and_check("layer", layer(x_sharded, W_sharded, b_replicated));
  auto const out_a0 = tessera::to_host(jit_layer(x_sharded, W_sharded, b_replicated));
  report("layer(x_sharded, weights_sharded, bias)", out_a0, host);

  // Seed 000's layer_auto: unsharded inputs, sharded inside jit by with_sharding_constraint. A
  // replicated array constrained to P("X") is a slice each device takes of what it holds: free.
  // @jax.jit
  // def layer_auto(x, weights, bias):
  //   x = jax.lax.with_sharding_constraint(x, sharding)
  //   weights = jax.lax.with_sharding_constraint(weights, sharding)
  //   return layer(x, weights, bias)
  auto const layer_auto_body = [&](auto const& x, auto const& weights, auto const& bias) {
    auto const xs = tessera::with_sharding_constraint(x, sharded);
    auto const ws = tessera::with_sharding_constraint(weights, tessera::named_sharding(mesh, P<"X", none>{}));
    return layer(xs, ws, bias);
  };
  // The host inputs go on the devices as jit's in_shardings say: replicated, "unsharded".
  auto const layer_auto = tessera::jit(layer_auto_body, tessera::in_shardings(replicated, replicated, replicated),
                                       tessera::out_shardings(replicated));
  std::printf("\n(a) layer_auto: unsharded inputs, with_sharding_constraint inside jit (seed 000)\n");
  explain_and_check("layer_auto",
                    layer_auto_body(tessera::device_put(x, replicated), W_replicated, b_replicated));
  auto const out_auto = tessera::to_host(layer_auto(x, W, b));
  report("layer_auto(x, weights, bias)", out_auto, host);

  // --- (b) Explicit sharding: the shardings are in the types --------------------------------
  // explicit_mesh = jax.make_mesh((8,), ("X",), axis_types=(AxisType.Explicit,))
  auto const explicit_mesh = tessera::make_mesh<"X">({8}, tessera::explicit_axes);
  auto const ex_x = tessera::device_put(x, tessera::named_sharding(explicit_mesh, P<"X">{}));
  auto const ex_W = tessera::device_put(W, tessera::named_sharding(explicit_mesh, P<>{}));
  auto const ex_replicated = tessera::named_sharding(explicit_mesh, P<>{});
  // @jax.jit
  // def layer_auto(x, W, b):
  //     print("x sharding:", jax.typeof(x)) ...
  auto const layer_explicit = tessera::jit(
      [](auto const& x, auto const& W, auto const& b) {
        std::cout << "x sharding: " << tessera::typeof(x) << "\n";
        std::cout << "W sharding: " << tessera::typeof(W) << "\n";
        std::cout << "b sharding: " << tessera::typeof(b) << "\n";
        auto out = layer(x, W, b);
        std::cout << "out sharding: " << tessera::typeof(out) << "\n";
        return out;
      },
      tessera::in_shardings(tessera::named_sharding(explicit_mesh, P<"X">{}), ex_replicated, ex_replicated),
      tessera::out_shardings(ex_replicated));
  std::printf("\n(b) explicit sharding (seed 002)\n");
  auto const out_b = tessera::to_host(layer_explicit(ex_x, ex_W, b));  // b from the host, as in the seed
  report("layer_auto(x_sharded, W_replicated, b)", out_b, host);

  // --- (c) Manual parallelism: shard_map with psum -------------------------------------------
  // @partial(jax.shard_map, mesh=mesh, in_specs=(P("X"), P("X", None), P(None)), out_specs=P(None))
  // def layer_sharded(x, W, b):
  //     return jax.nn.sigmoid(jax.lax.psum(x @ W, "X") + b)
  auto layer_sharded = tessera::shard_map(
      [](auto x, auto W, auto b) { return host_sigmoid(tessera::psum<"X">(vecmat(x, W)) + b); }, mesh,
      tessera::in_specs(P<"X">{}, P<"X", none>{}, P<none>{}), tessera::out_specs(P<none>{}));
  std::printf("\n(c) shard_map with psum (seeds 000 and 002)\n");
  tessera::collective_counter counter;
  auto const out_c_array = layer_sharded(x, W, b);
  std::printf("collectives run:\n");
  for (auto const& e : counter.events()) std::cout << "  " << e << "\n";
  // The psum is the all-reduce that (a) planned for the partial sums of x @ W.
  bool const same_collectives = counter.events() == plan_a.collectives;
  std::printf("the same collectives as (a): %s\n", same_collectives ? "yes" : "no");
  all_ok = all_ok && same_collectives;
  std::cout << "out sharding: " << tessera::typeof(out_c_array) << "\n";
  auto const out_c = tessera::to_host(out_c_array);
  report("layer_sharded(x, W, b)", out_c, host);

  // --- The three ways agree ------------------------------------------------------------------
  std::printf("\n");
  bool const same_plan = plan_a.collectives == plan_a0.collectives && plan_a.count() == 1 &&
                         plan_a.count("all-reduce") == 1;
  std::printf("(a) runs one all-reduce, whether W is replicated or sharded: %s\n", same_plan ? "yes" : "no");
  bool const agree = xt::allclose(out_a, out_a0, 1e-6, 1e-7) && xt::allclose(out_a, out_auto, 1e-6, 1e-7) &&
                     xt::allclose(out_a, out_b, 1e-6, 1e-7) && xt::allclose(out_a, out_c, 1e-6, 1e-7);
  std::printf("(a), (b) and (c) give the same numbers: %s\n", agree ? "yes" : "no");
  // What seed 002 prints for each of the three, from XLA's own order of summation and its exp.
  xt::xtensor<float, 1> const seed_002 = {0.01422223f, 0.9701333f, 0.00124826f, 0.08572862f};
  bool matches_seed = true;
  for (auto const* r : {&out_a, &out_a0, &out_auto, &out_b, &out_c})
    matches_seed = matches_seed && xt::allclose(*r, seed_002, 0.0, 1e-7);
  std::printf("all match seed 002's [0.01422223 0.9701333  0.00124826 0.08572862] to 1e-7: %s\n",
              matches_seed ? "yes" : "no");
  all_ok = all_ok && same_plan && agree && matches_seed;
  return all_ok ? 0 : 1;
}
