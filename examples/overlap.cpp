// Seed 003's "Overlapping Computation and Communication": a shard_map body starts an all-gather
// (jax.lax.all_gather_async in the seed), computes locally while it is in flight, then waits
// for it and combines the two. expensive_local_op and combine are the seed's placeholders; here
// a row-wise softmax of the block and its product with the gathered matrix's transpose. The
// result is checked against the same body with the blocking all_gather, and a tessera::trace of
// the run shows, on every device, the all-gather's span (start to wait) around the local work's.
#include <cstdio>

#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <tessera/parallel.hpp>

#include "numpy_print.hpp"

using tessera::none;
using tessera::P;

namespace {
// expensive_local_op(x): a row-wise softmax of the device's block.
template <class X>
xt::xtensor<float, 2> expensive_local_op(X const& x) {
  tessera::trace_annotation span("expensive_local_op");  // shows in the trace
  // Each reduction evaluated on its own: xtensor's lazy keep_dims reducers inside a broadcast
  // read out of bounds here.
  xt::xtensor<float, 2> const row_max = xt::amax(x, {1}, xt::keep_dims);
  xt::xtensor<float, 2> const e = xt::exp(x - row_max);
  xt::xtensor<float, 2> const row_sum = xt::sum(e, {1}, xt::keep_dims);
  return e / row_sum;
}
// combine(local_result, gathered): the local rows against every device's rows.
template <class G>
xt::xtensor<float, 2> combine(xt::xtensor<float, 2> const& local_result, G const& gathered) {
  return tessera::matmul(local_result, tessera::transpose(gathered));
}
}  // namespace

int main() {
  tessera::runtime rt{8};
  auto const mesh = tessera::make_mesh<"x">({8});
  xt::xtensor<float, 2> const host = xt::reshape_view(xt::arange<float>(64.0f) / 16.0f, {16, 4});
  auto const x = tessera::device_put(host, tessera::named_sharding(mesh, P<"x", none>{}));

  // @partial(shard_map, mesh=mesh, in_specs=P('x', None), out_specs=P('x', None))
  auto optimized_fn = tessera::shard_map(
      [](auto x) {
        // Start async communication
        auto future = tessera::all_gather_async<"x">(x, 0, tessera::tiled);
        // Do local computation while communicating
        auto const local_result = expensive_local_op(x);
        // Wait for communication
        auto const gathered = future.wait();
        return combine(local_result, gathered);
      },
      mesh, tessera::in_specs(P<"x", none>{}), tessera::out_specs(P<"x", none>{}));
  // The same body with the blocking all_gather, for the check.
  auto blocking_fn = tessera::shard_map(
      [](auto x) {
        auto const gathered = tessera::all_gather<"x">(x, 0, tessera::tiled);
        return combine(expensive_local_op(x), gathered);
      },
      mesh, tessera::in_specs(P<"x", none>{}), tessera::out_specs(P<"x", none>{}));

  tessera::trace trace;
  auto const out = tessera::to_host(optimized_fn(x));
  trace.stop();
  auto const want = tessera::to_host(blocking_fn(x));
  std::printf("optimized_fn(x), shape (16, 16), first two rows rounded:\n");
  examples::print(xt::xtensor<float, 2>(xt::round(xt::view(out, xt::range(0, 2), xt::all()) * 100.0f) / 100.0f));
  std::printf("matches the blocking all_gather: %s\n", out == want ? "True" : "False");

  // On each device: the all-gather's span holds the local work's span.
  int overlapping = 0;
  auto const events = trace.events();
  for (auto const& c : events)
    for (auto const& w : events)
      if (c.category == "collective" && c.name == "all-gather" && w.name == "expensive_local_op" &&
          c.device == w.device && c.start_ns <= w.start_ns &&
          w.start_ns + w.duration_ns <= c.start_ns + c.duration_ns)
        ++overlapping;
  std::printf("devices whose all-gather was in flight during expensive_local_op: %d of 8\n", overlapping);
  return out == want && overlapping == 8 ? 0 : 1;
}
