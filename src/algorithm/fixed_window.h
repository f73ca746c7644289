// Copyright tollgate authors. Fixed window counter as a pure function.
//
// Windows are aligned to the Unix epoch: window index = floor(now / window). A state from
// an earlier window counts as zero. `count + cost <= limit` passes and adds `cost`.
#ifndef TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_
#define TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_

#include <cstdint>
#include <optional>

#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct WindowParams {
  // REQUIRES: limit >= 1, window_micros >= 1.
  int64_t limit = 1;
  int64_t window_micros = 1'000'000;
};

struct FixedWindowState {
  int64_t window_index = 0;
  int64_t count = 0;
  bool operator==(const FixedWindowState&) const = default;
};

// Index of the window that contains `now_micros` (floor division; now may be negative).
int64_t WindowIndex(int64_t now_micros, int64_t window_micros);

// REQUIRES: cost >= 0.
Outcome<FixedWindowState> FixedWindowCheck(const std::optional<FixedWindowState>& state,
                                           int64_t now_micros, const WindowParams& params,
                                           int64_t cost);

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_FIXED_WINDOW_H_
