#pragma once
// The special functions of expr/special_functions.hpp on local tracers: a shard_map body that
// calls tessera::erf, gelu, silu, swish or softplus differentiates under grad like the global
// view, with the same bits: the forward values are the same scalar code, and each backward step
// is the global rule's g f'(x) (autodiff/special_rules.hpp, in JAX's order) on the device's own
// block, no communication.

#include <type_traits>

#include "tessera/autodiff/local_tracer.hpp"
#include "tessera/autodiff/special_rules.hpp"
#include "tessera/expr/special_functions.hpp"
#include "tessera/expr/special_math.hpp"

namespace tessera {

/// jax.lax.erf in a differentiated shard_map body.
template <local_traced X>
auto erf(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(
      x, [](T v) { return op::erf::apply(v); }, [](T g, T v) { return op::erf_cotangent::apply(g, v); }, "erf");
}
/// jax.lax.erfc in a differentiated shard_map body.
template <local_traced X>
auto erfc(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(
      x, [](T v) { return op::erfc::apply(v); }, [](T g, T v) { return op::erfc_cotangent::apply(g, v); },
      "erfc");
}
/// jax.nn.gelu in a differentiated shard_map body (gelu<false>: approximate=False).
template <bool Approximate = true, local_traced X>
auto gelu(X const& x) {
  using T = typename X::value_type;
  if constexpr (Approximate)
    return detail::ad::unary_op(
        x, [](T v) { return op::gelu_tanh::apply(v); },
        [](T g, T v) { return op::gelu_tanh_cotangent::apply(g, v); }, "gelu");
  else
    return detail::ad::unary_op(
        x, [](T v) { return op::gelu_erf::apply(v); },
        [](T g, T v) { return op::gelu_erf_cotangent::apply(g, v); }, "gelu");
}
/// jax.nn.silu in a differentiated shard_map body.
template <local_traced X>
auto silu(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(
      x, [](T v) { return op::silu::apply(v); }, [](T g, T v) { return op::silu_cotangent::apply(g, v); },
      "silu");
}
/// jax.nn.swish in a differentiated shard_map body: silu.
template <local_traced X>
auto swish(X const& x) {
  return silu(x);
}
/// jax.nn.softplus in a differentiated shard_map body.
template <local_traced X>
auto softplus(X const& x) {
  using T = typename X::value_type;
  return detail::ad::unary_op(
      x, [](T v) { return op::softplus::apply(v); }, [](T g, T v) { return op::softplus_cotangent::apply(g, v); },
      "softplus");
}

}  // namespace tessera
