// jnp.einsum("ijk,jk->ik", a, b) with a of rank 2: three indices for two dimensions.
// JAX: ValueError: Einstein sum subscript 'ijk' does not contain the correct number of indices for operand 0.
// EXPECT: tessera::einsum: an operand's subscripts have a different number of indices than the operand has dimensions
// EXPECT: einsum_indices_must_match_the_operand_rank<.*, 0, 3, 2, false>
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
  tessera::array e = tessera::einsum<"ij,jk->ik">(a, b);  // float32[8@X,8]
#else
  tessera::array e = tessera::einsum<"ijk,jk->ik">(a, b);
#endif
  return tessera::type_of(e) == "float32[8@X,8]" ? 0 : 1;
}
