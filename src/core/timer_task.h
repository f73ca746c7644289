// Copyright tollgate authors. Periodic work scheduled on injected Timers.
#ifndef TOLLGATE_SRC_CORE_TIMER_TASK_H_
#define TOLLGATE_SRC_CORE_TIMER_TASK_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "tollgate/timers.h"

namespace tollgate::internal {

// Runs a task again and again on `Timers`, one run at a time. A run may end later than it
// returns (it waits for Redis): it ends when it calls its `next` callback, with the delay to
// the next run. Sync rounds and heartbeats are scheduled this way, like deadlines: on
// LoopTimers in a service (each run on the loop that started it), ThreadTimers for a library,
// SimulatedTimers in tests (runs happen when the test advances time).
//
// Thread-safe.
class TimerTask {
 public:
  // Ends a run; call exactly once per run, from any thread, possibly before the run returns.
  using Next = absl::AnyInvocable<void(int64_t delay_micros) &&>;
  using Run = absl::AnyInvocable<void(Next next)>;

  TimerTask(std::shared_ptr<Timers> timers, Run run);
  TimerTask(const TimerTask&) = delete;
  TimerTask& operator=(const TimerTask&) = delete;
  // Stop().
  ~TimerTask();

  // A callable that schedules the first run `delay_micros` after it is called, from the thread
  // that calls it (with LoopTimers, a loop's thread keeps every run on that loop). It may be
  // called after the task is destroyed (then it does nothing); call it at most once.
  absl::AnyInvocable<void() &&> Starter(int64_t delay_micros);
  void Start(int64_t delay_micros) { Starter(delay_micros)(); }

  // Brings the next run forward to `delay_micros` from now when that is sooner than it is
  // scheduled. Nothing before the task is started; while a run is in progress its `next`
  // decides (a timer that falls due during a run does not start another).
  void RunWithin(int64_t delay_micros);

  // Once this returns no run starts, and no run is executing on another thread; a run that
  // waits for a reply still ends later (its `next` then schedules nothing): what the run
  // uses after it returns, it must own or hold weakly. Never waits for `next`, so it may be
  // called anywhere, from a run and from the thread its reply needs included. Idempotent.
  void Stop();

  // Stop(), and then waits until a run in progress has called `next`: what the run uses may
  // go once this returns. Idempotent.
  // REQUIRES: not called from a run before it called `next`, nor from a thread that must be
  // free for a run to call `next` (the Redis reply a run waits for).
  void StopAndWait();

 private:
  struct State;
  // REQUIRES: state->mu held (the analysis cannot name it here).
  static void Schedule(const std::shared_ptr<State>& state,
                       int64_t delay_micros) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  static void Fire(const std::shared_ptr<State>& state, const std::atomic<bool>* cancel);

  const std::shared_ptr<Timers> timers_;
  const std::shared_ptr<State> state_;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_TIMER_TASK_H_
