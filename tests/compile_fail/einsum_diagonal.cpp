// jnp.einsum("ii->i", a): a diagonal. JAX accepts it (float32[8]); tessera does not provide
// repeated indices within one operand (a documented difference).
// EXPECT: tessera::einsum: an index appears twice in one operand \(a diagonal or a trace
// EXPECT: einsum_subscripts_must_be_well_formed<
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
  tessera::array e = tessera::einsum<"ij->i">(a);  // float32[8@X]
#else
  tessera::array e = tessera::einsum<"ii->i">(a);
#endif
  return tessera::type_of(e) == "float32[8@X]" ? 0 : 1;
}
