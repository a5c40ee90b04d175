// matmul with a rank-0 operand (here the scalar tessera::sum(v)): jnp.matmul rejects scalars
// ("matmul: inputs must have at least one dimension"); tessera does so at compile time and
// points to the element-wise product.
// EXPECT: tessera::matmul: both operands must have rank 1 or more and a numeric element type
// EXPECT: multiply by a scalar with \*
// The diagnostic names both ranks:
// EXPECT: matmul_operands_must_be_numeric_arrays_of_rank_at_least_1<0, 2, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: both operands must have rank 1 or more
#include <cstddef>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 1> const hv = xt::arange<float>(8.0f);
  xt::xtensor<float, 2> const hw = xt::reshape_view(xt::arange<float>(24.0f), {4, 6});
  auto v = tessera::device_put(hv, tessera::named_sharding(mesh, P<"X">{}));
  auto w = tessera::device_put(hw, tessera::named_sharding(mesh, P<"X", none>{}));
#ifdef TESSERA_FIXED
  tessera::array c = tessera::sum(v) * w;  // float32[4@X,6]: 28 * w
#else
  tessera::array c = tessera::matmul(tessera::sum(v), w);
#endif
  auto const hc = tessera::to_host(c);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 6; ++j)
      if (hc(i, j) != 28.0f * hw(i, j)) return 1;
  return 0;
}
