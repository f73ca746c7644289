// Copyright tollgate authors.
#include "src/server/rls_service.h"

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/rls_requests.h"
#include "tollgate/clock.h"

namespace tollgate::server {
namespace {

using ::testing::HasSubstr;
using Status = RateLimitResponse::DescriptorStatus;

constexpr char kTiffin[] = R"(domain: tiffin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: ip
    value: 6.6.6.6
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: "/menu*"
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: health
    rate_limit: {unlimited: true}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: orders
        rate_limit: {unit: hour, requests_per_unit: 10, name: tenant_orders}
  - key: partner
    descriptors:
      - key: orders
        rate_limit:
          unit: hour
          requests_per_unit: 2
          replaces: [{name: tenant_orders}]
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 4, algorithm: token_bucket}
)";

RateLimitRequest Request(const std::vector<testing::DescriptorEntries>& descriptors,
                         uint32_t hits = 0, std::string domain = "tiffin") {
  return testing::MakeRateLimitRequest(std::move(domain), descriptors, hits);
}

class RlsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { service_ = MakeService(false); }

  std::unique_ptr<RlsService> MakeService(bool global_shadow) {
    RlsServiceOptions options;
    absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kTiffin, "tiffin.yaml");
    EXPECT_TRUE(config.ok()) << config.status();
    options.domains.push_back(*std::move(config));
    options.clock = &clock_;
    options.shadow_mode = global_shadow;
    absl::StatusOr<std::unique_ptr<RlsService>> service = RlsService::Create(std::move(options));
    EXPECT_TRUE(service.ok()) << service.status();
    return *std::move(service);
  }

  RateLimitResponse Call(const RateLimitRequest& request) { return Call(*service_, request); }
  RateLimitResponse Call(RlsService& service, const RateLimitRequest& request) {
    absl::StatusOr<RateLimitResponse> response = service.ShouldRateLimitSync(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *response : RateLimitResponse();
  }

  // Starts at a minute boundary, so windows are whole.
  SimulatedClock clock_{1'700'000'040'000'000};
  std::unique_ptr<RlsService> service_;
};

TEST_F(RlsServiceTest, CountsPerDistinctValueUpToTheLimit) {
  for (int i = 0; i < 3; ++i) {
    RateLimitResponse response = Call(Request({{{"user", "alice"}}}));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    ASSERT_EQ(response.statuses_size(), 1);
    EXPECT_EQ(response.statuses(0).limit_remaining(), static_cast<uint32_t>(2 - i));
  }
  RateLimitResponse refused = Call(Request({{{"user", "alice"}}}));
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(refused.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::MINUTE);
  EXPECT_EQ(refused.statuses(0).duration_until_reset().seconds(), 60);
  // Another value of the same key-only rule has its own counter.
  EXPECT_EQ(Call(Request({{{"user", "bob"}}})).overall_code(), RateLimitResponse::OK);
  // The exact value has its own, larger limit.
  EXPECT_EQ(Call(Request({{{"user", "vip"}}})).statuses(0).current_limit().requests_per_unit(),
            100u);
  // The window ends.
  clock_.AdvanceMillis(60'000);
  EXPECT_EQ(Call(Request({{{"user", "alice"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsServiceTest, WildcardValuesCountPerDistinctValue) {
  EXPECT_EQ(Call(Request({{{"path", "/menu/1"}}})).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Call(Request({{{"path", "/menu/1"}}})).statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(Call(Request({{{"path", "/menu/1"}}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Call(Request({{{"path", "/menu/2"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsServiceTest, UnmatchedUnlimitedAndUnknownDomain) {
  RateLimitResponse response = Call(Request({{{"nothing", "x"}}, {{"health", "x"}}}));
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
  ASSERT_EQ(response.statuses_size(), 2);
  EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  EXPECT_EQ(response.statuses(1).limit_remaining(), UINT32_MAX);
  EXPECT_TRUE(response.response_headers_to_add().empty());

  RateLimitResponse unknown = Call(Request({{{"user", "alice"}}}, 0, "elsewhere"));
  EXPECT_EQ(unknown.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(unknown.statuses_size(), 0);
}

TEST_F(RlsServiceTest, ZeroRequestsPerUnitAlwaysRefusesAndCountsNothingElse) {
  RateLimitResponse response = Call(Request({{{"ip", "6.6.6.6"}}, {{"user", "carol"}}}));
  EXPECT_EQ(response.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(response.statuses(0).current_limit().requests_per_unit(), 0u);
  EXPECT_EQ(response.statuses(1).code(), RateLimitResponse::OK);
  // carol was only looked at: all 3 are left.
  EXPECT_EQ(response.statuses(1).limit_remaining(), 3u);
  EXPECT_EQ(Call(Request({{{"user", "carol"}}})).statuses(0).limit_remaining(), 2u);
}

TEST_F(RlsServiceTest, ARefusalByOneDescriptorCountsNoneOfTheOthers) {
  for (int i = 0; i < 3; ++i) Call(Request({{{"user", "dave"}}}));
  RateLimitResponse refused = Call(Request({{{"ip", "1.2.3.4"}}, {{"user", "dave"}}}));
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(refused.statuses(1).code(), RateLimitResponse::OVER_LIMIT);
  // The ip was not counted by the refused request: all 5 are still there.
  EXPECT_EQ(Call(Request({{{"ip", "1.2.3.4"}}})).statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsServiceTest, HitsAddendIsTheCostAndZeroMeansOne) {
  EXPECT_EQ(Call(Request({{{"ip", "9.9.9.9"}}}, 3)).statuses(0).limit_remaining(), 2u);
  EXPECT_EQ(Call(Request({{{"ip", "9.9.9.9"}}}, 0)).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Call(Request({{{"ip", "9.9.9.9"}}}, 2)).overall_code(), RateLimitResponse::OVER_LIMIT);

  // A descriptor's own hits_addend replaces the request's; an explicit 0 only looks.
  RateLimitRequest request = Request({{{"ip", "8.8.8.8"}}, {{"user", "erin"}}}, 2);
  request.mutable_descriptors(1)->mutable_hits_addend()->set_value(0);
  RateLimitResponse response = Call(request);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 3u);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 3u);
}

TEST_F(RlsServiceTest, ARequestOverrideReplacesTheConfiguredLimit) {
  RateLimitRequest request = Request({{{"user", "frank"}}});
  auto* limit = request.mutable_descriptors(0)->mutable_limit();
  limit->set_requests_per_unit(1);
  limit->set_unit(envoy::type::v3::HOUR);
  RateLimitResponse first = Call(request);
  EXPECT_EQ(first.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(first.statuses(0).current_limit().requests_per_unit(), 1u);
  EXPECT_EQ(first.statuses(0).current_limit().unit(), RateLimitResponse::RateLimit::HOUR);
  EXPECT_EQ(Call(request).overall_code(), RateLimitResponse::OVER_LIMIT);
  // The configured rule's counter was not touched.
  EXPECT_EQ(Call(Request({{{"user", "frank"}}})).statuses(0).limit_remaining(), 2u);
  // An override also applies where no rule matches.
  RateLimitRequest unmatched = Request({{{"nothing", "x"}}});
  unmatched.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(5);
  unmatched.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::SECOND);
  EXPECT_EQ(Call(unmatched).statuses(0).limit_remaining(), 4u);
}

TEST_F(RlsServiceTest, ShadowRulesCountButNeverRefuse) {
  RateLimitResponse first = Call(Request({{{"beta", "x"}}, {{"ip", "7.7.7.7"}}}));
  EXPECT_EQ(first.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(first.statuses(0).limit_remaining(), 0u);
  // Over the shadow rule's limit: still OK, and the other descriptor is still counted.
  RateLimitResponse second = Call(Request({{{"beta", "x"}}, {{"ip", "7.7.7.7"}}}));
  EXPECT_EQ(second.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(second.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(second.statuses(1).limit_remaining(), 3u);
}

TEST_F(RlsServiceTest, GlobalShadowModeNeverRefusesButCounts) {
  std::unique_ptr<RlsService> shadow = MakeService(true);
  for (int i = 0; i < 5; ++i) {
    RateLimitResponse response = Call(*shadow, Request({{{"user", "gina"}}, {{"ip", "5.5.5.5"}}}));
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    // The descriptor status still tells what would have happened.
    EXPECT_EQ(response.statuses(0).code(),
              i < 3 ? RateLimitResponse::OK : RateLimitResponse::OVER_LIMIT);
    EXPECT_EQ(response.statuses(1).limit_remaining(), static_cast<uint32_t>(4 - i));
  }
  EXPECT_EQ(Call(*shadow, Request({{{"ip", "6.6.6.6"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsServiceTest, ReplacesDropsTheReplacedRule) {
  RateLimitRequest request =
      Request({{{"tenant", "t1"}, {"orders", "o"}}, {{"partner", "p1"}, {"orders", "o"}}});
  RateLimitResponse response = Call(request);
  EXPECT_FALSE(response.statuses(0).has_current_limit());
  EXPECT_EQ(response.statuses(1).current_limit().requests_per_unit(), 2u);
  Call(request);
  EXPECT_EQ(Call(request).overall_code(), RateLimitResponse::OVER_LIMIT);
  // The replaced rule was never counted.
  EXPECT_EQ(Call(Request({{{"tenant", "t1"}, {"orders", "o"}}})).statuses(0).limit_remaining(), 9u);
}

TEST_F(RlsServiceTest, TokenBucketExtensionRefillsContinuously) {
  for (int i = 0; i < 4; ++i) Call(Request({{{"bucket", "b"}}}));
  EXPECT_EQ(Call(Request({{{"bucket", "b"}}})).overall_code(), RateLimitResponse::OVER_LIMIT);
  clock_.AdvanceMillis(250);  // one token at 4 a second
  EXPECT_EQ(Call(Request({{{"bucket", "b"}}})).overall_code(), RateLimitResponse::OK);
}

TEST_F(RlsServiceTest, HeadersComeFromTheDescriptorWithLeastRemaining) {
  Call(Request({{{"user", "hank"}}}));
  RateLimitResponse response = Call(Request({{{"ip", "4.4.4.4"}}, {{"user", "hank"}}}));
  std::vector<std::pair<std::string, std::string>> headers;
  for (const auto& header : response.response_headers_to_add()) {
    headers.emplace_back(header.key(), header.value());
  }
  EXPECT_THAT(headers, ::testing::ElementsAre(::testing::Pair("RateLimit-Limit", "3"),
                                              ::testing::Pair("RateLimit-Remaining", "1"),
                                              ::testing::Pair("RateLimit-Reset", "60")));
}

TEST_F(RlsServiceTest, MalformedRequestsAreInvalidArgument) {
  EXPECT_EQ(service_->ShouldRateLimitSync(Request({{{"user", "x"}}}, 0, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(service_->ShouldRateLimitSync(Request({})).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<RateLimitResponse> long_key =
      service_->ShouldRateLimitSync(Request({{{"user", std::string(2000, 'x')}}}));
  EXPECT_EQ(long_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_key.status().message(), HasSubstr("bytes"));
}

TEST_F(RlsServiceTest, MoreDescriptorsThanTheBoundAreRefusedAndCountNothing) {
  RlsServiceOptions options;
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kTiffin, "tiffin.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  options.domains.push_back(*std::move(config));
  options.clock = &clock_;
  options.max_descriptors = 2;
  absl::StatusOr<std::unique_ptr<RlsService>> service = RlsService::Create(std::move(options));
  ASSERT_TRUE(service.ok()) << service.status();
  absl::StatusOr<RateLimitResponse> three =
      (*service)->ShouldRateLimitSync(Request({{{"user", "a"}}, {{"user", "b"}}, {{"user", "c"}}}));
  EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(three.status().message(), HasSubstr("3 descriptors, at most 2"));
  RateLimitResponse two = Call(**service, Request({{{"user", "a"}}, {{"user", "b"}}}));
  ASSERT_EQ(two.statuses_size(), 2);
  EXPECT_EQ(two.statuses(0).limit_remaining(), 2u);  // the refused request took nothing

  RlsServiceOptions zero;
  zero.max_descriptors = 0;
  EXPECT_EQ(RlsService::Create(std::move(zero)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RlsServiceTest, UpdateDomainsKeepsCountersOfUnchangedRules) {
  Call(Request({{{"user", "ivy"}}}));
  std::vector<EnvoyDomainConfig> domains;
  domains.push_back(*ParseEnvoyConfig(kTiffin, "tiffin.yaml"));
  ASSERT_TRUE(service_->UpdateDomains(std::move(domains)).ok());
  EXPECT_EQ(Call(Request({{{"user", "ivy"}}})).statuses(0).limit_remaining(), 1u);

  std::vector<EnvoyDomainConfig> duplicate;
  duplicate.push_back(*ParseEnvoyConfig("domain: a\n", "1.yaml"));
  duplicate.push_back(*ParseEnvoyConfig("domain: a\n", "2.yaml"));
  EXPECT_FALSE(service_->UpdateDomains(std::move(duplicate)).ok());
  EXPECT_EQ(Call(Request({{{"user", "ivy"}}})).statuses(0).limit_remaining(), 0u);
}

RlsJsonReply Json(RlsService& service, std::string_view body) {
  std::promise<RlsJsonReply> reply;
  HandleRlsJson(service, body, /*x_ratelimit_headers=*/true,
                [&](RlsJsonReply answer) { reply.set_value(std::move(answer)); });
  return reply.get_future().get();
}

TEST_F(RlsServiceTest, JsonEndpointUsesEnvoysJsonShape) {
  constexpr char kBody[] =
      R"({"domain": "tiffin", "descriptors": [{"entries": [{"key": "user", "value": "jo"}]}],
          "hitsAddend": 3})";
  RlsJsonReply allowed = Json(*service_, kBody);
  EXPECT_EQ(allowed.http_status, 200);
  EXPECT_THAT(allowed.body, HasSubstr(R"("overallCode":"OK")"));
  EXPECT_THAT(allowed.body, HasSubstr(R"("currentLimit":{"requestsPerUnit":3,"unit":"MINUTE"})"));
  RlsJsonReply refused = Json(*service_, kBody);
  EXPECT_EQ(refused.http_status, 429);
  EXPECT_THAT(refused.body, HasSubstr(R"("overallCode":"OVER_LIMIT")"));
  // The same decision as over gRPC: jo has nothing left.
  EXPECT_EQ(Call(Request({{{"user", "jo"}}})).overall_code(), RateLimitResponse::OVER_LIMIT);

  RlsJsonReply bad = Json(*service_, R"({"domain": "tiffin", "descriptor": []})");
  EXPECT_EQ(bad.http_status, 400);
  EXPECT_THAT(bad.body, HasSubstr("invalid JSON request"));
  EXPECT_EQ(Json(*service_, R"({"domain": "tiffin"})").http_status, 400);
}

TEST_F(RlsServiceTest, JsonEndpointSendsEnvoysXRateLimitFields) {
  Call(Request({{{"user", "kim"}}}));
  RlsJsonReply reply = Json(*service_, R"({"domain": "tiffin", "descriptors": [
      {"entries": [{"key": "ip", "value": "5.5.5.5"}]},
      {"entries": [{"key": "tenant", "value": "t"}, {"key": "orders", "value": "o"}]},
      {"entries": [{"key": "user", "value": "kim"}]},
      {"entries": [{"key": "health", "value": "h"}]}]})");
  EXPECT_EQ(reply.http_status, 200);
  // kim has 1 of 3 a minute left: the least; the unlimited descriptor carries no limit.
  EXPECT_THAT(
      reply.headers,
      ::testing::ElementsAre(::testing::Pair("X-RateLimit-Limit",
                                             R"(3, 5;w=1, 10;w=3600;name="tenant_orders", 3;w=60)"),
                             ::testing::Pair("X-RateLimit-Remaining", "1"),
                             ::testing::Pair("X-RateLimit-Reset", "60")));

  std::promise<RlsJsonReply> without;
  HandleRlsJson(
      *service_,
      R"({"domain": "tiffin", "descriptors": [{"entries": [{"key": "user", "value": "kim"}]}]})",
      /*x_ratelimit_headers=*/false,
      [&](RlsJsonReply answer) { without.set_value(std::move(answer)); });
  EXPECT_TRUE(without.get_future().get().headers.empty());
  // No status with a limit: no fields, as Envoy.
  EXPECT_TRUE(
      Json(
          *service_,
          R"({"domain": "tiffin", "descriptors": [{"entries": [{"key": "nothing", "value": "x"}]}]})")
          .headers.empty());
}

}  // namespace
}  // namespace tollgate::server
