// Copyright tollgate authors. The Rate Limit Quota Service over real gRPC, in memory: simulated
// Envoys (tests/support/rlqs_envoy.h, grpc++'s stub) against our server::GrpcServer and RlqsService
// in this process. The fleet over Redis and two `tollgate serve` is tests/rlqs_fleet_test.cc.
#include "src/rlqs/service.h"

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "src/server/event_loops.h"
#include "src/server/grpc_server.h"
#include "src/server/metrics.h"
#include "tests/support/rlqs_envoy.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace api = envoy::service::rate_limit_quota::v3;
using rlqs::RlqsService;
using testing::RlqsBucket;
using testing::SimulatedEnvoy;

// name=api: 10 an hour, so that a test's few seconds all but never straddle the end of a window
// (the fixed window's next 10 would let "the limit" pass twice).
constexpr char kTiffin[] = R"(domain: tiffin
descriptors:
  - key: name
    value: api
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: name
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: name
    value: free
    rate_limit: {unlimited: true}
)";

// Polls `done` until it holds or 20 s pass (the server's rounds run on their own time).
bool Eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class RlqsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }
  void TearDown() override { Stop(); }

  void Start(rlqs::RlqsLedgerOptions ledger, server::GrpcServerOptions grpc = {}) {
    Stop();
    absl::StatusOr<std::unique_ptr<server::EventLoops>> loops = server::EventLoops::Start(2);
    ASSERT_TRUE(loops.ok()) << loops.status();
    loops_ = *std::move(loops);
    LoadedConfigs config;
    absl::StatusOr<EnvoyDomainConfig> domain = ParseEnvoyConfig(kTiffin, "tiffin.yaml");
    ASSERT_TRUE(domain.ok()) << domain.status();
    config.envoy_domains.push_back(*std::move(domain));
    absl::StatusOr<std::unique_ptr<server::CheckService>> service =
        server::CheckService::Create({}, std::move(config));
    ASSERT_TRUE(service.ok()) << service.status();
    check_service_ = *std::move(service);
    ledger.round_micros = 100'000;
    ledger.assumed_reporting_interval_micros = 1'000'000;
    absl::StatusOr<std::unique_ptr<RlqsService>> rlqs =
        RlqsService::Start({.check_service = check_service_.get(), .ledger = ledger});
    ASSERT_TRUE(rlqs.ok()) << rlqs.status();
    rlqs_ = *std::move(rlqs);
    server::GrpcMethods methods;
    rlqs_->AddMethod(methods);
    grpc.address = {"127.0.0.1", 0};
    absl::StatusOr<std::unique_ptr<server::GrpcServer>> started =
        server::GrpcServer::Start(*loops_, grpc, std::move(methods));
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = *std::move(started);
  }

  void Stop() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::seconds(5));
    server_.reset();
    rlqs_.reset();
    check_service_.reset();
    loops_.reset();
  }

  std::unique_ptr<SimulatedEnvoy> Envoy(
      bool no_assignment_allows = false,
      std::chrono::milliseconds interval = std::chrono::seconds(1)) {
    return std::make_unique<SimulatedEnvoy>(
        server_->port(),
        testing::SimulatedEnvoyOptions{.reporting_interval = interval,
                                       .no_assignment_allows = no_assignment_allows});
  }

  std::unique_ptr<api::RateLimitQuotaService::Stub> Stub() {
    return api::RateLimitQuotaService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<server::EventLoops> loops_;
  std::unique_ptr<server::CheckService> check_service_;
  std::unique_ptr<RlqsService> rlqs_;
  std::unique_ptr<server::GrpcServer> server_;
};

const RlqsBucket kApi = {{"name", "api"}};

