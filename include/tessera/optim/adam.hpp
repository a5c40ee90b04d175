#pragma once
// optax.scale_by_adam, add_decayed_weights, adam and adamw.

#include <cmath>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/optim/sgd.hpp"
#include "tessera/optim/transform.hpp"

namespace tessera::optim {

/// optax.ScaleByAdamState: the count and the two moments, each shaped and sharded like the
/// parameters (an FSDP-sharded weight's moments are sharded the same way).
template <class Tree>
struct scale_by_adam_state {
  count_type count;
  Tree mu;
  Tree nu;
};

namespace detail {
/// optax.tree.bias_correction's 1 / (1 − decay^t) in the moment's precision: decay^t is formed
/// first (as float32 for float32 moments), then XLA turns the division of every element by it
/// into a product with its reciprocal. (XLA's own pow rounds differently from the C library's in
/// about 1% of the counts, by an ulp.)
template <class T>
T inverse_bias_correction(double decay, count_type t) {
  T const power = static_cast<T>(std::pow(static_cast<double>(static_cast<T>(decay)), static_cast<double>(t)));
  return T(1) / (T(1) - power);
}
}  // namespace detail

/// optax.scale_by_adam(b1, b2, eps, eps_root): mu ← b1·mu + (1−b1)·g, nu ← b2·nu + (1−b2)·g²,
/// update = mû / (sqrt(nû + eps_root) + eps) with mû, nû the bias-corrected moments at
/// t = count + 1. (mu_dtype and nesterov are not taken yet.)
struct scale_by_adam_t : gradient_transformation<scale_by_adam_t> {
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double eps_root = 0.0;
  static constexpr std::size_t slots = 2;

  template <class P>
  scale_by_adam_state<P> init(P const& params) const {
    return {0, detail::tree_zeros_like(params), detail::tree_zeros_like(params)};
  }
  template <class Tree>
  auto slot_trees(scale_by_adam_state<Tree> const& s) const {
    return std::tie(s.mu, s.nu);
  }
  struct step_t {
    double b1, b2, eps, eps_root;
    count_type t;
    template <class T>
    void operator()(std::size_t, T* u, T const*, T const* const* in, T* const* out, std::size_t n) const {
      using B = detail::batch<T>;
      // optax's constants: 1 − b1 is formed in double (Python), then rounded to T.
      B const c1(static_cast<T>(1.0 - b1)), d1(static_cast<T>(b1)), c2(static_cast<T>(1.0 - b2)), d2(static_cast<T>(b2));
      B const r1(detail::inverse_bias_correction<T>(b1, t)), r2(detail::inverse_bias_correction<T>(b2, t));
      B const e(static_cast<T>(eps)), er(static_cast<T>(eps_root));
      detail::for_batches<T>(n, [&](std::size_t i) {
        B const g = detail::load(u + i);
        // XLA contracts (1−b)·g + b·m into fma(g, 1−b, b·m).
        B const m = detail::fmadd(g, c1, detail::load(in[0] + i) * d1);
        B const v = detail::fmadd(g * g, c2, detail::load(in[1] + i) * d2);
        m.store_unaligned(out[0] + i);
        v.store_unaligned(out[1] + i);
        ((m * r1) / (detail::sqrt(detail::fmadd(v, r2, er)) + e)).store_unaligned(u + i);
      });
    }
    /// The fused form (transform.hpp's prepare protocol): the constants formed once per leaf and
    /// device, then one batch at a time; the same operations as operator() above, so the same bits.
    template <class T>
    struct prepared {
      detail::batch<T> c1, d1, c2, d2, r1, r2, e, er;
      detail::batch<T> operator()(detail::batch<T> const& g, std::size_t i, T const*, T const* const* in,
                                  T* const* out) const {
        auto const m = detail::fmadd(g, c1, detail::load(in[0] + i) * d1);
        auto const v = detail::fmadd(g * g, c2, detail::load(in[1] + i) * d2);
        m.store_unaligned(out[0] + i);
        v.store_unaligned(out[1] + i);
        return (m * r1) / (detail::sqrt(detail::fmadd(v, r2, er)) + e);
      }
    };
    template <class T>
    prepared<T> prepare(std::size_t) const {
      using B = detail::batch<T>;
      return {B(static_cast<T>(1.0 - b1)), B(static_cast<T>(b1)), B(static_cast<T>(1.0 - b2)), B(static_cast<T>(b2)),
              B(detail::inverse_bias_correction<T>(b1, t)), B(detail::inverse_bias_correction<T>(b2, t)),
              B(static_cast<T>(eps)), B(static_cast<T>(eps_root))};
    }
  };
  template <class G, class Tree, class P>
  step_t begin(G const&, scale_by_adam_state<Tree> const& s, P const&) const {
    return {b1, b2, eps, eps_root, safe_increment(s.count)};
  }
  template <class Tree, class Slots>
  scale_by_adam_state<Tree> finish(step_t const& step, scale_by_adam_state<Tree> const&, Slots&& slots) const {
    return {step.t, std::get<0>(std::move(slots)), std::get<1>(std::move(slots))};
  }
};
/// optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8, eps_root=0).
inline scale_by_adam_t scale_by_adam(double b1 = 0.9, double b2 = 0.999, double eps = 1e-8, double eps_root = 0.0) {
  scale_by_adam_t a;
  a.b1 = b1, a.b2 = b2, a.eps = eps, a.eps_root = eps_root;
  return a;
}

/// No mask: add_decayed_weights decays every parameter.
struct no_mask {};

/// optax.add_decayed_weights(weight_decay, mask): updates + weight_decay·params, on the leaves
/// the mask marks (a tree of bools shaped like the params, or a callable giving one from the
/// params; optax.masked). Stateless (optax wraps the state of a masked one in a MaskedState;
/// here it stays the empty state).
template <class Mask = no_mask>
struct add_decayed_weights_t : gradient_transformation<add_decayed_weights_t<Mask>>, detail::stateless {
  double weight_decay = 0.0;
  Mask mask{};

