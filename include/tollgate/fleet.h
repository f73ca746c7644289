// Copyright tollgate authors. The production stack in one call: what `tollgate serve` runs.
//
//   auto config = tollgate::LoadConfigFile("limits.yaml");
//   auto fleet = tollgate::Fleet::Connect(
//       {.limits = config->limits, .redis = {.url = "redis://127.0.0.1:6379"}});
//   if (!fleet.ok()) { /* bad URL or limit, Redis unreachable, AUTH refused, ... */ }
//   absl::StatusOr<tollgate::Decision> d = (*fleet)->limiter().Check("api_per_user", "user:42");
//   if (d.ok() && !d->allowed) { /* 429, Retry-After */ }
//
// With a Redis URL, Connect builds, in this order, the one set of connections every part
// shares (tollgate/redis_connections.h), the exact RedisStore, the InstanceRegistry that learns
// N (and, unless N is fixed, fail_open's demand-weighted shares: tollgate/fallback_shares.h),
// the SyncStore for `mode: sync` limits, the ResilientStore in front of the exact store
// (deadlines, circuit breaker, each limit's on_store_failure: tollgate/resilience.h), and the
// Limiter over both stores. Without one, the limits live in this process's memory
// (tollgate/memory_store.h). Every instance connected to the same Redis with the same
// key_prefix and instance_group shares the limits: "5 a second" holds for the whole fleet.
#ifndef TOLLGATE_FLEET_H_
#define TOLLGATE_FLEET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "tollgate/clock.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/limit.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"
#include "tollgate/redis_connections.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/sync_store.h"
#include "tollgate/timers.h"

namespace tollgate {

struct FleetOptions {
  // The limits of limiter(). NewLimiter makes limiters of other limits on the same stores.
  std::vector<Limit> limits;
  // Where the limits live: the Redis at `redis.url`, shared by every instance; with an empty
  // url, this process's memory. With `redis.caller_loops`, checks issued on those loops use
  // connections of their own loop (tollgate/redis_connections.h).
  RedisConnectionsOptions redis;
  // Prepended to every Redis key (the limits' counters and the instance registry), so that
  // several deployments can share one Redis.
  std::string key_prefix = "tollgate:";
  // The instances that count each other in N: those with the same group, whose registry is
  // the key `<key_prefix>instances:<instance_group>` (empty: `<key_prefix>instances`).
  std::string instance_group;
  // N fixed instead of learned (0: learned from heartbeats). With a fixed N this instance only
  // probes Redis, joins no registry, and fail_open takes limit / N (no shares by demand).
  int64_t instances = 0;
  // This instance's id in the registry; empty: hostname:pid:random.
  std::string instance_id;
  // How often this instance announces itself, and the period fail_open's shares are learned
  // over (InstanceRegistryOptions). REQUIRES: demand_period_ms >= 2 * heartbeat_interval_ms.
  int64_t heartbeat_interval_ms = 1000;
  int64_t demand_period_ms = 10'000;
  // Without Redis, the memory store's cap on keys; with Redis, the cap on the local fallback
  // limiters' keys (MemoryStoreOptions::max_keys).
  int64_t memory_max_keys = 1'000'000;
  // The time limits are decided at in memory and in the fallback. nullptr: SystemClock().
  // REQUIRES: outlives the fleet.
  Clock* clock = nullptr;
  // Where deadlines, sync rounds and heartbeats run. nullptr: LoopTimers over
  // `redis.caller_loops` when there are any, else ThreadTimers() (tollgate/timers.h).
  std::shared_ptr<Timers> timers = nullptr;
  // State changes worth a log line: Redis unreachable or back, the breaker, the fallback, N
  // (ResilienceEvent). nullptr: none.
  ResilienceEventCallback on_event = nullptr;
};

// The stores, the limiter over them, and what keeps them running. Thread-safe: every method
// may be called concurrently.
class Fleet {
 public:
  // Builds the stack FleetOptions describes. Errors: InvalidArgument (a limit that is not
  // valid, a bad URL or option), Unavailable (Redis cannot be reached), PermissionDenied
  // (AUTH refused), FailedPrecondition (Redis older than 7.0, or a limit with durable: true
  // while a primary has no replica: RedisStore::CheckDurable). REQUIRES: not on one of
  // `redis.caller_loops`' threads.
  static absl::StatusOr<std::unique_ptr<Fleet>> Connect(FleetOptions options);

  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;
  // Shuts the stack down in order: the limiter; the sync store's last round, so the other
  // instances count this one's deltas; the exact store once its calls are answered; the
  // registry, which leaves the set of live instances; then the connections.
  // REQUIRES: the limiters of NewLimiter are gone (else their stores outlive this); not on
  // one of `redis.caller_loops`' threads.
  virtual ~Fleet() = default;

  // The limiter of FleetOptions::limits.
  virtual Limiter& limiter() const = 0;

  // A limiter of `limits` on the same stores: counters of a limit with the same name and
  // numbers carry on (a config reload). InvalidArgument as Limiter::Create; FailedPrecondition
  // as RedisStore::CheckDurable.
  virtual absl::StatusOr<std::unique_ptr<Limiter>> NewLimiter(std::vector<Limit> limits) const = 0;

  // ---- What it runs on, for metrics and readiness ----

  // Whether the limits live in Redis (FleetOptions::redis.url).
  virtual bool shared() const = 0;
  // Things found at start that deserve a log line: an eviction policy that can drop limit keys
  // (silently resetting counters), or a setting that could not be read.
  virtual const std::vector<std::string>& warnings() const = 0;
  // Without Redis: the memory store (its size and evictions). Else nullptr.
  virtual const MemoryStore* memory_store() const = 0;
  // With Redis: the resilience layer in front of the exact store (its stats, breaker and
  // round trips), and the sync store of `mode: sync` limits. Else nullptr.
  virtual const ResilientStore* resilient_store() const = 0;
  virtual const SyncStore* sync_store() const = 0;
  // With Redis: the exact store behind the resilience layer (its durable limits' waits,
  // RedisStore::durable_waits). Else nullptr.
  virtual const RedisStore* redis_store() const = 0;
  // With Redis and a learned N: fail_open's shares (FallbackShares::Fractions). Else nullptr.
  virtual const FallbackShares* fallback_shares() const = 0;
  // With Redis: the connections every part shares (for other parts of a service that count in
  // the same Redis, such as the Rate Limit Quota Service). Else nullptr.
  virtual const std::shared_ptr<RedisConnections>& connections() const = 0;
  // N: FleetOptions::instances when set, else the live count the registry learned, else 1
  // (without Redis).
  virtual int64_t InstanceCount() const = 0;
  // Whether this instance's own probe of Redis (every 250 ms, whatever the traffic) was
  // answered last time. Always true without Redis.
  virtual bool StoreReachable() const = 0;
  // This instance's id in the registry; "" without Redis.
  virtual const std::string& instance_id() const = 0;

 protected:
  Fleet() = default;
};

}  // namespace tollgate

#endif  // TOLLGATE_FLEET_H_
