// Copyright tollgate authors.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "src/core/deadline_queue.h"
#include "tollgate/timers.h"

namespace tollgate {

using internal::DeadlineQueue;

SimulatedTimers::SimulatedTimers(int64_t start_micros)
    : now_(start_micros), queue_(std::make_unique<DeadlineQueue>()) {}

SimulatedTimers::~SimulatedTimers() {
  std::vector<absl::AnyInvocable<void() &&>> pending;
  {
    absl::MutexLock lock(&mutex_);
    while (!queue_->empty()) {
      DeadlineQueue::Popped popped = queue_->Pop();
      if (!popped.cancelled) pending.push_back(std::move(popped.callback));
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
  queue_->Push(now_ + std::max<int64_t>(0, delay_micros), cancelled, std::move(callback));
}

void SimulatedTimers::AdvanceMicros(int64_t micros) {
  mutex_.Lock();
  const int64_t until = now_ + std::max<int64_t>(0, micros);
  while (!queue_->empty() && queue_->earliest_micros() <= until) {
    DeadlineQueue::Popped popped = queue_->Pop();
    now_ = std::max(now_, popped.due_micros);
    // Run (or destroyed) outside the lock: a callback may schedule or read the time.
    mutex_.Unlock();
    if (!popped.cancelled) std::move(popped.callback)();
    popped.callback = nullptr;
    mutex_.Lock();
  }
  now_ = until;
  mutex_.Unlock();
}

int SimulatedTimers::pending() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int>(queue_->size());
}

}  // namespace tollgate
