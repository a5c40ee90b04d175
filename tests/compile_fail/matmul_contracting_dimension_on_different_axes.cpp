// matmul whose operands shard the contracting dimension on different Explicit mesh axes: a
// [8,16] has K on X, b [16,4] has K on Y. Neither operand's blocks line up with the other's,
// and JAX's explicit mode refuses to pick one to move; so does tessera, at compile time.
// EXPECT: tessera::matmul: the contracting dimension is sharded on different mesh axes in the left and right operands
// EXPECT: reshard one of them to the other's axis or to None: tessera::reshard
// The diagnostic names both axes (g++ prints an axis as tessera::axis_name{"X"}, clang++ 14
// as its characters' codes, {{88, 0, ...}}):
// EXPECT: matmul_contracting_dimension_sharded_on_different_axes<(tessera::axis_name)?{("X"|{88(, 0)*})}, (tessera::axis_name)?{("Y"|{89(, 0)*})}, false>
// The first error is ours (no "error:" before it), under g++ and clang++:
// EXPECT: ^([^:]|:[^ ]|: [^e]|: e[^r]|: er[^r]|: err[^o]|: erro[^r]|: error[^:])*: error: static(_assert| assertion) failed( due to requirement '[^']*')?(: | ")tessera::matmul: the contracting dimension is sharded on different mesh axes
#include <cstddef>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

using tessera::none;
using tessera::P;

int main() {
  tessera::runtime rt{8};
  auto mesh = tessera::make_mesh<"X", "Y">({2, 4}, tessera::explicit_axes);
  xt::xtensor<float, 2> const ha = xt::reshape_view(xt::arange<float>(128.0f), {8, 16});
  xt::xtensor<float, 2> const hb = xt::reshape_view(xt::arange<float>(64.0f) - 32.0f, {16, 4});
  auto a = tessera::device_put(ha, tessera::named_sharding(mesh, P<none, "X">{}));
  auto b = tessera::device_put(hb, tessera::named_sharding(mesh, P<"Y", none>{}));
#ifdef TESSERA_FIXED
  tessera::array c = tessera::matmul(a, tessera::reshard(b, P<"X", none>{}));  // float32[8,4], all-reduce over X
#else
  tessera::array c = tessera::matmul(a, b);
#endif
  auto const hc = tessera::to_host(c);
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      float want = 0;
      for (std::size_t k = 0; k < 16; ++k) want += ha(i, k) * hb(k, j);
      if (hc(i, j) != want) return 1;
    }
  return 0;
}
