// Copyright tollgate authors.
#include "src/store/sync/entry.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "src/algorithm/fixed_window.h"
#include "src/algorithm/share.h"
#include "src/algorithm/sliding_window.h"

namespace tollgate::sync {

int64_t Entry::ExpiresAtMicros() const {
  const int64_t window = info->numbers.window_micros;
  return info->numbers.algorithm == Algorithm::kSlidingWindow ? (window_index + 2) * window
                                                              : (window_index + 1) * window;
}

Entry NewEntry(std::shared_ptr<const KeyInfo> info, int64_t clock_micros, int64_t now_micros) {
  Entry entry;
  entry.window_index = algorithm::WindowIndex(now_micros, info->numbers.window_micros);
  entry.next_sync_micros = clock_micros + info->sync_interval_micros;
  entry.info = std::move(info);
  return entry;
}

int64_t Roll(Entry& entry, int64_t index) {
  if (index <= entry.window_index) return 0;
  int64_t dropped = entry.unsent_previous;
  int64_t carried = -1;
  if (index == entry.window_index + 1) {
    // A sliding window's estimate does not jump at the boundary, so its grant stays valid;
    // the other instances hold it for us until we sync the new window.
    if (entry.info->numbers.algorithm == Algorithm::kSlidingWindow && entry.grant_current >= 0) {
      carried = std::max<int64_t>(0, entry.grant_current - entry.LocalCurrent());
    }
    entry.view_previous = entry.view_current;
    entry.unsent_previous = entry.unsent_current;
    entry.unacked_previous = entry.unacked_current;
  } else {
    dropped += entry.unsent_current;
    entry.view_previous = entry.unsent_previous = entry.unacked_previous = 0;
  }
  entry.view_current = entry.unsent_current = entry.unacked_current = 0;
  entry.grant_current = carried;
  entry.grant_carried = carried >= 0;
  entry.first_share = index == entry.window_index + 1 ? entry.next_first_share : -1;
  entry.next_first_share = -1;
  entry.window_index = index;
  return dropped;
}

Decision Decide(Entry& entry, FailureMode on_store_failure, int64_t cost,
                const DecideContext& context, int64_t* dropped_units) {
  entry.last_check_micros = context.clock_micros;
  entry.demand += cost;
  const KeyInfo& info = *entry.info;
  const int64_t window = info.numbers.window_micros;
  const int64_t limit = info.numbers.limit;
  int64_t now = context.now_micros;
  // Still in the entry's window (the common case) costs a multiplication, not a division.
  if (now >= (entry.window_index + 1) * window) {
    *dropped_units += Roll(entry, algorithm::WindowIndex(now, window));
  }
  // Time going backwards (or a smaller Redis offset) counts as no time passing.
  now = std::max(now, entry.window_index * window);
  const int64_t window_end = (entry.window_index + 1) * window;

  if (on_store_failure == FailureMode::kFailClosed &&
      context.clock_micros - context.last_sync_micros >
          kFailClosedIntervals * info.sync_interval_micros) {
    Decision d;
    d.limit = limit;
    d.source = DecisionSource::kSync;
    d.reason = DenyReason::kStoreUnavailable;
    d.reset_after_micros = window_end - now;
    d.retry_after_micros = info.sync_interval_micros;
    return d;
  }

  // What everybody is known to have used: the view plus this instance's own units. The exact
  // algorithm on that state gives the global refusal and the reset and retry times.
  const algorithm::WindowParams params{limit, window};
  Decision d;
  double left;  // of the whole limit as far as the view goes, before this window's own units
  if (info.numbers.algorithm == Algorithm::kFixedWindow) {
    d = algorithm::FixedWindowCheck(
            algorithm::FixedWindowState{entry.window_index,
                                        entry.view_current + entry.LocalCurrent()},
            now, params, cost)
            .decision;
    left = static_cast<double>(limit - entry.view_current);
  } else {
    const int64_t previous = entry.view_previous + entry.LocalPrevious();
    d = algorithm::SlidingWindowCheck(
            algorithm::SlidingWindowState{entry.window_index,
                                          entry.view_current + entry.LocalCurrent(), previous},
            now, params, cost)
            .decision;
    // The previous window is complete: this instance's own part of it counts too.
    left = static_cast<double>(limit) -
           algorithm::SlidingWindowEstimate(previous, entry.view_current,
                                            now - entry.window_index * window, params);
  }
  d.source = DecisionSource::kSync;
  if (!d.allowed) return d;

  // Between two syncs, spend at most what the last sync granted; before the first sync of a
  // window, the first share set aside for it, or else the floor share of what the view leaves.
  int64_t share = entry.grant_current >= 0 ? entry.grant_current : entry.first_share;
  if (share < 0) share = algorithm::FirstShare(left, context.instances, info.shares);
  const int64_t local = entry.LocalCurrent();
  // The next sync of this key may bring a larger share; the next window surely does.
  const int64_t until_next_sync =
      std::clamp<int64_t>(entry.next_sync_micros - context.clock_micros, 1, window_end - now);
  if (cost == 0) {
    d.remaining = std::clamp<int64_t>(share - local, 0, d.remaining);
    if (d.retry_after_micros == 0 && local + 1 > share) d.retry_after_micros = until_next_sync;
    return d;
  }
  if (local + cost > share) {
    d.allowed = false;
    d.reason = DenyReason::kOverLimit;
    d.remaining = 0;
    d.retry_after_micros = until_next_sync;
    return d;
  }
  d.remaining = std::min(d.remaining, share - local - cost);
  entry.unsent_current += cost;
  return d;
}

}  // namespace tollgate::sync
