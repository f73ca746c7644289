// Copyright tollgate authors. Runs callbacks when deadlines pass.
#ifndef TOLLGATE_SRC_CORE_DEADLINE_SCHEDULER_H_
#define TOLLGATE_SRC_CORE_DEADLINE_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "src/core/deadline_queue.h"
#include "tollgate/timers.h"

namespace tollgate::internal {

// ThreadTimers() (tollgate/timers.h): one thread that runs each scheduled callback once its
// deadline (steady_clock) passes. Callbacks run on that thread and must be short (they
// answer a caller from a local limiter). A cancelled callback is dropped unrun, and the
// thread does not wake up for its deadline: when the store answers first, the thread does
// not wake for that call (one wake-up per timeout period instead of one per call).
//
// Thread-safe. The destructor runs every callback still pending and not cancelled, at once,
// then joins.
class DeadlineScheduler final : public Timers {
 public:
  DeadlineScheduler();
  DeadlineScheduler(const DeadlineScheduler&) = delete;
  DeadlineScheduler& operator=(const DeadlineScheduler&) = delete;
  ~DeadlineScheduler() override;

  int64_t NowMicros() const override { return MonotonicMicros(); }
  void RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                absl::AnyInvocable<void() &&> callback) override;

  // Monotonic microseconds (steady_clock).
  static int64_t MonotonicMicros();

 private:
  void Run();

  absl::Mutex mutex_;
  absl::CondVar wake_;
  DeadlineQueue queue_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_DEADLINE_SCHEDULER_H_
