#pragma once
// How a thread waits for a flag: spin a little, then sleep on a futex.
// Spinning wins only while every thread has a core of its own; measured here,
// spinning with more threads than cores costs 100-1000x a futex wait, so the
// spin budget is chosen from the ratio of threads to cores.

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace tessera::detail {

inline void cpu_relax() {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // The builtin behind _mm_pause: <immintrin.h> took 0.24 s of every file's parsing (issue 14).
  __builtin_ia32_pause();
#elif defined(__x86_64__) || defined(__i386__)
  std::atomic_signal_fence(std::memory_order_seq_cst);
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Spin budget in nanoseconds for `threads` busy threads on this machine: zero when
/// oversubscribed, else long enough to cover a back-to-back dispatch but short
/// enough that a parked device costs nothing measurable.
inline std::uint32_t spin_budget(unsigned threads) {
  // Read once: glibc answers hardware_concurrency() by reading /sys, and every shard_map asks.
  static unsigned const cores = std::thread::hardware_concurrency() == 0 ? 1 : std::thread::hardware_concurrency();
  return threads <= cores ? 50'000u : 0u;
}

/// A 32-bit counter that threads wait on for a change. On Linux it parks on a raw
/// futex and the waker skips the system call when nobody sleeps (libstdc++'s
/// std::atomic::wait goes through a shared waiter table and yields a dozen
/// times before sleeping, which costs a lot with more threads than cores).
class wait_word {
 public:
  std::uint32_t load() const { return value_.load(std::memory_order_acquire); }

  /// Increments the counter and wakes every thread waiting on it.
  void bump() {
    value_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) wake_all();
  }

  /// Replaces the value v with next(v) atomically and wakes every thread waiting on it; returns v.
  template <class F>
  std::uint32_t update(F next) {
    std::uint32_t v = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(v, next(v), std::memory_order_seq_cst, std::memory_order_relaxed)) {
    }
    if (sleepers_.load(std::memory_order_seq_cst) != 0) wake_all();
    return v;
  }

  /// Waits until the counter no longer holds `old`: spin for up to `budget_ns`
  /// (yielding now and then), then sleep. Returns the new value.
  std::uint32_t wait_for_change(std::uint32_t old, std::uint32_t budget_ns) {
    if (budget_ns != 0) {
      auto const deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(budget_ns);
      for (std::uint32_t i = 1;; ++i) {
        std::uint32_t const v = load();
        if (v != old) return v;
        cpu_relax();
        if ((i & 7u) == 0) {
          if (std::chrono::steady_clock::now() > deadline) break;  // the clock read is ~25 ns
          // Give the core away now and then: a thread we wait for may be runnable but
          // without a core (the dispatcher of an N-device pool on N cores).
          std::this_thread::yield();
        }
      }
    }
    // A few yields before sleeping: with more threads than cores the change often
    // comes within a time slice or two, and a yield is far cheaper than a futex round trip.
    for (int i = 0; i < 16; ++i) {
      std::this_thread::yield();
      std::uint32_t const v = load();
      if (v != old) return v;
    }
    for (;;) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      std::uint32_t v = value_.load(std::memory_order_seq_cst);
      if (v == old) sleep(old);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      v = load();
      if (v != old) return v;
    }
  }

 private:
  void sleep(std::uint32_t old) {
#if defined(__linux__)
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&value_), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
#else
    value_.wait(old, std::memory_order_acquire);
#endif
  }
  void wake_all() {
#if defined(__linux__)
    ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&value_), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
#else
    value_.notify_all();
#endif
  }

  std::atomic<std::uint32_t> value_{0};
  std::atomic<std::uint32_t> sleepers_{0};
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "futex needs a plain 32-bit word");
};

}  // namespace tessera::detail
