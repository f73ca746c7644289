// Copyright tollgate authors. A `tollgate serve` given a config written the way
// envoyproxy/ratelimit's users write it with the peer's newest keys (mid-string and multiple
// wildcards, share_threshold, quota_mode, value_to_metric, metadata, unit_multiplier, shadow
// mode, replaces, unlimited, nested descriptors), asked over real gRPC (ShouldRateLimit) and
// over HTTP (POST /json), gives the peer's answers; and so it does when the same config
// arrives over xDS as a RateLimitConfig (from a real xDS server, tests/support/xds_server.h)
// instead of a file, for every key the RateLimitConfig message has (share_threshold,
// value_to_metric and unit_multiplier are file keys only). Each source and transport gets its
// own server, so no two runs share a counter.
#include <chrono>
#include <memory>
#include <string>
#include <tuple>
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
#include "tests/support/xds_server.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;
using ::tollgate::testing::XdsTestServer;

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
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: general
    rate_limit: {unit: day, requests_per_unit: 1, name: general}
  - key: vip
    rate_limit:
      unit: day
      requests_per_unit: 3
      name: vip
      replaces: [{name: general}]
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: day, requests_per_unit: 0}
)";

// kConfig as the RateLimitConfig Envoy Gateway would send, but for the keys the message lacks
// (files, route, two_days).
constexpr char kConfigResource[] = R"pb(
  name: "peer"
  domain: "peer"
  descriptors {
    key: "midWild"
    value: "bar*b"
    rate_limit { unit: DAY requests_per_unit: 2 }
  }
  descriptors {
    key: "multiWild"
    value: "foo*bar*baz"
    rate_limit { unit: DAY requests_per_unit: 1 }
  }
  descriptors {
    key: "quota_a"
    quota_mode: true
    metadata {
      fields {
        key: "name"
        value { string_value: "service_1" }
      }
      fields {
        key: "tiers"
        value {
          list_value {
            values { string_value: "gold" }
            values { string_value: "silver" }
          }
        }
      }
    }
    rate_limit { unit: DAY requests_per_unit: 1 }
  }
  descriptors {
    key: "quota_b"
    quota_mode: true
    rate_limit { unit: DAY requests_per_unit: 1 }
  }
  descriptors {
    key: "shadow"
    shadow_mode: true
    rate_limit { unit: DAY requests_per_unit: 1 }
  }
  descriptors {
    key: "free"
    rate_limit { unlimited: true }
  }
  descriptors {
    key: "general"
    rate_limit { unit: DAY requests_per_unit: 1 name: "general" }
  }
  descriptors {
    key: "vip"
    rate_limit {
      unit: DAY
      requests_per_unit: 3
      name: "vip"
      replaces { name: "general" }
    }
  }
  descriptors {
    key: "tenant"
    value: "acme"
    descriptors {
      key: "user"
      rate_limit { unit: DAY requests_per_unit: 2 }
    }
  }
  descriptors {
    key: "blocked"
    rate_limit { unit: DAY requests_per_unit: 0 }
  }
)pb";

using Entries = std::vector<std::pair<std::string, std::string>>;

// Appends one descriptor of `entries` to `request`.
void AddDescriptor(RateLimitRequest& request, const Entries& entries) {
  auto* descriptor = request.add_descriptors();
  for (const auto& [key, value] : entries) {
    auto* entry = descriptor->add_entries();
    entry->set_key(key);
    entry->set_value(value);
  }
}

// One descriptor per pair.
RateLimitRequest Request(const Entries& descriptors) {
  RateLimitRequest request;
  request.set_domain("peer");
  for (const auto& pair : descriptors) AddDescriptor(request, {pair});
  return request;
}

// One descriptor of all the pairs.
RateLimitRequest NestedRequest(const Entries& entries) {
  RateLimitRequest request;
  request.set_domain("peer");
  AddDescriptor(request, entries);
  return request;
}

enum class Source { kFile, kXds };
enum class Transport { kGrpc, kJson };

class RlsPeerKeysTest : public ::testing::TestWithParam<std::tuple<Source, Transport>> {
 protected:
  Source source() const { return std::get<0>(GetParam()); }
  Transport transport() const { return std::get<1>(GetParam()); }

