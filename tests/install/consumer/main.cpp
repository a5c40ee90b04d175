// Smoke test for a project consuming tessera (installed, add_subdirectory or
// pkg-config). Returns nonzero on failure.
#include <tessera/tessera.hpp>

#include <xtensor/xtensor.hpp>

#include <algorithm>
#include <cstdio>

int main() {
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
  std::puts("tessera consumer: ok");
  return 0;
}
