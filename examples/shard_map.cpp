// The seeds' "manual parallelism" section with tessera::shard_map on 8 devices:
// a per-block function, the device-local shape, per-block sums, and a psum.
#include <cstdio>
#include <string>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>

#include <tessera/parallel.hpp>

namespace {
// numpy's layout for a 1-D integer array: every entry right-aligned to the widest.
template <class A>
void print_ints(A const& a) {
  std::size_t width = 0;
  for (auto v : a) width = std::max(width, std::to_string(v).size());
  std::printf("[");
  for (std::size_t i = 0; i < a.size(); ++i) std::printf(i ? " %*d" : "%*d", static_cast<int>(width), static_cast<int>(a(i)));
  std::printf("]\n");
}
}  // namespace

int main() {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"X">({8});

  // jax.shard_map(f_elementwise, mesh=mesh, in_specs=P("X"), out_specs=P("X"))
  auto f_elementwise = [](auto x) { return 2.0f * xt::sin(x) + 1.0f; };
  auto f_elementwise_sharded = tessera::shard_map(f_elementwise, mesh, tessera::in_specs(tessera::P<"X">{}),
                                                  tessera::out_specs(tessera::P<"X">{}));
  auto const af_sharded = f_elementwise_sharded(xt::arange<float>(32.0f));
  auto const host = tessera::to_host(af_sharded);
  for (std::size_t i = 0; i < host.size(); ++i) std::printf("%s%.7g", i % 6 == 0 ? (i ? "\n " : "[") : " ", host(i));
  std::printf("]\n");

  // The body sees only its block.
  auto const x = xt::arange<int>(32);
  std::printf("Global shape: x.shape=(%zu,)\n", x.size());
  auto f = [](auto blk) {
    if (tessera::axis_index<"X">() == 0) std::printf("Device-local shape: x.shape=(%zu,)\n", blk.shape()[0]);
    return xt::xtensor<int, 1>(blk * 2);
  };
  (void)tessera::shard_map(f, mesh, tessera::in_specs(tessera::P<"X">{}), tessera::out_specs(tessera::P<"X">{}))(x);

  // Per-block sums (jnp.sum(x, keepdims=True)), one per device.
  auto block_sum = [](auto blk) { return xt::xtensor<int, 1>{xt::sum(blk)()}; };
  print_ints(tessera::to_host(tessera::shard_map(block_sum, mesh, tessera::in_specs(tessera::P<"X">{}),
                                                 tessera::out_specs(tessera::P<"X">{}))(x)));

  // An all-reduce over "X": the total on every device, out_specs=P().
  auto total = [](auto blk) { return tessera::psum<"X">(xt::sum(blk)()); };
  auto const result =
      tessera::shard_map(total, mesh, tessera::in_specs(tessera::P<"X">{}), tessera::out_specs(tessera::P<>{}))(x);
  std::printf("%d\n", tessera::to_host(result)());
}
