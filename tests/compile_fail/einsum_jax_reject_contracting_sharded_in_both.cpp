// jnp.einsum("ij,jk->ik", a, b), a P(None, 'X'), b P('X', None), on Explicit axes.
// JAX: Contracting dimensions are sharded and it is ambiguous how the output should be sharded. Please specify the output sharding via the `out_sharding` parameter. Got lhs_contracting_spec=('X',) and rhs_contracting_spec=('X',)
// EXPECT: tessera::einsum: a contracting index \(in both operands, not in the output\) is sharded in both
// EXPECT: einsum_contracting_index_sharded_in_both_operands<'j', 
// EXPECT: Contracting dimensions are sharded and it is ambiguous
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const h = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
  auto a = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
  auto b = tessera::device_put(h, tessera::named_sharding(mesh, P<"X", none>{}));
  auto c = tessera::device_put(h, tessera::named_sharding(mesh, P<none, "X">{}));
  auto r = tessera::device_put(h, tessera::named_sharding(mesh, P<>{}));
  (void)a, (void)b, (void)c, (void)r;
#ifdef TESSERA_FIXED
  tessera::array e = tessera::einsum<"ij,jk->ik">(c, a, P<none, "Y">{});  // float32[8,8@Y]
#else
  tessera::array e = tessera::einsum<"ij,jk->ik">(c, a);
#endif
  return tessera::type_of(e) == "float32[8,8@Y]" ? 0 : 1;
}
