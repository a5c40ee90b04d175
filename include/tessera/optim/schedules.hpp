#pragma once
// optax's learning-rate schedules: callables from the update count to a float32 step size,
// computed in float32 in the order optax's jnp code computes them (so the values agree with
// optax's to an ulp or two; XLA's cos may round differently from the C library's).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <numbers>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tessera/optim/transform.hpp"

namespace tessera::optim {

/// optax.Schedule: a callable of the update count giving a float (a learning rate, a weight
/// decay). A plain number is not a schedule: optimizers take either.
template <class F>
concept schedule = !std::is_arithmetic_v<std::remove_cvref_t<F>> && std::is_invocable_v<F const&, count_type> &&
                   std::convertible_to<std::invoke_result_t<F const&, count_type>, float>;

/// optax.constant_schedule(value).
struct constant_schedule {
  double value;
  float operator()(count_type) const { return static_cast<float>(value); }
};

/// optax.cosine_decay_schedule(init_value, decay_steps, alpha=0, exponent=1):
/// init·((1−alpha)·(½(1+cos(π·min(t, T)/T)))^exponent + alpha).
struct cosine_decay_schedule {
  double init_value;
  int decay_steps;
  double alpha = 0.0;
  double exponent = 1.0;

  cosine_decay_schedule(double init, int steps, double a = 0.0, double e = 1.0)
      : init_value(init), decay_steps(steps), alpha(a), exponent(e) {
    if (steps <= 0)
      throw std::invalid_argument("tessera::optim::cosine_decay_schedule: decay_steps must be positive, got " +
                                  std::to_string(steps) + " (optax raises the same)");
  }
  float operator()(count_type count) const {
    // XLA divides by a constant as a product with its reciprocal, and contracts a product
    // feeding an add into an fma.
    float const steps = static_cast<float>(decay_steps);
    float const c = std::min(static_cast<float>(count), steps);
    float const cosine = 0.5f * (1.0f + std::cos(std::numbers::pi_v<float> * c * (1.0f / steps)));
    float const powed = exponent == 1.0 ? cosine : std::pow(cosine, static_cast<float>(exponent));
    return static_cast<float>(init_value) *
           detail::fmadd(static_cast<float>(1.0 - alpha), powed, static_cast<float>(alpha));
  }
};

/// optax.linear_schedule(init_value, end_value, transition_steps, transition_begin=0).
struct linear_schedule {
  double init_value;
  double end_value;
  int transition_steps;
  int transition_begin = 0;

  float operator()(count_type count) const {
    if (transition_steps <= 0) return static_cast<float>(init_value);  // optax: a constant schedule
    int const begin = std::max(transition_begin, 0);
    count_type const c = std::clamp<count_type>(count - begin, 0, transition_steps);
    // As XLA computes it: 1 − c·(1/steps) in one fma, then (init − end)·frac + end in another.
    float const frac = detail::fmadd(-static_cast<float>(c), 1.0f / static_cast<float>(transition_steps), 1.0f);
    return detail::fmadd(static_cast<float>(init_value - end_value), frac, static_cast<float>(end_value));
  }
};

/// optax.warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
/// end_value=0, exponent=1): linear from init to peak over warmup_steps, then a cosine decay
/// from peak to end_value over decay_steps − warmup_steps (decay_steps counts the warmup).
struct warmup_cosine_decay_schedule {
  linear_schedule warmup;
  cosine_decay_schedule decay;
  int warmup_steps;

  warmup_cosine_decay_schedule(double init_value, double peak_value, int warmup, int decay_steps,
                               double end_value = 0.0, double exponent = 1.0)
      : warmup{init_value, peak_value, warmup},
        decay(peak_value, decay_steps - warmup, peak_value == 0.0 ? 0.0 : end_value / peak_value, exponent),
        warmup_steps(warmup) {}
  /// optax.join_schedules: the second schedule sees the count minus the boundary.
  float operator()(count_type count) const { return count < warmup_steps ? warmup(count) : decay(count - warmup_steps); }
};

}  // namespace tessera::optim
