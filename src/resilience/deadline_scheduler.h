// Copyright tollgate authors. Runs callbacks when deadlines pass.
#ifndef TOLLGATE_SRC_RESILIENCE_DEADLINE_SCHEDULER_H_
#define TOLLGATE_SRC_RESILIENCE_DEADLINE_SCHEDULER_H_

#include <atomic>
#include <cstdint>
#include <queue>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/timers.h"

namespace tollgate::resilience {

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
  struct Entry {
    int64_t due_micros;
    uint64_t sequence;
    const std::atomic<bool>* cancelled;  // may be null
    mutable absl::AnyInvocable<void() &&> callback;
    bool operator>(const Entry& other) const {
      return due_micros != other.due_micros ? due_micros > other.due_micros
                                            : sequence > other.sequence;
    }
  };
  void Run();

  absl::Mutex mutex_;
  absl::CondVar wake_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_
      ABSL_GUARDED_BY(mutex_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_DEADLINE_SCHEDULER_H_
