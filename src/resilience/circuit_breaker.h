// Copyright tollgate authors. A circuit breaker for one store endpoint.
#ifndef TOLLGATE_SRC_RESILIENCE_CIRCUIT_BREAKER_H_
#define TOLLGATE_SRC_RESILIENCE_CIRCUIT_BREAKER_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/clock.h"
#include "tollgate/resilience.h"

namespace tollgate::resilience {

// Closed: calls go through; `failure_threshold` consecutive failures open it.
// Open: calls are refused (Admit() returns kReject) for `open_duration_ms`.
// Half-open: exactly one call (the probe) is admitted; its success closes the breaker, its
// failure opens it again. Other calls are refused while the probe is out.
//
// Thread-safe. Time comes from the injected clock. While the breaker is closed with no
// failure counted (the usual state: every call of every event loop asks it twice), Admit and
// a non-probe RecordSuccess read one atomic flag and take no lock.
class CircuitBreaker {
 public:
  enum class Admission { kAdmit, kProbe, kReject };

  CircuitBreaker(const CircuitBreakerOptions& options, Clock* clock);

  // Asks whether a call may go to the store. Every kAdmit or kProbe must be followed by
  // exactly one RecordSuccess or RecordFailure with the same `probe` flag.
  Admission Admit();
  // Returns true when this success closed a breaker that was open or half-open.
  bool RecordSuccess(bool probe);
  // Returns true when this failure opened a closed breaker (a failed probe re-opening it
  // is not a change worth reporting).
  bool RecordFailure(bool probe);

  CircuitState state() const;

 private:
  // Sets quiet_ from the state. REQUIRES: mutex_ held, after every change.
  void UpdateQuiet() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const CircuitBreakerOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mutex_;
  CircuitState state_ ABSL_GUARDED_BY(mutex_) = CircuitState::kClosed;
  int consecutive_failures_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t open_until_micros_ ABSL_GUARDED_BY(mutex_) = 0;
  bool probe_in_flight_ ABSL_GUARDED_BY(mutex_) = false;
  // state_ == kClosed and consecutive_failures_ == 0: Admit admits and a non-probe success
  // changes nothing, so both may answer from this flag alone.
  std::atomic<bool> quiet_{true};
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_CIRCUIT_BREAKER_H_
