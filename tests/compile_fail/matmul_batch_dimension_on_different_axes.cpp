// A batched matmul whose operands shard the batch dimension on different Explicit mesh axes:
// a [4,8,6] on X, b [4,6,5] on Y. Batch dimensions combine like element-wise ones, and X with
// Y is a conflict; on Explicit axes tessera refuses it at compile time.
// EXPECT: tessera::matmul: a batch dimension is sharded on different mesh axes in the left and right operands
// EXPECT: batch dimensions must be sharded alike: reshard one operand
// The diagnostic names the result dimension and both axes (g++ prints an axis as
// tessera::axis_name{"X"}, clang++ 14 as its characters' codes, {{88, 0, ...}}):
// EXPECT: matmul_batch_dimension_sharded_on_different_axes<0, (tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: a batch dimension is sharded on different mesh axes
#include <cstddef>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<int, 3> const ha = xt::reshape_view(xt::arange<int>(192) % 7 - 3, {4, 8, 6});
  xt::xtensor<int, 3> const hb = xt::reshape_view(xt::arange<int>(120) % 5 - 2, {4, 6, 5});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<"X">{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"Y">{}));
#ifdef TESSERA_FIXED
  tessera::array c = tessera::matmul(a, tessera::reshard(b, P<"X">{}));  // int32[4@X,8,5]
#else
  tessera::array c = tessera::matmul(a, b);
#endif
  auto const hc = tessera::to_host(c);
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        int want = 0;
        for (std::size_t k = 0; k < 6; ++k) want += ha(t, i, k) * hb(t, k, j);
        if (hc(t, i, j) != want) return 1;
      }
  return 0;
}
