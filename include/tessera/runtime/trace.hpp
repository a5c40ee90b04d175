#pragma once
// What every device did, and when (jax.profiler.trace): while a tessera::trace
// lives, the library records a span for each dispatch, each device's task, each
// fused evaluation pass, each collective (with the time it spent waiting for the
// other devices) and each device_put/to_host copy, on a track per device. The
// trace writes Chrome/Perfetto trace-event JSON (chrome://tracing, ui.perfetto.dev);
// debug/trace_svg.hpp draws it as a timeline. With no trace alive a span costs
// one relaxed atomic load; TESSERA_NO_TRACE removes even that.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/detail/linkage.hpp"

namespace tessera {

class trace;

/// One span of a trace: Chrome's "complete" event.
struct trace_event {
  /// What ran: "task", "fused pass", "all-reduce", "device_put", ...
  std::string name;
  /// Its category: "dispatch", "evaluate", "collective" or "transfer".
  std::string category;
  /// The runtime it ran on (its number, as in its name), or -1 for a host thread.
  int process = -1;
  /// The device it ran on, or -1 for a host thread.
  int device = -1;
  /// Start and duration in nanoseconds since the trace began.
  std::int64_t start_ns = 0;
  std::int64_t duration_ns = 0;
  /// Nanoseconds of the span spent waiting for other devices (collectives).
  std::int64_t wait_ns = 0;
  /// Bytes moved or produced per device (0 when it does not apply).
  std::uint64_t bytes = 0;
  /// More about it: the collective's axes and shape, in the library's words.
  std::string detail;
};

namespace detail {

struct trace_registry {
  std::mutex lock;
  std::vector<tessera::trace*> active;
  std::atomic<int> count{0};
};
// Constant-initialised, as collective_counter.hpp's registry: tracing() is one load.
inline constinit trace_registry trace_registry_instance{};
inline trace_registry& traces() { return trace_registry_instance; }

/// Whether any trace is alive (a relaxed check, so that untraced runs pay nothing more).
inline bool tracing() {
#ifdef TESSERA_NO_TRACE
  return false;
#else
  return traces().count.load(std::memory_order_relaxed) != 0;
#endif
}

inline std::int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The track of the calling thread: set by each device thread when it starts.
struct trace_track {
  int process = -1;
  int device = -1;
  std::int64_t wait_ns = 0;  // time spent in collective barriers so far (while tracing)
};
inline thread_local trace_track this_trace_track{};

TESSERA_LINKAGE void record_trace_event(trace_event e, std::int64_t start_clock_ns);

/// Adds the time it lives to the calling thread's barrier wait (team's entry and exit waits).
class trace_wait {
 public:
  trace_wait() : start_(tracing() ? trace_clock_ns() : 0) {}
  ~trace_wait() {
    if (start_ != 0) this_trace_track.wait_ns += trace_clock_ns() - start_;
  }
  trace_wait(trace_wait const&) = delete;
  trace_wait& operator=(trace_wait const&) = delete;

 private:
  std::int64_t start_;
};

/// A span on the calling thread's track, recorded when it ends if a trace was alive when it began.
class trace_span {
 public:
  trace_span(char const* category, char const* name, std::uint64_t bytes = 0) {
    if (!tracing()) return;
    active_ = true;
    category_ = category;
    name_ = name;
    bytes_ = bytes;
    wait_before_ = this_trace_track.wait_ns;
    start_ = trace_clock_ns();
  }
  ~trace_span() {
    if (!active_) return;
    std::int64_t const end = trace_clock_ns();
    trace_event e;
    e.name = name_;
    e.category = category_;
    e.process = this_trace_track.process;
    e.device = this_trace_track.device;
    e.duration_ns = end - start_;
    e.wait_ns = this_trace_track.wait_ns - wait_before_;
    e.bytes = bytes_;
    e.detail = std::move(detail_);
    record_trace_event(std::move(e), start_);
  }
  trace_span(trace_span const&) = delete;
  trace_span& operator=(trace_span const&) = delete;

  /// Whether the span records (a trace was alive when it began).
  bool active() const { return active_; }
  /// Sets the bytes once they are known.
  void bytes(std::uint64_t b) { bytes_ = b; }
  /// Sets the detail text (call only when active(), to keep untraced runs free).
  void detail(std::string d) { detail_ = std::move(d); }

 private:
  bool active_ = false;
  char const* category_ = "";
  char const* name_ = "";
  std::uint64_t bytes_ = 0;
  std::int64_t wait_before_ = 0;
  std::int64_t start_ = 0;
  std::string detail_;
};

/// What the device spans of the next build_array on this thread are (a reshard's or a partial
/// sum's collective), when not the default.
struct trace_label {
  char const* category = nullptr;
  std::string name;
  std::string detail;
};
inline thread_local trace_label this_trace_label{};

/// Labels, while it lives, the device spans of the arrays this thread builds.
class trace_as {
 public:
  trace_as(char const* category, std::string name, std::string detail = {}) {
    if (!tracing()) return;
    saved_ = std::exchange(this_trace_label, trace_label{category, std::move(name), std::move(detail)});
    active_ = true;
  }
  ~trace_as() {
    if (active_) this_trace_label = std::move(saved_);
  }
  trace_as(trace_as const&) = delete;
  trace_as& operator=(trace_as const&) = delete;