TEST_F(RlqsServiceTest, ACountedBucketGetsATokenBucketOfWhatIsLeftThenDenyAllOnceSpent) {
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy();
  EXPECT_FALSE(envoy->Request(kApi));  // no assignment yet: DENY_ALL (as configured)
  ASSERT_TRUE(Eventually([&] { return envoy->counts(kApi).assignments >= 1; }));
  testing::RlqsBucketCounts counts = envoy->counts(kApi);
  EXPECT_EQ(counts.last_strategy, "token_bucket");
  EXPECT_EQ(counts.last_max_tokens, 10);  // the whole limit: one Envoy, nothing admitted yet
  EXPECT_GE(counts.last_ttl_seconds, 2);
  int allowed = 0;
  for (int i = 0; i < 30; ++i) allowed += envoy->Request(kApi) ? 1 : 0;
  EXPECT_EQ(allowed, 10);
  // Its next report shows the limit spent: DENY_ALL until the window ends.
  ASSERT_TRUE(Eventually([&] { return envoy->counts(kApi).last_strategy == "deny_all"; }));
  EXPECT_FALSE(envoy->Request(kApi));
  EXPECT_EQ(envoy->counts(kApi).allowed, 10);
}

TEST_F(RlqsServiceTest, MetricsCountStreamsBucketsReportsAndAssignmentsByStrategy) {
  server::Metrics metrics;
  metrics.set_rlqs_stats([this] { return rlqs_->stats(); });
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy();
  envoy->Request(kApi);
  envoy->Request({{"name", "blocked"}});
  envoy->Request({{"name", "free"}});
  ASSERT_TRUE(Eventually([&] { return envoy->counts({{"name", "free"}}).assignments > 0; }));
  ASSERT_TRUE(Eventually([&] { return envoy->counts(kApi).assignments > 0; }));
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("tollgate_rlqs_streams 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("tollgate_rlqs_buckets 3\n"), std::string::npos);
  EXPECT_GE(testing::MetricValue(text, "tollgate_rlqs_reports_total"), 3);
  EXPECT_NE(text.find("tollgate_rlqs_assignments_total{strategy=\"token_bucket\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("tollgate_rlqs_assignments_total{strategy=\"deny_all\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("tollgate_rlqs_assignments_total{strategy=\"allow_all\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE tollgate_rlqs_abandoned_buckets_total counter"), std::string::npos);
}

TEST_F(RlqsServiceTest, BucketsWithoutACountingRuleAreAllowedOrBlockedAsTheirRuleSays) {
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy();
  const RlqsBucket none = {{"name", "other"}}, blocked = {{"name", "blocked"}},
                   free = {{"name", "free"}};
  envoy->Request(none);
  envoy->Request(blocked);
  envoy->Request(free);
  ASSERT_TRUE(Eventually([&] {
    return envoy->counts(none).assignments > 0 && envoy->counts(blocked).assignments > 0 &&
           envoy->counts(free).assignments > 0;
  }));
  EXPECT_EQ(envoy->counts(none).last_strategy, "allow_all");
  EXPECT_EQ(envoy->counts(free).last_strategy, "allow_all");
  EXPECT_EQ(envoy->counts(blocked).last_strategy, "deny_all");
  EXPECT_TRUE(envoy->Request(none));
  EXPECT_FALSE(envoy->Request(blocked));
}

TEST_F(RlqsServiceTest, TwoEnvoysOnOneBucketShareTheLimitAndNeverExceedIt) {
  std::unique_ptr<SimulatedEnvoy> a = Envoy();
  std::unique_ptr<SimulatedEnvoy> b = Envoy();
  a->Request(kApi);
  b->Request(kApi);
  ASSERT_TRUE(Eventually(
      [&] { return a->counts(kApi).assignments >= 1 && b->counts(kApi).assignments >= 1; }));
  int allowed = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 20; ++i) allowed += (a->Request(kApi) ? 1 : 0) + (b->Request(kApi) ? 1 : 0);
    const int64_t before = a->responses() + b->responses();
    ASSERT_TRUE(Eventually([&] { return a->responses() + b->responses() > before + 1; }));
  }
  EXPECT_LE(allowed, 10);
  EXPECT_GE(allowed, 5);
}

TEST_F(RlqsServiceTest, AFirstMessageWithoutADomainEndsTheStreamWithInvalidArgument) {
  auto stub = Stub();
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  api::RateLimitQuotaUsageReports reports;
  auto* usage = reports.add_bucket_quota_usages();
  (*usage->mutable_bucket_id()->mutable_bucket())["name"] = "api";
  ASSERT_TRUE(stream->Write(reports));
  api::RateLimitQuotaResponse response;
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("domain"), std::string::npos) << status.error_message();
}

