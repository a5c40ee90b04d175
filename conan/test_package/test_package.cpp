// conan/test_package: the smallest real use of an installed tessera. It puts an 8x8
// matrix on 4 devices, sharded by rows over mesh axis "x", runs one collective (psum
// of each device's column sums inside shard_map: 8 floats, enough for the vectorised
// reduction) and prints the result, which must equal the column sums computed on the host.
#include <cstdio>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/tessera.hpp>

int main() {
  tessera::runtime rt{4};
  auto const mesh = tessera::make_mesh<"x">({4});

  xt::xtensor<float, 2> const a = xt::reshape_view(xt::arange<float>(64.0f), {8, 8});
  auto const rows = tessera::device_put(a, tessera::named_sharding(mesh, tessera::P<"x">{}));

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

  if (got != want) {
    std::printf("FAILED: the host computes a different result\n");
    return 1;
  }
  return 0;
}
