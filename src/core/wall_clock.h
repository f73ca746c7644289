// Copyright tollgate authors. The wall clock behind SystemClock(), read cheaply.
//
// Reading CLOCK_REALTIME through the vDSO costs about 65 cycles on the development VM (the
// kernel orders the time-stamp counter read and re-reads its parameters under a seqlock);
// a plain RDTSC costs about 27. Every in-memory decision reads the clock once, so this is
// a large share of a decision. A coarse clock (CLOCK_REALTIME_COARSE, a few ms stale)
// would be cheaper still but not exact: a decision made with a stale time can admit up to
// rate x staleness more than the limit allows. This clock stays within a microsecond of the
// system clock instead:
//
//  - each thread keeps an anchor, a (counter, wall time in ns) pair read together (the
//    counter read on both sides of clock_gettime, retried if the thread was interrupted
//    in between), renewed every `anchor_ns` (1 ms);
//  - between anchors, wall time = anchor + (counter - anchor counter) x ns per tick, where
//    ns per tick is measured from the process's first anchor over an ever longer baseline;
//  - a renewal that finds the extrapolated time off by more than `max_error_ns` (the wall
//    clock was set, or the counter misbehaved) starts the measurement again, and until a
//    rate is known every read is a plain clock_gettime.
//
// It is used only where the kernel itself uses the counter (clocksource "tsc": invariant
// and synchronized across CPUs); elsewhere every read is clock_gettime.
#ifndef TOLLGATE_SRC_CORE_WALL_CLOCK_H_
#define TOLLGATE_SRC_CORE_WALL_CLOCK_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/clock.h"

namespace tollgate::internal {

struct WallClockOptions {
  // Use the time-stamp counter (only if the CPU and kernel allow it); false: every read is
  // clock_gettime(CLOCK_REALTIME).
  bool use_counter = true;
  // How long a thread extrapolates from one anchor.
  int64_t anchor_ns = 1'000'000;
  // The shortest baseline over which ns per tick is measured (first, and after a step).
  int64_t first_baseline_ns = 20'000'000;
  // A renewal that finds the extrapolation off by more than this restarts the measurement.
  int64_t max_error_ns = 20'000;
};

// Thread-safe. Anchors are per thread and shared by every WallClock of the process that
// uses the counter (they all read the same kernel clock).
class WallClock final : public Clock {
 public:
  explicit WallClock(WallClockOptions options = {});

  int64_t NowMicros() const override;

  // Whether reads go through the counter (false: every read is clock_gettime).
  bool uses_counter() const { return use_counter_; }
  // Times the measurement of ns per tick was restarted (a wall clock step).
  int64_t restarts() const { return restarts_.load(std::memory_order_relaxed); }

 private:
  int64_t Renew() const;

  const WallClockOptions options_;
  const bool use_counter_;
  // Fixed point: ns per tick x 2^32. 0 until measured.
  mutable std::atomic<uint64_t> ns_per_tick_q32_{0};
  mutable std::atomic<int64_t> restarts_{0};
  mutable absl::Mutex mu_;
  mutable int64_t base_tsc_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t base_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_WALL_CLOCK_H_
