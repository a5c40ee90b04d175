#pragma once
// jax.make_array_from_callback: each device's block comes from a user callback.

#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tessera/detail/xtensor/xtensor.hpp"

#include "tessera/array/placement.hpp"

namespace tessera {

/// jax.make_array_from_callback(shape, sharding, callback): callback(index) returns the block
/// at `index` (one slice per dimension) as any xtensor expression of that block's shape.
/// It is called once per device (empty blocks included), on that device's thread, one call at a time, so it need not be thread-safe.
template <std::size_t N, sharding S, class F>
auto make_array_from_callback(shape_t<N> const& shape, S const& s, F&& callback) {
  using R = std::decay_t<std::invoke_result_t<F&, std::array<slice, N> const&>>;
  static_assert(xt::is_xexpression<R>::value,
                "tessera::make_array_from_callback: the callback must return an xtensor expression (the block)");
  using T = std::remove_cv_t<typename R::value_type>;
  detail::checked_element_count<T>(shape, "make_array_from_callback");
  std::mutex serial;
  return detail::build_array<T, N, S, true>(s, shape, "make_array_from_callback",
                                            [&](std::size_t pos, std::array<slice, N> const& block, T* out) {
    std::lock_guard lock(serial);
    // Checked before anything is copied: a block of the wrong rank or size must not be read past its end.
    auto&& r = callback(block);
    auto const want = detail::block_shape(block);
    bool ok = r.dimension() == N;
    for (std::size_t i = 0; ok && i < N; ++i) ok = static_cast<std::size_t>(r.shape()[i]) == want[i];
    if (!ok)
      throw std::invalid_argument("tessera::make_array_from_callback: the callback returned shape " +
                                  detail::shape_string(r.shape()) + " for the block of device " +
                                  std::to_string(s.device_ids()[pos]) + ", which has shape " +
                                  detail::shape_string(want));
    if (detail::element_count(want) == 0) return;
    xt::xtensor<T, N> data = r;  // evaluates lazy expressions and views in row-major order
    std::copy(data.data(), data.data() + data.size(), out);
  });
}

/// The same with the shape as a braced list: make_array_from_callback({4, 8}, s, cb). Negative sizes throw.
template <std::integral I, std::size_t N, sharding S, class F>
auto make_array_from_callback(I const (&shape)[N], S const& s, F&& callback) {
  return make_array_from_callback(detail::checked_shape<I, N>(shape, "make_array_from_callback"), s,
                                  std::forward<F>(callback));
}

}  // namespace tessera
