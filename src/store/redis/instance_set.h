// Copyright tollgate authors. The set of live instances in Redis and the fleet's demand totals
// beside it: the Redis side of InstanceRegistry (src/resilience/instance_registry.cc), which
// owns what is done with the answers (N, reachability, fail_open's shares).
#ifndef TOLLGATE_SRC_STORE_REDIS_INSTANCE_SET_H_
#define TOLLGATE_SRC_STORE_REDIS_INSTANCE_SET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "tollgate/redis_connections.h"

namespace tollgate::redis {

// Units asked of each limit, by limit name.
using DemandUnits = std::vector<std::pair<std::string, int64_t>>;

// The fleet's totals of one demand period as a heartbeat read them.
struct DemandTotals {
  std::string created;  // the incarnation of the period's hash in Redis
  DemandUnits units;
};

// What a probe answered. A heartbeat: the live count and, with demand, the period it ran in,
// the incarnation of that period's totals and, in a new period, the totals of the two before
// (the previous period first). A PING: nothing (count 0).
struct HeartbeatReply {
  int64_t count = 0;
  int64_t period = -1;
  std::string created;
  bool has_previous = false;
  std::vector<DemandTotals> previous;
};

struct InstanceSetOptions {
  // The sorted set (member: instance id, score: last heartbeat, Redis TIME in microseconds).
  std::string key;
  std::string instance_id;
  // A member not heard from for this long is dropped by the next heartbeat.
  int64_t instance_ttl_ms = 3000;
  // The period demand is totalled over, an epoch of Redis' clock.
  int64_t demand_period_ms = 10'000;
};

// One instance's heartbeats (lua/heartbeat.lua: one atomic step adds it with Redis' own time,
// drops members older than the TTL, sets the key's TTL and returns the count; with demand it
// also adds this instance's units to the current period's totals, keys `<key>:demand:{0,1,2}`
// in the set's slot, each with a TTL of three periods, and reads the two periods before), its
// PINGs, and its leaving. Thread-safe.
class InstanceSet {
 public:
  using Reply = absl::AnyInvocable<void(absl::StatusOr<HeartbeatReply>) &&>;
  // Sends a command already formatted; `reply` runs once, on the connections' I/O thread (or
  // inline when failing fast), with the reply parsed: Unavailable for an error or an
  // unexpected reply.
  using Send = absl::AnyInvocable<void(Reply reply) &&>;

  // REQUIRES: `connections` non-null.
  InstanceSet(std::shared_ptr<RedisConnections> connections, InstanceSetOptions options);

  // This instance's demand for a heartbeat: the period whose totals it last learned (-1:
  // none), and the units counted since its last heartbeat.
  struct Demand {
    int64_t learned_period = -1;
    const DemandUnits* units = nullptr;
  };
  // A heartbeat, with `demand` when non-null (read before this returns).
  Send Heartbeat(const Demand* demand) const;
  // PING.
  Send Ping() const;

  // Runs `task` soon on one of the connections' I/O threads (Router::Post).
  void Post(absl::AnyInvocable<void() &&> task) const;

  // Removes this instance from the set now, so that the others' count drops without waiting
  // for the TTL. Blocking. REQUIRES: not on one of the connections' threads.
  void Leave() const;

 private:
  Send Sender(std::string formatted_command, bool heartbeat, bool demand) const;

  const std::shared_ptr<RedisConnections> connections_;
  const InstanceSetOptions options_;
  const int slot_;                        // the hash slot of options_.key
  std::vector<std::string> demand_keys_;  // heartbeat.lua's KEYS[2..4]
};

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_INSTANCE_SET_H_
