#pragma once
// A value kept in the partial state (JAX's `unreduced`, DTensor's `Partial`):
// every device holds its own partial block, and the sum over the mesh axes U
// has not been taken. It is what jit returns for an out_sharding that asks for
// the partial state; using it sums it (into the replicated layout, or straight
// into a sharded one under reshard or with_sharding_constraint), and a linear
// operation on it keeps it partial, like any partial expression.

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "tessera/array/sum_partials.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/expr/expression.hpp"
#include "tessera/runtime/call_once.hpp"

namespace tessera {

/// The sharding of a value in the partial state: NamedSharding S, its values still to be
/// summed over the mesh axes U (jax's `NamedSharding(mesh, P(..., unreduced={...}))`).
template <class S, dim_spec U>
struct partial_sharding {
  /// The layout of each device's partial block.
  S sharding;
};
/// `tessera::partial(named_sharding(mesh, P<"X">{}), tessera::axes<"Y">)`: an out_sharding
/// asking for the partial state over Y.
template <dim_spec U, class S>
partial_sharding<S, U> partial(S const& s) {
  static_assert(!U.is_none(), "tessera::partial<axes>(sharding): name the mesh axes the value stays partial over");
  return {s};
}

/// An array in the partial state: each device's block is a partial sum over the mesh axes U.
template <class T, std::size_t N, class S, dim_spec U>
class partial_array : public expression_tag {
 public:
  using value_type = T;
  using mesh_type = typename S::mesh_type;
  static constexpr std::size_t rank = N;
  static constexpr std::array<dim_spec, N> spec = detail::padded_spec<typename S::spec_type>(std::make_index_sequence<N>{});
  /// The mesh axes the blocks are still partial sums over.
  static constexpr dim_spec unreduced = detail::canonical(U);
  using sharding_type = named_sharding<mesh_type, detail::spec_type_t<spec>>;
  using array_type = array<T, N, sharding_type>;

  /// Wraps the partial blocks (for the library: jit makes these).
  explicit partial_array(array_type blocks)
      : blocks_(std::move(blocks)), cache_(std::make_shared<cache>()) {}

  shape_t<N> shape() const { return blocks_.shape(); }
  mesh_type const& mesh() const { return blocks_.sharding().mesh(); }
  /// Every device's partial block.
  array_type const& partial() const { return blocks_; }
  /// The summed value, replicated over U (an all-reduce, once).
  array_type const& result() const {
    prepare();
    return *cache_->value;
  }
  auto evaluate() const { return result(); }
  void prepare() const {
    detail::call_once(cache_->once, [&] {
      cache_->value.emplace(detail::sum_partials(blocks_, unreduced, sharding_type(mesh()), detail::reduce_op::sum));
    });
  }
  template <std::size_t Q>
  auto cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(*cache_->value, pos, rb, rs);
  }
  template <std::size_t Q>
  auto partial_cursor(std::size_t pos, std::array<slice, Q> const& rb, shape_t<Q> const& rs) const {
    return detail::cursor_of<Q>(blocks_, pos, rb, rs);
  }
  /// The all-reduce that summing it runs.
  void plan(std::vector<collective_event>& out) const {
    if (cache_->value) return;
    sharding_type const s(mesh());
    auto const e = detail::reshard_events<T, N>(shape(), s, unreduced, s);
    out.insert(out.end(), e.begin(), e.end());
  }
  /// Nothing: the partial blocks are there.
  void partial_plan(std::vector<collective_event>&) const {}

 private:
  struct cache {
    std::once_flag once;
    std::optional<array_type> value;
  };
  array_type blocks_;
  std::shared_ptr<cache> cache_;
};

}  // namespace tessera
