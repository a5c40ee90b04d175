#pragma once
// flax.training.train_state.TrainState: the step, the model's apply function, the parameters,
// the optimizer and its state, and apply_gradients, which returns the next state.

#include <memory>
#include <utility>

#include "tessera/optim/transform.hpp"

namespace tessera::optim {

/// A field Flax marks `pytree_node=False` (apply_fn, tx): held by a shared pointer, so that a
/// train_state whose function is a lambda with captures can still be assigned
/// (`state = state.apply_gradients(grads)`).
template <class F>
class static_field {
 public:
  explicit static_field(F f) : f_(std::make_shared<F const>(std::move(f))) {}
  F const& get() const { return *f_; }
  F const* operator->() const { return f_.get(); }
  /// Calls the function (`state.apply_fn(state.params, x)`).
  template <class... A>
  decltype(auto) operator()(A&&... a) const {
    return (*f_)(std::forward<A>(a)...);
  }

 private:
  std::shared_ptr<F const> f_;
};

/// flax.training.train_state.TrainState: step, apply_fn, params, tx and opt_state.
template <class ApplyFn, class Params, class Tx>
struct train_state {
  using opt_state_type = decltype(std::declval<Tx const&>().init(std::declval<Params const&>()));

  /// TrainState.step: how many updates were applied.
  count_type step;
  /// TrainState.apply_fn (not a tree leaf in Flax).
  static_field<ApplyFn> apply_fn;
  /// TrainState.params.
  Params params;
  /// TrainState.tx (not a tree leaf in Flax).
  static_field<Tx> tx;
  /// TrainState.opt_state: tx.init(params), then each update's.
  opt_state_type opt_state;

  /// TrainState.create(apply_fn=..., params=..., tx=...): step 0 and tx.init(params).
  static train_state create(ApplyFn apply_fn, Params params, Tx tx) {
    auto opt_state = tx.init(params);
    return train_state{0, static_field<ApplyFn>(std::move(apply_fn)), std::move(params),
                       static_field<Tx>(std::move(tx)), std::move(opt_state)};
  }

  /// TrainState.apply_gradients(grads=...): tx.update and optax.apply_updates (one pass per
  /// device per leaf: tx.update_and_apply), and a new state with step + 1.
  template <class Grads>
  train_state apply_gradients(Grads const& grads) const& {
    auto [new_params, new_opt_state] = tx->update_and_apply(grads, opt_state, params);
    return train_state{safe_increment(step), apply_fn, std::move(new_params), tx, std::move(new_opt_state)};
  }
  /// `state = std::move(state).apply_gradients(grads)`: the same, with the params and the
  /// optimizer state donated (tx.update_and_apply_donated: written in their own blocks, as a
  /// jitted Flax step with donate_argnums does). Other copies of those arrays see the new values.
  template <class Grads>
  train_state apply_gradients(Grads const& grads) && {
    auto [new_params, new_opt_state] = tx->update_and_apply_donated(grads, std::move(opt_state), std::move(params));
    return train_state{safe_increment(step), std::move(apply_fn), std::move(new_params), std::move(tx),
                       std::move(new_opt_state)};
  }
};

/// TrainState.create(apply_fn=..., params=..., tx=...).
template <class ApplyFn, class Params, class Tx>
train_state<ApplyFn, Params, Tx> create_train_state(ApplyFn apply_fn, Params params, Tx tx) {
  return train_state<ApplyFn, Params, Tx>::create(std::move(apply_fn), std::move(params), std::move(tx));
}

}  // namespace tessera::optim
