// Copyright tollgate authors. Monotonic time and one-shot timers, for deadlines.
//
//   ResilienceOptions options;
//   options.timers = tollgate::ThreadTimers();           // the default: a thread of its own
//   options.timers = tollgate::LoopTimers({&io1, &io2});  // on a service's own event loops
//
//   auto timers = std::make_shared<tollgate::SimulatedTimers>();  // tests: simulated time
//   ... a check whose store never answers ...
//   timers->AdvanceMicros(limit.timeout_micros);  // the deadline passes: answered now
//
// Deadlines bound how long a caller waits on a real socket, so they run on monotonic time,
// apart from the wall Clock that limits use. Both are injected, so that a test drives each
// in simulated time.
#ifndef TOLLGATE_INCLUDE_TOLLGATE_TIMERS_H_
#define TOLLGATE_INCLUDE_TOLLGATE_TIMERS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace tollgate {

namespace internal {
class DeadlineQueue;  // src/core/deadline_queue.h
}  // namespace internal

class Timers {
 public:
  virtual ~Timers() = default;

  // Monotonic microseconds: only differences mean something. Thread-safe.
  virtual int64_t NowMicros() const = 0;

  // Runs `callback` once, `delay_micros` (>= 0) from now or later, unless `*cancelled` is
  // true by then: a cancelled callback is destroyed unrun, at its deadline or earlier.
  // `cancelled` may be null. Callbacks must be short; where they run is the
  // implementation's (see each below). Thread-safe.
  // REQUIRES: `*cancelled` lives as long as `callback` (e.g. both owned by it).
  virtual void RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                        absl::AnyInvocable<void() &&> callback) = 0;
};

// One thread that runs each callback once its deadline passes (steady_clock). The thread
// wakes for the earliest deadline not cancelled: calls answered before their deadline cost
// no wake-up. Destroying it runs every pending callback not cancelled at once, then joins.
std::shared_ptr<Timers> ThreadTimers();

// Timers on Boost.Asio event loops, each io_context run by one thread: a callback scheduled
// from one of `loops`' threads runs on that thread (no thread hop, no lock), on one timer
// per loop armed for its earliest deadline; one scheduled from any other thread runs on a
// thread of its own, as ThreadTimers. Destroying it runs the pending callbacks not cancelled
// on their loops at once; callbacks still pending when a loop stops are destroyed unrun.
// REQUIRES: the io_contexts outlive the timers' last callback (the service's loops).
std::shared_ptr<Timers> LoopTimers(std::vector<boost::asio::io_context*> loops);

// Simulated time for tests: NowMicros() moves only by AdvanceMicros(), which runs the
// callbacks that fall due, in deadline order, on the calling thread. Destroying it runs
// the pending callbacks not cancelled at once. Thread-safe.
class SimulatedTimers final : public Timers {
 public:
  explicit SimulatedTimers(int64_t start_micros = 1'000'000);
  SimulatedTimers(const SimulatedTimers&) = delete;
  SimulatedTimers& operator=(const SimulatedTimers&) = delete;
  ~SimulatedTimers() override;

  int64_t NowMicros() const override;
  void RunAfter(int64_t delay_micros, const std::atomic<bool>* cancelled,
                absl::AnyInvocable<void() &&> callback) override;

  // Moves time on by `micros` and runs every callback due by then (not cancelled), each at
  // its own deadline: NowMicros() seen inside a callback is its deadline.
  void AdvanceMicros(int64_t micros);
  // Callbacks scheduled and neither run nor dropped.
  int pending() const;

 private:
  mutable absl::Mutex mutex_;
  int64_t now_ ABSL_GUARDED_BY(mutex_);
  const std::unique_ptr<internal::DeadlineQueue> queue_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tollgate

#endif  // TOLLGATE_INCLUDE_TOLLGATE_TIMERS_H_
