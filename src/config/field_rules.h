// Copyright tollgate authors. What both config formats accept for the fields they share.
#ifndef TOLLGATE_SRC_CONFIG_FIELD_RULES_H_
#define TOLLGATE_SRC_CONFIG_FIELD_RULES_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace tollgate::config {

// The accepted durations of one field, and how an error message states them.
struct DurationRange {
  int64_t min_micros;
  int64_t max_micros;
  absl::string_view text;
};

// A limit's `timeout`, the deadline of one store call.
inline constexpr DurationRange kTimeoutRange = {1'000, 60'000'000, "from 1ms to 60s"};

}  // namespace tollgate::config

#endif  // TOLLGATE_SRC_CONFIG_FIELD_RULES_H_
