// JAX's collective matmul (the shard_map tutorial, "Example 1" and "Example 2") on a 1-D mesh of
// 8 devices: the all-gather form (lhs and rhs sharded by rows, the rhs blocks passed round a
// ring while each device multiplies the one it holds) and the reduce-scatter form (the
// contracting dimension sharded, the partial sums passed round instead), each with
// ppermute_async so that the next block's transfer overlaps the product of the one in hand, and
// each checked against its plain form (all_gather then matmul; matmul then psum_scatter) and
// against lhs @ rhs on the host. Integer-valued matrices: every order of summation gives the
// same bits, so the checks are exact.
#include <cstdio>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>

#include <tessera/parallel.hpp>

#include "collective_matmul.hpp"

using tessera::none;
using tessera::P;

namespace {
xt::xtensor<float, 2> test_matrix(std::size_t rows, std::size_t cols, std::size_t salt) {
  xt::xtensor<float, 2> m = xt::zeros<float>({rows, cols});
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) m(r, c) = static_cast<float>(static_cast<int>((r * 7 + c * 3 + salt) % 11) - 5);
  return m;
}
xt::xtensor<float, 2> host_matmul(xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  xt::xtensor<float, 2> c = xt::zeros<float>({a.shape()[0], b.shape()[1]});
  for (std::size_t i = 0; i < a.shape()[0]; ++i)
    for (std::size_t p = 0; p < a.shape()[1]; ++p)
      for (std::size_t j = 0; j < b.shape()[1]; ++j) c(i, j) += a(i, p) * b(p, j);
  return c;
}
bool equal(xt::xtensor<float, 2> const& a, xt::xtensor<float, 2> const& b) {
  return a.shape() == b.shape() && std::equal(a.begin(), a.end(), b.begin());
}
char const* yes(bool b) { return b ? "True" : "False"; }
}  // namespace

int main() {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"i">({8});
  auto const lhs_host = test_matrix(64, 32, 1);
  auto const rhs_host = test_matrix(32, 48, 4);
  auto const want = host_matmul(lhs_host, rhs_host);
  std::printf("lhs (64, 32) @ rhs (32, 48) on 8 devices, mesh axis 'i'\n");

  // Example 1: lhs P('i', None), rhs P('i', None), out P('i', None).
  auto const lhs = tessera::device_put(lhs_host, tessera::named_sharding(mesh, P<"i", none>{}));
  auto const rhs = tessera::device_put(rhs_host, tessera::named_sharding(mesh, P<"i", none>{}));
  auto const specs = tessera::in_specs(P<"i", none>{}, P<"i", none>{});
  auto const naive = tessera::to_host(
      tessera::shard_map(examples::matmul_allgather, mesh, specs, tessera::out_specs(P<"i", none>{}))(lhs, rhs));
  auto const overlapped = tessera::to_host(tessera::shard_map(examples::collective_matmul_allgather, mesh, specs,
                                                              tessera::out_specs(P<"i", none>{}))(lhs, rhs));
  std::printf("all-gather form:\n");
  std::printf("  all_gather, then matmul equals lhs @ rhs: %s\n", yes(equal(naive, want)));
  std::printf("  ppermute_async ring equals all_gather + matmul: %s\n", yes(equal(overlapped, naive)));

  // Example 2: lhs P(None, 'i'), rhs P('i', None), out P('i', None).
  auto const lhs2 = tessera::device_put(lhs_host, tessera::named_sharding(mesh, P<none, "i">{}));
  auto const specs2 = tessera::in_specs(P<none, "i">{}, P<"i", none>{});
  auto const naive2 = tessera::to_host(
      tessera::shard_map(examples::matmul_reduce_scatter, mesh, specs2, tessera::out_specs(P<"i", none>{}))(lhs2, rhs));
  auto const overlapped2 = tessera::to_host(tessera::shard_map(examples::collective_matmul_reduce_scatter, mesh, specs2,
                                                               tessera::out_specs(P<"i", none>{}))(lhs2, rhs));
  std::printf("reduce-scatter form:\n");
  std::printf("  matmul, then psum_scatter equals lhs @ rhs: %s\n", yes(equal(naive2, want)));
  std::printf("  ppermute_async ring equals matmul + psum_scatter: %s\n", yes(equal(overlapped2, naive2)));
  std::printf("out[:2, :6] =\n");
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t c = 0; c < 6; ++c) std::printf(" %6.0f", static_cast<double>(overlapped2(r, c)));
    std::printf("\n");
  }
  return equal(naive, want) && equal(overlapped, naive) && equal(naive2, want) && equal(overlapped2, naive2) ? 0 : 1;
}
