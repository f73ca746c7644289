// Copyright tollgate authors. The lock of one memory-store shard.
//
// A shard's critical section is a hash lookup and an algorithm step, so the lock's own cost
// is a large share of an in-memory decision (docs/memory.md, "Layout", for what
// absl::Mutex and std::mutex cost there). This lock is one atomic exchange to take and one
// plain store to release, inline.
//
// The price: a waiter does not sleep on a wake-up. It spins briefly (longer than a usual
// critical section), then yields its CPU, then sleeps in short steps, so a holder that was
// preempted, or that is growing a large table, costs its waiters little CPU, but a waiter
// may notice the release up to one step (kSleepNs in spin_lock.cc) late. Not fair: under
// contention a thread can take the lock several times in a row. Use it only around short
// sections that never block.
#ifndef TOLLGATE_SRC_CORE_SPIN_LOCK_H_
#define TOLLGATE_SRC_CORE_SPIN_LOCK_H_

#include <atomic>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"

namespace tollgate::internal {

// Thread-safe. Not recursive: a thread that takes it twice waits forever.
class ABSL_LOCKABLE SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  ABSL_ATTRIBUTE_ALWAYS_INLINE void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    if (ABSL_PREDICT_FALSE(locked_.exchange(true, std::memory_order_acquire))) LockSlow();
  }
  // Takes the lock if it is free. Returns whether it did.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  // REQUIRES: the calling thread holds the lock.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Unlock() ABSL_UNLOCK_FUNCTION() {
    locked_.store(false, std::memory_order_release);
  }

 private:
  // Waits for the lock: spins, then yields, then sleeps in short steps.
  ABSL_ATTRIBUTE_NOINLINE void LockSlow();

  std::atomic<bool> locked_{false};
};

// Holds a SpinLock for its scope.
class ABSL_SCOPED_LOCKABLE SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock& lock) ABSL_EXCLUSIVE_LOCK_FUNCTION(lock) : lock_(lock) {
    lock_.Lock();
  }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;
  ~SpinLockHolder() ABSL_UNLOCK_FUNCTION() { lock_.Unlock(); }

 private:
  SpinLock& lock_;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_SPIN_LOCK_H_
