// Copyright tollgate authors. Sliding window counter (two-counter approximation).
//
// Counts are kept per epoch-aligned window. At elapsed time `e` into the current window,
// the estimated use over the last `window` is
//   estimate = previous * ((window - e) / window) + current
// (the previous window's count weighted by how much of it the sliding window still
// overlaps, assuming its requests were spread evenly). A check passes when
// `estimate + cost <= limit`.
//
// Bounds (what tests assert): every epoch-aligned window admits at most `limit`, and any
// interval of length `window` admits less than 2 * limit (the worst case is a previous
// window whose requests all came at its very end). Cloudflare measured the approximation's
// error on real traffic at 0.003% of requests wrongly allowed.
#ifndef TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_
#define TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_

#include <cstdint>
#include <optional>

#include "src/algorithm/fixed_window.h"
#include "src/algorithm/outcome.h"

namespace tollgate::algorithm {

struct SlidingWindowState {
  int64_t window_index = 0;
  int64_t current = 0;
  int64_t previous = 0;
  bool operator==(const SlidingWindowState&) const = default;
};

// REQUIRES: cost >= 0.
Outcome<SlidingWindowState> SlidingWindowCheck(const std::optional<SlidingWindowState>& state,
                                               int64_t now_micros, const WindowParams& params,
                                               int64_t cost);

}  // namespace tollgate::algorithm

#endif  // TOLLGATE_SRC_ALGORITHM_SLIDING_WINDOW_H_
