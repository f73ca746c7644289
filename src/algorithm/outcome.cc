// Copyright tollgate authors.
#include "src/algorithm/outcome.h"

#include <cmath>

namespace tollgate::algorithm {

int64_t CeilMicros(double micros) {
  if (!(micros > 0)) return 0;
  // Durations beyond 2^62 µs (146,000 years; a slow refill of a huge capacity) are capped:
  // converting a double beyond int64 is undefined, and `now + duration` must not overflow.
  constexpr double kMaxMicros = 4'611'686'018'427'387'904.0;  // 2^62
  if (micros >= kMaxMicros) return static_cast<int64_t>(kMaxMicros);
  return static_cast<int64_t>(std::ceil(micros));
}

}  // namespace tollgate::algorithm
