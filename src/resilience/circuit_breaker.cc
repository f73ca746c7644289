// Copyright tollgate authors.
#include "src/resilience/circuit_breaker.h"

namespace tollgate::resilience {

CircuitBreaker::CircuitBreaker(const CircuitBreakerOptions& options, Clock* clock)
    : options_(options), clock_(clock) {}

void CircuitBreaker::UpdateQuiet() {
  quiet_.store(state_ == CircuitState::kClosed && consecutive_failures_ == 0,
               std::memory_order_release);
}

CircuitBreaker::Admission CircuitBreaker::Admit() {
  // Closed: admitted, and nothing changes.
  if (quiet_.load(std::memory_order_acquire)) return Admission::kAdmit;
  absl::MutexLock lock(&mutex_);
  switch (state_) {
    case CircuitState::kClosed:
      return Admission::kAdmit;
    case CircuitState::kOpen:
      if (clock_->NowMicros() < open_until_micros_) return Admission::kReject;
      state_ = CircuitState::kHalfOpen;
      probe_in_flight_ = true;
      UpdateQuiet();
      return Admission::kProbe;
    case CircuitState::kHalfOpen:
      if (probe_in_flight_) return Admission::kReject;
      probe_in_flight_ = true;
      return Admission::kProbe;
  }
  return Admission::kReject;
}

bool CircuitBreaker::RecordSuccess(bool probe) {
  // Closed with no failure counted: a success leaves it so. (A failure counted meanwhile is
  // ordered after this success, as if it came a moment later.)
  if (!probe && quiet_.load(std::memory_order_acquire)) return false;
  absl::MutexLock lock(&mutex_);
  const bool was_closed = state_ == CircuitState::kClosed;
  consecutive_failures_ = 0;
  if (probe) probe_in_flight_ = false;
  // Any success shows the store answers again (a call admitted before the breaker opened
  // may come back after it did).
  state_ = CircuitState::kClosed;
  UpdateQuiet();
  return !was_closed;
}

bool CircuitBreaker::RecordFailure(bool probe) {
  absl::MutexLock lock(&mutex_);
  if (probe) {
    probe_in_flight_ = false;
    state_ = CircuitState::kOpen;
    open_until_micros_ = clock_->NowMicros() + options_.open_duration_ms * 1000;
    UpdateQuiet();
    return false;
  }
  if (state_ != CircuitState::kClosed) return false;
  ++consecutive_failures_;
  if (consecutive_failures_ >= options_.failure_threshold) {
    state_ = CircuitState::kOpen;
    open_until_micros_ = clock_->NowMicros() + options_.open_duration_ms * 1000;
  }
  UpdateQuiet();
  return state_ == CircuitState::kOpen;
}

CircuitState CircuitBreaker::state() const {
  absl::MutexLock lock(&mutex_);
  return state_;
}

}  // namespace tollgate::resilience
