// Copyright tollgate authors. Malformed and hostile Rate Limit Quota Service streams against a
// real `tollgate serve` over a real redis-server, beside a well-behaved simulated Envoy
// (tests/support/rlqs_envoy.h) on a connection of its own: each bad stream gets a clear error
// or is cut off within the server's bounds, and the Envoy's stream goes on unaffected, its
// bucket counted in Redis.
#include <nghttp2/nghttp2.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/rate_limit_quota/v3/rlqs.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/raw_h2_client.h"
#include "tests/support/redis_server.h"
#include "tests/support/rlqs_envoy.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace api = envoy::service::rate_limit_quota::v3;
using testing::RawH2Client;
using testing::RlqsBucket;
using testing::SimulatedEnvoy;

constexpr char kPath[] =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
constexpr char kConfig[] = R"(domain: tiffin
descriptors:
  - key: name
    value: api
    rate_limit: {unit: minute, requests_per_unit: 100000}
)";
const RlqsBucket kApi = {{"name", "api"}};
// The server's bounds, small so that a test reaches them.
constexpr int kMaxBucketsPerStream = 50;
constexpr int kMaxStreamQueuedBytes = 16384;

// Polls `done` until it holds or 30 s pass.
bool Eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// A report of `count` buckets {name: <prefix><i>} in `domain` ("" for none).
api::RateLimitQuotaUsageReports Report(const std::string& domain, const std::string& prefix,
                                       int count) {
  api::RateLimitQuotaUsageReports reports;
  if (!domain.empty()) reports.set_domain(domain);
  for (int i = 0; i < count; ++i) {
    auto* usage = reports.add_bucket_quota_usages();
    (*usage->mutable_bucket_id()->mutable_bucket())["name"] = prefix + std::to_string(i);
    usage->set_num_requests_allowed(1);
  }
  return reports;
}

class RlqsHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> redis = testing::RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    server_ = testing::ServeProcess::Start(
        kConfig,
        {"--redis", redis_->url(), "--rlqs-round-ms", "200", "--rlqs-reporting-interval-ms", "1000",
         "--rlqs-max-buckets-per-stream", std::to_string(kMaxBucketsPerStream),
         "--grpc-max-stream-queued-bytes", std::to_string(kMaxStreamQueuedBytes)});
    ASSERT_NE(server_, nullptr);
    envoy_ = std::make_unique<SimulatedEnvoy>(
        server_->grpc_port(),
        testing::SimulatedEnvoyOptions{.reporting_interval = std::chrono::seconds(1),
                                       .no_assignment_allows = false});
    ASSERT_TRUE(Eventually([&] {
      envoy_->Request(kApi);
      return envoy_->counts(kApi).last_strategy == "token_bucket";
    }));
  }

  int64_t Metric(const std::string& series) {
    return testing::MetricValue(testing::ScrapeMetrics(server_->port()), series);
  }

  // The well-behaved Envoy is still served on the stream it opened first: its requests are
  // admitted under a token bucket, two more assignments come, and Redis counts its bucket.
  void ExpectTheEnvoyUnaffected() {
    const int64_t responses = envoy_->responses();
    const int64_t allowed = envoy_->counts(kApi).allowed;
    const int64_t redis_commands = Metric("tollgate_rlqs_redis_commands_total");
    EXPECT_TRUE(Eventually([&] {
      envoy_->Request(kApi);
      return envoy_->responses() >= responses + 2 &&
             Metric("tollgate_rlqs_redis_commands_total") > redis_commands;
    }));
    EXPECT_GT(envoy_->counts(kApi).allowed, allowed);
    EXPECT_EQ(envoy_->counts(kApi).last_strategy, "token_bucket");
    EXPECT_EQ(envoy_->streams_opened(), 1);
    EXPECT_EQ(envoy_->last_stream_status(), "");  // never ended
  }

  std::unique_ptr<api::RateLimitQuotaService::Stub> Stub() {
    return api::RateLimitQuotaService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  // Sends `reports` on a new stream and reads until the server ends it: its status.
  grpc::Status EndOf(const std::vector<api::RateLimitQuotaUsageReports>& reports) {
    auto stub = Stub();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto stream = stub->StreamRateLimitQuotas(&context);
    for (const auto& report : reports) stream->Write(report);
    api::RateLimitQuotaResponse response;
    while (stream->Read(&response)) {
    }
    return stream->Finish();
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<testing::ServeProcess> server_;
  std::unique_ptr<SimulatedEnvoy> envoy_;
};

TEST_F(RlqsHostileTest, MalformedStreamsEndWithInvalidArgumentNamingTheField) {
  struct Case {
    std::vector<api::RateLimitQuotaUsageReports> reports;
    std::string named;  // in the status message
  };
  api::RateLimitQuotaUsageReports empty_key = Report("tiffin", "b", 2);
  (*empty_key.add_bucket_quota_usages()->mutable_bucket_id()->mutable_bucket())[""] = "x";
  api::RateLimitQuotaUsageReports no_pairs = Report("tiffin", "b", 1);
  no_pairs.add_bucket_quota_usages()->mutable_bucket_id();
  const std::vector<Case> cases = {
      {{Report("", "b", 1)}, "domain"},
      {{empty_key}, "bucket_quota_usages[2].bucket_id.bucket: a key is empty"},
      {{no_pairs}, "bucket_quota_usages[1].bucket_id: a BucketId needs at least one pair"},
      {{Report("tiffin", "b", 1), Report("other", "b", 1)}, "domain: \"other\""},
  };
  for (const Case& c : cases) {
    const grpc::Status status = EndOf(c.reports);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.named;
    EXPECT_NE(status.error_message().find(c.named), std::string::npos) << status.error_message();
  }
  // A message that is not a RateLimitQuotaUsageReports.
  RawH2Client raw(server_->grpc_port(), 65535);
  const int32_t id = raw.Open(kPath);
  raw.Send(id, "\xff\xff\xff");
  ASSERT_TRUE(raw.PumpUntil([&] { return raw.stream(id).closed; }, std::chrono::seconds(30)));
  EXPECT_EQ(raw.stream(id).headers["grpc-status"], "3");
  EXPECT_NE(raw.stream(id).headers["grpc-message"].find("RateLimitQuotaUsageReports"),
            std::string::npos);

  // None of them holds a bucket.
  EXPECT_TRUE(Eventually([&] { return Metric("tollgate_rlqs_streams") == 1; }));
  EXPECT_EQ(Metric("tollgate_rlqs_buckets"), 1);
  ExpectTheEnvoyUnaffected();
}

TEST_F(RlqsHostileTest, AStreamOpeningBucketsWithoutBoundHoldsAtMostTheBound) {
  constexpr int kMessages = 40;
  constexpr int kPerMessage = 100;
  auto stub = Stub();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->StreamRateLimitQuotas(&context);
  for (int m = 0; m < kMessages; ++m) {
    ASSERT_TRUE(stream->Write(Report("tiffin", "m" + std::to_string(m) + "-", kPerMessage)));
  }
  ASSERT_TRUE(Eventually([&] {
    return Metric("tollgate_rlqs_refused_buckets_total") >=
           kMessages * kPerMessage - kMaxBucketsPerStream;
  }));
  EXPECT_EQ(Metric("tollgate_rlqs_buckets"), kMaxBucketsPerStream + 1);
  // Its assignments name only the buckets it holds.
  std::set<std::string> assigned;
  api::RateLimitQuotaResponse response;
  while (assigned.size() < static_cast<size_t>(kMaxBucketsPerStream) && stream->Read(&response)) {
    for (const auto& action : response.bucket_action()) {
      assigned.insert(action.bucket_id().bucket().at("name"));
    }
  }
  EXPECT_EQ(assigned.size(), static_cast<size_t>(kMaxBucketsPerStream));
  for (const std::string& name : assigned) EXPECT_EQ(name.substr(0, 3), "m0-") << name;
  ExpectTheEnvoyUnaffected();
  context.TryCancel();
  stream->Finish();
  // Its buckets go with it.
  EXPECT_TRUE(Eventually([&] { return Metric("tollgate_rlqs_buckets") == 1; }));
}

TEST_F(RlqsHostileTest, AStreamThatNeverReadsIsResetAndItsBucketsLetGo) {
  // Grants no flow-control window: nothing the server answers can leave, and it reports every
  // round so that every round answers it.
  RawH2Client stuck(server_->grpc_port(), /*window=*/0);
  const int32_t id = stuck.Open(kPath);
  const std::string report = Report("tiffin", "b", kMaxBucketsPerStream).SerializeAsString();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!stuck.stream(id).closed && stuck.connected() &&
         std::chrono::steady_clock::now() < give_up) {
    stuck.Send(id, report);
    stuck.Pump(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(stuck.stream(id).closed);
  EXPECT_EQ(stuck.stream(id).reset_code, static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  EXPECT_EQ(stuck.stream(id).data, "");
  EXPECT_TRUE(stuck.connected());  // the stream goes, not the connection
  EXPECT_TRUE(Eventually([&] {
    return Metric("tollgate_rlqs_buckets") == 1 && Metric("tollgate_rlqs_streams") == 1;
  }));
  ExpectTheEnvoyUnaffected();
}

}  // namespace
}  // namespace tollgate
