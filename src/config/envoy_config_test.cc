// Copyright tollgate authors.
#include "src/config/envoy_config.h"

#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

constexpr char kTiffin[] = R"(domain: tiffin
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: "/api/*"
    shadow_mode: true
    rate_limit:
      unit: Minute
      requests_per_unit: 100
      name: api_paths
      algorithm: token_bucket
      on_store_failure: fail_closed
      timeout: 25ms
  - key: tenant
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit:
          unit: day
          requests_per_unit: 5
          replaces:
            - name: api_paths
  - key: internal
    rate_limit:
      unlimited: true
)";

TEST(EnvoyConfigTest, LoadsEnvoyproxyRatelimitFormat) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kTiffin, "tiffin.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->domain, "tiffin");
  EXPECT_EQ(config->file_name, "tiffin.yaml");
  ASSERT_EQ(config->descriptors.size(), 5u);

  const EnvoyDescriptor& any_address = config->descriptors[0];
  EXPECT_EQ(any_address.key, "remote_address");
  EXPECT_EQ(any_address.value, "");
  EXPECT_EQ(any_address.line, 3);
  ASSERT_TRUE(any_address.rate_limit.has_value());
  EXPECT_EQ(any_address.rate_limit->unit, EnvoyUnit::kSecond);
  EXPECT_EQ(any_address.rate_limit->requests_per_unit, 10u);
  EXPECT_EQ(any_address.rate_limit->algorithm, Algorithm::kFixedWindow);
  EXPECT_FALSE(any_address.shadow_mode);

  EXPECT_EQ(config->descriptors[1].rate_limit->requests_per_unit, 0u);

  const EnvoyDescriptor& path = config->descriptors[2];
  EXPECT_EQ(path.value, "/api/*");
  EXPECT_TRUE(path.shadow_mode);
  EXPECT_EQ(path.rate_limit->unit, EnvoyUnit::kMinute);  // units are case-insensitive
  EXPECT_EQ(path.rate_limit->name, "api_paths");
  EXPECT_EQ(path.rate_limit->algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(path.rate_limit->on_store_failure, FailureMode::kFailClosed);
  EXPECT_EQ(path.rate_limit->timeout_micros, 25'000);

  const EnvoyDescriptor& tenant = config->descriptors[3];
  EXPECT_FALSE(tenant.rate_limit.has_value());
  ASSERT_EQ(tenant.descriptors.size(), 1u);
  EXPECT_EQ(tenant.descriptors[0].rate_limit->unit, EnvoyUnit::kDay);
  EXPECT_THAT(tenant.descriptors[0].rate_limit->replaces, ::testing::ElementsAre("api_paths"));

  EXPECT_TRUE(config->descriptors[4].rate_limit->unlimited);
}

TEST(EnvoyConfigTest, RlqsOnStoreFailureIsReadAndUnsetByDefault) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: "
      "1, rlqs_on_store_failure: expire}\n  - key: b\n    rate_limit: {unit: second, "
      "requests_per_unit: 1}\n",
      "d.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->descriptors[0].rate_limit->rlqs_on_store_failure, RlqsStoreFailure::kExpire);
  EXPECT_FALSE(config->descriptors[1].rate_limit->rlqs_on_store_failure.has_value());
}

TEST(EnvoyConfigTest, UnitsHaveEnvoyproxyLengths) {
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kSecond), 1);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kHour), 3600);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kWeek), 7 * 86400);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kMonth), 30 * 86400);
  EXPECT_EQ(EnvoyUnitSeconds(EnvoyUnit::kYear), 365 * 86400);
  EXPECT_EQ(ParseEnvoyUnit("WEEK"), EnvoyUnit::kWeek);
  EXPECT_EQ(ParseEnvoyUnit("fortnight"), std::nullopt);
  EXPECT_EQ(EnvoyUnitName(EnvoyUnit::kYear), "year");
}

TEST(EnvoyConfigTest, AnEmptyDescriptorListIsValid) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig("domain: empty\n", "e.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->descriptors.empty());
}

