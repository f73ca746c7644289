// Copyright tollgate authors.
#include <algorithm>
#include <utility>
#include <vector>

#include "tollgate/timers.h"

namespace tollgate {

SimulatedTimers::~SimulatedTimers() {
  std::vector<absl::AnyInvocable<void() &&>> pending;
  {
    absl::MutexLock lock(&mutex_);
    for (; !queue_.empty(); queue_.pop()) {
      const Entry& entry = queue_.top();
      if (entry.cancelled == nullptr || !entry.cancelled->load(std::memory_order_acquire)) {
        pending.push_back(std::move(entry.callback));
      }
    }
  }
  for (auto& callback : pending) std::move(callback)();
}

int64_t SimulatedTimers::NowMicros() const {
  absl::MutexLock lock(&mutex_);
  return now_;
}

void SimulatedTimers::RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                               absl::AnyInvocable<void() &&> callback) {
  absl::MutexLock lock(&mutex_);
  queue_.push(Entry{now_ + std::max<int64_t>(0, delay_micros), next_sequence_++, cancelled,
                    std::move(callback)});
}

void SimulatedTimers::AdvanceMicros(int64_t micros) {
  mutex_.Lock();
  const int64_t until = now_ + std::max<int64_t>(0, micros);
  while (!queue_.empty() && queue_.top().due_micros <= until) {
    const Entry& entry = queue_.top();
    now_ = std::max(now_, entry.due_micros);
    absl::AnyInvocable<void()&&> callback = std::move(entry.callback);
    const bool cancelled =
        entry.cancelled != nullptr && entry.cancelled->load(std::memory_order_acquire);
    queue_.pop();
    // Run (or destroyed) outside the lock: a callback may schedule or read the time.
    mutex_.Unlock();
    if (!cancelled) std::move(callback)();
    callback = nullptr;
    mutex_.Lock();
  }
  now_ = until;
  mutex_.Unlock();
}

int SimulatedTimers::pending() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(queue_.size());
}

}  // namespace tollgate
