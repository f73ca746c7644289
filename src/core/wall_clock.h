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
//    ns per tick is measured from the process's first anchor over an ever longer baseline.
//    The anchor holds its time in whole microseconds plus a binary fraction, and the rate
//    in microseconds per tick, so a read is a counter read, one comparison and one
//    multiply-add, with no division;
//  - a renewal that finds the extrapolated time off by more than `max_error_ns` (the wall
//    clock was set, or the counter misbehaved) starts the measurement again, and until a
//    rate is known every read is a plain clock_gettime.
//
// It is used where the kernel's clock is the counter itself: clock source "tsc" (the kernel
// found the counter invariant and synchronized across CPUs), or "kvm-clock" on a CPU whose
// counter is invariant (flags constant_tsc and nonstop_tsc). A KVM guest's kvm-clock is that
// same counter, scaled with numbers the host publishes and changes when the counter's
// relation to time changes: the VM moved to another host, or was restored from a snapshot
// (as Firecracker's can be). A thread sees such a change, or a counter that differs between
// processors, at its next renewal, at most `anchor_ns` of counter time later. Until then its
// reads are at most `anchor_ns` ahead of the kernel's clock (a read never extrapolates
// further), or behind it (a stricter decision, never a looser one). Elsewhere, or with
// TOLLGATE_CLOCK_COUNTER=0 in the environment, every read is clock_gettime.
#ifndef TOLLGATE_SRC_CORE_WALL_CLOCK_H_
#define TOLLGATE_SRC_CORE_WALL_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <string_view>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/clock.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tollgate::internal {

// Where a thread extrapolates from, set by the WallClock that owns it at each renewal: the
// counter value and the wall time read with it (whole microseconds plus a binary fraction),
// the rate in microseconds per tick (same fraction), and how many ticks the anchor may be
// used for, so a read decides with one comparison. Trivially constructible: the
// thread_local below needs no initialization guard, and an anchor without an owner makes
// every read renew it. The owner is the clock's id, not its address: a clock created where
// a destroyed one was must not extrapolate from that one's anchor (one created with
// use_counter = false would then read the counter for up to anchor_ns).
struct WallClockAnchor {
  uint64_t owner = 0;  // WallClock::id_; 0: none
  uint64_t tsc = 0;
  uint64_t usable_ticks = 0;
  uint64_t micros_per_tick_q36 = 0;
  uint64_t fraction_q36 = 0;
  int64_t micros = 0;
};
inline thread_local WallClockAnchor wall_clock_anchor;

inline int64_t ReadTimeStampCounter() {
#if defined(__x86_64__)
  return static_cast<int64_t>(__rdtsc());
#else
  return 0;
#endif
}

// Whether the counter can stand in for the kernel's wall clock, from the kernel's current
// clock source and the CPU's flags (/proc/cpuinfo's "flags" line, after its colon).
bool CounterUsableFor(std::string_view clock_source, std::string_view cpu_flags);

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

// Thread-safe. Each thread keeps one anchor, owned by the WallClock that set it last: a
// thread that reads two WallClocks in turn renews its anchor on every switch (production
// has one, SystemClock()).
class WallClock final : public Clock {
 public:
  // Fraction bits of the anchor's fixed-point numbers. A counter runs at 10 MHz or more
  // (the rate is measured and checked), so microseconds per tick x 2^36 < 2^33, and that
  // times at most 2^31 ticks, plus a fraction < 2^36, stays below 2^64.
  static constexpr int kMicrosFractionBits = 36;

  explicit WallClock(WallClockOptions options = {});

  int64_t NowMicros() const override { return NowMicrosInline(); }

  // NowMicros() for callers that know the clock is a WallClock (the memory store checks
  // once): inlined there, a read costs no call. The fast path is one counter read, one
  // unsigned comparison (a counter behind the anchor wraps to a huge tick count and
  // renews), and one multiply-add, with no division.
  ABSL_ATTRIBUTE_ALWAYS_INLINE int64_t NowMicrosInline() const {
    const WallClockAnchor& a = wall_clock_anchor;
    const uint64_t ticks = static_cast<uint64_t>(ReadTimeStampCounter()) - a.tsc;
    if (ABSL_PREDICT_TRUE(a.owner == id_ && ticks < a.usable_ticks)) {
      // < 2^36 + 2^31 x 2^33: no overflow (usable_ticks <= 2^31; see kMicrosFractionBits).
      return a.micros + static_cast<int64_t>((a.fraction_q36 + ticks * a.micros_per_tick_q36) >>
                                             kMicrosFractionBits);
    }
    return RenewMicros();
  }

  // Unique in the process, never 0: what a thread's anchor names its owner by.
  uint64_t id() const { return id_; }
  // Whether reads go through the counter (false: every read is clock_gettime).
  bool uses_counter() const { return use_counter_; }
  // Times the measurement of ns per tick was restarted (a wall clock step).
  int64_t restarts() const { return restarts_.load(std::memory_order_relaxed); }

 private:
  // The slow path of NowMicros(): renews the calling thread's anchor. Out of line, so the
  // fast path needs no stack frame.
  ABSL_ATTRIBUTE_NOINLINE int64_t RenewMicros() const;
  // Reads a (counter, wall time) pair, updates the rate from it and anchors the calling
  // thread there. Returns the wall time read, in ns.
  int64_t Renew() const;
  // Measures ns per tick against the base pair, or restarts the measurement.
  void RenewRate(int64_t pair_tsc, int64_t pair_ns) const;

  const WallClockOptions options_;
  const bool use_counter_;
  // Unique in the process, never 0 (WallClockAnchor::owner).
  const uint64_t id_;
  // Fixed point: ns per tick x 2^32. 0 until measured.
  mutable std::atomic<uint64_t> ns_per_tick_q32_{0};
  mutable std::atomic<int64_t> restarts_{0};
  mutable absl::Mutex mu_;
  mutable int64_t base_tsc_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int64_t base_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_WALL_CLOCK_H_
