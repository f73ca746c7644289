// Copyright tollgate authors. Limits for tests, built in one line.
#ifndef TOLLGATE_TESTS_SUPPORT_LIMITS_H_
#define TOLLGATE_TESTS_SUPPORT_LIMITS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

#include "tollgate/clock.h"
#include "tollgate/limit.h"

namespace tollgate::testing {

inline Limit TokenBucket(std::string name, int64_t capacity, double refill_per_second) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = capacity;
  limit.numbers.refill_per_second = refill_per_second;
  return limit;
}

// A fixed or sliding window limit.
inline Limit Window(std::string name, Algorithm algorithm, int64_t limit_per_window,
                    int64_t window_micros) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = algorithm;
  limit.numbers.limit = limit_per_window;
  limit.numbers.window_micros = window_micros;
  return limit;
}

// Windows are aligned to multiples of their length since 1970 on Redis's clock (this
// machine's, on loopback): a test that counts a window's admissions exactly while seconds pass
// calls this first, so that its run ends in the window it started in. Waits (at most
// `needed_micros`, and only when the current window has less than that left) for the next
// window to begin.
inline void WaitClearOfWindowEdge(int64_t window_micros, int64_t needed_micros) {
  const int64_t left = window_micros - SystemClock().NowMicros() % window_micros;
  if (left < needed_micros) std::this_thread::sleep_for(std::chrono::microseconds(left + 1'000));
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_LIMITS_H_
