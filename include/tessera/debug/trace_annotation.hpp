#pragma once
// A span of the user's own code in a tessera::trace (jax.profiler.TraceAnnotation): wrap the
// local work of a shard_map body in one, and the trace shows it on the device's track beside the
// collectives, so an asynchronous collective's overlap with it can be seen (docs/async.md).

#include <string>
#include <utility>

#include "tessera/runtime/trace.hpp"

namespace tessera {

/// jax.profiler.TraceAnnotation(name): while it lives, a span named `name` (category "compute")
/// on the calling thread's track of every live tessera::trace. Costs one relaxed load untraced.
class trace_annotation {
 public:
  explicit trace_annotation(char const* name) : span_("compute", name) {}
  /// The same, with a text shown as the span's detail.
  trace_annotation(char const* name, std::string detail) : span_("compute", name) {
    if (span_.active()) span_.detail(std::move(detail));
  }
  trace_annotation(trace_annotation const&) = delete;
  trace_annotation& operator=(trace_annotation const&) = delete;

 private:
  detail::trace_span span_;
};

}  // namespace tessera