 private:
  bool active_ = false;
  trace_label saved_;
};

inline void json_escape(std::ostream& os, std::string const& s) {
  for (char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (static_cast<unsigned char>(c) < 0x20) os << ' ';
    else os << c;
  }
}

}  // namespace detail

/// jax.profiler.trace: records what every device does while it lives, from every thread.
/// Traces may nest; each sees every span that began while it was alive. Constructed with a
/// path, it writes the Chrome trace-event JSON there when it ends.
class trace {
 public:
  trace() : origin_(detail::trace_clock_ns()) {
    auto& r = detail::traces();
    std::lock_guard g(r.lock);
    r.active.push_back(this);
    r.count.fetch_add(1);
  }
  /// Records until destroyed, then writes the JSON to `path` (errors are swallowed there: a
  /// destructor must not throw; call write_json yourself to see them).
  explicit trace(std::string path) : trace() { path_ = std::move(path); }
  ~trace() {
    stop();
    if (!path_.empty()) {
      try {
        write_json(path_);
      } catch (...) {
      }
    }
  }
  trace(trace const&) = delete;
  trace& operator=(trace const&) = delete;

  /// Stops recording (spans that end later are not kept); the events stay readable.
  void stop() {
    auto& r = detail::traces();
    std::lock_guard g(r.lock);
    auto it = std::find(r.active.begin(), r.active.end(), this);
    if (it == r.active.end()) return;
    r.active.erase(it);
    r.count.fetch_sub(1);
  }

  /// The spans recorded so far, in the order they ended.
  std::vector<trace_event> events() const {
    std::lock_guard g(detail::traces().lock);
    return events_;
  }

  /// Chrome/Perfetto trace-event JSON: a process per runtime ("runtime N", pid N + 1) and one
  /// for the host threads (pid 0), a thread per device (tid = device id); times in microseconds.
  void write_json(std::ostream& os) const {
    std::vector<trace_event> const ev = events();
    std::vector<std::pair<int, int>> tracks;
    for (auto const& e : ev)
      if (std::find(tracks.begin(), tracks.end(), std::pair{e.process, e.device}) == tracks.end())
        tracks.emplace_back(e.process, e.device);
    std::sort(tracks.begin(), tracks.end());
    os << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
    bool first = true;
    auto sep = [&] {
      if (!first) os << ",\n";
      first = false;
    };
    for (auto const& [p, d] : tracks) {
      sep();
      os << R"({"ph":"M","name":"process_name","pid":)" << pid(p) << R"(,"tid":)" << tid(d) << R"(,"args":{"name":")"
         << (p < 0 ? std::string("host") : "runtime " + std::to_string(p)) << "\"}}";
      sep();
      os << R"({"ph":"M","name":"thread_name","pid":)" << pid(p) << R"(,"tid":)" << tid(d) << R"(,"args":{"name":")"
         << (d < 0 ? std::string("host thread") : "device " + std::to_string(d)) << "\"}}";
    }
    os.setf(std::ios::fixed);
    os.precision(3);
    for (auto const& e : ev) {
      sep();
      os << "{\"ph\":\"X\",\"name\":\"";
      detail::json_escape(os, e.name);
      os << "\",\"cat\":\"";
      detail::json_escape(os, e.category);
      os << "\",\"pid\":" << pid(e.process) << ",\"tid\":" << tid(e.device)
         << ",\"ts\":" << static_cast<double>(e.start_ns) / 1e3 << ",\"dur\":" << static_cast<double>(e.duration_ns) / 1e3
         << ",\"args\":{\"bytes\":" << e.bytes << ",\"wait_us\":" << static_cast<double>(e.wait_ns) / 1e3
         << ",\"detail\":\"";
      detail::json_escape(os, e.detail);
      os << "\"}}";
    }
    os << "]}\n";
  }
  /// write_json(os) into a file; throws std::runtime_error naming the path if it cannot be written.
  void write_json(std::string const& path) const {
    std::ofstream f(path);
    if (!f) throw std::runtime_error("tessera::trace: cannot open '" + path + "' for writing");
    write_json(f);
    if (!f) throw std::runtime_error("tessera::trace: writing '" + path + "' failed");
  }
  /// The JSON as a string.
  std::string json() const {
    std::ostringstream os;
    write_json(os);
    return os.str();
  }

 private:
  friend void detail::record_trace_event(trace_event e, std::int64_t start_clock_ns);
  // Host threads get tids past any device's, so the two never share a track.
  static int tid(int device) { return device < 0 ? 1000000 : device; }
  // Runtime n is process n + 1; the host threads are process 0.
  static int pid(int process) { return process + 1; }

  std::int64_t origin_;
  std::string path_;
  std::vector<trace_event> events_;
};

// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS
TESSERA_LINKAGE void detail::record_trace_event(trace_event e, std::int64_t start_clock_ns) {
  auto& r = traces();
  std::lock_guard g(r.lock);
  for (auto* t : r.active) {
    // A span that began before this trace did is not this trace's.
    if (start_clock_ns < t->origin_) continue;
    trace_event copy = e;
    copy.start_ns = start_clock_ns - t->origin_;
    t->events_.push_back(std::move(copy));
  }
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