// Envoy Gateway writes the RateLimitConfig message's `name` beside its domain; the peer
// accepts it, and so does tollgate.
TEST(EnvoyConfigTest, ATopLevelNameIsAccepted) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(
      "name: default/eg/http\ndomain: default/eg/http\ndescriptors:\n  - key: user\n"
      "    rate_limit: {unit: second, requests_per_unit: 5}\n",
      "gateway.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->domain, "default/eg/http");
  EXPECT_EQ(config->descriptors.size(), 1u);
}

struct BadConfig {
  const char* yaml;
  const char* message;  // a part of the expected message
};

class EnvoyConfigErrorTest : public ::testing::TestWithParam<BadConfig> {};

TEST_P(EnvoyConfigErrorTest, NamesFileLineAndField) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(GetParam().yaml, "bad.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Errors, EnvoyConfigErrorTest,
    ::testing::Values(
        BadConfig{"descriptors: []\n", "bad.yaml:1:1: domain: missing"},
        BadConfig{"domain: ''\n", "bad.yaml:1:9: domain: must not be empty"},
        BadConfig{"domain: d\nlimits: {}\n",
                  "bad.yaml:2:1: (top level): unknown key 'limits', expected one of domain, "
                  "descriptors"},
        BadConfig{"domain: d\ndescriptors:\n  - value: x\n",
                  "bad.yaml:3:5: descriptors[0].key: missing"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, "
                  "requests_per_unit: 1}\n",
                  "bad.yaml:4:24: descriptors[0].rate_limit.unit: expected one of second, "
                  "minute, hour, day, week, month, year, got 'fortnight'"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n",
                  "bad.yaml:5:7: descriptors[0].rate_limit.requests_per_unit: missing"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                  "      requests_per_unit: -3\n",
                  "bad.yaml:6:26: descriptors[0].rate_limit.requests_per_unit: expected a whole "
                  "number"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n"
                  "      unit: second\n",
                  "bad.yaml:6:13: descriptors[0].rate_limit.unit: must not be set when "
                  "unlimited is true"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
                  "bad.yaml:4:5: descriptors[1]: duplicate descriptor key 'a'"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n"
                  "        rate_limit: {unit: second, requests_per_unit: 1, name: n,\n"
                  "                     replaces: [{name: n}]}\n",
                  "descriptors[0].descriptors[0].rate_limit.replaces[0].name: a rule cannot "
                  "replace itself"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n",
                  "bad.yaml:4:18: descriptors[0].shadow_mode: expected true or false"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1, algorithm: leaky_bucket}\n",
                  "descriptors[0].rate_limit.algorithm: expected one of fixed_window, "
                  "sliding_window, token_bucket, got 'leaky_bucket'"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1, on_store_failure: local}\n",
                  "descriptors[0].rate_limit.on_store_failure: expected fail_open or "
                  "fail_closed"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1, rlqs_on_store_failure: later}\n",
                  "descriptors[0].rate_limit.rlqs_on_store_failure: expected fail_open, "
                  "fail_closed or expire, got 'later'"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1, reqests: 2}\n",
                  "descriptors[0].rate_limit: unknown key 'reqests'"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    value: exact\n"
                  "    share_threshold: true\n",
                  "bad.yaml:5:22: descriptors[0].share_threshold: only applies to a wildcard "
                  "value"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n",
                  "descriptors[0].share_threshold: only applies to a wildcard value"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    quota_mode: sometimes\n",
                  "bad.yaml:4:17: descriptors[0].quota_mode: expected true or false"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    value_to_metric: 2\n",
                  "descriptors[0].value_to_metric: expected true or false"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    metadata: [1, 2]\n",
                  "bad.yaml:4:15: descriptors[0].metadata: expected a map"},
        // A wildcard that an earlier one of the same key always beats can never match.
        BadConfig{"domain: d\ndescriptors:\n  - key: p\n    value: foo*\n"
                  "  - key: p\n    value: foo*bar\n",
                  "bad.yaml:6:12: descriptors[1].value: wildcard 'foo*bar' can never match: "
                  "'foo*' (line 3) comes first"},
        BadConfig{"domain: d\ndescriptors:\n  - key: p\n    value: a*c\n"
                  "  - key: p\n    value: ab*bc\n",
                  "descriptors[1].value: wildcard 'ab*bc' can never match"},
        BadConfig{"domain: d\ndescriptors:\n  - key: p\n    value: \"*\"\n"
                  "  - key: p\n    value: x*y*z\n",
                  "descriptors[1].value: wildcard 'x*y*z' can never match"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
                  "requests_per_unit: 1, unit_multiplier: 0}\n",
                  "descriptors[0].rate_limit.unit_multiplier: expected a whole number from 1 "
                  "to 315360000"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, "
                  "requests_per_unit: 1, unit_multiplier: 11}\n",
                  "descriptors[0].rate_limit.unit_multiplier: expected a whole number from 1 "
                  "to 10"},
        BadConfig{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, "
                  "unit_multiplier: 2}\n",
                  "descriptors[0].rate_limit.unit_multiplier: must not be set when unlimited"},
        BadConfig{"domain: [unclosed\n", "bad.yaml:"},
        BadConfig{"- just\n- a list\n", "bad.yaml:1:1: expected a map with domain"}));

