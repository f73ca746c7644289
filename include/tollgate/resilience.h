// Copyright tollgate authors. What a limit does when its store is slow or down.
//
// `ResilientStore` wraps a shared store (Redis) and guarantees that no caller waits longer
// than the deadline of the limits it checks (`Limit::timeout_micros`, default 10 ms),
// whatever the store does. When the store fails, times out, or its circuit breaker is open,
// each limit's `on_store_failure` answers instead:
//   fail_open   a local in-memory limiter at this instance's share: limit / N (for a token
//               bucket, capacity / N and refill / N), never below 1; with Shares::kDemand
//               and `fallback_shares`, its learned fraction of the limit instead
//               (tollgate/fallback_shares.h);
//   fail_closed refused, DenyReason::kStoreUnavailable, with `fail_closed_retry_after_ms`;
//   local       a local in-memory limiter with the limit's own `local` numbers.
// Such decisions carry DecisionSource::kFallback.
//
// What fail_open and local admit meanwhile is recorded (per window for windows, in time
// slices for a token bucket) and, when the store answers again, added to the shared state
// as ItemOp::kAdd items as of when it was admitted (best effort: "Reconciliation" in
// docs/resilience.md), so a key that spent its budget during the outage does not get a
// second one the moment the store is back, and a key that stayed within the limit is not
// put into debt. A call that missed its deadline but whose store reply comes later is
// settled by that reply: consumed in the store, its fallback admission is not added again.
//
// State changes (store unreachable or back, breaker opened or closed, fallback started or
// ended, consumption reconciled, instance count changed) are reported to an optional
// callback, for logs.
#ifndef TOLLGATE_RESILIENCE_H_
#define TOLLGATE_RESILIENCE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tollgate/clock.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/redis_connections.h"
#include "tollgate/store.h"
#include "tollgate/timers.h"

