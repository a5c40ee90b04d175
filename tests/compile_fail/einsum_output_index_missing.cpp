// jnp.einsum("ij,jk->iz", a, b): an output index in no operand.
// JAX: ValueError: einsum(): output subscript z does not appear in any input (opt_einsum: "Output character 'z' did not appear in the input").
// EXPECT: tessera::einsum: an index of the output appears in no operand
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
  tessera::array e = tessera::einsum<"ij,jk->ik">(a, b);  // float32[8@X,8]
#else
  tessera::array e = tessera::einsum<"ij,jk->iz">(a, b);
#endif
  return tessera::type_of(e) == "float32[8@X,8]" ? 0 : 1;
}
