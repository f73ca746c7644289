// Copyright tollgate authors. Hot keys: local counters synced with Redis on an interval.
//
//   auto redis = tollgate::RedisConnections::Connect({.url = "redis://127.0.0.1:6379"});
//   auto store = tollgate::SyncStore::Create(
//       {.redis = *redis, .instance_count = [&] { return registry->Count(); }});
//   // Route the limits with `mode: sync` to *store (LimiterOptions::sync_store); the others
//   // to the exact RedisStore, on the same connections.
//
// (tollgate/fleet.h builds it beside the exact store and the instance registry.)
//
// For limits with `mode: sync` (fixed_window and sliding_window only), every decision is
// made in this process, without a Redis call. Each instance keeps, per (limit, key,
// window), the last known global count read from Redis (its "view"), the units it admitted
// since (its delta), and its grant: how many units it may admit before its next sync.
//
//   delta + cost <= grant
//
// A sync (one Lua script, atomic in Redis) adds the delta to the window's counter, releases
// this instance's old grant, and grants it its part of what is left once the counter and every
// other instance's outstanding grant are subtracted (the rules of src/algorithm/share.h): with
// `Limit::shares` kDemand (the default), in proportion to the demand each instance reported
// for the key at its last sync (units asked of it, admitted or refused), at least 1/(10N) of
// it; with kEqual, 1/N. An instance that has not synced the window yet is assumed to hold
// what it may spend before its first sync of a window: the first share the script set aside
// for it at its last sync of the previous window (kDemand, fixed windows), else its floor,
// floor(limit / N) (kEqual) or floor(limit / (10N)) (kDemand), for a sliding window of what
// the estimate left in its view. So a key the load balancer pins to one instance gets all of
// its limit but the others' floors. A sliding window's grant carries over the window boundary (its
// estimate does not jump there), and the others hold what is left of it until this instance
// syncs the new window. So counted + granted never exceeds the limit, and N instances can
// never spend more than the remaining between syncs. The only excess (docs/sync.md) comes
// from units admitted while the instance's own sync is in flight beyond the grant it brings
// back, a wrong N (fewer than the live instances), clocks that disagree on the window, or a
// sync whose reply was lost.
//
// Rounds run on `SyncStoreOptions::timers`, every `Limit::sync_interval_micros` per key: each
// sends the deltas of every key that has one or was checked recently, and reads back totals
// and grants, in one EVALSHA for all keys together (INCRBY and PEXPIRE ... NX in the same
// atomic step); on a Redis Cluster, one EVALSHA per hash slot, to the node that owns it. The
// counters use the exact RedisStore's layout, `<key_prefix><limit name>:{<key>}:<window index>`
// (grants in `<counter>:grants`, demand reports in `<key_prefix><limit name>:{<key>}:demand`),
// so exact and sync instances of one limit count the same thing.
// Window indexes come from the injected clock plus an offset learned from Redis TIME at every
// sync, so instances with skewed clocks still count into the same windows.
//
// Cold keys (no delta and no check for 2 intervals) stop being synced and are forgotten
// once their window no longer matters. At `max_keys` tracked keys, a new key is decided by a
// local in-memory limiter at this instance's floor per window, never synced (counted in
// SyncStoreStats::overflow_decisions).
//
// When Redis is unreachable, deltas are kept and sent by the next successful sync for
// windows still current (the current and the just-ended one); decisions continue within
// the last grant (a new window: the first share set aside for it, else the floor). Each sync
// carries a sequence number that Redis records, so a sync whose reply was lost but which Redis
// applied is never counted twice. Limits with `on_store_failure: fail_closed` (only with
// `allow_sync_with_fail_closed`) are refused with DenyReason::kStoreUnavailable once the last
// successful sync is older than 2 of their intervals.
#ifndef TOLLGATE_SYNC_STORE_H_
#define TOLLGATE_SYNC_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tollgate/clock.h"
#include "tollgate/redis_connections.h"
#include "tollgate/store.h"
#include "tollgate/timers.h"

namespace tollgate {

struct SyncStoreOptions {
  // The connections (tollgate/redis_connections.h), shared with the process's other stores;
  // their reply_timeout_ms bounds a sync round. REQUIRES: non-null.
  std::shared_ptr<RedisConnections> redis = nullptr;
  // Prepended to every key; use the exact RedisStore's prefix to share its counters.
  std::string key_prefix = "tollgate:";
  // Time source for windows and intervals. nullptr means SystemClock().
  // REQUIRES: outlives the store.
  Clock* clock = nullptr;
  // Where sync rounds are scheduled: a service passes LoopTimers over its event loops (with
  // connections over the same loops, every round then runs on one loop); tests pass
  // SimulatedTimers (rounds happen as the test advances them). nullptr: ThreadTimers() of
  // the store's own. A round's bookkeeping runs on the timers' thread, in time proportional
  // to the tracked keys; its Redis call never blocks it.
  std::shared_ptr<Timers> timers = nullptr;
  // N, the number of live instances sharing the limits (e.g. InstanceRegistry::Count),
  // read once per sync round. nullptr means 1. Values below 1 count as 1.
  std::function<int64_t()> instance_count;
  // Upper bound on tracked (synced) keys, one per (limit, key).
  int64_t max_keys = 100'000;
  // Independent shards of the key table, each with its own lock. Rounded up to a power of 2.
  int shards = 64;
};

// Counters for metrics. Monotonic except keys_tracked and clock_offset_micros.
struct SyncStoreStats {
  int64_t syncs = 0;                // sync rounds that reached Redis and were applied
  int64_t sync_failures = 0;        // sync rounds that failed (deltas kept)
  int64_t redis_commands = 0;       // commands sent to Redis by sync rounds
  int64_t keys_tracked = 0;         // (limit, key) entries in memory now
  int64_t keys_synced = 0;          // key syncs sent (one per key per round)
  int64_t overflow_decisions = 0;   // decisions for keys beyond max_keys (local share only)
  int64_t dropped_units = 0;        // unsynced units dropped because their window ended
  int64_t clock_offset_micros = 0;  // Redis TIME minus the clock, as last learned
};

// A Store for `mode: sync` limits. Decisions carry DecisionSource::kSync. Thread-safe.
class SyncStore : public Store {
 public:
  // Loads the sync script and learns the clock offset. Errors: InvalidArgument (no
  // connections, options), Unavailable (Redis cannot be reached now), Internal (the script
  // did not load).
  static absl::StatusOr<std::unique_ptr<SyncStore>> Create(SyncStoreOptions options);

  // Stops the rounds, then runs a last one (after the one in flight, if any) so the other
  // instances' counts include this one's deltas, and waits for it. On one of the connections'
  // threads (a loop of a service) it does not wait: the last round ends there after the store
  // is gone, and lets go of the connections then.
  ~SyncStore() override = default;

  // Checks are answered inline. A limit not in sync mode (Limit::mode), or not valid there
  // (ValidateLimit: a token bucket, invalid numbers, a sync interval below 10 ms) is
  // InvalidArgument naming the limit.

  // Runs one sync round now for every key with a delta or checked recently, whatever its
  // interval, and returns when it is done: OK, or why Redis could not be reached. Scheduled
  // rounds do the same on their own (one round at a time: this waits for one in progress).
  // REQUIRES: not on a thread the connections' replies need (one of their loops).
  virtual absl::Status SyncNow() = 0;

  virtual SyncStoreStats stats() const = 0;

  std::string_view Name() const override { return "sync"; }
};

}  // namespace tollgate

#endif  // TOLLGATE_SYNC_STORE_H_