// The keys envoyproxy/ratelimit added since late 2025, written as its users write them
// (its test/config/share_threshold.yaml and the README's examples).
TEST(EnvoyConfigTest, LoadsThePeersNewestKeys) {
  constexpr char kYaml[] = R"(domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        quota_mode: true
        detailed_metric: true
        metadata:
          owner: payments
          tiers: [gold, silver]
          limits: {burst: 3}
        rate_limit:
          unit: second
          unit_multiplier: 30
          requests_per_unit: 60
  - key: empty_metadata
    metadata:
)";
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kYaml, "new.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->descriptors.size(), 3u);
  EXPECT_TRUE(config->descriptors[0].share_threshold);
  EXPECT_FALSE(config->descriptors[0].quota_mode);
  EXPECT_EQ(config->descriptors[0].rate_limit->unit_multiplier, 1u);
  const EnvoyDescriptor& method = config->descriptors[1].descriptors.at(0);
  EXPECT_TRUE(method.quota_mode);
  EXPECT_FALSE(method.share_threshold);
  EXPECT_EQ(method.rate_limit->unit, EnvoyUnit::kSecond);
  EXPECT_EQ(method.rate_limit->unit_multiplier, 30u);
  EXPECT_EQ(method.metadata_json,
            R"({"owner":"payments","tiers":["gold","silver"],"limits":{"burst":3}})");
  EXPECT_EQ(config->descriptors[2].metadata_json, "");
}

TEST(EnvoyConfigTest, MetadataScalarsAreTypedAsYamlReadsThem) {
  constexpr char kYaml[] = R"(domain: d
descriptors:
  - key: k
    metadata:
      count: 12
      ratio: -0.5
      on: yes
      off: False
      none: ~
      quoted: "12"
      single: 'true'
      text: "say \"hi\"\tnow"
      version: 1.2.3
    rate_limit: {unit: second, requests_per_unit: 1}
)";
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kYaml, "m.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->descriptors[0].metadata_json,
            R"({"count":12,"ratio":-0.5,"on":true,"off":false,"none":null,"quoted":"12",)"
            R"("single":"true","text":"say \"hi\"\tnow","version":"1.2.3"})");
}

