// Copyright tollgate authors. Time for limits.
//
// Every object that reads time takes a `Clock`. Production code uses `SystemClock()`;
// tests use `SimulatedClock` and advance it by hand, so no test sleeps to wait for tokens.
#ifndef TOLLGATE_CLOCK_H_
#define TOLLGATE_CLOCK_H_

#include <atomic>
#include <cstdint>

namespace tollgate {

// A source of time in whole microseconds since the Unix epoch. Limits work in integer
// microseconds everywhere (also inside the Redis scripts), so the in-memory and Redis
// stores compute the same decisions.
//
// Thread-safe: implementations may be called from any thread.
class Clock {
 public:
  Clock() = default;
  Clock(const Clock&) = delete;
  Clock& operator=(const Clock&) = delete;
  virtual ~Clock() = default;

  // Current time in microseconds since 1970-01-01 UTC. Not guaranteed monotonic
  // (wall-clock steps are possible); the algorithms treat time going backwards as no time
  // passing.
  virtual int64_t NowMicros() const = 0;
};

// The process's wall clock: CLOCK_REALTIME as Abseil reads it (absl::GetCurrentTimeNanos(),
// which may extrapolate from the CPU's cycle counter between its own reads of the kernel's
// clock), in whole microseconds. Like the kernel's clock it can step when the clock is set.
// Thread-safe; never destroyed (usable during shutdown).
Clock& SystemClock();

// A clock that moves only when told to. Thread-safe.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(int64_t start_micros = 1'700'000'000'000'000) : now_(start_micros) {}

  int64_t NowMicros() const override { return now_.load(std::memory_order_acquire); }
  void AdvanceMicros(int64_t micros) { now_.fetch_add(micros, std::memory_order_acq_rel); }
  void AdvanceMillis(int64_t millis) { AdvanceMicros(millis * 1000); }
  void SetMicros(int64_t micros) { now_.store(micros, std::memory_order_release); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace tollgate

#endif  // TOLLGATE_CLOCK_H_
