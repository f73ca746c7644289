// Copyright tollgate authors.
#include "src/cli/serve_rlqs.h"

#include <cstdint>
#include <utility>

#include "CLI/CLI.hpp"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/router.h"

namespace tollgate::cli {

namespace {

// An option in milliseconds written as microseconds into `micros`.
void AddMillis(CLI::App& serve, const std::string& name, int64_t& micros, const std::string& help,
               int64_t min_ms, int64_t max_ms, const std::string& group) {
  serve
      .add_option_function<int64_t>(
          name, [&micros](int64_t ms) { micros = ms * 1000; }, help)
      ->default_str(std::to_string(micros / 1000))
      ->check(CLI::Range(min_ms, max_ms))
      ->group(group);
}

}  // namespace

void AddRlqsFlags(CLI::App& serve, rlqs::RlqsLedgerOptions& ledger,
                  server::GrpcServerOptions& grpc) {
  const std::string group = "Rate Limit Quota Service (docs/envoy.md)";
  AddMillis(serve, "--rlqs-round-ms", ledger.round_micros,
            "How often RLQS syncs with Redis (one script call) and sends assignments", 10, 60'000,
            group);
  AddMillis(serve, "--rlqs-idle-ms", ledger.idle_micros,
            "Abandon an RLQS bucket whose reports show no request for this long", 100, 86'400'000,
            group);
  AddMillis(serve, "--rlqs-reporting-interval-ms", ledger.assumed_reporting_interval_micros,
            "A bucket's reporting interval until its reports show it (assignments live a "
            "little over two)",
            100, 3'600'000, group);
  serve
      .add_option("--rlqs-max-buckets-per-stream", ledger.max_buckets_per_stream,
                  "Buckets one RLQS stream may hold; further ones get no assignment")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, size_t{10'000'000}))
      ->group(group);
  serve
      .add_option("--grpc-max-streaming-calls-per-connection",
                  grpc.max_streaming_calls_per_connection,
                  "Streaming calls (RLQS) one gRPC connection may hold open at once")
      ->capture_default_str()
      ->check(CLI::Range(uint32_t{1}, uint32_t{1'000'000}))
      ->group(group);
  serve
      .add_option("--grpc-max-stream-queued-bytes", grpc.max_stream_queued_bytes,
                  "Messages one streaming call may have waiting for its client before it is "
                  "reset")
      ->capture_default_str()
      ->check(CLI::Range(size_t{4096}, size_t{1} << 30))
      ->group(group);
}

absl::StatusOr<std::unique_ptr<rlqs::RlqsService>> StartRlqs(rlqs::RlqsLedgerOptions options,
                                                             const std::string& key_prefix,
                                                             const Fleet& fleet,
                                                             server::CheckService& check_service,
                                                             std::shared_ptr<Timers> timers) {
  options.key_prefix = key_prefix;
  rlqs::RlqsServiceOptions service;
  service.check_service = &check_service;
  service.redis = fleet.connections();
  if (service.redis != nullptr) {
    options.group_by_slot = redis::RouterOf(*service.redis).topology() == redis::Topology::kCluster;
    service.instance_id = fleet.instance_id().empty() ? "" : fleet.instance_id() + ":rlqs";
  }
  service.ledger = std::move(options);
  service.instance_count = [&fleet] { return fleet.InstanceCount(); };
  if (fleet.fallback_shares() != nullptr) {
    service.fallback_fraction = [shares = fleet.fallback_shares()](std::string_view limit,
                                                                   int64_t instances) {
      return shares->Fraction(limit, instances);
    };
  }
  service.timers = std::move(timers);
  return rlqs::RlqsService::Start(std::move(service));
}

}  // namespace tollgate::cli
