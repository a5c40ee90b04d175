#pragma once
// optax.clip_by_global_norm: the one optimizer step that communicates. The squared norms of all
// the gradient leaves are summed on each device over the blocks it holds (each distinct block
// counted once: a replicated leaf by its first copy only), and one all-reduce of that one number
// over the whole mesh gives the global norm, whatever the number of leaves.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "tessera/array/sum_partials.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/core/tuple_traits.hpp"
#include "tessera/optim/transform.hpp"

namespace tessera::optim {

namespace detail {

/// Σ x² over n elements, in batches of T summed into a double per 4096 elements.
template <class T>
double sum_of_squares(T const* x, std::size_t n) {
  using B = batch<T>;
  constexpr std::size_t W = B::size;
  double total = 0;
  std::size_t i = 0;
  std::size_t const body = n - n % W;
  while (i < body) {
    std::size_t const end = std::min(body, i + 4096);
    B acc(T(0));
    for (; i < end; i += W) {
      B const v = load(x + i);
      acc = detail::fmadd(v, v, acc);
    }
    alignas(64) T lanes[W];
    acc.store_aligned(lanes);
    for (T l : lanes) total += static_cast<double>(l);
  }
  for (; i < n; ++i) total += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return total;
}

}  // namespace detail

/// optax.tree.norm(tree) squared: Σ over every leaf of Σ x², with ONE all-reduce over the mesh
/// of the leaves (all of them on one mesh).
template <class Tree>
double global_norm_squared(Tree const& tree) {
  auto const leaves = tessera::tree_leaves(tree);
  constexpr std::size_t L = std::tuple_size_v<std::remove_cvref_t<decltype(leaves)>>;
  if constexpr (L == 0) {
    return 0.0;
  } else {
    auto const& first = std::get<0>(leaves);
    using S0 = typename std::remove_cvref_t<decltype(first)>::sharding_type;
    static_assert(requires { typename S0::mesh_type; },
                  "tessera::optim::global_norm: the leaves are arrays with a NamedSharding (on one mesh)");
    using Mesh = typename S0::mesh_type;
    Mesh const& mesh = first.sharding().mesh();
    tessera::detail::apply(
        [&](auto const&... leaf) {
          static_assert((std::is_same_v<typename std::remove_cvref_t<decltype(leaf)>::sharding_type::mesh_type, Mesh> &&
                         ...),
                        "tessera::optim::global_norm: every leaf is on the mesh of the first (one all-reduce over "
                        "one mesh sums them all)");
          std::size_t k = 0;
          ((leaf.sharding().mesh() == mesh && leaf.pool() == first.pool()
                ? void(++k)
                : throw std::invalid_argument("tessera::optim::global_norm: leaf " + std::to_string(k) +
                                              " is on another mesh than leaf 0; put every gradient on one mesh")),
           ...);
        },
        leaves);
    auto const rs = tessera::named_sharding(mesh, P<>{});
    using RS = std::remove_cvref_t<decltype(rs)>;
    // Each device's partial sum: its blocks' squares, each distinct block on one device only.
    auto const partials = tessera::detail::build_array<double, 0, RS>(
        rs, shape_t<0>{}, "clip_by_global_norm", [&](std::size_t pos, std::array<slice, 0> const&, double* out) {
          double s = 0;
          tessera::detail::apply(
              [&](auto const&... leaf) {
                ((s += leaf.sharding().replica_id(pos) != 0
                           ? 0.0
                           : detail::sum_of_squares(leaf.block_data(pos),
                                                    tessera::detail::element_count(tessera::detail::block_shape(
                                                        leaf.sharding().block(pos, leaf.shape()))))),
                 ...);
              },
              leaves);
          *out = s;
        });
    dim_spec every_axis;
    for (std::size_t a = 0; a < Mesh::rank; ++a) every_axis.push(Mesh::axes[a].name);
    auto const total = tessera::detail::sum_partials(partials, every_axis, rs, tessera::detail::reduce_op::sum);
    auto const& ids = rs.device_ids();
    for (std::size_t p = 0; p < ids.size(); ++p)
      if (total.pool()->is_local(ids[p])) return *total.block_data(p);
    return 0.0;  // no device of this process in the mesh: nothing to clip here
  }
}

/// optax.global_norm(tree) (optax.tree.norm): sqrt of global_norm_squared, one all-reduce.
template <class Tree>
double global_norm(Tree const& tree) {
  return std::sqrt(global_norm_squared(tree));
}

/// optax.clip_by_global_norm(max_norm): where the global norm of the updates is max_norm or
/// more, every update becomes (u / norm) · max_norm; below it, the updates pass unchanged.
/// Stateless; one all-reduce per update (of one number, for all the leaves together).
struct clip_by_global_norm_t : gradient_transformation<clip_by_global_norm_t>, detail::stateless {
  double max_norm;
  /// It needs the norm of its whole input before the pass: only the gradients are whole then, so
  /// it comes first in a chain (chain_t refuses it elsewhere).
  static constexpr bool needs_whole_input = true;

  struct step_t {
    double norm, max_norm;
    template <class T>
    void operator()(std::size_t, T* u, T const*, T const* const*, T* const*, std::size_t n) const {
      T const g = static_cast<T>(norm);
      if (g < static_cast<T>(max_norm)) return;
      // XLA multiplies by the reciprocal of a scalar it divides by.
      detail::batch<T> const r(T(1) / g), m(static_cast<T>(max_norm));
      detail::for_batches<T>(n, [&](std::size_t i) { (detail::load(u + i) * r * m).store_unaligned(u + i); });
    }
  };
  template <class G, class S, class P>
  step_t begin(G const& grads, S const&, P const&) const {
    return {global_norm(grads), max_norm};
  }
};
/// optax.clip_by_global_norm(max_norm).
inline clip_by_global_norm_t clip_by_global_norm(double max_norm) {
  clip_by_global_norm_t c;
  c.max_norm = max_norm;
  return c;
}

}  // namespace tessera::optim
