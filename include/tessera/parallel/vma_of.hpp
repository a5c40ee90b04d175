#pragma once
// The vma (core/varying_axes.hpp) of any value a shard_map body computes,
// read off its type: a block or collective result says it; an xtensor
// expression varies where its operands do; a literal or generator (2 * x,
// xt::zeros, xt::arange) is the same everywhere; a plain number or container
// (xt::xtensor, xt::xarray, an adaptor of raw memory) is untracked.

#include <cstddef>
#include <type_traits>

#include "tessera/detail/xtensor/xbroadcast.hpp"
#include "tessera/detail/xtensor/xdynamic_view.hpp"
#include "tessera/detail/xtensor/xexpression.hpp"
#include "tessera/detail/xtensor/xgenerator.hpp"
#include "tessera/detail/xtensor/xscalar.hpp"
#include "tessera/detail/xtensor/xstrided_view.hpp"

#include "tessera/core/varying_axes.hpp"
#include "tessera/parallel/local_block.hpp"

namespace tessera::detail {

template <class E>
struct vma_of;

/// An operand of an expression: expressions and tessera values count, functors, slices and shapes do not.
template <class A>
constexpr vma_state operand_vma() {
  using D = std::remove_cvref_t<A>;
  if constexpr (xt::is_xexpression<D>::value || is_local_scalar<D>::value) return vma_of<D>::value;
  else return vma_state{};
}

template <class... A>
constexpr bool any_operand = ((xt::is_xexpression<std::remove_cvref_t<A>>::value ||
                               is_local_scalar<std::remove_cvref_t<A>>::value) || ...);

/// Default: a type tessera cannot see into (a plain number or container) is untracked.
template <class E>
struct vma_of {
  static constexpr vma_state value = vma_state_of<untracked_vma>::value;
};
template <class E>
  requires(!std::is_same_v<E, std::remove_cvref_t<E>>)
struct vma_of<E> : vma_of<std::remove_cvref_t<E>> {};

template <class T, std::size_t N, class Vma>
struct vma_of<local_block<T, N, Vma>> {
  static constexpr vma_state value = vma_state_of<Vma>::value;
};
template <class T, class Vma>
struct vma_of<local_scalar<T, Vma>> {
  static constexpr vma_state value = vma_state_of<Vma>::value;
};
// A number inside an expression (the 2 in 2 * x) is a constant; a tessera scalar says what it is.
template <class CT>
struct vma_of<xt::xscalar<CT>> {
  static constexpr vma_state value = operand_vma<CT>();
};
template <class F, class R, class S>
struct vma_of<xt::xgenerator<F, R, S>> {
  static constexpr vma_state value = vma_state_of<invariant_vma>::value;
};
template <class CT, class S, xt::layout_type L, class FST>
struct vma_of<xt::xstrided_view<CT, S, L, FST>> {
  static constexpr vma_state value = operand_vma<CT>();
};
template <class CT, class S, xt::layout_type L, class FST>
struct vma_of<xt::xdynamic_view<CT, S, L, FST>> {
  static constexpr vma_state value = operand_vma<CT>();
};
// Other xtensor expressions (xfunction, xview, xreducer, xbroadcast, ...): where their operands vary.
template <template <class...> class X, class... A>
  requires(xt::is_xexpression<X<A...>>::value && any_operand<A...>)
struct vma_of<X<A...>> {
  static constexpr vma_state value = [] {
    vma_state s = vma_state_of<invariant_vma>::value;
    ((s = join(s, operand_vma<A>())), ...);
    return s;
  }();
};

/// The vma of a value, as a type: `vma<in_mesh<"x">, varying<"x">>`.
template <class E>
using vma_t = vma_type_t<vma_of<E>::value>;

}  // namespace tessera::detail