namespace tollgate {

struct CircuitBreakerOptions {
  // Consecutive failures (errors or missed deadlines) that open the breaker. While open,
  // checks do not wait on the store at all: the failure policy answers at once.
  int failure_threshold = 5;
  // How long the breaker stays open before one probe call is let through. The probe's
  // success closes it (shared limits resume); its failure opens it again for this long.
  int64_t open_duration_ms = 500;
};

enum class CircuitState { kClosed, kOpen, kHalfOpen };
std::string_view CircuitStateName(CircuitState state);

// A change of state worth one log line.
struct ResilienceEvent {
  enum class Kind {
    kStoreUnreachable,      // a probe (the heartbeat) failed after succeeding; `detail`: why
    kStoreReachable,        // a probe succeeded after failing
    kBreakerOpened,         // consecutive failures opened the breaker
    kBreakerClosed,         // the store answered again
    kFallbackStarted,       // the first decision answered by a failure policy; `count`: N,
                            // `detail`: the fail_open shares in use
    kFallbackEnded,         // the store answered again; `count`: fallback decisions since start
    kReconciled,            // fallback consumption sent; `count`: entries added, `dropped`: lost
    kInstanceCountChanged,  // `count`: the new N, `previous`: the old one
    // A WAIT for durable writes (Limit::durable) returned without a replica's confirmation,
    // after the last one had one; `detail`: the primary and why. Durable limits answer from
    // their failure policy until kReplicasConfirming.
    kReplicasNotConfirming,
    kReplicasConfirming,  // a replica confirmed durable writes again; `detail`: the primary
  };
  Kind kind = Kind::kStoreUnreachable;
  int64_t count = 0;
  int64_t dropped = 0;
  int64_t previous = 0;
  std::string detail;
};
std::string_view ResilienceEventName(ResilienceEvent::Kind kind);

// Receives events. Called on store, deadline or heartbeat threads, possibly concurrently:
// must be thread-safe, quick, and must not call back into the store.
using ResilienceEventCallback = std::function<void(const ResilienceEvent&)>;

struct ResilienceOptions {
  // Time for the breaker and the local fallback limiters. nullptr means SystemClock().
  // REQUIRES: outlives the store.
  Clock* clock = nullptr;
  // Where each call's deadline (Limit::timeout_micros) is kept and run: a deadline that
  // passes answers the call from its limit's failure policy on the timers' thread.
  // nullptr: ThreadTimers() of the store's own. A service with event loops passes
  // LoopTimers() over them; tests pass SimulatedTimers. May be shared by several stores.
  std::shared_ptr<Timers> timers;
  CircuitBreakerOptions breaker;
  // The number of live instances sharing the limits (N), read on every fallback decision.
  // nullptr means 1 (this instance takes the whole limit when the store is down).
  std::function<int64_t()> instance_count;
  // fail_open's demand-weighted shares (tollgate/fallback_shares.h), shared with the
  // InstanceRegistry that learns them: every unit asked of a fail_open limit with
  // Shares::kDemand is counted there, and its fallback takes the learned fraction of the
  // limit. nullptr: every fail_open limit takes limit / N.
  std::shared_ptr<FallbackShares> fallback_shares;
  // Retry-After of a fail_closed refusal.
  int64_t fail_closed_retry_after_ms = 1000;
  // Bound on the local fallback limiters' keys.
  int64_t fallback_max_keys = 1'000'000;
  // Bound on the entries of fallback consumption kept for reconciliation (one per (limit,
  // key, window) of a window, one per (limit, key, time slice) of a token bucket);
  // consumption of new entries beyond it is dropped (and counted).
  int64_t reconcile_max_entries = 100'000;
  // Items per kAdd batch (Store::ApplyAsync) when reconciling.
  int64_t reconcile_batch_size = 500;
  // Breaker, fallback and reconciliation events; nullptr: none.
  ResilienceEventCallback on_event;
};

// Counters for metrics. Monotonic.
struct ResilienceStats {
  int64_t store_decisions = 0;     // answered by the wrapped store
  int64_t fallback_decisions = 0;  // answered by a failure policy
  int64_t store_errors = 0;        // the store answered with an error
  int64_t deadlines_missed = 0;    // the store did not answer in time
  int64_t breaker_rejections = 0;  // not sent to the store: the breaker was open
  int64_t late_replies = 0;        // answers that came after the deadline, discarded
  // Late replies that had consumed in the store what the fallback had admitted for the same
  // call: that admission is settled by the store and not reconciled again.
  int64_t late_replies_settled = 0;
  int64_t reconciled_items = 0;         // fallback consumption entries added back to the store
  int64_t reconcile_dropped_items = 0;  // entries lost: over the bound, or the add failed
};

// Upper bounds, in microseconds, of the buckets of the store round-trip histogram: 50 us
// (a local Redis, idle) to 100 ms (far past any sane deadline).
inline constexpr std::array<int64_t, 14> kStoreRoundTripBucketsMicros = {
    50, 100, 200, 300, 500, 750, 1'000, 1'500, 2'500, 5'000, 10'000, 25'000, 50'000, 100'000};

// How long the wrapped store took to answer its checks: one observation per check call that
// the store answered (decisions or an error), including answers that came after the deadline
// (late replies), so the tail is visible. A call the store never answers is not observed
// (it is counted in ResilienceStats::deadlines_missed). Monotonic.
struct StoreRoundTripHistogram {
  // counts[i]: round trips in (bounds[i-1], bounds[i]] microseconds; the last element counts
  // those over kStoreRoundTripBucketsMicros.back(). Not cumulative.
  std::array<int64_t, kStoreRoundTripBucketsMicros.size() + 1> counts{};
  int64_t count = 0;  // the sum of counts
  int64_t sum_micros = 0;
};

// A Store that adds deadlines, a circuit breaker and per-limit failure policies to another.
// Thread-safe.
class ResilientStore : public Store {
 public:
  // REQUIRES: primary non-null.
  static absl::StatusOr<std::unique_ptr<ResilientStore>> Create(std::shared_ptr<Store> primary,
                                                                ResilienceOptions options = {});

