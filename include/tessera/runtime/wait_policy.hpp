#pragma once
// How a thread waits for a flag: spin a little, then sleep on a futex.
// Spinning wins only while every thread has a core of its own; measured here,
// spinning with more threads than cores costs 100-1000x a futex wait, so the
// spin budget is chosen from the ratio of threads to cores.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tessera::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spin budget in nanoseconds for `threads` busy threads on this machine: zero when
/// oversubscribed, else long enough to cover a back-to-back dispatch but short
/// enough that a parked device costs nothing measurable.
inline std::uint32_t spin_budget(unsigned threads) {
  unsigned const cores = std::thread::hardware_concurrency() == 0 ? 1 : std::thread::hardware_concurrency();
  return threads <= cores ? 50'000u : 0u;
}

/// Waits until `flag` no longer holds `old`: spin for up to `budget_ns`, then futex-wait (std::atomic::wait).
inline std::uint32_t wait_for_change(std::atomic<std::uint32_t> const& flag, std::uint32_t old, std::uint32_t budget_ns) {
  if (budget_ns != 0) {
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
    for (std::uint32_t i = 1;; ++i) {
      std::uint32_t const v = flag.load(std::memory_order_acquire);
      if (v != old) return v;
      cpu_relax();
      if ((i & 63u) == 0 && std::chrono::steady_clock::now() > deadline) break;  // the clock read is ~20 ns
    }
  }
  for (;;) {
    flag.wait(old, std::memory_order_acquire);
    std::uint32_t const v = flag.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace tessera::detail
