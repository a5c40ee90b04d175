// conan/test_package: the smallest real use of an installed tessera. It puts an 8x8
// matrix on 4 devices, sharded by rows over mesh axis "x", runs one collective (psum
// of each device's column sums inside shard_map: 8 floats, enough for the vectorised
// reduction) and one matrix product (each device multiplies its 2 rows by a replicated
// matrix, so float products reach cblas_sgemm when the package was built with a BLAS),
// and checks both against the host's results.
//
// usage: test_package [blas|kernel]
//   With an argument it also checks which kernel the float product used: `blas` when the
//   package defines TESSERA_HAS_CBLAS and links OpenBLAS (Conan's with_blas=True),
//   `kernel` for tessera's own (with_blas=False). Without one it only prints it.
#include <cstdio>
#include <cstring>
#include <string_view>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main(int argc, char** argv) {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});

  // Small integers: every product and sum below is exact in float, so == is the right test.
  xt::xtensor<float, 2> const a = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
  xt::xtensor<float, 2> const b = xt::reshape_view(xt::arange<float>(64.0f) - 32.0f, {8, 8});
  auto const rows = tessera::device_put(a, tessera::named_sharding(mesh, tessera::P<"x">{}));
  auto const b_everywhere = tessera::device_put(b, tessera::named_sharding(mesh, tessera::P<>{}));

  // Each device sums the columns of its 2 rows; psum adds those partial sums over "x".
  auto column_sums = tessera::shard_map(
      [](auto blk) { return tessera::psum<"x">(xt::xtensor<float, 1>(xt::sum(blk, {0}))); }, mesh,
      tessera::in_specs(tessera::P<"x">{}), tessera::out_specs(tessera::P<>{}));
  auto const got = tessera::to_host(column_sums(rows));
  xt::xtensor<float, 1> const want = xt::sum(a, {0});

  std::printf("tessera %s: psum over 4 devices of the column sums of an 8x8 matrix sharded by rows: [",
              TESSERA_VERSION_STRING);
  for (std::size_t j = 0; j < got.size(); ++j) std::printf(j ? " %g" : "%g", static_cast<double>(got(j)));
  std::printf("]\n");

  xt::xtensor<float, 2> const product = tessera::to_host(tessera::eval(tessera::matmul(rows, b_everywhere)));
  xt::xtensor<float, 2> want_product = xt::zeros<float>({8, 8});
  for (std::size_t i = 0; i < 8; ++i)
    for (std::size_t j = 0; j < 8; ++j)
      for (std::size_t k = 0; k < 8; ++k) want_product(i, j) += a(i, k) * b(k, j);
  std::string_view const backend = tessera::matmul_backend();
  std::printf("matmul of the row-sharded matrix by a replicated one on %.*s: %s\n",
              static_cast<int>(backend.size()), backend.data(),
              product == want_product ? "equals the host's product" : "DIFFERS from the host's product");

  bool ok = got == want && product == want_product;
  if (got != want) std::printf("FAILED: the host computes different column sums\n");
  if (argc > 1) {
    bool const want_blas = std::strcmp(argv[1], "blas") == 0;
    // OpenBLAS in particular: the name says the package linked it, not just some cblas.
    bool const is_openblas = backend.rfind("OpenBLAS", 0) == 0;
    if (want_blas != is_openblas) {
      std::printf("FAILED: expected the float product on %s, it ran on %.*s\n",
                  want_blas ? "OpenBLAS (TESSERA_HAS_CBLAS and libopenblas linked)" : "tessera's own kernel",
                  static_cast<int>(backend.size()), backend.data());
      ok = false;
    }
  }
  return ok ? 0 : 1;
}