  add_decayed_weights_t(double wd, Mask m) : weight_decay(wd), mask(std::move(m)) {}

  struct step_t {
    double weight_decay;
    std::vector<char> decayed;  // per leaf
    template <class T>
    void operator()(std::size_t leaf, T* u, T const* p, T const* const*, T* const*, std::size_t n) const {
      if (weight_decay == 0.0 || !decayed[leaf]) return;  // optax leaves the updates as they are
      detail::batch<T> const wd(static_cast<T>(weight_decay));
      detail::for_batches<T>(n, [&](std::size_t i) {
        detail::fmadd(wd, detail::load(p + i), detail::load(u + i)).store_unaligned(u + i);  // XLA's contraction
      });
    }
  };
  template <class G, class S, class P>
  step_t begin(G const&, S const&, P const& params) const {
    constexpr std::size_t L = tessera::tree_leaf_count<P>;
    step_t s{weight_decay, std::vector<char>(L, 1)};
    if constexpr (!std::is_same_v<Mask, no_mask>) {
      auto const leaves = [&] {
        if constexpr (std::is_invocable_v<Mask const&, P const&>) return tessera::tree_leaves(mask(params));
        else return tessera::tree_leaves(mask);
      }();
      static_assert(std::tuple_size_v<std::remove_cvref_t<decltype(leaves)>> == L,
                    "tessera::optim: the weight-decay mask has another number of leaves than the params; give a tree "
                    "of bools shaped like the params (or a callable returning one), as optax.masked takes");
      [&]<std::size_t... I>(std::index_sequence<I...>) {
        ((s.decayed[I] = static_cast<bool>(std::get<I>(leaves)) ? 1 : 0), ...);
      }(std::make_index_sequence<L>{});
    }
    return s;
  }
};
/// optax.add_decayed_weights(weight_decay, mask=None).
template <class Mask = no_mask>
add_decayed_weights_t<Mask> add_decayed_weights(double weight_decay = 0.0, Mask mask = {}) {
  return add_decayed_weights_t<Mask>(weight_decay, std::move(mask));
}

/// optax.adam(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0):
/// chain(scale_by_adam(...), scale_by_learning_rate(learning_rate)). learning_rate is a number
/// or a schedule.
template <class LR>
auto adam(LR learning_rate, double b1 = 0.9, double b2 = 0.999, double eps = 1e-8, double eps_root = 0.0) {
  return chain(scale_by_adam(b1, b2, eps, eps_root), scale_by_learning_rate(learning_rate));
}

/// optax.adamw's keyword arguments (C++20 designated initialisers: `adamw(lr, {.weight_decay = 0.01})`).
struct adamw_options {
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double eps_root = 0.0;
  double weight_decay = 1e-4;
};

/// optax.adamw(learning_rate, b1=0.9, b2=0.999, eps=1e-8, eps_root=0, weight_decay=1e-4, mask=None):
/// chain(scale_by_adam(...), add_decayed_weights(weight_decay, mask),
/// scale_by_learning_rate(learning_rate)): the decay is decoupled from the moments and scaled
/// by the learning rate.
template <class LR, class Mask = no_mask>
auto adamw(LR learning_rate, adamw_options o = {}, Mask mask = {}) {
  return chain(scale_by_adam(o.b1, o.b2, o.eps, o.eps_root), add_decayed_weights(o.weight_decay, std::move(mask)),
               scale_by_learning_rate(learning_rate));
}

}  // namespace tessera::optim
