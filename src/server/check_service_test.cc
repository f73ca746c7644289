// Copyright tollgate authors.
#include "src/server/check_service.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"

namespace tollgate::server {
namespace {

constexpr char kEnvoy[] = R"(domain: svc
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, on_store_failure: fail_closed}
)";

LoadedConfigs Config(int64_t api_capacity) {
  LoadedConfigs config;
  config.limits.push_back(
      testing::Window("api", Algorithm::kFixedWindow, api_capacity, 3'600'000'000));
  absl::StatusOr<EnvoyDomainConfig> envoy = ParseEnvoyConfig(kEnvoy, "svc.yaml");
  EXPECT_TRUE(envoy.ok()) << envoy.status();
  if (envoy.ok()) config.envoy_domains.push_back(*std::move(envoy));
  return config;
}

CheckServiceOptions Options(Clock* clock) {
  CheckServiceOptions options;
  options.clock = clock;
  return options;
}

absl::StatusOr<Decision> CheckNow(Limiter& limiter, const Limit& limit, const std::string& key) {
  std::optional<absl::StatusOr<Decision>> answer;
  limiter.CheckAsync(limit, key, 1, [&](absl::StatusOr<Decision> d) { answer = std::move(d); });
  EXPECT_TRUE(answer.has_value()) << "the memory store answers inline";
  return answer.value_or(absl::InternalError("no answer"));
}

TEST(CheckServiceTest, OneLimiterHoldsTollgateLimitsAndEnvoyRules) {
  SimulatedClock clock(1'700'000'040'000'000);
  auto service = CheckService::Create(Options(&clock), Config(3));
  ASSERT_TRUE(service.ok()) << service.status();
  std::shared_ptr<const CheckSnapshot> snapshot = (*service)->snapshot();
  EXPECT_NE(snapshot->limiter->FindLimit("api"), nullptr);
  EXPECT_NE(snapshot->limiter->FindLimit("svc.user"), nullptr);
  EXPECT_EQ(snapshot->http_limits, 1u);
  // /v1/check may name tollgate's limits only, not an Envoy rule's.
  EXPECT_NE(snapshot->FindHttpLimit("api"), nullptr);
  EXPECT_EQ(snapshot->FindHttpLimit("svc.user"), nullptr);
  EXPECT_EQ(snapshot->fail_closed_limit, "svc.user");
  EXPECT_TRUE(snapshot->matcher->HasDomain("svc"));
}

TEST(CheckServiceTest, AReloadSwapsTheSnapshotAndKeepsTheCounters) {
  SimulatedClock clock(1'700'000'040'000'000);
  auto service = CheckService::Create(Options(&clock), Config(2));
  ASSERT_TRUE(service.ok()) << service.status();
  std::shared_ptr<const CheckSnapshot> old = (*service)->snapshot();
  ASSERT_TRUE(CheckNow(*old->limiter, *old->FindHttpLimit("api"), "k")->allowed);
  ASSERT_TRUE(CheckNow(*old->limiter, *old->FindHttpLimit("api"), "k")->allowed);
  ASSERT_FALSE(CheckNow(*old->limiter, *old->FindHttpLimit("api"), "k")->allowed);

  ASSERT_TRUE((*service)->Reload(Config(3)).ok());
  std::shared_ptr<const CheckSnapshot> now = (*service)->snapshot();
  EXPECT_NE(now, old);
  // The same store: 2 of the 3 used.
  EXPECT_TRUE(CheckNow(*now->limiter, *now->FindHttpLimit("api"), "k")->allowed);
  EXPECT_FALSE(CheckNow(*now->limiter, *now->FindHttpLimit("api"), "k")->allowed);
  // A request still holding the old snapshot finishes on it.
  EXPECT_EQ(old->FindHttpLimit("api")->numbers.limit, 2);
}

TEST(CheckServiceTest, AnInvalidReloadKeepsTheOldSnapshot) {
  auto service = CheckService::Create(CheckServiceOptions(), Config(2));
  ASSERT_TRUE(service.ok()) << service.status();
  std::shared_ptr<const CheckSnapshot> before = (*service)->snapshot();

  LoadedConfigs clash = Config(2);
  clash.limits.push_back(testing::TokenBucket("svc.user", 1, 1));  // an Envoy rule's name
  EXPECT_EQ((*service)->Reload(std::move(clash)).code(), absl::StatusCode::kInvalidArgument);
  LoadedConfigs twice = Config(2);
  twice.envoy_domains.push_back(twice.envoy_domains[0]);
  EXPECT_EQ((*service)->Reload(std::move(twice)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*service)->snapshot(), before);

  // ReloadDomains keeps tollgate's limits.
  ASSERT_TRUE((*service)->ReloadDomains({}).ok());
  EXPECT_NE((*service)->snapshot()->FindHttpLimit("api"), nullptr);
  EXPECT_FALSE((*service)->snapshot()->matcher->HasDomain("svc"));
  EXPECT_EQ((*service)->snapshot()->fail_closed_limit, "");
}

EnvoyDomainConfig Domain(const std::string& domain, const std::string& source) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(
      "domain: " + domain +
          "\ndescriptors: [{key: k, rate_limit: {unit: day, requests_per_unit: 1}}]\n",
      source);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.value_or(EnvoyDomainConfig{});
}

TEST(CheckServiceTest, TheControlPlanesDomainsAndTheFilesReloadApart) {
  auto service = CheckService::Create(CheckServiceOptions(), Config(2));
  ASSERT_TRUE(service.ok()) << service.status();
  ASSERT_TRUE((*service)->ReloadControlPlaneDomains({Domain("shop", "xDS resource 'shop'")}).ok());
  auto serves = [&](const std::string& domain) {
    return (*service)->snapshot()->matcher->HasDomain(domain);
  };
  EXPECT_TRUE(serves("svc"));
  EXPECT_TRUE(serves("shop"));
  EXPECT_NE((*service)->snapshot()->FindHttpLimit("api"), nullptr);

  // Reloading the files keeps the control plane's domains, and the reverse.
  ASSERT_TRUE((*service)->Reload(Config(3)).ok());
  EXPECT_TRUE(serves("shop"));
  ASSERT_TRUE((*service)->ReloadDomains({}).ok());
  EXPECT_TRUE(serves("shop"));
  EXPECT_FALSE(serves("svc"));
  ASSERT_TRUE((*service)->Reload(Config(3)).ok());
  ASSERT_TRUE((*service)->ReloadControlPlaneDomains({Domain("cart", "xDS resource 'cart'")}).ok());
  EXPECT_FALSE(serves("shop"));  // state of the world: the set replaces the previous one
  EXPECT_TRUE(serves("cart"));
  EXPECT_TRUE(serves("svc"));

  // A domain in both parts is refused, naming the file and the resource; nothing changes.
  std::shared_ptr<const CheckSnapshot> before = (*service)->snapshot();
  absl::Status both = (*service)->ReloadControlPlaneDomains({Domain("svc", "xDS resource 'svc'")});
  EXPECT_EQ(both.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(both.message(), "domain 'svc' is in both svc.yaml and xDS resource 'svc'");
  LoadedConfigs with_cart = Config(3);
  with_cart.envoy_domains.push_back(Domain("cart", "cart.yaml"));
  EXPECT_EQ((*service)->Reload(std::move(with_cart)).message(),
            "domain 'cart' is in both cart.yaml and xDS resource 'cart'");
  EXPECT_EQ((*service)->snapshot(), before);
}

}  // namespace
}  // namespace tollgate::server