TEST(EnvoyConfigTest, WildcardsMatchLikeThePeers) {
  // envoyproxy/ratelimit's wildcard cases: each '*' any run, possibly empty.
  auto matches = [](const char* pattern, const char* value) {
    return WildcardMatches(SplitWildcard(pattern), value);
  };
  EXPECT_TRUE(matches("foo*", "foo1"));
  EXPECT_TRUE(matches("foo*", "foo"));
  EXPECT_FALSE(matches("foo*", "bar"));
  EXPECT_TRUE(matches("bar*b", "barab"));
  EXPECT_TRUE(matches("bar*b", "bar123b"));
  EXPECT_TRUE(matches("bar*b", "barb"));
  EXPECT_FALSE(matches("bar*b", "bara"));
  EXPECT_FALSE(matches("bar*b", "xbarb"));
  EXPECT_FALSE(matches("bar*b", "bar"));  // prefix and suffix may not overlap
  EXPECT_TRUE(matches("foo*bar*baz", "foo123bar456baz"));
  EXPECT_TRUE(matches("foo*bar*baz", "foobarbaz"));
  EXPECT_FALSE(matches("foo*bar*baz", "foo123baz"));
  EXPECT_FALSE(matches("foo*bar*baz", "foobazbar"));
  EXPECT_FALSE(matches("foo*bar*baz", "foobaz"));
  EXPECT_TRUE(matches("*", ""));
  EXPECT_TRUE(matches("*mid*", "xxmidyy"));
  EXPECT_FALSE(matches("a*aa*a", "aaa"));
  EXPECT_TRUE(matches("a*aa*a", "aaaa"));
  EXPECT_TRUE(matches("exact", "exact"));
  EXPECT_FALSE(matches("exact", "exactly"));
}

TEST(EnvoyConfigTest, WildcardsThatCanStillMatchLoadInAnyOrder) {
  // A narrower wildcard written first still matches what it names; a broader one after it
  // takes the rest. Overlapping ones that each keep some values load too.
  constexpr char kYaml[] = R"(domain: d
descriptors:
  - key: p
    value: foo*bar
  - key: p
    value: foo*
  - key: p
    value: "*baz"
  - key: q
    value: foo*
)";
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kYaml, "order.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
}

TEST(EnvoyConfigTest, TheDefaultAlgorithmGoesToRulesThatNameNone) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(R"(domain: d
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 5}
    descriptors:
      - key: nested
        rate_limit: {unit: minute, requests_per_unit: 50}
  - key: named
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: fixed_window}
  - key: free
    rate_limit: {unlimited: true}
)",
                                                              "d.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<EnvoyDomainConfig> domains = {*config};
  SetDefaultAlgorithm(domains, Algorithm::kSlidingWindow);
  const std::vector<EnvoyDescriptor>& rules = domains[0].descriptors;
  EXPECT_EQ(rules[0].rate_limit->algorithm, Algorithm::kSlidingWindow);
  EXPECT_EQ(rules[0].descriptors[0].rate_limit->algorithm, Algorithm::kSlidingWindow);
  EXPECT_EQ(rules[1].rate_limit->algorithm, Algorithm::kFixedWindow);  // named its own
  EXPECT_TRUE(rules[2].rate_limit->unlimited);
}

TEST(EnvoyConfigTest, LoadFileReportsMissingFile) {
  absl::StatusOr<EnvoyDomainConfig> config = LoadEnvoyConfigFile("/nonexistent/tiffin.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr("/nonexistent/tiffin.yaml"));
}

TEST(EnvoyConfigTest, TheTiffinExampleLoads) {
  const std::string path = std::string(TOLLGATE_SOURCE_DIR) + "/examples/envoy/ratelimit.yaml";
  absl::StatusOr<EnvoyDomainConfig> config = LoadEnvoyConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->domain, "tiffin");
  EXPECT_FALSE(config->descriptors.empty());
}

