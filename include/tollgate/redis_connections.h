// Copyright tollgate authors. One set of connections to Redis, shared by a process's stores.
//
//   auto redis = tollgate::RedisConnections::Connect({.url = "redis://127.0.0.1:6379"});
//   if (!redis.ok()) { /* bad URL, Redis unreachable, AUTH refused, Redis too old */ }
//   auto exact = tollgate::RedisStore::Create({.redis = *redis});
//   auto registry = tollgate::InstanceRegistry::Start({.redis = *redis});
//   auto sync = tollgate::SyncStore::Create(
//       {.redis = *redis, .instance_count = [&] { return (*registry)->Count(); }});
//
// (tollgate/fleet.h builds all of these, and the resilience layer, in one call.)
//
// The exact RedisStore, the SyncStore and the InstanceRegistry take these and share them: one
// pool of pipelined connections per node (per event loop, with `caller_loops`), one topology
// (a cluster's slot map, Sentinel's primary) followed for all of them. Each store keeps them
// alive as long as it lives. These options are the only place a Redis URL and its timings
// are given.
#ifndef TOLLGATE_REDIS_CONNECTIONS_H_
#define TOLLGATE_REDIS_CONNECTIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace tollgate {

struct RedisConnectionsOptions {
  // One of
  //   redis://[user:password@]host[:port][/db]
  //   rediss://[user:password@]host[:port][/db][?ca=FILE&cert=FILE&key=FILE&verify=no] (TLS)
  //   redis-cluster://[user:password@]host[:port][,host[:port]...]        (seed nodes)
  //   redis-sentinel://[user:password@]host[:port][,host[:port]...]/<master name>[?db=N]
  //   rediss-cluster://..., rediss-sentinel://... (TLS to every node and sentinel; the same
  //     ?ca=FILE&cert=FILE&key=FILE&verify=no parameters as rediss://)
  // `:password@` authenticates as the default user; `user:password@` as an ACL user (on
  // the data nodes; sentinels are asked without AUTH). User and password may be
  // percent-encoded. Empty: no Redis (Connect answers InvalidArgument; a Fleet then keeps
  // its limits in memory).
  std::string url;
  // Connections per node (one per loop of `caller_loops`), used round-robin; commands of
  // concurrent callers are pipelined on them, so a few suffice.
  int connections = 2;
  // Time allowed for TCP connect, AUTH, SELECT and the version check.
  int64_t connect_timeout_ms = 1000;
  // A connection with commands in flight and no reply for this long is dropped and
  // re-established; its pending commands fail with Unavailable. (A limit's deadline, much
  // shorter, is enforced above the stores: ResilientStore.)
  int64_t reply_timeout_ms = 2000;
  // Reconnect backoff after a connection drops: doubles from min to max.
  int64_t reconnect_min_ms = 20;
  int64_t reconnect_max_ms = 1000;
  // Cluster: how often the slot map is read again (also soon after MOVED, CLUSTERDOWN or a
  // lost connection); Sentinel: how often the sentinels are asked for the primary (also soon
  // after a lost connection or READONLY). Unused for redis://.
  int64_t refresh_interval_ms = 1000;
  // For a service that runs its own event loops (Boost.Asio io_contexts, each run by one
  // thread): one connection per loop, used by every command issued on that loop's thread
  // (the commands of one turn of the loop leave in one write), whose reply is then handled on
  // that same thread, without a hop between threads. Commands from any other thread use the
  // connections' own I/O thread. redis:// and rediss:// only (a cluster or Sentinel keeps
  // its own I/O thread for every command). The periodic work of the stores created on these
  // connections (sync rounds, heartbeats) starts on one of the loops.
  // REQUIRES: the loops run for as long as the connections live, and are destroyed after
  // them; the connections are created on a thread that is none of them.
  std::vector<boost::asio::io_context*> caller_loops = {};
};

// Connections to one Redis deployment. Thread-safe. Destroying it (when the last store that
// holds it goes) closes every connection: at once, or, when that happens on one of its own
// I/O threads or loops, soon after on a thread started for it.
class RedisConnections {
 public:
  // Parses the URL and connects (AUTH, SELECT, the version check); a cluster's slot map is
  // read from the first seed that answers, Sentinel must name a primary. Errors:
  // InvalidArgument (URL, options), Unavailable (cannot connect), PermissionDenied (AUTH or
  // SELECT refused), FailedPrecondition (Redis older than 7.0).
  static absl::StatusOr<std::shared_ptr<RedisConnections>> Connect(RedisConnectionsOptions options);

  RedisConnections(const RedisConnections&) = delete;
  RedisConnections& operator=(const RedisConnections&) = delete;
  virtual ~RedisConnections() = default;

  // Connections ready now (to every primary of a cluster; the loops' own not counted).
  virtual int ReadyConnections() const = 0;

 protected:
  RedisConnections() = default;
};

}  // namespace tollgate

#endif  // TOLLGATE_REDIS_CONNECTIONS_H_
