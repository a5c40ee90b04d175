// Seed 000, "2. Semi-automated sharding with constraints": f_contract sums a
// (4, 8) array sharded P('x', 'y') over a (2, 4) mesh along axis 0, and its
// result is partially replicated; f_contract_2 asks for P('x') with
// jax.lax.with_sharding_constraint. Both run under jit, with their pictures,
// values and communication plans:
//   - f_contract: each device sums the rows it holds, a partial sum over 'x'
//     (JAX's "unreduced"), which the default replicated layout completes with
//     an all-reduce over 'x';
//   - f_contract_2: the partial sum goes straight to P('x'): a reduce-scatter
//     over 'x', and, since the sum was sharded over 'y' and P('x') is not, an
//     all-gather over 'y';
//   - f_contract_3 (not in the seed): P(('y', 'x')), "fully sharded across the
//     eight devices" as the seed's prose puts it, is a reduce-scatter alone.
// A collective_counter checks that each run did exactly what explain() said.
#include <cstdio>
#include <iostream>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xstrided_view.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>

#include "numpy_print.hpp"

using tessera::P;

namespace {
bool all_ok = true;

// Prints explain() of body(x), then runs jit(body)(x) under a collective_counter; prints the type,
// the picture and the value, and checks the value and that the collectives run were the plan's.
template <class F, class X>
tessera::communication_plan show(char const* name, F const& body, X const& x, xt::xtensor<float, 1> const& expected) {
  auto const plan = tessera::explain(body(x));
  std::printf("explain(%s):\n", name);
  std::cout << plan;
  auto const f = tessera::jit(body);
  tessera::collective_counter counter;
  auto const result = f(x);
  auto const events = counter.events();
  std::printf("%s(arr_sharded): %s\n", name, tessera::typeof(result).c_str());
  tessera::visualize_array_sharding(result);
  auto const host = tessera::to_host(result);
  examples::print(host);
  bool const values_ok = host == expected;
  bool const plan_ok = events == plan.collectives;
  std::printf("values match numpy: %s\n", values_ok ? "yes" : "no");
  std::printf("collectives run match explain(): %s\n\n", plan_ok ? "yes" : "no");
  all_ok = all_ok && values_ok && plan_ok;
  return plan;
}
}  // namespace

int main() {
  tessera::runtime rt{8};

  // mesh = jax.make_mesh((2, 4), ('x', 'y'))
  // sharding = jax.sharding.NamedSharding(mesh, P('x', 'y'))
  // arr_sharded = jax.device_put(jnp.arange(32.0).reshape(4, 8), sharding)
  auto const mesh = tessera::make_mesh<"x", "y">({2, 4});
  auto const sharding = tessera::named_sharding(mesh, P<"x", "y">{});
  std::cout << sharding << "\n";
  xt::xtensor<float, 2> const arr = xt::reshape_view(xt::arange<float>(32.0f), {4, 8});
  auto const arr_sharded = tessera::device_put(arr, sharding);
  tessera::visualize_array_sharding(arr_sharded);
  xt::xtensor<float, 1> const expected = xt::sum(arr, {0});

  // @jax.jit (show() jits the body)
  // def f_contract(x):
  //   return x.sum(axis=0)
  auto const f_contract = [](auto x) { return tessera::sum<0>(x); };
  auto const plan_1 = show("f_contract", f_contract, arr_sharded, expected);

  // @jax.jit
  // def f_contract_2(x):
  //   out = x.sum(axis=0)
  //   sharding = jax.sharding.NamedSharding(mesh, P('x'))
  //   return jax.lax.with_sharding_constraint(out, sharding)
  auto const f_contract_2 = [&mesh](auto x) {
    auto out = tessera::sum<0>(x);
    auto const s = tessera::named_sharding(mesh, P<"x">{});
    return tessera::with_sharding_constraint(out, s);
  };
  auto const plan_2 = show("f_contract_2", f_contract_2, arr_sharded, expected);

  // The same with P(('y', 'x')): each of the 8 devices ends with one element, and the partial sum
  // over 'x' is scattered along 'y''s blocks, which stay where they are: one reduce-scatter.
  auto const f_contract_3 = [&mesh](auto x) {
    return tessera::with_sharding_constraint(tessera::sum<0>(x),
                                             tessera::named_sharding(mesh, P<tessera::axes<"y", "x">>{}));
  };
  auto const plan_3 = show("f_contract_3", f_contract_3, arr_sharded, expected);

  bool const kinds_ok = plan_1.count("all-reduce") == 1 && plan_1.count() == 1 &&
                        plan_2.count("reduce-scatter") == 1 && plan_2.count("all-reduce") == 0 &&
                        plan_3.count("reduce-scatter") == 1 && plan_3.count() == 1;
  std::printf("f_contract all-reduces, the constrained ones reduce-scatter: %s\n", kinds_ok ? "yes" : "no");
  all_ok = all_ok && kinds_ok;
  return all_ok ? 0 : 1;
}
