#pragma once
// jnp.einsum on local tracers (a shard_map body under grad), with the name of
// parallel/block_einsum.hpp: the product of the device's blocks, and as its transpose the
// cotangent of each operand is the einsum of g with the other operand into that operand's
// indices (dot_general's transpose; an index only that operand has, summed forwards, is
// broadcast back). The subscripts are checked at compile time as the global einsum's are.
// Nothing here communicates: where a contracted dimension is split over devices the body
// psums the result, and psum's transpose gives every device g.

#include <array>
#include <tuple>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/parallel/block_einsum.hpp"

namespace tessera {

namespace detail::ad {

/// out[L.out] = sum over the other indices of a[L.a] b[L.b], the indices' sizes given by
/// `size` (so an output index neither operand has is a broadcast: the transposes need it).
template <class T, std::size_t R, std::size_t RA, std::size_t RB>
local_value<T, R> einsum_sized(einsum_labels const& L, std::array<std::size_t, 128> const& size,
                               local_value<T, RA> const& a, local_value<T, RB> const& b) {
  shape_t<R> shape{};
  for (std::size_t d = 0; d < R; ++d) shape[d] = size[static_cast<unsigned char>(L.out.labels[d])];
  auto y = make_value<T>(shape);
  einsum_local<T>(L, size, a.data(), einsum_label_strides(L.a, a.shape), b.data(), einsum_label_strides(L.b, b.shape),
                  y.data(), einsum_label_strides(L.out, shape));
  return y;
}

/// The product of a and hb (a local tracer, or the number 1 as a 0-d value for the one-operand
/// form), recorded.
template <einsum_labels L, class T, std::size_t RA, class HB>
auto einsum_recorded(local_tracer<T, RA> const& a, HB const& hb) {
  constexpr std::size_t R = L.out.rank;
  constexpr std::size_t RB = std::tuple_size_v<std::remove_cvref_t<decltype(value_ref(hb).shape)>>;
  auto const size = einsum_sizes<RA, RB>(L, a.shape(), value_ref(hb).shape);
  return local_record(einsum_sized<T, R>(L, size, a.node()->value, value_ref(hb)), a.node()->vma | vma_of_held(hb),
                      [a, hb, size](local_value<T, R> g, axis_mask m) {
                        constexpr einsum_labels LA = einsum_transpose_labels(L.out, L.b, L.a);
                        a.node()->add(m, einsum_sized<T, RA>(LA, size, g, value_ref(hb)));
                        if constexpr (local_traced<HB>) {
                          constexpr einsum_labels LB = einsum_transpose_labels(L.out, L.a, L.b);
                          hb.node()->add(m, einsum_sized<T, RB>(LB, size, g, a.node()->value));
                        }
                      },
                      "einsum");
}

}  // namespace detail::ad

/// jnp.einsum(subscripts, x) of a local tracer: the indices left out of the output summed, the
/// rest transposed; g broadcast back over the summed ones.
template <einsum_subscripts S, local_traced X>
auto einsum(X const& x) {
  using T = typename X::value_type;
  constexpr std::size_t N = X::rank;
  if constexpr (!detail::einsum_ok<S, 1, N, 0>()) {
    detail::einsum_diagnose<S, 1, N, 0>();
    return x;
  } else {
    constexpr detail::einsum_labels L = detail::parse_einsum(S.view());
    detail::local_value<T, 0> const one{std::vector<T>(1, T(1)), {}};
    return detail::ad::einsum_recorded<L>(x, one);
  }
}

/// jnp.einsum(subscripts, a, b) of local tracers (one element type): a local product; where the
/// contracted dimension is split over devices, psum the result.
template <einsum_subscripts S, local_traced A, local_traced B>
auto einsum(A const& a, B const& b) {
  using T = typename A::value_type;
  static_assert(std::is_same_v<T, typename B::value_type>,
                "tessera::einsum in a differentiated shard_map body: the operands have different element types; "
                "convert one with tessera::astype first");
  constexpr std::size_t NA = A::rank, NB = B::rank;
  if constexpr (!detail::einsum_ok<S, 2, NA, NB>()) {
    detail::einsum_diagnose<S, 2, NA, NB>();
    return a;
  } else {
    constexpr detail::einsum_labels L = detail::parse_einsum(S.view());
    return detail::ad::einsum_recorded<L>(a, b);
  }
}

}  // namespace tessera
