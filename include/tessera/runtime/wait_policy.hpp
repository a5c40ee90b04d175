#pragma once
// How a thread waits for a flag: spin a little, then sleep on a futex.
// Spinning wins only while every thread has a core of its own; measured here,
// spinning with more threads than cores costs 100-1000x a futex wait, so the
// spin budget is chosen from the ratio of threads to cores.

#include <atomic>
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

/// Spin budget (pause iterations) for `threads` busy threads on this machine: zero when oversubscribed.
inline std::uint32_t spin_budget(unsigned threads) {
  unsigned const cores = std::thread::hardware_concurrency() == 0 ? 1 : std::thread::hardware_concurrency();
  return threads <= cores ? 20000u : 0u;  // ~50-100 us of pause on current x86
}

/// Waits until `flag` no longer holds `old`: spin for `budget` iterations, then futex-wait (std::atomic::wait).
inline std::uint32_t wait_for_change(std::atomic<std::uint32_t> const& flag, std::uint32_t old, std::uint32_t budget) {
  for (std::uint32_t i = 0; i < budget; ++i) {
    std::uint32_t const v = flag.load(std::memory_order_acquire);
    if (v != old) return v;
    cpu_relax();
  }
  for (;;) {
    flag.wait(old, std::memory_order_acquire);
    std::uint32_t const v = flag.load(std::memory_order_acquire);
    if (v != old) return v;
  }
}

}  // namespace tessera::detail
