// Copyright tollgate authors.
#include "src/core/deadline_scheduler.h"

#include <chrono>
#include <utility>

#include "absl/time/time.h"

namespace tollgate::internal {

int64_t DeadlineScheduler::MonotonicMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

DeadlineScheduler::DeadlineScheduler() : thread_([this] { Run(); }) {}

DeadlineScheduler::~DeadlineScheduler() {
  {
    absl::MutexLock lock(&mutex_);
    stopping_ = true;
    wake_.Signal();
  }
  thread_.join();
}

void DeadlineScheduler::RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                                 absl::AnyInvocable<void() &&> callback) {
  const int64_t due = MonotonicMicros() + delay_micros;
  absl::MutexLock lock(&mutex_);
  // The thread sleeps until the front entry's deadline (or 100 ms when there is none).
  const bool earliest = queue_.empty() || due < queue_.earliest_micros();
  queue_.Push(due, cancelled, std::move(callback));
  if (earliest) wake_.Signal();
}

void DeadlineScheduler::Run() {
  // Cancelled callbacks, destroyed outside the lock (they may own what calls RunAfter).
  std::vector<absl::AnyInvocable<void() &&>> dropped;
  absl::MutexLock lock(&mutex_);
  while (true) {
    // Whatever their deadline, cancelled entries at the front go: with one timeout for all
    // calls the queue is in deadline order, so one wake-up clears every call answered so far
    // and the next sleep lasts until the oldest unanswered call's deadline.
    while (!queue_.empty() && queue_.FrontCancelled()) {
      dropped.push_back(queue_.Pop().callback);
    }
    if (!dropped.empty()) {
      mutex_.Unlock();
      dropped.clear();
      mutex_.Lock();
      continue;
    }
    const int64_t now = MonotonicMicros();
    if (!queue_.empty() && (stopping_ || queue_.earliest_micros() <= now)) {
      absl::AnyInvocable<void()&&> callback = queue_.Pop().callback;
      mutex_.Unlock();
      std::move(callback)();
      mutex_.Lock();
      continue;
    }
    if (stopping_) return;
    const int64_t wait_micros = queue_.empty() ? 100'000 : queue_.earliest_micros() - now;
    // Woken early by RunAfter() when an earlier deadline arrives, or by the destructor.
    wake_.WaitWithTimeout(&mutex_, absl::Microseconds(wait_micros));
  }
}

}  // namespace tollgate::internal

namespace tollgate {

std::shared_ptr<Timers> ThreadTimers() { return std::make_shared<internal::DeadlineScheduler>(); }

}  // namespace tollgate
