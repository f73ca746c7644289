// Copyright tollgate authors.
#include "src/resilience/deadline_scheduler.h"

#include <chrono>
#include <utility>

#include "absl/time/time.h"

namespace tollgate::resilience {

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

void DeadlineScheduler::Schedule(int64_t delay_micros, absl::AnyInvocable<void() &&> callback) {
  const int64_t due = MonotonicMicros() + delay_micros;
  absl::MutexLock lock(&mutex_);
  const bool earliest = queue_.empty() || due < queue_.top().due_micros;
  queue_.push(Entry{due, next_sequence_++, std::move(callback)});
  if (earliest) wake_.Signal();
}

void DeadlineScheduler::Run() {
  absl::MutexLock lock(&mutex_);
  while (true) {
    const int64_t now = MonotonicMicros();
    if (!queue_.empty() && (stopping_ || queue_.top().due_micros <= now)) {
      absl::AnyInvocable<void() &&> callback = std::move(queue_.top().callback);
      queue_.pop();
      mutex_.Unlock();
      std::move(callback)();
      mutex_.Lock();
      continue;
    }
    if (stopping_) return;
    const int64_t wait_micros = queue_.empty() ? 100'000 : queue_.top().due_micros - now;
    // Woken early by Schedule() when an earlier deadline arrives, or by the destructor.
    wake_.WaitWithTimeout(&mutex_, absl::Microseconds(wait_micros));
  }
}

}  // namespace tollgate::resilience