  void SetUp() override {
    // The peer's RESPONSE_DYNAMIC_METADATA=true, as its integration tests run it.
    if (source() == Source::kFile) {
      server_ = ServeProcess::Start(kConfig, {"--response-dynamic-metadata"});
    } else {
      absl::StatusOr<std::unique_ptr<XdsTestServer>> xds = XdsTestServer::Start();
      ASSERT_TRUE(xds.ok()) << xds.status();
      xds_ = *std::move(xds);
      xds_->SetSnapshot("envoy-ratelimit", "1",
                        {testing::RateLimitConfigFromText(kConfigResource)});
      // No --config: the ports open once the config is applied.
      server_ = ServeProcess::StartWithArgs({"--xds-server", xds_->address(), "--xds-node-id",
                                             "envoy-ratelimit", "--response-dynamic-metadata"});
    }
    ASSERT_NE(server_, nullptr);
    const int grpc_port = server_->grpc_port();
    ASSERT_GT(grpc_port, 0) << server_->log();
    stub_ = RateLimitService::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", grpc_port),
                                                          grpc::InsecureChannelCredentials()));
    client_ = std::make_unique<HttpTestClient>(server_->port());
  }

  RateLimitResponse Ask(const RateLimitRequest& request) {
    RateLimitResponse response;
    if (transport() == Transport::kGrpc) {
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

  // Skips the test when it needs keys a RateLimitConfig does not have.
  bool FileKeysOnly() const { return source() == Source::kXds; }

  std::unique_ptr<XdsTestServer> xds_;  // with Source::kXds
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
  if (FileKeysOnly()) GTEST_SKIP() << "share_threshold, value_to_metric: not in RateLimitConfig";
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

TEST_P(RlsPeerKeysTest, MetadataOfPassedRulesComesBackAsDynamicMetadata) {
  RateLimitResponse passed = Ask(Request({{"quota_a", "m"}, {"quota_b", "m"}}));
  EXPECT_EQ(passed.overall_code(), kOk);
  const auto& fields = passed.dynamic_metadata().fields();
  ASSERT_TRUE(fields.contains("metadata")) << passed.ShortDebugString();
  EXPECT_EQ(fields.at("domain").string_value(), "peer");
  const auto& metadata = fields.at("metadata").struct_value().fields();
  EXPECT_EQ(metadata.at("name").string_value(), "service_1");
  EXPECT_EQ(metadata.at("tiers").list_value().values(1).string_value(), "silver");
  // quota_a is spent: it did not pass, so its metadata is not sent.
  RateLimitResponse spent = Ask(Request({{"quota_a", "m"}}));
  EXPECT_EQ(spent.overall_code(), kOver);
  EXPECT_FALSE(spent.dynamic_metadata().fields().contains("metadata"));
  EXPECT_TRUE(spent.dynamic_metadata().fields().contains("descriptors"));
}

TEST_P(RlsPeerKeysTest, JsonSendsEnvoysXRateLimitFields) {
  if (transport() != Transport::kJson) GTEST_SKIP() << "HTTP headers: POST /json only";
  if (FileKeysOnly()) GTEST_SKIP() << "unit_multiplier: not in RateLimitConfig";
  auto reply = client_->Send(
      http::verb::post, "/json",
      R"({"domain":"peer","descriptors":[{"entries":[{"key":"two_days","value":"h"}]}]})");
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ((*reply)["X-RateLimit-Limit"], "1, 1;w=86400");
  EXPECT_EQ((*reply)["X-RateLimit-Remaining"], "0");
  EXPECT_GT(std::stoll(std::string((*reply)["X-RateLimit-Reset"])), 0);
}

TEST_P(RlsPeerKeysTest, UnitMultiplierWindow) {
  if (FileKeysOnly()) GTEST_SKIP() << "unit_multiplier: not in RateLimitConfig";
  RateLimitResponse first = Ask(Request({{"two_days", "x"}}));
  EXPECT_EQ(first.overall_code(), kOk);
  // current_limit names the unit, as Envoy's API has no multiplier; the window is 2 days.
  EXPECT_EQ(first.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::DAY);
  EXPECT_GT(first.statuses(0).duration_until_reset().seconds(), 0);
  EXPECT_LE(first.statuses(0).duration_until_reset().seconds(), 2 * 86'400);
  EXPECT_EQ(Code({{"two_days", "x"}}), kOver);
}

TEST_P(RlsPeerKeysTest, ShadowModeCountsButNeverRefuses) {
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Code({{"shadow", "s"}}), kOk) << i;
}

TEST_P(RlsPeerKeysTest, UnlimitedMatchesAndNeverLimits) {
  for (int i = 0; i < 3; ++i) {
    RateLimitResponse free = Ask(Request({{"free", "f"}}));
    EXPECT_EQ(free.overall_code(), kOk);
    EXPECT_EQ(free.statuses(0).limit_remaining(), 4294967295u);
  }
}

TEST_P(RlsPeerKeysTest, AReplacingRuleDropsTheOneItReplaces) {
  // general (1 a day) is replaced whenever vip (3 a day) matches in the same request: only
  // vip is counted.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Code({{"general", "g"}, {"vip", "g"}}), kOk) << i;
  EXPECT_EQ(Code({{"general", "g"}, {"vip", "g"}}), kOver);
  EXPECT_EQ(Code({{"general", "g"}}), kOk);  // never counted until now
  EXPECT_EQ(Code({{"general", "g"}}), kOver);
}

TEST_P(RlsPeerKeysTest, NestedDescriptorsAndBlockList) {
  EXPECT_EQ(Ask(NestedRequest({{"tenant", "acme"}, {"user", "u"}})).overall_code(), kOk);
  EXPECT_EQ(Ask(NestedRequest({{"tenant", "acme"}, {"user", "u"}})).overall_code(), kOk);
  EXPECT_EQ(Ask(NestedRequest({{"tenant", "acme"}, {"user", "u"}})).overall_code(), kOver);
  EXPECT_EQ(Ask(NestedRequest({{"tenant", "acme"}, {"user", "v"}})).overall_code(), kOk);
  // Another tenant has no rule: not limited.
  RateLimitResponse other = Ask(NestedRequest({{"tenant", "other"}, {"user", "u"}}));
  EXPECT_EQ(other.overall_code(), kOk);
  EXPECT_FALSE(other.statuses(0).has_current_limit());
  // requests_per_unit 0: always over.
  EXPECT_EQ(Code({{"blocked", "b"}}), kOver);
}

INSTANTIATE_TEST_SUITE_P(SourcesAndTransports, RlsPeerKeysTest,
                         ::testing::Combine(::testing::Values(Source::kFile, Source::kXds),
                                            ::testing::Values(Transport::kGrpc, Transport::kJson)),
                         [](const auto& info) {
                           return absl::StrCat(
                               std::get<0>(info.param) == Source::kFile ? "file" : "xds", "_",
                               std::get<1>(info.param) == Transport::kGrpc ? "grpc" : "json");
                         });

}  // namespace
}  // namespace tollgate
