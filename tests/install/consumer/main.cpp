// Smoke test for a project consuming tessera (installed, add_subdirectory, pkg-config or
// the vcpkg port). Returns nonzero on failure.
//
// usage: tessera_consumer [blas|kernel]
//   With an argument it also checks which kernel the float matrix product ran on: `blas`
//   (OpenBLAS: the package defines TESSERA_HAS_CBLAS and links it) or `kernel` (tessera's).
#include <tessera/tessera.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

int main(int argc, char** argv) {
  tessera::runtime rt{2};
  auto mesh = tessera::make_mesh<"x">({2});
  const xt::xtensor<float, 1> input{1, 2, 3, 4};
  auto a = tessera::device_put(xt::xtensor<float, 1>{1, 2, 3, 4},
                               tessera::named_sharding(mesh, tessera::P<"x">{}));
  const auto back = tessera::to_host(a);
  if (back.size() != input.size() ||
      !std::equal(input.begin(), input.end(), back.begin())) {
    std::puts("tessera consumer: round trip FAILED");
    return 1;
  }

  // A float product, so that a TESSERA_HAS_CBLAS build really calls (and links) cblas_sgemm.
  const xt::xtensor<float, 2> m{{1, 2}, {3, 4}};
  const xt::xtensor<float, 2> want{{7, 10}, {15, 22}};
  auto rows = tessera::device_put(m, tessera::named_sharding(mesh, tessera::P<"x">{}));
  auto all = tessera::device_put(m, tessera::named_sharding(mesh, tessera::P<>{}));
  const xt::xtensor<float, 2> product = tessera::to_host(tessera::eval(tessera::matmul(rows, all)));
  const std::string_view backend = tessera::matmul_backend();
  if (product != want) {
    std::printf("tessera consumer: matmul on %s FAILED\n", backend.data());
    return 1;
  }
  if (argc > 1) {
    const bool want_blas = std::strcmp(argv[1], "blas") == 0;
    // (or tessera's kernel because OpenBLAS runs its generic kernel on this CPU, in a build for AVX2)
    const bool on_blas = backend.rfind("OpenBLAS", 0) == 0 || backend.find("OpenBLAS chose") != std::string_view::npos;
    if (want_blas != on_blas) {
      std::printf("tessera consumer: expected the float product on %s, it ran on %s\n",
                  want_blas ? "OpenBLAS" : "tessera's own kernel", backend.data());
      return 1;
    }
  }
  std::printf("tessera consumer: ok (matmul on %s)\n", backend.data());
  return 0;
}
