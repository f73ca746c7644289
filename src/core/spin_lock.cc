// Copyright tollgate authors.
#include "src/core/spin_lock.h"

#include <sched.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tollgate::internal {
namespace {

// Spins before yielding: meant to outlast a shard's usual critical section.
constexpr int kSpins = 256;
// Then this many yields (each one lets a preempted holder run on this CPU).
constexpr int kYields = 64;
// Then sleeps of this long: a table being grown holds the lock for milliseconds.
constexpr long kSleepNs = 50'000;

void Pause() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

void SpinLock::LockSlow() {
  for (int round = 0;; ++round) {
    // Read before exchanging: waiters share the line instead of taking it from each other.
    if (!locked_.load(std::memory_order_relaxed) &&
        !locked_.exchange(true, std::memory_order_acquire)) {
      return;
    }
    if (round < kSpins) {
      Pause();
    } else if (round < kSpins + kYields) {
      sched_yield();
    } else {
      const timespec step{0, kSleepNs};
      nanosleep(&step, nullptr);
    }
  }
}

}  // namespace tollgate::internal
