// jnp.matmul(x, jnp.sum(x)): a rank-0 operand.
// JAX: matmul input operand 1 must have ndim at least 1, but it has ndim 0
// EXPECT: tessera::matmul: both operands must have rank 1 or more and a numeric element type
// EXPECT: matmul_operands_must_be_numeric_arrays_of_rank_at_least_1<1, 0, false>
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: both operands must have rank 1 or more
// EXPECT: multiply by a scalar with \*
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::axes;
using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 1> const h = xt::reshape_view(xt::arange<float>(8.0f), {8});
  auto x = tessera::device_put(h, tessera::named_sharding(mesh, P<"X">{}));
#ifdef TESSERA_FIXED
  tessera::array r = x * tessera::sum(x);  // float32[8@X]
#else
  tessera::array r = tessera::matmul(x, tessera::sum(x));
#endif
  return tessera::type_of(r) == "float32[8@X]" ? 0 : 1;
}
