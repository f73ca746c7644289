// Copyright tollgate authors. Sync mode's request path for one (limit, key): what this
// instance knows of it, and the decision made from that alone.
//
// Per (limit, key) an instance keeps, for its current window w and the one before:
//   view      the global count last read from Redis (everybody's synced units),
//   unsent    units admitted here and not yet taken by a round,
//   unacked   units in rounds whose reply has not come back OK yet,
//   grant     how many units it may admit in w beyond its synced ones, from its last sync.
// A check passes when the exact algorithm (src/algorithm/) on the known total, view + unsent +
// unacked, allows it, and this instance's own units stay within its grant (before its first
// sync of a window: its first share, src/algorithm/share.h). docs/sync.md has the rule, the
// invariant it keeps (counted + granted <= limit) and the overshoot bound.
//
// Pure: no locks, no clock, no I/O. The key table (key_table.h) holds entries under its shard
// locks; rounds (round.h) take their units and apply replies to them.
#ifndef TOLLGATE_SRC_STORE_SYNC_ENTRY_H_
#define TOLLGATE_SRC_STORE_SYNC_ENTRY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "tollgate/decision.h"
#include "tollgate/limit.h"

namespace tollgate::sync {

// A key with no check and no delta for this many of its intervals is cold: not synced.
inline constexpr int64_t kColdIntervals = 2;
// A fail_closed limit refuses once the last successful round is this many of its intervals old.
inline constexpr int64_t kFailClosedIntervals = 2;

// What an entry needs of its limit, copied once: rounds outlive any one call's Limit.
struct KeyInfo {
  std::string limit_name;
  LimitNumbers numbers;  // fixed_window or sliding_window
  int64_t sync_interval_micros = 0;
  // <prefix><limit name>:{<key>}: the exact RedisStore's layout; counters are
  // <counter_base>:<window index>, so exact and sync instances of a limit count the same thing.
  std::string counter_base;
  // The script call the key's counters go in: their hash slot on a Redis Cluster, one group
  // (redis::kAnySlot) on one server.
  int slot = -1;
  Shares shares = Shares::kDemand;  // how grants and first shares divide the limit
};

struct Entry {
  std::shared_ptr<const KeyInfo> info;
  int64_t window_index = 0;
  int64_t view_current = 0;
  int64_t view_previous = 0;
  int64_t unsent_current = 0;
  int64_t unsent_previous = 0;
  int64_t unacked_current = 0;
  int64_t unacked_previous = 0;
  // Units this instance may admit in the current window beyond its synced ones, as granted by
  // the last successful sync of the window; -1 before one (then its first share). For a
  // sliding window, what was left of the previous window's grant until the first sync of this
  // one (`grant_carried`; see src/store/redis/lua/sync.lua).
  int64_t grant_current = -1;
  bool grant_carried = false;
  // Shares::kDemand, fixed window: what this instance may spend in the current window before
  // its first sync of it, as a sync of the previous window set it aside (src/algorithm/share.h,
  // NextFirstShare); -1: none, then FirstShare(left, N, shares). `next_first_share` is the one
  // the last reply set aside for the next window (window_index + 1).
  int64_t first_share = -1;
  int64_t next_first_share = -1;
  // Units asked of this instance (admitted or refused) since a round last took the entry.
  int64_t demand = 0;
  int64_t last_check_micros = 0;  // the store's clock, without the Redis offset
  int64_t next_sync_micros = 0;   // likewise

  int64_t LocalCurrent() const { return unsent_current + unacked_current; }
  int64_t LocalPrevious() const { return unsent_previous + unacked_previous; }
  bool HasDeltas() const {
    return unsent_current + unsent_previous + unacked_current + unacked_previous > 0;
  }
  // When the entry stops mattering (a missing entry then means the same thing).
  int64_t ExpiresAtMicros() const;
};

// A new entry for `info`, in the window of `now_micros`, due for its first sync one interval
// after `clock_micros`.
Entry NewEntry(std::shared_ptr<const KeyInfo> info, int64_t clock_micros, int64_t now_micros);

// When and among how many instances a decision is made.
struct DecideContext {
  int64_t clock_micros = 0;      // the store's clock: intervals and staleness
  int64_t now_micros = 0;        // the clock plus the offset learned from Redis TIME: windows
  int64_t instances = 1;         // N
  int64_t last_sync_micros = 0;  // the store's clock at the last successful round
};

// Decides a check of `cost` (>= 0) and, when it is allowed with cost > 0, consumes it (adds
// it to `unsent_current`). Rolls the entry into the current window first, adding the units
// that drops to `*dropped_units`. A peek (cost 0) is allowed, consumes nothing, and its
// retry_after says when a cost of 1 would pass: 0 if now, else as a refused cost of 1. A
// refusal by the grant waits for the key's next sync (which may bring a larger grant),
// capped by the window's end; `remaining` is what this instance may still admit before then.
// A fail_closed limit is refused (kStoreUnavailable) once the last round that reached Redis
// is kFailClosedIntervals of its intervals old. REQUIRES: entry.info set.
Decision Decide(Entry& entry, FailureMode on_store_failure, int64_t cost,
                const DecideContext& context, int64_t* dropped_units);

// Moves the entry to window `index` if that is later: the current window's counts become the
// previous window's (a sliding window keeps what is left of its grant; the window right after
// takes the first share set aside for it). Returns the unsent
// units that no longer belong to a window that matters (older than the previous one).
int64_t Roll(Entry& entry, int64_t index);

}  // namespace tollgate::sync

#endif  // TOLLGATE_SRC_STORE_SYNC_ENTRY_H_
