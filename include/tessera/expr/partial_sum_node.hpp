// The protocol every node computed as partial sums shares (JAX's `unreduced` results): matmul's
// and einsum's contractions over a sharded dimension, and take on a vocabulary-sharded table.
// Each device computes its share once; the sum over the unreduced mesh axes is taken once, where
// the value is used, and a linear operation on the node can stay partial (tracer.hpp reads
// partial() and partial_plan()).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "tessera/array/sum_partials.hpp"
#include "tessera/core/slice.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera::detail {

/// CRTP base of the partial-sum nodes. `Derived` provides `array_type`, `mesh()`, `shape()`, the
/// constexpr `unreduced`, `result_sharding()`, and, reachable from this base, `compute_partial()` (every
/// device's share), `prepare_operands()` and `plan_operands(out)`. The members that return
/// `Derived::array_type` are templates so that they name it only once Derived is complete.
template <class Derived>
class partial_sum_node : public expression_tag {
 public:
  /// Evaluates the node: its partial shares summed over `unreduced`.
  template <class D = Derived>
  typename D::array_type evaluate() const {
    return result();
  }
  /// The summed value (computed once; copies of the node share it).
  template <class D = Derived>
  typename D::array_type const& result() const {
    prepare();
    return *cache_->reduced;
  }
  void prepare() const {
    if constexpr (Derived::unreduced.is_none()) {
      partial();
      call_once(cache_->reduced_once, [&] { cache_->reduced.emplace(*cache_->partial); });
    } else {
      // Inside the once: a value already summed looks nothing up again.
      call_once(cache_->reduced_once, [&] {
        summing_partials(self().mesh(), [&] {
          partial();
          cache_->reduced.emplace(
              sum_partials(*cache_->partial, Derived::unreduced, self().result_sharding(), reduce_op::sum));
        });
      });
    }
  }
  /// Every device's share, not yet summed over `unreduced`.
  template <class D = Derived>
  typename D::array_type const& partial() const {
    self().prepare_operands();
    call_once(cache_->partial_once, [&] { cache_->partial.emplace(self().compute_partial()); });
    return *cache_->partial;
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return cursor_of<Q>(*cache_->reduced, pos, rb, rs);
  }
  template <std::size_t Q>
  auto partial_cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return cursor_of<Q>(*cache_->partial, pos, rb, rs);
  }
  /// The operands' collectives, then the all-reduce of the shares (none when nothing is unreduced).
  void plan(std::vector<collective_event>& out) const {
    if (cache_->reduced) return;  // already summed: nothing left to run
    partial_plan(out);
    if constexpr (!Derived::unreduced.is_none()) {
      auto const s = self().result_sharding();
      auto const e = reshard_events<typename Derived::value_type, Derived::rank>(self().shape(), s,
                                                                                      Derived::unreduced, s);
      out.insert(out.end(), e.begin(), e.end());
    }
  }
  /// The operands' collectives only (the moves that put them in place).
  void partial_plan(std::vector<collective_event>& out) const {
    if (cache_->partial) return;
    self().plan_operands(out);
  }

 protected:
  partial_sum_node() : cache_(std::make_shared<cache>()) {}

 private:
  Derived const& self() const { return static_cast<Derived const&>(*this); }
  struct cache {
    std::once_flag partial_once, reduced_once;
    std::optional<typename Derived::array_type> partial, reduced;
  };
  std::shared_ptr<cache> cache_;
};

}  // namespace tessera::detail
