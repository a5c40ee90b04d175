#pragma once
// optax.scale, scale_by_schedule, scale_by_learning_rate, identity, trace and sgd.

#include <cstddef>
#include <tuple>
#include <utility>

#include "tessera/optim/schedules.hpp"
#include "tessera/optim/transform.hpp"

namespace tessera::optim {

/// optax.identity(): passes the updates on unchanged (sgd without momentum).
struct identity_t : gradient_transformation<identity_t>, detail::stateless {
  struct step_t {
    template <class T>
    void operator()(std::size_t, T*, T const*, T const* const*, T* const*, std::size_t) const {}
  };
  template <class G, class S, class P>
  step_t begin(G const&, S const&, P const&) const {
    return {};
  }
};
/// optax.identity().
inline identity_t identity() { return {}; }

/// optax.scale(step_size): updates · step_size.
struct scale_t : gradient_transformation<scale_t>, detail::stateless {
  double step_size;
  struct step_t {
    double step_size;
    template <class T>
    void operator()(std::size_t, T* u, T const*, T const* const*, T* const*, std::size_t n) const {
      detail::batch<T> const s(static_cast<T>(step_size));
      detail::for_batches<T>(n, [&](std::size_t i) { (detail::load(u + i) * s).store_unaligned(u + i); });
    }
    /// The last step of an update_and_apply: p + u·s in one fma, as XLA fuses it.
    template <class T>
    void operator()(std::size_t, T* u, T const* p, T const* const*, T* const*, std::size_t n, T* new_p) const {
      detail::batch<T> const s(static_cast<T>(step_size));
      detail::for_batches<T>(n, [&](std::size_t i) {
        detail::fmadd(detail::load(u + i), s, detail::load(p + i)).store_unaligned(new_p + i);
      });
    }
    /// The fused form (transform.hpp's prepare protocol): u·s, and p + u·s in one fma when applied.
    template <class T>
    struct prepared {
      detail::batch<T> s;
      detail::batch<T> operator()(detail::batch<T> const& u, std::size_t, T const*, T const* const*, T* const*) const {
        return u * s;
      }
      detail::batch<T> apply(detail::batch<T> const& u, std::size_t i, T const* p, T const* const*, T* const*) const {
        return detail::fmadd(u, s, detail::load(p + i));
      }
    };
    template <class T>
    prepared<T> prepare(std::size_t) const {
      return {detail::batch<T>(static_cast<T>(step_size))};
    }
  };
  template <class G, class S, class P>
  step_t begin(G const&, S const&, P const&) const {
    return {step_size};
  }
};
/// optax.scale(step_size).
inline scale_t scale(double step_size) {
  scale_t s;
  s.step_size = step_size;
  return s;
}

/// optax.ScaleByScheduleState.
struct scale_by_schedule_state {
  count_type count;
};

/// optax.scale_by_schedule(step_size_fn): updates · step_size_fn(count), then count + 1.
template <schedule F>
struct scale_by_schedule_t : gradient_transformation<scale_by_schedule_t<F>> {
  F step_size_fn;
  static constexpr std::size_t slots = 0;

  explicit scale_by_schedule_t(F f) : step_size_fn(std::move(f)) {}

  template <class P>
  scale_by_schedule_state init(P const&) const {
    return {0};
  }
  std::tuple<> slot_trees(scale_by_schedule_state const&) const { return {}; }
  template <class G, class P>
  scale_t::step_t begin(G const&, scale_by_schedule_state const& s, P const&) const {
    return {static_cast<double>(static_cast<float>(step_size_fn(s.count)))};
  }
  scale_by_schedule_state finish(scale_t::step_t const&, scale_by_schedule_state const& s, std::tuple<>) const {
    return {safe_increment(s.count)};
  }
};
/// optax.scale_by_schedule(step_size_fn).
template <schedule F>
scale_by_schedule_t<F> scale_by_schedule(F f) {
  return scale_by_schedule_t<F>(std::move(f));
}

/// optax.scale_by_learning_rate(learning_rate, flip_sign=True): updates · (−learning_rate),
/// learning_rate a number (optax.scale) or a schedule (optax.scale_by_schedule, with a count).
template <class LR>
auto scale_by_learning_rate(LR learning_rate, bool flip_sign = true) {
  double const m = flip_sign ? -1.0 : 1.0;
  if constexpr (std::is_arithmetic_v<LR>) {
    return scale(m * static_cast<double>(learning_rate));
  } else {
    static_assert(schedule<LR>, "tessera::optim: a learning rate is a number or a schedule (a callable of the "
                                "update count giving a float, as optax.Schedule)");
    return scale_by_schedule([learning_rate, f = static_cast<float>(m)](count_type c) {
      return f * static_cast<float>(learning_rate(c));
    });
  }
}

/// optax.TraceState: the momentum of every parameter, shaped and sharded like the parameters.
template <class Tree>
struct trace_state {
  Tree trace;
};

/// optax.trace(decay, nesterov=False): t ← g + decay·t; the update is t, or g + decay·t with
/// Nesterov momentum.
struct trace_t : gradient_transformation<trace_t> {
  double decay;
  bool nesterov = false;
  static constexpr std::size_t slots = 1;

  template <class P>
  trace_state<P> init(P const& params) const {
    return {detail::tree_zeros_like(params)};
  }
  template <class Tree>
  auto slot_trees(trace_state<Tree> const& s) const {
    return std::tie(s.trace);
  }
  struct step_t {
    double decay;
    bool nesterov;
    template <class T>
    void operator()(std::size_t, T* u, T const*, T const* const* in, T* const* out, std::size_t n) const {
      using B = detail::batch<T>;
      B const d(static_cast<T>(decay));
      detail::for_batches<T>(n, [&](std::size_t i) {
        B const g = detail::load(u + i);
        B const t = detail::fmadd(d, detail::load(in[0] + i), g);  // XLA contracts g + decay·t into one fma
        t.store_unaligned(out[0] + i);
        (nesterov ? detail::fmadd(d, t, g) : t).store_unaligned(u + i);
      });
    }
  };
  template <class G, class S, class P>
  step_t begin(G const&, S const&, P const&) const {
    return {decay, nesterov};
  }
  template <class Tree, class Slots>
  trace_state<Tree> finish(step_t const&, trace_state<Tree> const&, Slots&& slots) const {
    return {std::get<0>(std::move(slots))};
  }
};
/// optax.trace(decay, nesterov).
inline trace_t trace(double decay, bool nesterov = false) {
  trace_t t;
  t.decay = decay;
  t.nesterov = nesterov;
  return t;
}

/// optax.sgd(learning_rate): chain(identity(), scale_by_learning_rate(learning_rate)).
template <class LR>
auto sgd(LR learning_rate) {
  return chain(identity(), scale_by_learning_rate(learning_rate));
}
/// optax.sgd(learning_rate, momentum, nesterov): chain(trace(momentum, nesterov),
/// scale_by_learning_rate(learning_rate)).
template <class LR>
auto sgd(LR learning_rate, double momentum, bool nesterov = false) {
  return chain(trace(momentum, nesterov), scale_by_learning_rate(learning_rate));
}

}  // namespace tessera::optim
