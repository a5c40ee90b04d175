// Distributed matrix multiplication with shard_map, two ways:
//  1. seed 003's manual block matmul: A's columns and B's rows (the contracting
//     dimension) are split over one mesh axis, each device multiplies its
//     blocks, and a psum over that axis adds the partial products; then the
//     same with seed 003's layouts P('x', 'y') and P('y', None).
//  2. a ring matmul with ppermute, the "Cannon-style" algorithm seed 004
//     announces: A split by rows and B by columns over 8 devices; each step
//     every device multiplies its rows of A by the column block of B it holds
//     and passes that block to its neighbour, so after 8 steps it has its rows
//     of C. (Seed 004's own body, a local matmul and a psum, would add up the
//     diagonal blocks of C instead.)
// Each is checked against a plain triple-loop A @ B on the host (xtensor-blas,
// whose xt::linalg::dot would do it, is not a dependency of tessera).
#include <cmath>
#include <cstdio>
#include <iostream>
#include <utility>
#include <vector>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include <tessera/parallel.hpp>

#include "numpy_print.hpp"

using tessera::none;
using tessera::P;

namespace {
// jnp.dot(a, b) for 2-D a and b: a plain triple loop, good for blocks and for the reference alike.
template <class A, class B>
xt::xtensor<float, 2> dot(A const& a, B const& b) {
  std::size_t const m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  xt::xtensor<float, 2> c = xt::zeros<float>({m, n});
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < n; ++j) c(i, j) += a(i, p) * b(p, j);
  return c;
}

// Small integers, so that every sum is exact in float32 and any order of summation gives the same bits.
xt::xtensor<float, 2> test_matrix(std::size_t rows, std::size_t cols, int salt) {
  xt::xtensor<float, 2> m = xt::zeros<float>({rows, cols});
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) m(r, c) = static_cast<float>(static_cast<int>((r * 7 + c * 3 + static_cast<std::size_t>(salt)) % 11) - 5);
  return m;
}

bool report(char const* what, xt::xtensor<float, 2> const& got, xt::xtensor<float, 2> const& expected) {
  float const diff = xt::amax(xt::abs(got - expected))();
  std::printf("%s: Maximum difference: %.1f\n", what, static_cast<double>(diff));
  bool const ok = got == expected;
  std::printf("%s matches unsharded: %s\n", what, ok ? "true" : "false");
  return ok;
}
}  // namespace

int main() {
  tessera::runtime rt{8};
  bool ok = true;

  // --- 1. Block matmul, psum over the contracting axis (seed 003) -------------
  auto const a = test_matrix(8, 8, 0);
  auto const b = test_matrix(8, 8, 4);
  auto const expected = dot(a, b);

  // mesh = jax.make_mesh((2, 2, 2), ('i', 'j', 'k'))
  // @partial(shard_map, mesh=mesh, in_specs=(P('i', 'j'), P('j', 'k')), out_specs=P('i', 'k'))
  // def manual_matmul(a_block, b_block):
  //     c_partial = jnp.dot(a_block, b_block)
  //     c_block = jax.lax.psum(c_partial, 'j')
  //     return c_block
  // After the psum the block no longer varies over 'j', which is what out_specs promises by leaving 'j' out.
  auto const mesh_ijk = tessera::make_mesh<"i", "j", "k">({2, 2, 2});
  auto manual_matmul = tessera::shard_map(
      [](auto a_block, auto b_block) {
        auto c_partial = dot(a_block, b_block);
        return tessera::psum<"j">(std::move(c_partial));
      },
      mesh_ijk, tessera::in_specs(P<"i", "j">{}, P<"j", "k">{}), tessera::out_specs(P<"i", "k">{}));
  auto const c = manual_matmul(a, b);
  std::cout << "manual_matmul(a, b): " << tessera::typeof(c) << "\n";
  examples::print(tessera::to_host(c));
  tessera::visualize_array_sharding(c);  // each block of C is held twice, by the two devices along 'j'
  ok &= report("manual_matmul", tessera::to_host(c), expected);

  // Seed 003's other layout: a as P('x', 'y') and b as P('y', None) on a (4, 2) mesh; the
  // contracting dimension is split over 'y', so the psum is over 'y' and the result is P('x', None).
  auto const mesh_xy = tessera::make_mesh<"x", "y">({4, 2});
  auto matmul_2d = tessera::shard_map(
      [](auto a_block, auto b_block) { return tessera::psum<"y">(dot(a_block, b_block)); }, mesh_xy,
      tessera::in_specs(P<"x", "y">{}, P<"y", none>{}), tessera::out_specs(P<"x", none>{}));
  auto const c_2d = matmul_2d(a, b);
  std::cout << "matmul_2d(a, b): " << tessera::typeof(c_2d) << "\n";
  ok &= report("matmul_2d", tessera::to_host(c_2d), expected);

  // --- 2. Ring matmul with ppermute ----------------------------------------
  // A (32, 48) by rows and B (48, 32) by columns over 8 devices: each holds 4 rows of A and 4 columns of B.
  auto const big_a = test_matrix(32, 48, 1);
  auto const big_b = test_matrix(48, 32, 2);
  auto const mesh = tessera::make_mesh<"x">({8});

  // def ring_matmul(a_rows, b_cols):
  //     n, me = jax.lax.axis_size('x'), jax.lax.axis_index('x')
  //     perm = [(j, (j - 1) % n) for j in range(n)]   # send to the left, receive from the right
  //     for step in range(n):
  //         col = (me + step) % n
  //         c = c.at[:, col * w:(col + 1) * w].set(a_rows @ b_cols)
  //         b_cols = jax.lax.ppermute(b_cols, 'x', perm)
  //     return c
  auto ring_matmul = tessera::shard_map(
      [](auto a_rows, auto b_cols) {
        int const n = tessera::axis_size<"x">();
        int const me = tessera::axis_index<"x">();
        std::vector<std::pair<int, int>> perm;
        for (int j = 0; j < n; ++j) perm.emplace_back(j, (j + n - 1) % n);
        std::size_t const w = b_cols.shape()[1];
        // The accumulator and the travelling block are ours to overwrite; the blocks we were given are not.
        xt::xtensor<float, 2> c = xt::zeros<float>({a_rows.shape()[0], w * static_cast<std::size_t>(n)});
        xt::xtensor<float, 2> b_held = b_cols;
        for (int step = 0; step < n; ++step) {
          auto const col = static_cast<std::size_t>((me + step) % n);
          xt::view(c, xt::all(), xt::range(col * w, (col + 1) * w)) = dot(a_rows, b_held);
          if (step + 1 < n) b_held = tessera::ppermute<"x">(b_held, perm);
        }
        return c;
      },
      mesh, tessera::in_specs(P<"x", none>{}, P<none, "x">{}), tessera::out_specs(P<"x", none>{}));
  auto const c_ring = ring_matmul(big_a, big_b);
  std::cout << "ring_matmul(a, b): " << tessera::typeof(c_ring) << "\n";
  ok &= report("ring_matmul", tessera::to_host(c_ring), dot(big_a, big_b));

  return ok ? 0 : 1;
}
