#pragma once
// optax.scale_by_lion and lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms").

#include <cstddef>
#include <tuple>
#include <utility>

#include "tessera/optim/adam.hpp"
#include "tessera/optim/sgd.hpp"
#include "tessera/optim/transform.hpp"

namespace tessera::optim {

/// optax.ScaleByLionState: the count and the momentum, shaped and sharded like the parameters.
template <class Tree>
struct scale_by_lion_state {
  count_type count;
  Tree mu;
};

/// optax.scale_by_lion(b1=0.9, b2=0.99) (mode 'hard'): update = sign((1−b1)·g + b1·mu), then
/// mu ← b2·mu + (1−b2)·g.
struct scale_by_lion_t : gradient_transformation<scale_by_lion_t> {
  double b1 = 0.9;
  double b2 = 0.99;
  static constexpr std::size_t slots = 1;

  template <class P>
  scale_by_lion_state<P> init(P const& params) const {
    return {0, detail::tree_zeros_like(params)};
  }
  template <class Tree>
  auto slot_trees(scale_by_lion_state<Tree> const& s) const {
    return std::tie(s.mu);
  }
  struct step_t {
    double b1, b2;
    template <class T>
    void operator()(std::size_t, T* u, T const*, T const* const* in, T* const* out, std::size_t n) const {
      using B = detail::batch<T>;
      B const c1(static_cast<T>(1.0 - b1)), d1(static_cast<T>(b1)), c2(static_cast<T>(1.0 - b2)), d2(static_cast<T>(b2));
      B const one(T(1)), zero(T(0));
      detail::for_batches<T>(n, [&](std::size_t i) {
        B const g = detail::load(u + i);
        B const m = detail::load(in[0] + i);
        B const x = detail::fmadd(g, c1, m * d1);
        detail::fmadd(g, c2, m * d2).store_unaligned(out[0] + i);
        // jnp.sign: ±1, and x itself for ±0 and NaN.
        xsimd::select(x > zero, one, xsimd::select(x < zero, -one, x)).store_unaligned(u + i);
      });
    }
  };
  template <class G, class S, class P>
  step_t begin(G const&, S const&, P const&) const {
    return {b1, b2};
  }
  template <class Tree, class Slots>
  scale_by_lion_state<Tree> finish(step_t const&, scale_by_lion_state<Tree> const& s, Slots&& slots) const {
    return {safe_increment(s.count), std::get<0>(std::move(slots))};
  }
};
/// optax.scale_by_lion(b1=0.9, b2=0.99).
inline scale_by_lion_t scale_by_lion(double b1 = 0.9, double b2 = 0.99) {
  scale_by_lion_t l;
  l.b1 = b1, l.b2 = b2;
  return l;
}

/// optax.lion(learning_rate, b1=0.9, b2=0.99, weight_decay=1e-3, mask=None):
/// chain(scale_by_lion(b1, b2), add_decayed_weights(weight_decay, mask),
/// scale_by_learning_rate(learning_rate)).
template <class LR, class Mask = no_mask>
auto lion(LR learning_rate, double b1 = 0.9, double b2 = 0.99, double weight_decay = 1e-3, Mask mask = {}) {
  return chain(scale_by_lion(b1, b2), add_decayed_weights(weight_decay, std::move(mask)),
               scale_by_learning_rate(learning_rate));
}

}  // namespace tessera::optim
