#pragma once
// Counting the collectives that run (PyTorch's CommDebugMode): while a
// collective_counter is alive, every collective the library runs, from any
// thread, is recorded in it, once per operation (not once per device), with
// the same kind, axes and bytes that explain() derives from the types. A test
// can then assert that an expression ran exactly the plan it promised.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string_view>
#include <vector>

#include "tessera/core/communication_plan.hpp"
#include "tessera/detail/linkage.hpp"

namespace tessera {

class collective_counter;

namespace detail {

struct counter_registry {
  std::mutex lock;
  std::vector<collective_counter*> active;
  std::atomic<int> count{0};
};
// A variable constant-initialised (not a function's static): a check of it, inlined wherever a
// collective may run, is one load, with no guard of a first initialisation to compile there.
inline constinit counter_registry counter_registry_instance{};
inline counter_registry& counters() { return counter_registry_instance; }

/// Whether any counter is alive (a relaxed check that keeps uncounted runs free).
inline bool counting() { return counters().count.load(std::memory_order_relaxed) != 0; }

TESSERA_LINKAGE void record_collective(collective_event const& e);

/// Records every event of a plan.
TESSERA_LINKAGE void record_collectives(std::vector<collective_event> const& events);

}  // namespace detail

/// torch's CommDebugMode: the collectives run while this object lives, in the order they ran.
/// Counters may nest; each sees every event.
class collective_counter {
 public:
  collective_counter() {
    auto& r = detail::counters();
    std::lock_guard g(r.lock);
    r.active.push_back(this);
    r.count.fetch_add(1);
  }
  ~collective_counter() {
    auto& r = detail::counters();
    std::lock_guard g(r.lock);
    r.active.erase(std::find(r.active.begin(), r.active.end(), this));
    r.count.fetch_sub(1);
  }
  collective_counter(collective_counter const&) = delete;
  collective_counter& operator=(collective_counter const&) = delete;

  /// The collectives recorded so far.
  std::vector<collective_event> events() const {
    std::lock_guard g(detail::counters().lock);
    return events_;
  }
  /// How many collectives ran (of one kind, e.g. "all-gather", when given).
  std::size_t count(std::string_view kind = {}) const {
    std::lock_guard g(detail::counters().lock);
    return static_cast<std::size_t>(std::count_if(events_.begin(), events_.end(), [&](collective_event const& e) {
      return kind.empty() || e.kind == kind;
    }));
  }
  /// Forgets what was recorded.
  void reset() {
    std::lock_guard g(detail::counters().lock);
    events_.clear();
  }

 private:
  friend void detail::record_collective(collective_event const& e);
  std::vector<collective_event> events_;
};


// The non-template functions, compiled where TESSERA_DEFINITIONS says (detail/linkage.hpp).
#if TESSERA_DEFINITIONS

TESSERA_LINKAGE void detail::record_collective(collective_event const& e) {
  if (!counting()) return;
  auto& r = counters();
  std::lock_guard g(r.lock);
  for (auto* c : r.active) c->events_.push_back(e);
}

TESSERA_LINKAGE void detail::record_collectives(std::vector<collective_event> const& events) {
  if (!counting()) return;
  for (auto const& e : events) record_collective(e);
}
#endif  // TESSERA_DEFINITIONS

}  // namespace tessera
