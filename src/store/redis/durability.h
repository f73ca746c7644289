// Copyright tollgate authors. Which calls of the Redis store are durable (Limit::durable), and
// what the deployment's replicas and settings allow at start (docs/redis.md#durable-limits).
#ifndef TOLLGATE_SRC_STORE_REDIS_DURABILITY_H_
#define TOLLGATE_SRC_STORE_REDIS_DURABILITY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "src/store/redis/redis_url.h"
#include "src/store/redis/resp.h"
#include "src/store/redis/router.h"
#include "tollgate/limit.h"
#include "tollgate/store.h"

namespace tollgate::redis {

// What one primary reported at start.
struct PrimaryReplication {
  std::string address;  // host:port
  // Replicas in state "online" (INFO replication); -1 when it could not be read.
  int64_t online_replicas = -1;
  // CONFIG GET values; -1 when not read (an ACL that refuses CONFIG, a managed Redis).
  int64_t min_replicas_to_write = -1;
  int64_t min_replicas_max_lag = -1;
  int64_t cluster_replica_validity_factor = -1;  // a cluster node's
  std::string error;  // why something could not be read; empty when all was
};

// What the deployment allows durable limits, found at start.
struct DurabilityAssessment {
  // Whether fail_closed limits are durable unless they say otherwise: a Sentinel or Cluster
  // deployment (where a failover can promote a replica) whose every primary had a replica.
  bool durable_by_default = false;
  // The primaries without a connected replica ("host:port"), or whose replicas could not be
  // read: durable: true cannot be honoured there.
  std::vector<std::string> without_replica;
  // Lines for RedisStore::warnings(): a failover's loss without a bound, no replica where
  // the default would be durable, settings that could not be read.
  std::vector<std::string> warnings;
};

// Reads every primary's replication (INFO replication, CONFIG GET min-replicas-to-write,
// min-replicas-max-lag, cluster-replica-validity-factor) through `router`, and says what it
// allows. REQUIRES: not on the router's I/O thread.
DurabilityAssessment AssessDurability(Router& router);

// The same, from what was read (for tests and AssessDurability).
DurabilityAssessment AssessReplication(Topology topology,
                                       const std::vector<PrimaryReplication>& primaries);

// "connected_slaves:1\r\nslave0:ip=...,state=online,..." -> replicas in state online; -1 when
// the text has no connected_slaves line.
int64_t OnlineReplicas(std::string_view info_replication);

// Whether `limit`'s calls wait for a replica (RedisStore::Durable).
inline bool IsDurable(const Limit& limit, bool durable_by_default) {
  return limit.durable.value_or(durable_by_default &&
                                limit.on_store_failure == FailureMode::kFailClosed &&
                                limit.mode == Mode::kExact);
}

// 0 when no item of `items` that may write (anything but a peek, a check of cost 0) is
// durable; else the time its call has (the smallest timeout of its items, the deadline
// ResilientStore gives it).
int64_t DurableTimeoutMicros(const std::vector<CheckItem>& items, bool durable_by_default);

// Whether a reply of check.lua or lease.lua (8 bytes of time, then 25 bytes per item, each
// starting with its flags) may have written: some item is allowed. A malformed reply: true.
bool ScriptReplyWrote(const RedisReply& reply);

// OK, or FailedPrecondition naming each limit of `limits` with durable: true when
// `assessment` found a primary without a replica.
absl::Status CheckDurableLimits(const std::vector<Limit>& limits,
                                const DurabilityAssessment& assessment);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_DURABILITY_H_
