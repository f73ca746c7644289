// Copyright tollgate authors. Work in flight, counted, and a wait for it to end: what a
// destructor blocks on instead of polling in a sleep loop.
#ifndef TOLLGATE_SRC_CORE_IN_FLIGHT_H_
#define TOLLGATE_SRC_CORE_IN_FLIGHT_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tollgate::internal {

// Start() and Finish() cost one atomic operation each while nobody waits; Finish() takes the
// lock only to wake a waiter it lets through. Thread-safe.
class InFlight {
 public:
  void Start() { count_.fetch_add(1, std::memory_order_relaxed); }

  // Ends one started piece of work. A waiter may return as soon as the count falls, while this
  // still runs: whoever calls Finish must hold the InFlight (a shared_ptr) until it returns.
  void Finish() {
    // Sequentially consistent with WaitUntilAtMost's store of `waiting_` and load of
    // `count_`: either the waiter sees this decrement, or this sees it waiting and wakes it.
    const int64_t left = count_.fetch_sub(1, std::memory_order_seq_cst) - 1;
    if (!waiting_.load(std::memory_order_seq_cst)) return;
    absl::MutexLock lock(&mu_);
    if (left <= allowed_) changed_.SignalAll();
  }

  // Blocks until at most `allowed` pieces of work are in flight (the caller's own, when it
  // runs inside one). One waiter at a time.
  void WaitUntilAtMost(int64_t allowed) {
    absl::MutexLock lock(&mu_);
    allowed_ = allowed;
    waiting_.store(true, std::memory_order_seq_cst);
    while (count_.load(std::memory_order_seq_cst) > allowed) changed_.Wait(&mu_);
    waiting_.store(false, std::memory_order_relaxed);
  }

  int64_t count() const { return count_.load(std::memory_order_acquire); }

 private:
  std::atomic<int64_t> count_{0};
  std::atomic<bool> waiting_{false};
  absl::Mutex mu_;
  absl::CondVar changed_;
  int64_t allowed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_IN_FLIGHT_H_
