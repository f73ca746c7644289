// Copyright tollgate authors. Envoy's Rate Limit Quota Service on the gRPC port:
// /envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas, a
// bidirectional stream (src/server/grpc_stream.h) per Envoy filter config.
//
//   auto rlqs = RlqsService::Start({.check_service = service.get(), .redis = connections,
//                                   .instance_count = [&] { return fleet->InstanceCount(); },
//                                   .timers = timers});
//   (*rlqs)->AddMethod(methods);          // before server::GrpcServer::Start
//
// Each stream's messages are reports (RlqsLedger::Report); its buckets are matched against
// the running config's Envoy rules (src/rlqs/bucket.h). Every `ledger.round_micros` a
// round syncs with Redis (sync.lua, one script call per round, or per hash slot on a
// cluster: src/store/sync/round.h) and sends each stream the assignments of the buckets that
// reported since their last one (src/rlqs/assign.h says how they are sized). A round
// comes sooner when a new bucket subscribes. docs/envoy.md ("Rate Limit Quota Service") is
// the user's account.
//
// A stream is ended with INVALID_ARGUMENT for a message that is not a
// RateLimitQuotaUsageReports, a first message without a domain, another domain later, or a
// BucketId without pairs or with an empty key; with OK when the client ends its side.
#ifndef TOLLGATE_SRC_SERVER_RLQS_SERVICE_H_
#define TOLLGATE_SRC_SERVER_RLQS_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "src/rlqs/ledger.h"
#include "src/server/check_service.h"
#include "src/server/grpc_server.h"
#include "src/server/rlqs_stats.h"
#include "tollgate/clock.h"
#include "tollgate/redis_connections.h"
#include "tollgate/timers.h"

namespace tollgate::rlqs {

inline constexpr char kStreamRateLimitQuotasPath[] =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

struct RlqsServiceOptions {
  // The running config (its snapshot's matcher and limiter). REQUIRES: non-null, outlives the
  // service.
  server::CheckService* check_service = nullptr;
  RlqsLedgerOptions ledger;
  // Where the fleet's counts live (the fleet's shared connections); nullptr: this process
  // alone, in memory.
  std::shared_ptr<RedisConnections> redis;
  // This instance's id in the sync script's grants (one per process; "" makes a random one).
  std::string instance_id;
  // N, read once per round; nullptr means 1.
  std::function<int64_t()> instance_count;
  // fail_open while Redis is away: the fraction of a limit this instance takes
  // (FallbackShares::Fraction); nullptr: 1/N.
  std::function<double(std::string_view limit, int64_t instances)> fallback_fraction;
  // Where rounds run (LoopTimers over the service's loops); nullptr: ThreadTimers().
  std::shared_ptr<Timers> timers;
  // Time of the limits' windows (plus the offset learned from Redis' TIME); nullptr:
  // SystemClock().
  Clock* clock = nullptr;
};

class RlqsService {
 public:
  // Loads the sync script (with Redis) and schedules the rounds. InvalidArgument without a
  // check service or with a round or idle time below 1 ms; Unavailable when Redis cannot be
  // reached now.
  static absl::StatusOr<std::unique_ptr<RlqsService>> Start(RlqsServiceOptions options);

  RlqsService(const RlqsService&) = delete;
  RlqsService& operator=(const RlqsService&) = delete;
  // Stops the rounds (waits for the one in flight), then sends what was reported and granted
  // since to Redis (one last script call, waited for). Streams still open end with UNAVAILABLE
  // at their next message.
  // REQUIRES: not on one of the Redis connections' threads.
  ~RlqsService();

  // Adds StreamRateLimitQuotas to `methods`.
  void AddMethod(server::GrpcMethods& methods);

  server::RlqsStats stats() const;

  struct Core;  // internal: shared with the streams' handlers (service.cc)

 private:
  RlqsService(std::shared_ptr<Core> core, std::shared_ptr<RedisConnections> redis)
      : core_(std::move(core)), redis_(std::move(redis)) {}
  // Owned here: the streams' handlers, which may outlive the service, hold it weakly (a
  // connection may outlive even the loops, and the core holds the loops' timers). It does not
  // own the connections (whose last owner must not be one of their own threads): the service
  // does.
  std::shared_ptr<Core> core_;
  std::shared_ptr<RedisConnections> redis_;
};

}  // namespace tollgate::rlqs

#endif  // TOLLGATE_SRC_SERVER_RLQS_SERVICE_H_
