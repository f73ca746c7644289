// Copyright tollgate authors. Limits for tests, built in one line.
#ifndef TOLLGATE_TESTS_SUPPORT_LIMITS_H_
#define TOLLGATE_TESTS_SUPPORT_LIMITS_H_

#include <cstdint>
#include <string>
#include <utility>

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

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_LIMITS_H_
