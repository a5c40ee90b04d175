// The shard_map bodies of JAX's collective matmul (the shard_map tutorial's "Example 1" and
// "Example 2"), each in its plain form and in the form that overlaps the ppermute of the next
// block with the product of the one in hand (ppermute_async), over mesh axis "i". Shared by
// examples/collective_matmul.cpp and bench/mpi/collective_matmul_bench.cpp.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/parallel.hpp>

namespace examples {

/// [(j, (j + step) mod k) for j in range(k)]: every device sends to the one `step` further along "i".
inline std::vector<std::pair<int, int>> ring(int k, int step) {
  std::vector<std::pair<int, int>> perm;
  for (int j = 0; j < k; ++j) perm.emplace_back(j, ((j + step) % k + k) % k);
  return perm;
}

/// All-gather form, plain: lhs P('i', None), rhs P('i', None); rhs = all_gather(rhs_block,
/// 'i', tiled=True), then lhs_block @ rhs.
inline auto matmul_allgather = [](auto const& lhs_block, auto const& rhs_block) {
  auto const rhs = tessera::all_gather<"i">(rhs_block, 0, tessera::tiled);
  return xt::xtensor<float, 2>(tessera::matmul(lhs_block, rhs));
};

/// All-gather form, overlapped: rhs blocks go round the ring (i -> i + 1) while the device
/// multiplies the block it holds by the matching columns of its lhs block.
inline auto collective_matmul_allgather = [](auto const& lhs_block, auto const& rhs_block) {
  int const k = tessera::axis_size<"i">();
  int const idx = tessera::axis_index<"i">();
  auto const shift = ring(k, 1);
  std::size_t const b = lhs_block.shape()[1] / static_cast<std::size_t>(k);
  auto lhs_cols = [&](int j) {
    std::size_t const at = static_cast<std::size_t>(((j % k) + k) % k) * b;
    return xt::view(lhs_block, xt::all(), xt::range(at, at + b));
  };
  xt::xtensor<float, 2> rhs = rhs_block;
  xt::xtensor<float, 2> out;
  for (int i = 0; i < k; ++i) {
    if (i + 1 < k) {
      auto next = tessera::ppermute_async<"i">(rhs, shift);  // in flight while we multiply
      auto const part = tessera::matmul(lhs_cols(idx - i), rhs);
      if (i == 0) out = part;
      else out += part;
      rhs = next.wait();
    } else {
      out += tessera::matmul(lhs_cols(idx - i), rhs);
    }
  }
  return out;
};

/// Reduce-scatter form, plain: lhs P(None, 'i'), rhs P('i', None); psum_scatter(lhs_block @
/// rhs_block, 'i', scatter_dimension=0, tiled=True).
inline auto matmul_reduce_scatter = [](auto const& lhs_block, auto const& rhs_block) {
  return xt::xtensor<float, 2>(
      tessera::psum_scatter<"i">(tessera::matmul(lhs_block, rhs_block), 0, tessera::tiled));
};

/// Reduce-scatter form, overlapped: the partial sum goes round the ring (i -> i - 1) while the
/// device multiplies the next row block of its lhs block, which the partial sum then gets.
inline auto collective_matmul_reduce_scatter = [](auto const& lhs_block, auto const& rhs_block) {
  int const k = tessera::axis_size<"i">();
  int const idx = tessera::axis_index<"i">();
  auto const shift = ring(k, -1);
  std::size_t const b = lhs_block.shape()[0] / static_cast<std::size_t>(k);
  auto lhs_rows = [&](int j) {
    std::size_t const at = static_cast<std::size_t>(((j % k) + k) % k) * b;
    return xt::view(lhs_block, xt::range(at, at + b), xt::all());
  };
  xt::xtensor<float, 2> acc = tessera::matmul(lhs_rows(idx + 1), rhs_block);
  for (int i = 1; i < k; ++i) {
    auto moved = tessera::ppermute_async<"i">(acc, shift);  // in flight while we multiply
    auto const part = tessera::matmul(lhs_rows(idx + i + 1), rhs_block);
    acc = moved.wait() + part;
  }
  return acc;
};

}  // namespace examples
