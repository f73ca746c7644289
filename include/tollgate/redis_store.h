// Copyright tollgate authors. Limit state shared in Redis (7.0 or later).
//
//   auto redis = tollgate::RedisConnections::Connect({.url = "redis://127.0.0.1:6379"});
//   if (!redis.ok()) { /* bad URL, Redis unreachable, AUTH refused, Redis too old */ }
//   auto store = tollgate::RedisStore::Create({.redis = *redis});
//   for (const std::string& warning : (*store)->warnings()) { /* log it */ }
//   auto limiter = tollgate::Limiter::Create({.limits = ..., .store = std::move(*store)});
//
// (tollgate/fleet.h does this, with the deadlines and failure policies a store needs in
// front of it, in one call.)
//
// Every check is one EVALSHA of one Lua script that decides every item of the call with
// Redis' own clock (TIME) and writes only when all pass, so any number of processes
// sharing a Redis never over-admit. Key layout (see docs/redis.md):
//   token bucket:    <key_prefix><limit name>:{<key>}                  (empty-at time, µs)
//   fixed window:    <key_prefix><limit name>:{<key>}:<window index>   (count)
//   sliding window:  <key_prefix><limit name>:{<key>}:<window index>   (count per window)
// The entity key sits in a Redis Cluster hash tag, so every limit on the same key shares
// a slot. Every key is written with a TTL in the same atomic step.
//
// Three deployments (RedisConnectionsOptions::url): one Redis (redis://), a Redis Cluster
// (redis-cluster://, routed by hash slot), or a primary found through Redis Sentinel
// (redis-sentinel://, followed across failovers). See docs/redis.md.
#ifndef TOLLGATE_REDIS_STORE_H_
#define TOLLGATE_REDIS_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tollgate/clock.h"
#include "tollgate/redis_connections.h"
#include "tollgate/resilience.h"
#include "tollgate/store.h"

namespace tollgate {

struct RedisStoreOptions {
  // The connections (tollgate/redis_connections.h), shared with the process's other stores.
  // REQUIRES: non-null.
  std::shared_ptr<RedisConnections> redis = nullptr;
  // Prepended to every key this store writes.
  std::string key_prefix = "tollgate:";
  // The clock kAdd items' `at_micros` are read against: the store sends their age, since
  // Redis decides at its own TIME. Give it the clock that stamped them (a ResilientStore's
  // ResilienceOptions::clock). nullptr: SystemClock(). REQUIRES: outlives the store.
  Clock* clock = nullptr;
  // Durable writes' state changes: ResilienceEvent::Kind::kReplicasNotConfirming and
  // kReplicasConfirming, once per primary and change. nullptr: none.
  ResilienceEventCallback on_event = nullptr;
};

// What durable limits' waits for a replica cost and found (RedisStore::durable_waits()).
// Monotonic.
struct DurableWaitStats {
  // WAIT commands sent: one per group of durable calls sent together on one connection.
  int64_t waits = 0;
  // WAITs that returned without a replica's confirmation (or with an error).
  int64_t wait_timeouts = 0;
  // Durable calls that wrote, answered once a replica held the write.
  int64_t calls_confirmed = 0;
  // Durable calls that wrote but that no replica confirmed in time: store failures
  // (UnconfirmedWriteError), the write spent on the primary.
  int64_t calls_unconfirmed = 0;
  // Each WAIT, from sent to answered.
  StoreRoundTripHistogram wait_latency = {};
};

// A Store keeping every limit's state in Redis. Thread-safe.
//
// ApplyAsync sends one script call for all items and runs `done` on the connections' I/O
// thread (or the caller's loop, see RedisConnectionsOptions::caller_loops) with decisions whose
// `source` is kRedis, or with Unavailable when Redis cannot be reached (never waiting past
// `reply_timeout_ms` for a dead connection). A script flushed from Redis (SCRIPT FLUSH,
// restart, failover) is reloaded transparently.
//
// In a Redis Cluster, items whose keys share a hash slot (every limit on one entity key)
// still go in one script call, to the slot's primary. Items on several slots are checked
// with one call per slot; if any refuses or fails, what the others consumed is given back
// before `done` runs, so a refused request consumes nothing (a concurrent request may
// meanwhile see the consumption and be refused: a transient over-refusal, never an
// over-admission). While a primary is down, checks of its slots fail fast with
// Unavailable until a replica is promoted and the slot map is read again.
//
// A call with a durable limit (Durable) goes on a connection of its own to the primary that
// serves its slot, and is answered once a `WAIT 1 <ms>` sent after it returned with a
// replica: one WAIT covers every call sent together on that connection, and the next group
// goes once it returns (group commit). A call that wrote nothing (every item refused) is
// answered at once. If no replica confirms before the call's deadline (its limits' smallest
// timeout, less a margin for the answer to arrive) it is answered UnconfirmedWriteError: the
// count stays spent on the primary. Calls of other limits never wait behind a WAIT.
class RedisStore : public Store {
 public:
  // Loads the scripts, reads `maxmemory-policy`, and each primary's replicas and settings
  // that bound what a failover loses (warnings()). Errors: InvalidArgument (no
  // connections), Unavailable (Redis cannot be reached now), Internal (a script did not load).
  static absl::StatusOr<std::unique_ptr<RedisStore>> Create(RedisStoreOptions options);

  // Things found at start that do not stop the store but deserve a log line: an eviction
  // policy that can drop limit keys (silently resetting counters), replication settings that
  // let a failover lose counts without a bound, a primary with no replica where fail_closed
  // limits would be durable by default, or a setting that could not be read.
  virtual const std::vector<std::string>& warnings() const = 0;

  // Whether `limit`'s calls wait for a replica on this store: Limit::durable when set, else
  // true for a fail_closed limit in exact mode when the store is on a Redis Sentinel or Cluster
  // deployment whose every primary had a connected replica when the store was created
  // (fail_closed already says "refuse rather than over-admit"; docs/redis.md#durable-limits).
  virtual bool Durable(const Limit& limit) const = 0;
  // OK, or FailedPrecondition naming every limit of `limits` that sets durable: true while a
  // primary had no connected replica when the store was created, so that none of its
  // admissions could ever be confirmed.
  virtual absl::Status CheckDurable(const std::vector<Limit>& limits) const = 0;
  // Counts of the WAITs sent for durable limits.
  virtual DurableWaitStats durable_waits() const = 0;

  std::string_view Name() const override { return "redis"; }
};

}  // namespace tollgate

#endif  // TOLLGATE_REDIS_STORE_H_
