// Copyright tollgate authors. Envoy reports over real gRPC (docs/envoy.md#reports): a look
// (a descriptor's hits_addend 0) before the request, a report (the descriptor's hits_addend:
// the response's tokens, Envoy's apply_on_stream_done) after it, with an Envoy AI Gateway
// style token limit, against a real `tollgate serve` with its own Redis, and without one (the
// in-memory store).
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::tollgate::testing::ServeProcess;

// As Envoy Gateway writes the rate-limit service's file for an AI Gateway token limit
// (BackendTrafficPolicy, a Distinct x-user-id selector, 1000 tokens an hour, request cost 0
// and response cost from the llm_total_token metadata): the route's descriptor, then one
// counter per user.
constexpr char kAiGatewayConfig[] = R"(domain: default/envoy-ai-gateway-basic/http
descriptors:
  - key: httproute/default/envoy-ai-gateway-basic/rule/0/match/0/llm_example_com
    value: httproute/default/envoy-ai-gateway-basic/rule/0/match/0/llm_example_com
    descriptors:
      - key: rule-0-match-0
        rate_limit:
          requests_per_unit: 1000
          unit: hour
)";

constexpr char kRoute[] = "httproute/default/envoy-ai-gateway-basic/rule/0/match/0/llm_example_com";

constexpr auto kOk = RateLimitResponse::OK;
constexpr auto kOver = RateLimitResponse::OVER_LIMIT;

// One descriptor (route, user) with its own hits_addend, as Envoy >= 1.33 sends a route
// rate_limits entry's `hits_addend`: 0 before the request, the tokens when the stream is done.
RateLimitRequest Descriptor(const std::string& user, uint64_t hits) {
  RateLimitRequest request;
  request.set_domain("default/envoy-ai-gateway-basic/http");
  auto* descriptor = request.add_descriptors();
  auto* route = descriptor->add_entries();
  route->set_key(kRoute);
  route->set_value(kRoute);
  auto* entry = descriptor->add_entries();
  entry->set_key("rule-0-match-0");
  entry->set_value(user);
  descriptor->mutable_hits_addend()->set_value(hits);
  return request;
}

// The parameter: with Redis (true) or the in-memory store.
class EnvoyReportsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    std::vector<std::string> args;
    if (GetParam()) {
      absl::StatusOr<std::unique_ptr<testing::RedisServer>> redis = testing::RedisServer::Start();
      ASSERT_TRUE(redis.ok()) << redis.status();
      redis_ = *std::move(redis);
      args = {"--redis", redis_->url()};
    }
    server_ = ServeProcess::Start(kAiGatewayConfig, args);
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->grpc_port(), 0) << server_->log();
    stub_ = RateLimitService::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  RateLimitResponse Ask(const RateLimitRequest& request) {
    RateLimitResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stub_->ShouldRateLimit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message() << "\n" << server_->log();
    return response;
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::unique_ptr<ServeProcess> server_;
  std::unique_ptr<RateLimitService::Stub> stub_;
};

// The issue's sequence: look, report 900, look, report 300 past the limit, look. The report
// past the limit counts in full, so the last look is OVER_LIMIT, as envoyproxy/ratelimit
// answers; another user's counter is untouched.
TEST_P(EnvoyReportsTest, AReportPastTheLimitRefusesTheNextLook) {
  EXPECT_EQ(Ask(Descriptor("alice", 0)).overall_code(), kOk);
  const RateLimitResponse first = Ask(Descriptor("alice", 900));
  EXPECT_EQ(first.overall_code(), kOk);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 100u);
  const RateLimitResponse look = Ask(Descriptor("alice", 0));
  EXPECT_EQ(look.overall_code(), kOk);
  EXPECT_EQ(look.statuses(0).limit_remaining(), 100u);
  const RateLimitResponse past = Ask(Descriptor("alice", 300));
  EXPECT_EQ(past.overall_code(), kOver);
  EXPECT_EQ(past.statuses(0).code(), kOver);
  EXPECT_EQ(past.statuses(0).limit_remaining(), 0u);
  const RateLimitResponse refused = Ask(Descriptor("alice", 0));
  EXPECT_EQ(refused.overall_code(), kOver);
  EXPECT_GT(refused.statuses(0).duration_until_reset().seconds(), 0);
  // Only the reporting user's counter moved.
  const RateLimitResponse other = Ask(Descriptor("bob", 0));
  EXPECT_EQ(other.overall_code(), kOk);
  EXPECT_EQ(other.statuses(0).limit_remaining(), 1000u);
}

// A request without a descriptor hits_addend (the request's hits_addend) is a request: over
// the limit it is refused and counts nothing, as elsewhere in tollgate.
TEST_P(EnvoyReportsTest, ARequestsHitsStillCountNothingWhenRefused) {
  RateLimitRequest request = Descriptor("carol", 0);
  request.mutable_descriptors(0)->clear_hits_addend();
  request.set_hits_addend(600);
  EXPECT_EQ(Ask(request).overall_code(), kOk);
  EXPECT_EQ(Ask(request).overall_code(), kOver);  // 600 more do not fit: nothing counted
  const RateLimitResponse look = Ask(Descriptor("carol", 0));
  EXPECT_EQ(look.overall_code(), kOk);
  EXPECT_EQ(look.statuses(0).limit_remaining(), 400u);
}

INSTANTIATE_TEST_SUITE_P(Stores, EnvoyReportsTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Redis" : "Memory";
                         });

}  // namespace
}  // namespace tollgate
