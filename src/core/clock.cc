// Copyright tollgate authors.
#include "tollgate/clock.h"

#include <cstdint>

#include "absl/time/clock.h"

namespace tollgate {
namespace {

// SystemClock(): Abseil's wall clock, in whole microseconds.
class RealtimeClock final : public Clock {
 public:
  int64_t NowMicros() const override { return absl::GetCurrentTimeNanos() / 1000; }
};

}  // namespace

Clock& SystemClock() {
  // Never destroyed: usable during shutdown.
  static Clock* clock = new RealtimeClock();
  return *clock;
}

}  // namespace tollgate
