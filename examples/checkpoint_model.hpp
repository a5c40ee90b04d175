#pragma once
// The model examples/checkpoint.cpp and examples/mpi/checkpoint.cpp train and checkpoint: seed
// 004's linear model, SGD on the mean squared error.

#include <cstddef>

#include <tessera/autodiff.hpp>

namespace checkpoint_model {

constexpr std::size_t batch = 64, n_in = 32, n_out = 8;
constexpr float learning_rate = 0.05f;

// params = {"w": ..., "b": ...}, as a class template so grad can fill it with tracers and
// restore can fill it with arrays of other shardings.
template <class W, class B>
struct params {
  W w;
  B b;
};
template <class W, class B>
params(W, B) -> params<W, B>;  // clang before 17 deduces no aggregate's template arguments

inline auto const loss_fn = [](auto const& p, auto const& x, auto const& y) {
  auto const d = tessera::matmul(x, p.w) + p.b - y;
  return tessera::mean(d * d);
};

/// One SGD step on p; returns the loss (a replicated scalar array).
template <class Params, class X, class Y>
auto sgd_step(Params& p, X const& x, Y const& y) {
  auto [loss, grads] = tessera::value_and_grad(loss_fn)(p, x, y);
  p = tessera::tree_map([](auto const& a, auto const& g) { return a - learning_rate * g; }, p, grads);
  return loss;
}

}  // namespace checkpoint_model