TEST_F(RlqsServiceTest, ABucketIdWithAnEmptyKeyEndsTheStreamNamingTheField) {
  auto stub = Stub();
  grpc::ClientContext context;
  auto stream = stub->StreamRateLimitQuotas(&context);
  api::RateLimitQuotaUsageReports reports;
  reports.set_domain("tiffin");
  (*reports.add_bucket_quota_usages()->mutable_bucket_id()->mutable_bucket())["name"] = "api";
  (*reports.add_bucket_quota_usages()->mutable_bucket_id()->mutable_bucket())[""] = "x";
  ASSERT_TRUE(stream->Write(reports));
  api::RateLimitQuotaResponse response;
  while (stream->Read(&response)) {
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("bucket_quota_usages[1].bucket_id"), std::string::npos)
      << status.error_message();
}

TEST_F(RlqsServiceTest, AnUnreportedBucketIsAbandoned) {
  rlqs::RlqsLedgerOptions ledger;
  ledger.idle_micros = 300'000;
  Start(ledger);
  // Reports every 60 s: after the first, nothing comes within the idle time.
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy(false, std::chrono::seconds(60));
  envoy->Request(kApi);
  ASSERT_TRUE(Eventually([&] { return envoy->counts(kApi).abandons == 1; }));
  EXPECT_FALSE(envoy->HasBucket(kApi));
  EXPECT_GE(rlqs_->stats().abandoned_buckets, 1);
  EXPECT_EQ(rlqs_->stats().buckets, 0);
}

TEST_F(RlqsServiceTest, ShutdownEndsOpenStreamsWithUnavailable) {
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy();
  envoy->Request(kApi);
  ASSERT_TRUE(Eventually([&] { return envoy->counts(kApi).assignments >= 1; }));
  EXPECT_TRUE(server_->Shutdown(std::chrono::seconds(5)));
  ASSERT_TRUE(Eventually([&] { return !envoy->last_stream_status().empty(); }));
  EXPECT_EQ(envoy->last_stream_status().substr(0, 3), "14:") << envoy->last_stream_status();
}

TEST_F(RlqsServiceTest, BucketsBeyondTheBoundOfAStreamGetNoAssignment) {
  rlqs::RlqsLedgerOptions ledger;
  ledger.max_buckets_per_stream = 3;
  Start(ledger);
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy(true);
  for (int i = 0; i < 5; ++i) envoy->Request({{"name", "b" + std::to_string(i)}});
  ASSERT_TRUE(Eventually([&] { return rlqs_->stats().refused_buckets >= 2; }));
  ASSERT_TRUE(Eventually([&] { return envoy->counts({{"name", "b2"}}).assignments > 0; }));
  EXPECT_EQ(rlqs_->stats().buckets, 3);
  EXPECT_EQ(envoy->counts({{"name", "b4"}}).assignments, 0);
}

TEST_F(RlqsServiceTest, StreamsBeyondTheBoundOfAConnectionAreRefused) {
  server::GrpcServerOptions grpc;
  grpc.max_streaming_calls_per_connection = 2;
  Start({}, grpc);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = api::RateLimitQuotaService::NewStub(channel);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<
      grpc::ClientReaderWriter<api::RateLimitQuotaUsageReports, api::RateLimitQuotaResponse>>>
      streams;
  api::RateLimitQuotaUsageReports reports;
  reports.set_domain("tiffin");
  (*reports.add_bucket_quota_usages()->mutable_bucket_id()->mutable_bucket())["name"] = "api";
  for (int i = 0; i < 3; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->StreamRateLimitQuotas(contexts.back().get()));
    streams.back()->Write(reports);
  }
  api::RateLimitQuotaResponse response;
  EXPECT_TRUE(streams[0]->Read(&response));  // the first two are served
  EXPECT_TRUE(streams[1]->Read(&response));
  EXPECT_FALSE(streams[2]->Read(&response));
  EXPECT_EQ(streams[2]->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  for (int i = 0; i < 2; ++i) contexts[i]->TryCancel();
}

}  // namespace
}  // namespace tollgate
