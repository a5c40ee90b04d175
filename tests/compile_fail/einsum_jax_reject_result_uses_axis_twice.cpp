// jnp.einsum("ik,jk->ij", a, b), a and b P('X', None), on Explicit axes.
// JAX: dot_general operation with inputs: f32[8@X,8], f32[8@X,8] produces an illegally sharded result: f32[8@X,8@X]
// EXPECT: tessera::einsum: the result would shard two dimensions on the same mesh axis
// EXPECT: einsum_result_would_use_a_mesh_axis_twice<'j', 
// EXPECT: produces an illegally sharded
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
  tessera::array e = tessera::einsum<"ik,jk->ij">(a, r);  // float32[8@X,8]
#else
  tessera::array e = tessera::einsum<"ik,jk->ij">(a, b);
#endif
  return tessera::type_of(e) == "float32[8@X,8]" ? 0 : 1;
}
