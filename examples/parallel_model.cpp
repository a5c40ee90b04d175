// Seed 003's "Integration with Flax", as written:
//
//   class ParallelModel(nn.Module):
//       @nn.compact
//       def __call__(self, x):
//           kernel_init = nn.with_partitioning(nn.initializers.lecun_normal(), ('data', 'model'))
//           x = nn.Dense(features=1024, kernel_init=kernel_init)(x)
//           return x
//
// on a 2x4 ("data", "model") mesh, x of shape (16, 256) with its batch over "data". The kernel is
// created in place in P('data', 'model') (each device draws its own block: no gather), with
// Flax's key for the parameter 'Dense_0/kernel', so its values are Flax's; the output, the loss
// mean(y**2) and its gradient agree with Flax 0.12's (tools/jax_reference/gen_flax.py, case
// "parallel_model"), and the gradient keeps the kernel's sharding.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <tessera/autodiff.hpp>
#include <tessera/nn.hpp>
#include <tessera/random.hpp>

namespace nn = tessera::nn;
using tessera::none;
using tessera::P;

// Flax's parameter tree {'Dense_0': {'kernel': ..., 'bias': ...}}.
template <class D>
struct parallel_model_params {
  D Dense_0;
};

struct ParallelModel {
  nn::Dense<nn::partitioned<nn::initializers::lecun_normal, nn::names<"data", "model">>> dense{
      1024, nn::with_partitioning(nn::initializers::lecun_normal(), nn::names<"data", "model">{})};

  template <class X>
  auto init(tessera::random::prng_key key, X const& x) const {
    auto s = nn::scope(key, x.sharding().mesh());
    auto p = dense.init(s.push("Dense_0"), x);  // @nn.compact names it Dense_0
    return parallel_model_params<decltype(p)>{p};
  }
  template <class Params, class X>
  auto apply(Params const& p, X const& x) const {
    return dense.apply(p.Dense_0, x);
  }
};

// Flax 0.12.12 on the same program (tests/golden/jax_flax.json, "parallel_model").
constexpr double flax_kernel_head[4] = {-0.10323747247457504, 0.04715946689248085, -0.08610938489437103,
                                        -0.05325143784284592};
constexpr double flax_y_head[4] = {1.769935965538025, 0.24460157752037048, 0.9995145201683044, 0.392471581697464};
constexpr double flax_y_sum = -37.447425842285156, flax_loss = 1.006757140159607;
constexpr double flax_grad_head[4] = {-8.413774776272476e-05, -0.000901736319065094, -0.0007294146344065666,
                                      -0.0003084941708948463};

bool close(double got, double want, double rtol) { return std::abs(got - want) <= rtol * std::max(1.0, std::abs(want)); }

int main() {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"data", "model">({2, 4});
  auto const x = tessera::random::normal(tessera::random::key(1), {16, 256},
                                         tessera::named_sharding(mesh, P<"data", none>{}));
  ParallelModel const model;
  auto const params = model.init(tessera::random::key(0), x);
  auto const& kernel = params.Dense_0.kernel;
  std::cout << "params['Dense_0']['kernel']: " << tessera::type_of(kernel) << "\n  " << kernel.sharding() << '\n';
  std::cout << "params['Dense_0']['bias']:   " << tessera::type_of(params.Dense_0.bias) << '\n';
  tessera::visualize_array_sharding(kernel);

  bool ok = true;
  auto const k = tessera::to_host(kernel);
  for (std::size_t j = 0; j < 4; ++j) ok = ok && close(k(0, j), flax_kernel_head[j], 1e-6);
  std::cout << "kernel[0, :4] = Flax's (lecun_normal under Flax's key for Dense_0/kernel): " << (ok ? "yes" : "NO") << '\n';

  auto const y_expr = model.apply(params, x);
  std::cout << "\ny = model.apply(params, x): " << tessera::type_of(y_expr) << '\n' << tessera::explain(y_expr);
  auto const y = tessera::to_host(tessera::array(y_expr));
  bool y_ok = close(static_cast<double>(xt::sum(y)()), flax_y_sum, 1e-4);
  for (std::size_t j = 0; j < 4; ++j) y_ok = y_ok && close(y(0, j), flax_y_head[j], 1e-5);
  std::printf("y[0, :4] = [%.4f, %.4f, %.4f, %.4f], sum %.3f: %s\n", static_cast<double>(y(0, 0)),
              static_cast<double>(y(0, 1)), static_cast<double>(y(0, 2)), static_cast<double>(y(0, 3)),
              static_cast<double>(xt::sum(y)()), y_ok ? "Flax's" : "DIFFERS from Flax's");

  auto const loss = [&](auto const& p) {
    auto const out = model.apply(p, x);
    return tessera::mean(out * out);
  };
  auto const [l, g] = tessera::value_and_grad(loss)(params);
  double const lv = tessera::to_host(l)();
  auto const gk = tessera::to_host(g.Dense_0.kernel);
  bool g_ok = close(lv, flax_loss, 1e-5);
  for (std::size_t j = 0; j < 4; ++j) g_ok = g_ok && std::abs(gk(0, j) - flax_grad_head[j]) <= 1e-4 * std::abs(flax_grad_head[j]);
  std::printf("\nloss mean(y**2) = %.5f; grad of the kernel: %s, %s\n", lv, tessera::type_of(g.Dense_0.kernel).c_str(),
              g_ok ? "Flax's values" : "DIFFERS from Flax's");
  ok = ok && y_ok && g_ok;
  std::cout << (ok ? "every value agrees with Flax's\n" : "a value differs from Flax's\n");
  return ok ? 0 : 1;
}