  virtual CircuitState circuit_state() const = 0;
  virtual ResilienceStats stats() const = 0;
  // Round trips are measured with the monotonic clock (std::chrono::steady_clock), not the
  // injected Clock: they are durations for operators, and never feed a decision.
  virtual StoreRoundTripHistogram store_round_trips() const = 0;
};

struct InstanceRegistryOptions {
  // The connections to the Redis the limits live in, shared with the process's stores
  // (tollgate/redis_connections.h); a probe fails after probe_timeout_ms without a reply,
  // whatever their own timeouts. REQUIRES: non-null.
  std::shared_ptr<RedisConnections> redis = nullptr;
  // Where probes are scheduled and timed (as SyncStoreOptions::timers): LoopTimers in a
  // service, SimulatedTimers in tests; nullptr: ThreadTimers() of the registry's own.
  std::shared_ptr<Timers> timers = nullptr;
  // The sorted set of live instances (member: instance id, score: last heartbeat, Redis
  // TIME in microseconds).
  std::string key = "tollgate:instances";
  // This instance's id; empty means hostname:pid:random.
  std::string instance_id;
  // How often this instance announces itself and reads the live count.
  int64_t heartbeat_interval_ms = 1000;
  // An instance not heard from for this long is no longer counted.
  int64_t instance_ttl_ms = 3000;
  // How often Redis is probed (the heartbeat when one is due, else PING), and how long a
  // probe may wait for its reply: Redis is known unreachable within about
  // probe_interval_ms + probe_timeout_ms of failing, and reachable again within about
  // probe_interval_ms of answering (plus, after a restart, the connections' reconnect
  // backoff: RedisConnectionsOptions::reconnect_max_ms).
  int64_t probe_interval_ms = 250;
  int64_t probe_timeout_ms = 250;
  // false: only probe, never join the set (an instance whose N is fixed by configuration).
  bool announce = true;
  // kStoreUnreachable, kStoreReachable and kInstanceCountChanged events; nullptr: none.
  ResilienceEventCallback on_event;
  // fail_open's demand-weighted shares (tollgate/fallback_shares.h), shared with the stores
  // that count the demand: each heartbeat adds the units counted since the last one to the
  // fleet's totals of the current period and, in a new period, learns the totals of the two
  // before (in the same script call, keys `<key>:demand:{0,1,2}` in the set's slot, each with
  // a TTL of three periods). nullptr: none. Needs `announce`.
  std::shared_ptr<FallbackShares> fallback_shares = nullptr;
  // The period the fleet's demand is totalled over, an epoch of Redis' clock; the same on
  // every instance. REQUIRES (with fallback_shares): >= 2 * heartbeat_interval_ms.
  int64_t demand_period_ms = 10'000;
};

// Learns N, the number of live instances sharing the limits: every heartbeat, one script
// adds this instance to a sorted set with Redis' own time, drops members older than
// `instance_ttl_ms`, sets the key's TTL, and returns the count. While Redis is unreachable
// the last known count is kept. Adding or removing an instance changes everyone's count
// within about `instance_ttl_ms`. It is also the instance's own probe of Redis, independent
// of request traffic: StoreReachable() says whether the last probe was answered. Probes run
// on injected Timers (InstanceRegistryOptions::timers). Thread-safe.
class InstanceRegistry {
 public:
  // Starts probing on the timers. The first heartbeat runs before this returns; when Redis
  // cannot be reached it is not an error (the count starts at 1 and is learned later).
  // InvalidArgument for no connections or bad intervals. REQUIRES: not on one of the
  // connections' threads (nor is it destroyed there).
  static absl::StatusOr<std::unique_ptr<InstanceRegistry>> Start(InstanceRegistryOptions options);

  virtual ~InstanceRegistry() = default;
  // The last known number of live instances, at least 1.
  virtual int64_t Count() const = 0;
  // Whether the last probe of Redis was answered (false until one was).
  virtual bool StoreReachable() const = 0;
  virtual const std::string& instance_id() const = 0;
};

}  // namespace tollgate

#endif  // TOLLGATE_RESILIENCE_H_
