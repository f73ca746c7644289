// Copyright tollgate authors.
#include "src/config/descriptor_matcher.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

constexpr char kConfig[] = R"(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: remote_address
    value: "10.1.*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
  - key: key
    value: value
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: internal
    rate_limit: {unlimited: true}
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    value: b
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
)";

std::unique_ptr<DescriptorMatcher> Matcher() {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(kConfig, "edge.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  std::vector<EnvoyDomainConfig> domains;
  domains.push_back(*std::move(config));
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(std::move(domains));
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return *std::move(matcher);
}

std::string FullKey(const DescriptorMatcher& matcher, const std::vector<DescriptorEntry>& entries) {
  const EnvoyRule* rule = matcher.Match("edge", entries);
  return rule == nullptr ? "(none)" : rule->full_key;
}

TEST(DescriptorMatcherTest, ExactValueBeatsWildcardBeatsKeyOnly) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "50.0.0.5"}}), "edge.remote_address_50.0.0.5");
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "50.0.0.1"}}), "edge.remote_address");
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "10.9.9.9"}}), "edge.remote_address_10.*");
}

TEST(DescriptorMatcherTest, FirstMatchingWildcardInFileOrderWins) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  // "10.*" is written before "10.1.*", so it wins, as in envoyproxy/ratelimit.
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "10.1.2.3"}}), "edge.remote_address_10.*");
}

TEST(DescriptorMatcherTest, NestedDescriptorsMatchEntryByEntry) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  EXPECT_EQ(FullKey(*matcher, {{"message_type", "marketing"}, {"to_number", "2061111111"}}),
            "edge.message_type_marketing.to_number");
  EXPECT_EQ(FullKey(*matcher, {{"to_number", "2061111111"}}), "edge.to_number");
  // The placeholder level has no limit of its own.
  EXPECT_EQ(FullKey(*matcher, {{"message_type", "marketing"}}), "(none)");
  EXPECT_EQ(FullKey(*matcher, {{"message_type", "transactional"}, {"to_number", "1"}}), "(none)");
}

TEST(DescriptorMatcherTest, RuleAppliesOnlyAtTheDepthOfTheLastEntry) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  EXPECT_EQ(FullKey(*matcher, {{"key", "value"}}), "edge.key_value");
  EXPECT_EQ(FullKey(*matcher, {{"key", "value"}, {"subkey", "subvalue"}}), "(none)");
}

TEST(DescriptorMatcherTest, UnknownKeysDomainsAndEmptyDescriptorsMatchNothing) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  EXPECT_EQ(FullKey(*matcher, {{"nobody", "x"}}), "(none)");
  EXPECT_EQ(FullKey(*matcher, {}), "(none)");
  std::vector<DescriptorEntry> entries = {{"remote_address", "1.2.3.4"}};
  EXPECT_EQ(matcher->Match("other", entries), nullptr);
  EXPECT_TRUE(matcher->HasDomain("edge"));
  EXPECT_FALSE(matcher->HasDomain("other"));
}

TEST(DescriptorMatcherTest, CountingRulesBecomeUniquelyNamedLimits) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  std::vector<std::string> names;
  for (const Limit& limit : matcher->limits()) names.push_back(limit.name);
  // Not the block-list rule (0 per second) nor the unlimited one; "a_b" and "a"/"b" have the
  // same full key, so the second gets a suffix.
  EXPECT_THAT(names, ::testing::UnorderedElementsAre(
                         "edge.remote_address", "edge.remote_address_10.*",
                         "edge.remote_address_10.1.*", "edge.message_type_marketing.to_number",
                         "edge.to_number", "edge.key_value", "edge.a_b", "edge.a_b#2"));
  std::vector<DescriptorEntry> blocked = {{"remote_address", "50.0.0.5"}};
  EXPECT_EQ(matcher->Match("edge", blocked)->limit_name, "");
  std::vector<DescriptorEntry> internal = {{"internal", "x"}};
  EXPECT_TRUE(matcher->Match("edge", internal)->rate_limit.unlimited);
  std::vector<DescriptorEntry> a_b = {{"a", "b"}};
  EXPECT_EQ(matcher->Match("edge", a_b)->limit_name, "edge.a_b#2");
}

TEST(DescriptorMatcherTest, LimitNumbersFollowTheAlgorithm) {
  std::unique_ptr<DescriptorMatcher> matcher = Matcher();
  for (const Limit& limit : matcher->limits()) {
    if (limit.name == "edge.remote_address") {
      EXPECT_EQ(limit.numbers.algorithm, Algorithm::kFixedWindow);
      EXPECT_EQ(limit.numbers.limit, 10);
      EXPECT_EQ(limit.numbers.window_micros, 1'000'000);
    } else if (limit.name == "edge.to_number") {
      EXPECT_EQ(limit.numbers.algorithm, Algorithm::kTokenBucket);
      EXPECT_EQ(limit.numbers.capacity, 100);
      EXPECT_DOUBLE_EQ(limit.numbers.refill_per_second, 100.0 / 86'400);
    } else if (limit.name == "edge.a_b#2") {
      EXPECT_EQ(limit.numbers.algorithm, Algorithm::kSlidingWindow);
      EXPECT_EQ(limit.numbers.window_micros, 60'000'000);
    }
  }
}

TEST(DescriptorMatcherTest, DuplicateDomainsAreRefused) {
  std::vector<EnvoyDomainConfig> domains;
  domains.push_back(*ParseEnvoyConfig("domain: d\n", "one.yaml"));
  domains.push_back(*ParseEnvoyConfig("domain: d\n", "two.yaml"));
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(std::move(domains));
  ASSERT_FALSE(matcher.ok());
  EXPECT_THAT(matcher.status().message(), HasSubstr("domain 'd' is in both one.yaml and two.yaml"));
}

}  // namespace
}  // namespace tollgate
