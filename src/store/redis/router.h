// Copyright tollgate authors. Where a Redis command goes: the one server, the node that
// serves a key's hash slot in a Redis Cluster, or the primary that Sentinel names.
#ifndef TOLLGATE_SRC_STORE_REDIS_ROUTER_H_
#define TOLLGATE_SRC_STORE_REDIS_ROUTER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "src/store/redis/client.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/resp.h"

namespace tollgate::redis {

// A slot argument meaning "any node" (a command without keys).
inline constexpr int kAnySlot = -1;

struct RouterOptions {
  // Connections per data node, and the connect, reply and reconnect timings of each. The
  // URL's host and port are ignored (they come from the RedisTarget).
  ClientOptions client;
  // Cluster: how often the slot map is read again; Sentinel: how often the sentinels are
  // asked for the primary. Both also refresh at once on a redirect, a lost connection or a
  // READONLY reply (at most once per `min_refresh_interval`).
  std::chrono::milliseconds refresh_interval{1000};
  std::chrono::milliseconds min_refresh_interval{50};
  // Standalone only: one connection per loop, for commands sent on that loop's thread
  // (RedisStoreOptions::caller_loops).
  std::vector<boost::asio::io_context*> caller_loops;
};

// Sends commands to the right Redis node and follows topology changes. Thread-safe;
// callbacks run on the router's I/O thread, or inline when failing fast.
class Router {
 public:
  // Reaches the target and waits for its first topology: the standalone server is
  // connected; a cluster's slot map was read from a seed and every primary's connections
  // made their first attempt; Sentinel named a primary and it was connected. Errors as
  // RedisConnection::Start (Unavailable, PermissionDenied, FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<Router>> Connect(const RedisTarget& target,
                                                         const RouterOptions& options);

  Router() = default;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;
  // Fails pending commands with Unavailable and stops the I/O thread.
  // REQUIRES: not called on the I/O thread.
  virtual ~Router() = default;

  // Sends `formatted_command`, whose keys all hash to `slot` (kAnySlot for none), and calls
  // `done` once with the final reply.
  //
  // Cluster: MOVED updates the slot's node, schedules a map refresh and resends there;
  // TRYAGAIN (a multi-key command during a slot migration) resends after a short pause;
  // ASK resends to the importing node after ASKING when `follow_ask`, else to the same
  // node after a short pause until the migration of the slot is over (for scripts that
  // touch keys they do not declare). Redirects and pauses stop once `reply_timeout` has
  // passed since the call: then Unavailable. CLUSTERDOWN is Unavailable.
  // Sentinel: a READONLY reply (the node was demoted) becomes Unavailable and makes the
  // router ask the sentinels again.
  // Every other reply, error replies included (NOSCRIPT), goes to `done` as is; a
  // connection failure is Unavailable and (cluster, sentinel) triggers a refresh.
  virtual void Send(int slot, std::string formatted_command, ReplyCallback done,
                    bool follow_ask = true) = 0;

  // Send of a write to be answered once a replica holds it (src/store/redis/durable_writes.h):
  // on the durable connection of the node that serves `slot`, with the same redirects (an ASK
  // is waited out on the same node rather than followed) and READONLY handling. `done` gets
  // the reply once a WAIT sent after it returned with a replica, UnconfirmedWriteError when
  // none confirmed in time, or the reply at once when it is an error or wrote nothing.
  virtual void SendDurable(int slot, std::string formatted_command, const DurableSend& how,
                           ReplyCallback done) = 0;

  // Blocking Send. REQUIRES: not on the I/O thread.
  absl::StatusOr<RedisReply> Command(const std::vector<std::string>& args, int slot = kAnySlot);

  // Runs `task` soon on one of the router's I/O threads: the caller loops in turn when it has
  // them, else its own I/O thread. Periodic work (sync rounds, heartbeats) starts there, so
  // that the commands it sends, their replies and its LoopTimers stay on that one thread. A
  // task still queued when the router or its loop stops is destroyed unrun.
  virtual void Post(absl::AnyInvocable<void() &&> task) = 0;

  // Whether the calling thread is one of the router's I/O threads (a caller loop, or its
  // own): one that must not block on a reply, which may need it to be delivered.
  virtual bool OnIoThread() const = 0;

  // Ready connections to the nodes commands go to (every primary, for a cluster).
  virtual int ReadyConnections() const = 0;
  virtual Topology topology() const = 0;
  // The primaries that own at least one slot ("host:port"), or the one node.
  virtual std::vector<std::string> Primaries() const = 0;
};

// For the implementations: the cluster and sentinel routers (cluster_router.cc,
// sentinel_router.cc).
absl::StatusOr<std::unique_ptr<Router>> ConnectClusterRouter(const RedisTarget& target,
                                                             const RouterOptions& options);
absl::StatusOr<std::unique_ptr<Router>> ConnectSentinelRouter(const RedisTarget& target,
                                                              const RouterOptions& options);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_ROUTER_H_
