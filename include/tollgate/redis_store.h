// Copyright tollgate authors. Limit state shared in Redis (7.0 or later).
//
//   auto store = tollgate::RedisStore::Create({.url = "redis://127.0.0.1:6379"});
//   if (!store.ok()) { /* bad URL, Redis unreachable, AUTH refused, Redis too old */ }
//   for (const std::string& warning : (*store)->warnings()) { /* log it */ }
//   auto limiter = tollgate::Limiter::Create({.limits = ..., .store = std::move(*store)});
//
// Or on connections shared with the process's SyncStore and InstanceRegistry:
//   auto redis = tollgate::RedisConnections::Connect({.url = "redis://127.0.0.1:6379"});
//   auto store = tollgate::RedisStore::Create({.redis = *redis});
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
// Three deployments (RedisStoreOptions::url): one Redis (redis://), a Redis Cluster
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
#include "tollgate/store.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace tollgate {

struct RedisStoreOptions {
  // One of
  //   redis://[user:password@]host[:port][/db]
  //   rediss://[user:password@]host[:port][/db][?ca=FILE&cert=FILE&key=FILE&verify=no] (TLS)
  //   redis-cluster://[user:password@]host[:port][,host[:port]...]        (seed nodes)
  //   redis-sentinel://[user:password@]host[:port][,host[:port]...]/<master name>[?db=N]
  //   rediss-cluster://..., rediss-sentinel://... (TLS to every node and sentinel; the same
  //     ?ca=FILE&cert=FILE&key=FILE&verify=no parameters as rediss://)
  // `:password@` authenticates as the default user; `user:password@` as an ACL user (on
  // the data nodes; sentinels are asked without AUTH). User and password may be
  // percent-encoded.
  std::string url = "redis://127.0.0.1:6379";
  // Prepended to every key this store writes.
  std::string key_prefix = "tollgate:";
  // Connections to Redis (to each primary and replica of a cluster), used round-robin;
  // commands of concurrent callers are pipelined on them, so a few suffice.
  int connections = 2;
  // Time allowed for TCP connect, AUTH, SELECT and the version check.
  int64_t connect_timeout_ms = 1000;
  // A connection with commands in flight and no reply for this long is dropped and
  // re-established; its pending checks fail with Unavailable. (The per-limit deadline,
  // much shorter, is enforced above the store.)
  int64_t reply_timeout_ms = 2000;
  // Reconnect backoff after a connection drops: doubles from min to max.
  int64_t reconnect_min_ms = 20;
  int64_t reconnect_max_ms = 1000;
  // Cluster: how often the slot map is read again (also soon after MOVED, CLUSTERDOWN or a
  // lost connection). Sentinel: how often the sentinels are asked for the primary (also
  // soon after a lost connection or READONLY). Unused for redis://.
  int64_t refresh_interval_ms = 1000;
  // For a service that runs its own event loops (Boost.Asio io_contexts, each run by one
  // thread): one connection per loop, used by every check issued on that loop's thread
  // (the checks of one turn of the loop leave in one write), whose callback then runs on
  // that same thread, without a hop between threads.
  // Checks from any other thread use the store's own I/O thread. redis:// only (a cluster
  // or Sentinel keeps its own I/O thread for every check).
  // REQUIRES: the loops run for as long as the store lives, and are destroyed after it;
  // the store is created and destroyed on a thread that is none of them.
  std::vector<boost::asio::io_context*> caller_loops;
  // Connections shared with the process's other stores (tollgate/redis_connections.h). When
  // set, the store uses them and every option above but `key_prefix` is theirs to say
  // (RedisConnectionsOptions); when null, the store makes connections of its own from them.
  std::shared_ptr<RedisConnections> redis = nullptr;
  // The clock AddAsync reads its items' `at_micros` against: it sends their age, since
  // Redis decides at its own TIME. Give it the clock that stamped them (a ResilientStore's
  // ResilienceOptions::clock). nullptr: SystemClock(). REQUIRES: outlives the store.
  Clock* clock = nullptr;
};

// A Store keeping every limit's state in Redis. Thread-safe.
//
// CheckAsync sends one script call for all items and runs `done` on the store's I/O
// thread (or the caller's loop, see `caller_loops`) with decisions whose `source` is kRedis, or
// with Unavailable when Redis cannot be reached (never waiting past `reply_timeout_ms` for a dead
// connection). A script flushed from Redis (SCRIPT FLUSH, restart, failover) is reloaded
// transparently.
//
// In a Redis Cluster, items whose keys share a hash slot (every limit on one entity key)
// still go in one script call, to the slot's primary. Items on several slots are checked
// with one call per slot; if any refuses or fails, what the others consumed is given back
// before `done` runs, so a refused request consumes nothing (a concurrent request may
// meanwhile see the consumption and be refused: a transient over-refusal, never an
// over-admission). While a primary is down, checks of its slots fail fast with
// Unavailable until a replica is promoted and the slot map is read again.
class RedisStore : public Store {
 public:
  // Parses the URL, connects every connection (AUTH, SELECT, INFO server) unless given
  // shared ones, loads the script, and reads `maxmemory-policy`. A cluster's slot map is read from
  // the first seed that answers; Sentinel must name a primary. Errors: InvalidArgument (URL,
  // options), Unavailable (cannot connect), PermissionDenied (AUTH or SELECT refused),
  // FailedPrecondition (Redis older than 7.0).
  static absl::StatusOr<std::unique_ptr<RedisStore>> Create(RedisStoreOptions options);

  // Things found at start that do not stop the store but deserve a log line: an eviction
  // policy that can drop limit keys (silently resetting counters), or a setting that could
  // not be read.
  virtual const std::vector<std::string>& warnings() const = 0;

  std::string_view Name() const override { return "redis"; }
};

}  // namespace tollgate

#endif  // TOLLGATE_REDIS_STORE_H_
