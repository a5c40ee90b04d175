#pragma once
// The collective matmul of JAX's shard_map tutorial (XLA's windowed einsum, what
// --xla_gpu_threshold_for_windowed_einsum_mib turns on) for global-view arrays: lhs @ rhs where
// one operand's blocks go round a ring of the devices along mesh axis A (ppermute_async) while
// each device multiplies the block it holds, instead of one all-gather or reduce-scatter before
// or after a single product. The two layouts the tutorial decomposes:
//   all-gather form      lhs P(A, None), rhs P(A, None): rhs blocks travel (i -> i + 1)
//   reduce-scatter form  lhs P(None, A), rhs P(A, None): the partial sums travel (i -> i - 1)
// Both give P(A, None), the layout tessera::matmul's plan gives after its all-gather or
// reduce-scatter (docs/matmul-and-partial-sums.md); the sums are the same products added in
// another order. examples/collective_matmul.cpp writes the same bodies out.

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/array.hpp"
#include "tessera/core/fixed_string.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/parallel/async_collectives.hpp"
#include "tessera/parallel/block_functions.hpp"
#include "tessera/parallel/shard_map.hpp"

namespace tessera {
namespace detail {

inline std::vector<std::pair<int, int>> ring_permutation(int k, int step) {
  std::vector<std::pair<int, int>> perm;
  for (int j = 0; j < k; ++j) perm.emplace_back(j, ((j + step) % k + k) % k);
  return perm;
}

/// Columns [at, at + b) (or rows, with Rows) of a matrix block, as a matrix of its own.
template <bool Rows, class X>
auto matrix_block(X const& x, std::size_t at, std::size_t b) {
  using T = std::remove_cv_t<typename X::value_type>;
  std::size_t const r = x.shape()[0], c = x.shape()[1];
  xt::xtensor<T, 2> out = xt::xtensor<T, 2>::from_shape({Rows ? b : r, Rows ? c : b});
  T const* src = x.data();
  T* dst = out.data();
  if constexpr (Rows) std::copy(src + at * c, src + (at + b) * c, dst);
  else
    for (std::size_t i = 0; i < r; ++i) std::copy(src + i * c + at, src + i * c + at + b, dst + i * b);
  return out;
}

/// The all-gather form's body over axis A.
template <axis_name A>
struct ring_allgather_matmul {
  template <class L, class R>
  auto operator()(L const& lhs_block, R const& rhs_block) const {
    using T = std::remove_cv_t<typename L::value_type>;
    int const k = axis_size<A>();
    int const idx = axis_index<A>();
    auto const shift = ring_permutation(k, 1);
    std::size_t const b = lhs_block.shape()[1] / static_cast<std::size_t>(k);
    auto cols = [&](int j) {
      std::size_t const at = static_cast<std::size_t>(((j % k) + k) % k) * b;
      return matrix_block<false>(lhs_block, at, b);
    };
    xt::xtensor<T, 2> rhs = rhs_block, out;
    for (int i = 0; i < k; ++i) {
      if (i + 1 < k) {
        auto next = ppermute_async<A>(rhs, shift);
        auto const part = matmul(cols(idx - i), rhs);
        if (i == 0) out = part;
        else out += part;
        rhs = next.wait();
      } else if (i == 0) {
        out = matmul(cols(idx), rhs);
      } else {
        out += matmul(cols(idx - i), rhs);
      }
    }
    return out;
  }
};

/// The reduce-scatter form's body over axis A.
template <axis_name A>
struct ring_reduce_scatter_matmul {
  template <class L, class R>
  auto operator()(L const& lhs_block, R const& rhs_block) const {
    using T = std::remove_cv_t<typename L::value_type>;
    int const k = axis_size<A>();
    int const idx = axis_index<A>();
    auto const shift = ring_permutation(k, -1);
    std::size_t const b = lhs_block.shape()[0] / static_cast<std::size_t>(k);
    auto rows = [&](int j) {
      std::size_t const at = static_cast<std::size_t>(((j % k) + k) % k) * b;
      return matrix_block<true>(lhs_block, at, b);
    };
    xt::xtensor<T, 2> acc = matmul(rows(idx + 1), rhs_block);
    for (int i = 1; i < k; ++i) {
      auto moved = ppermute_async<A>(acc, shift);
      auto const part = matmul(rows(idx + i + 1), rhs_block);
      acc = moved.wait() + part;
    }
    return acc;
  }
};

template <class X>
using spec_of_array = typename std::remove_cvref_t<decltype(std::declval<X const&>().sharding())>::spec_type;

}  // namespace detail

/// jnp.matmul(lhs, rhs) as a collective matmul along mesh axis A (XLA's windowed einsum; JAX's
/// shard_map tutorial): for lhs and rhs both sharded P(A, None) (the all-gather form) or lhs
/// P(None, A) and rhs P(A, None) (the reduce-scatter form), 2-D; the result is P(A, None).
/// The dimensions split along A must divide by its size (std::invalid_argument otherwise).
template <axis_name A, class L, class R>
auto collective_matmul(L const& lhs, R const& rhs) {
  using SL = detail::spec_of_array<L>;
  using SR = detail::spec_of_array<R>;
  constexpr bool gather_form = std::is_same_v<SL, P<A, none>> && std::is_same_v<SR, P<A, none>>;
  constexpr bool scatter_form = std::is_same_v<SL, P<none, A>> && std::is_same_v<SR, P<A, none>>;
  static_assert(gather_form || scatter_form,
                "tessera::collective_matmul<A>(lhs, rhs): the operands must be 2-D with lhs and rhs sharded "
                "P(A, None) (the all-gather form) or lhs P(None, A) and rhs P(A, None) (the reduce-scatter form); "
                "reshard them first, or use tessera::matmul");
  auto const& mesh = lhs.sharding().mesh();
  constexpr std::size_t axis = *std::remove_cvref_t<decltype(mesh)>::index_of(A);
  std::size_t const k = static_cast<std::size_t>(mesh.size(axis));
  std::size_t const split = scatter_form ? lhs.shape()[0] : lhs.shape()[1];
  if (split % k != 0)
    throw std::invalid_argument("tessera::collective_matmul: lhs dimension " + std::to_string(scatter_form ? 0 : 1) +
                                " has size " + std::to_string(split) + ", which does not divide into " +
                                std::to_string(k) + " blocks, one per device along mesh axis '" +
                                std::string(A.view()) + "'");
  if constexpr (gather_form)
    return shard_map(detail::ring_allgather_matmul<A>{}, mesh, in_specs(P<A, none>{}, P<A, none>{}),
                     out_specs(P<A, none>{}))(lhs, rhs);
  else
    return shard_map(detail::ring_reduce_scatter_matmul<A>{}, mesh, in_specs(P<none, A>{}, P<A, none>{}),
                     out_specs(P<A, none>{}))(lhs, rhs);
}

/// matmul's option for the collective matmul along mesh axis A (XLA's windowed einsum, JAX's
/// collective matmul): `tessera::matmul(lhs, rhs, tessera::windowed<"x">)`.
template <axis_name A>
struct windowed_t {};
/// The value to pass: `tessera::windowed<"x">` (jax: the collective matmul of the shard_map tutorial).
template <axis_name A>
inline constexpr windowed_t<A> windowed{};

/// jnp.matmul(lhs, rhs) decomposed as a collective matmul along A: collective_matmul<A>(lhs, rhs),
/// the same layouts (lhs and rhs P(A, None), or lhs P(None, A) and rhs P(A, None)) and result P(A, None).
template <axis_name A, class L, class R>
auto matmul(L const& lhs, R const& rhs, windowed_t<A>) {
  return collective_matmul<A>(lhs, rhs);
}

}  // namespace tessera
