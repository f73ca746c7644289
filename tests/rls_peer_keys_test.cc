// Copyright tollgate authors. A `tollgate serve` loading a config written the way
// envoyproxy/ratelimit's users write it with the peer's newest keys (mid-string and multiple
// wildcards, share_threshold, quota_mode, value_to_metric, metadata, unit_multiplier), asked
// over real gRPC (ShouldRateLimit) and over HTTP (POST /json), gives the peer's answers.
// Each transport gets its own server, so the two runs never share a counter.
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;

// In the peer's style: its test/config/wildcard.yaml and share_threshold.yaml, its README's
// quota_mode and metadata examples. Windows are a day or longer, so no run crosses one.
constexpr char kConfig[] = R"(domain: peer
descriptors:
  - key: midWild
    value: bar*b
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: day
      requests_per_unit: 2
  - key: route
    value: api/*
    value_to_metric: true
    detailed_metric: true
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: quota_a
    quota_mode: true
    metadata:
      name: service_1
      tiers: [gold, silver]
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: quota_b
    quota_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: two_days
    rate_limit:
      unit: day
      unit_multiplier: 2
      requests_per_unit: 1
)";

RateLimitRequest Request(const std::vector<std::pair<std::string, std::string>>& descriptors) {
  RateLimitRequest request;
  request.set_domain("peer");
  for (const auto& [key, value] : descriptors) {
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key(key);
    entry->set_value(value);
  }
  return request;
}

enum class Transport { kGrpc, kJson };

class RlsPeerKeysTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    server_ = ServeProcess::Start(kConfig);
    ASSERT_NE(server_, nullptr);
    const int grpc_port = server_->grpc_port();
    ASSERT_GT(grpc_port, 0) << server_->log();
    stub_ = RateLimitService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                          grpc::InsecureChannelCredentials()));
    client_ = std::make_unique<HttpTestClient>(server_->port());
  }

  RateLimitResponse Ask(const RateLimitRequest& request) {
    RateLimitResponse response;
    if (GetParam() == Transport::kGrpc) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      grpc::Status status = stub_->ShouldRateLimit(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      return response;
    }
    std::string body;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(request, &body).ok());
    auto reply = client_->Send(http::verb::post, "/json", body);
    EXPECT_TRUE(reply.has_value());
    if (!reply.has_value()) return response;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(reply->body(), &response).ok())
        << reply->body();
    EXPECT_EQ(reply->result_int(),
              response.overall_code() == RateLimitResponse::OVER_LIMIT ? 429 : 200);
    return response;
  }

  RateLimitResponse::Code Code(const std::vector<std::pair<std::string, std::string>>& d) {
    return Ask(Request(d)).overall_code();
  }

  std::unique_ptr<ServeProcess> server_;
  std::unique_ptr<RateLimitService::Stub> stub_;
  std::unique_ptr<HttpTestClient> client_;
};

constexpr auto kOk = RateLimitResponse::OK;
constexpr auto kOver = RateLimitResponse::OVER_LIMIT;

TEST_P(RlsPeerKeysTest, MidStringAndMultipleWildcards) {
  // bar*b: prefix "bar", suffix "b", anything (or nothing) between; one counter per value.
  RateLimitResponse first = Ask(Request({{"midWild", "barab"}}));
  EXPECT_EQ(first.overall_code(), kOk);
  ASSERT_EQ(first.statuses_size(), 1);
  EXPECT_EQ(first.statuses(0).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Ask(Request({{"midWild", "barb"}})).statuses(0).limit_remaining(), 1u);
  // No rule: OK with no current_limit.
  EXPECT_FALSE(Ask(Request({{"midWild", "xbarb"}})).statuses(0).has_current_limit());
  EXPECT_FALSE(Ask(Request({{"midWild", "bara"}})).statuses(0).has_current_limit());

  EXPECT_EQ(Code({{"multiWild", "foo123bar456baz"}}), kOk);
  EXPECT_EQ(Code({{"multiWild", "foo123bar456baz"}}), kOver);
  EXPECT_EQ(Code({{"multiWild", "foobarbaz"}}), kOk);
  EXPECT_FALSE(Ask(Request({{"multiWild", "foobazbar"}})).statuses(0).has_current_limit());
}

TEST_P(RlsPeerKeysTest, ShareThresholdCountsAllMatchingValuesTogether) {
  EXPECT_EQ(Code({{"files", "files/a.pdf"}}), kOk);
  EXPECT_EQ(Code({{"files", "files/b.csv"}}), kOk);
  RateLimitResponse third = Ask(Request({{"files", "files/c.txt"}}));
  EXPECT_EQ(third.overall_code(), kOver);
  EXPECT_EQ(third.statuses(0).limit_remaining(), 0u);
  // value_to_metric changes only the peer's statistics: each value still counts alone.
  EXPECT_EQ(Code({{"route", "api/a"}}), kOk);
  EXPECT_EQ(Code({{"route", "api/b"}}), kOk);
  EXPECT_EQ(Code({{"route", "api/a"}}), kOver);
}

TEST_P(RlsPeerKeysTest, QuotaModeRefusesOnlyWhenEveryQuotaIsOver) {
  EXPECT_EQ(Code({{"quota_a", "t"}}), kOk);
  RateLimitResponse one_over = Ask(Request({{"quota_a", "t"}, {"quota_b", "t"}}));
  EXPECT_EQ(one_over.overall_code(), kOk);
  EXPECT_EQ(one_over.statuses(0).code(), kOver);
  EXPECT_EQ(one_over.statuses(1).code(), kOk);
  RateLimitResponse all_over = Ask(Request({{"quota_a", "t"}, {"quota_b", "t"}}));
  EXPECT_EQ(all_over.overall_code(), kOver);
}

TEST_P(RlsPeerKeysTest, UnitMultiplierWindow) {
  RateLimitResponse first = Ask(Request({{"two_days", "x"}}));
  EXPECT_EQ(first.overall_code(), kOk);
  // current_limit names the unit, as Envoy's API has no multiplier; the window is 2 days.
  EXPECT_EQ(first.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::DAY);
  EXPECT_GT(first.statuses(0).duration_until_reset().seconds(), 0);
  EXPECT_LE(first.statuses(0).duration_until_reset().seconds(), 2 * 86'400);
  EXPECT_EQ(Code({{"two_days", "x"}}), kOver);
}

INSTANTIATE_TEST_SUITE_P(Transports, RlsPeerKeysTest,
                         ::testing::Values(Transport::kGrpc, Transport::kJson),
                         [](const auto& info) {
                           return info.param == Transport::kGrpc ? "grpc" : "json";
                         });

}  // namespace
}  // namespace tollgate