// The lines of an error message.
std::vector<std::string> Lines(const std::string& message) {
  std::vector<std::string> lines;
  std::istringstream in(message);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every error of a file, one line each in file order, with "did you mean" for unknown keys
// among the keys valid where they stand (top level, a descriptor, a rate_limit).
TEST(EnvoyConfigTest, EveryErrorOfAFileIsReported) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(R"(domain: tiffin
descriptor: []
descriptors:
  - key: remote_address
    rate_limit: {unit: fortnight, requests_per_unit: 10}
  - key: path
    valu: /api
    rate_limit:
      unit: minute
      requests_per_unit: -1
      unlimted: true
  - value: x
    shadow_mode: maybe
)",
                                                              "envoy.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(
      Lines(std::string(config.status().message())),
      ::testing::ElementsAre(
          "envoy.yaml:2:1: (top level): unknown key 'descriptor', expected one of domain, "
          "descriptors, name (did you mean 'descriptors'?)",
          "envoy.yaml:5:24: descriptors[0].rate_limit.unit: expected one of second, minute, "
          "hour, day, week, month, year, got 'fortnight'",
          "envoy.yaml:7:5: descriptors[1]: unknown key 'valu', expected one of key, value, "
          "rate_limit, descriptors, shadow_mode, quota_mode, detailed_metric, value_to_metric, "
          "share_threshold, metadata (did you mean 'value'?)",
          "envoy.yaml:10:26: descriptors[1].rate_limit.requests_per_unit: expected a whole "
          "number from 0 to 4294967295, got '-1'",
          "envoy.yaml:11:7: descriptors[1].rate_limit: unknown key 'unlimted', expected one of "
          "unit, requests_per_unit, unit_multiplier, unlimited, name, replaces, algorithm, "
          "on_store_failure, timeout, durable, rlqs_on_store_failure (did you mean 'unlimited'?)",
          "envoy.yaml:12:5: descriptors[2].key: missing",
          "envoy.yaml:13:18: descriptors[2].shadow_mode: expected true or false, got 'maybe'"));
}

// A misspelt `domain:` is one error, with "did you mean", and no second one saying that
// `domain` is missing.
TEST(EnvoyConfigTest, AMisspeltDomainIsOneError) {
  absl::StatusOr<EnvoyDomainConfig> config =
      ParseEnvoyConfig("domian: tiffin\ndescriptors: []\n", "envoy.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message(),
            "envoy.yaml:1:1: (top level): unknown key 'domian', expected one of domain, "
            "descriptors, name (did you mean 'domain'?)");
}

TEST(ConfigKindTest, ToldApartByTopLevelKeys) {
  EXPECT_EQ(DetectConfigKind("limits:\n  a: {}\n", "a.yaml").value(), ConfigKind::kLimits);
  EXPECT_EQ(DetectConfigKind("domain: tiffin\ndescriptors: []\n", "b.yaml").value(),
            ConfigKind::kEnvoy);
  absl::StatusOr<ConfigKind> both = DetectConfigKind("limits: {}\ndomain: x\n", "c.yaml");
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.status().message(), HasSubstr("c.yaml: has both"));
  absl::StatusOr<ConfigKind> neither = DetectConfigKind("other: 1\n", "d.yaml");
  ASSERT_FALSE(neither.ok());
  EXPECT_THAT(neither.status().message(), HasSubstr("d.yaml: expected a top-level"));
  EXPECT_THAT(DetectConfigKind("a: [", "e.yaml").status().message(),
              HasSubstr("e.yaml:1:1: invalid YAML: "));
}

// A file whose top-level key is a typo of one format's key is read as that format, whose
// parser says "did you mean".
TEST(ConfigKindTest, AMisspeltTopLevelKeyNamesTheFormat) {
  EXPECT_EQ(DetectConfigKind("limit:\n  a: {}\n", "a.yaml").value(), ConfigKind::kLimits);
  EXPECT_EQ(DetectConfigKind("memory_store: {max_keys: 3}\n", "a.yaml").value(),
            ConfigKind::kLimits);
  EXPECT_EQ(DetectConfigKind("domian: tiffin\n", "b.yaml").value(), ConfigKind::kEnvoy);
  EXPECT_EQ(DetectConfigKind("descriptors: []\n", "b.yaml").value(), ConfigKind::kEnvoy);
}

}  // namespace
}  // namespace tollgate
