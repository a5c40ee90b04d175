// jnp.einsum("ij,ij->i", a, b), a P('X', None), b P(None, None), on Explicit axes.
// JAX: dot_general requires lhs batch dimensions and rhs batch dimensions to have the same sharding, got ('X',) and (None,).
// EXPECT: tessera::einsum: a batch index \(in both operands and the output\) is sharded differently
// EXPECT: einsum_batch_index_must_be_sharded_alike<'i', 
// EXPECT: dot_general requires lhs batch dimensions and rhs batch dimensions to have the same sharding
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
  tessera::array e = tessera::einsum<"ij,ij->i">(a, b);  // float32[8@X]
#else
  tessera::array e = tessera::einsum<"ij,ij->i">(a, r);
#endif
  return tessera::type_of(e) == "float32[8@X]" ? 0 : 1;
}
