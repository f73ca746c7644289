// Copyright tollgate authors.
#include "tollgate/clock.h"

#include <chrono>

namespace tollgate {
namespace {

class WallClock final : public Clock {
 public:
  int64_t NowMicros() const override {
    // The one place production code reads the system clock.
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

Clock& SystemClock() {
  static WallClock* clock = new WallClock();  // never destroyed: usable during shutdown
  return *clock;
}

}  // namespace tollgate
