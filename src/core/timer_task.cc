// Copyright tollgate authors.
#include "src/core/timer_task.h"

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tollgate::internal {

// Shared with the pending timer's callback and a run's `next`, which may outlive the task.
// It does not own the timers (their queue holds it): they are used only until Stop (a `next`
// or a timer that comes after it touches nothing else), and the task that owns them lives
// at least that long.
struct TimerTask::State {
  State(Timers* timers, Run run) : timers(timers), run(std::move(run)) {}

  Timers* const timers;
  Run run;  // called by one run at a time, never once stopped

  absl::Mutex mu;
  bool started ABSL_GUARDED_BY(mu) = false;
  bool stopped ABSL_GUARDED_BY(mu) = false;
  bool running ABSL_GUARDED_BY(mu) = false;  // from a run's start until its `next`
  bool in_run ABSL_GUARDED_BY(mu) = false;   // while `run` executes, on `run_thread`
  std::thread::id run_thread ABSL_GUARDED_BY(mu);
  // The pending timer: its cancel flag (owned with its callback) and when it falls due.
  std::shared_ptr<std::atomic<bool>> pending ABSL_GUARDED_BY(mu);
  int64_t pending_due_micros ABSL_GUARDED_BY(mu) = std::numeric_limits<int64_t>::max();
};

TimerTask::TimerTask(std::shared_ptr<Timers> timers, Run run)
    : timers_(std::move(timers)), state_(std::make_shared<State>(timers_.get(), std::move(run))) {}

TimerTask::~TimerTask() { Stop(); }

absl::AnyInvocable<void() &&> TimerTask::Starter(int64_t delay_micros) {
  return [weak = std::weak_ptr<State>(state_), delay_micros] {
    std::shared_ptr<State> state = weak.lock();
    if (state == nullptr) return;
    absl::MutexLock lock(&state->mu);
    if (state->stopped || state->started) return;
    state->started = true;
    Schedule(state, delay_micros);
  };
}

void TimerTask::RunWithin(int64_t delay_micros) {
  absl::MutexLock lock(&state_->mu);
  if (!state_->started || state_->stopped || state_->running) return;
  if (state_->timers->NowMicros() + delay_micros < state_->pending_due_micros) {
    Schedule(state_, delay_micros);
  }
}

void TimerTask::Stop() {
  absl::MutexLock lock(&state_->mu);
  state_->stopped = true;
  if (state_->pending != nullptr) state_->pending->store(true, std::memory_order_release);
  state_->pending = nullptr;
  if (state_->in_run && state_->run_thread != std::this_thread::get_id()) {
    state_->mu.Await(absl::Condition(
        +[](bool* in_run) { return !*in_run; }, &state_->in_run));
  }
}

void TimerTask::StopAndWait() {
  Stop();
  absl::MutexLock lock(&state_->mu);
  state_->mu.Await(absl::Condition(
      +[](bool* running) { return !*running; }, &state_->running));
}

// REQUIRES: state->mu held. Replaces the pending timer, if any.
void TimerTask::Schedule(const std::shared_ptr<State>& state, int64_t delay_micros) {
  if (state->pending != nullptr) state->pending->store(true, std::memory_order_release);
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  state->pending = cancel;
  state->pending_due_micros = state->timers->NowMicros() + delay_micros;
  state->timers->RunAfter(delay_micros, cancel.get(),
                          [state, cancel] { Fire(state, cancel.get()); });
}

void TimerTask::Fire(const std::shared_ptr<State>& state, const std::atomic<bool>* cancel) {
  {
    absl::MutexLock lock(&state->mu);
    if (state->stopped || cancel->load(std::memory_order_acquire)) return;
    state->pending = nullptr;
    state->pending_due_micros = std::numeric_limits<int64_t>::max();
    if (state->running) return;
    state->running = true;
    state->in_run = true;
    state->run_thread = std::this_thread::get_id();
  }
  state->run([state](int64_t delay_micros) {
    absl::MutexLock lock(&state->mu);
    state->running = false;
    if (state->stopped) return;
    // A RunWithin that came during the run may have asked for an earlier one already.
    if (state->pending == nullptr ||
        state->timers->NowMicros() + delay_micros < state->pending_due_micros) {
      Schedule(state, delay_micros);
    }
  });
  absl::MutexLock lock(&state->mu);
  state->in_run = false;
}

}  // namespace tollgate::internal
