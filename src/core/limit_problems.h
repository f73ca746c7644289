// Copyright tollgate authors. The one rule of what a Limit may be (tollgate::ValidateLimit),
// as a list of problems that say which field is at fault, for the config parser to place
// each at its YAML position.
#ifndef TOLLGATE_SRC_CORE_LIMIT_PROBLEMS_H_
#define TOLLGATE_SRC_CORE_LIMIT_PROBLEMS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/limit.h"

namespace tollgate::internal {

// Counts above this are almost certainly typos (and keep the stores' arithmetic, which mixes
// int64 and double, exact).
inline constexpr int64_t kMaxLimitCount = 1'000'000'000'000;
inline constexpr double kMaxRefillPerSecond = 1e12;
// A token bucket must refill completely within this, so the time its key lives in a store
// stays a sane number of microseconds. Slower limits are better written as a window.
inline constexpr int64_t kMaxFillMicros = 365LL * 86'400 * 1'000'000;
// A sync round trips to Redis; a shorter interval would only queue rounds.
inline constexpr int64_t kMinSyncIntervalMicros = 10'000;

struct LimitProblem {
  // The field at fault, as configuration files name it under the limit: "capacity",
  // "refill_per_second", "limit", "window", "lease", "local", "local.<field>", "mode",
  // "sync_interval", "durable", "name".
  std::string field;
  // What the field should be: "expected at most the window (1m)".
  std::string expected;
  // What it is: the field's own value when `got_is_value` (such as "'2m'"), else a
  // description ("mode 'sync' with algorithm token_bucket").
  std::string got;
  bool got_is_value = true;
};

// Every problem of `limit`, in the order of its fields; empty when it is valid. Allocates
// nothing for a valid limit.
std::vector<LimitProblem> LimitProblems(const Limit& limit);

// 90'000'000 -> "90s", 600'000'000 -> "10m": the largest unit that divides evenly.
std::string FormatDuration(int64_t micros);

}  // namespace tollgate::internal

#endif  // TOLLGATE_SRC_CORE_LIMIT_PROBLEMS_H_
