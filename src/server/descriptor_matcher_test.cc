// Copyright tollgate authors.
#include "src/server/descriptor_matcher.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/config/envoy_config.h"

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
    value: "10.1.*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: remote_address
    value: "10.*"
    rate_limit: {unit: second, requests_per_unit: 1000}
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
  // "10.1.*" is written before "10.*", so it wins where both match, as in
  // envoyproxy/ratelimit. (The other order cannot load: "10.1.*" could never match.)
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "10.1.2.3"}}), "edge.remote_address_10.1.*");
  EXPECT_EQ(FullKey(*matcher, {{"remote_address", "10.2.2.3"}}), "edge.remote_address_10.*");
}

std::unique_ptr<DescriptorMatcher> MatcherOf(const char* yaml) {
  absl::StatusOr<EnvoyDomainConfig> config = ParseEnvoyConfig(yaml, "test.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return nullptr;
  std::vector<EnvoyDomainConfig> domains;
  domains.push_back(*std::move(config));
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher =
      DescriptorMatcher::Create(std::move(domains));
  EXPECT_TRUE(matcher.ok()) << matcher.status();
  return matcher.ok() ? *std::move(matcher) : nullptr;
}

// envoyproxy/ratelimit's test/config/wildcard.yaml, and the answers its TestWildcardConfig
// expects.
constexpr char kPeerWildcards[] = R"(domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noWild
    value: foo
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: noVal
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: midWild
    value: bar*b
    rate_limit:
      unit: minute
      requests_per_unit: 20
  - key: multiWild
    value: foo*bar*baz
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit:
          unit: minute
          requests_per_unit: 20
)";

std::string Rule(const DescriptorMatcher& matcher, const std::vector<DescriptorEntry>& entries) {
  const EnvoyRule* rule = matcher.Match("test-domain", entries);
  return rule == nullptr ? "(none)" : rule->full_key;
}

TEST(DescriptorMatcherTest, MidStringAndMultipleWildcardsMatchAsThePeers) {
  std::unique_ptr<DescriptorMatcher> matcher = MatcherOf(kPeerWildcards);
  ASSERT_NE(matcher, nullptr);
  EXPECT_EQ(Rule(*matcher, {{"noVal", "foo1"}}), "test-domain.noVal");
  EXPECT_EQ(Rule(*matcher, {{"wild", "foo1"}}), "test-domain.wild_foo*");
  EXPECT_EQ(Rule(*matcher, {{"wild", "foo2"}}), "test-domain.wild_foo*");
  EXPECT_EQ(Rule(*matcher, {{"nestedWild", "val1"}, {"wild", "goo2"}}),
            "test-domain.nestedWild_val1.wild_goo*");
  EXPECT_EQ(Rule(*matcher, {{"wild", "bar"}}), "(none)");
  EXPECT_EQ(Rule(*matcher, {{"noWild", "foo1"}}), "(none)");  // no eager match
  EXPECT_EQ(Rule(*matcher, {{"midWild", "barab"}}), "test-domain.midWild_bar*b");
  EXPECT_EQ(Rule(*matcher, {{"midWild", "bar123b"}}), "test-domain.midWild_bar*b");
  EXPECT_EQ(Rule(*matcher, {{"midWild", "barb"}}), "test-domain.midWild_bar*b");
  EXPECT_EQ(Rule(*matcher, {{"midWild", "bara"}}), "(none)");
  EXPECT_EQ(Rule(*matcher, {{"midWild", "xbarb"}}), "(none)");
  EXPECT_EQ(Rule(*matcher, {{"multiWild", "foo123bar456baz"}}),
            "test-domain.multiWild_foo*bar*baz");
  EXPECT_EQ(Rule(*matcher, {{"multiWild", "foobarbaz"}}), "test-domain.multiWild_foo*bar*baz");
  EXPECT_EQ(Rule(*matcher, {{"multiWild", "foo123baz"}}), "(none)");
  EXPECT_EQ(Rule(*matcher, {{"multiWild", "foobazbar"}}), "(none)");
}

// From envoyproxy/ratelimit's test/config/share_threshold.yaml.
constexpr char kPeerShareThreshold[] = R"(domain: test-domain
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit:
              unit: minute
              requests_per_unit: 120
  - key: file
    value: test1
    rate_limit:
      unit: minute
      requests_per_unit: 50
  - key: file
    value: test*
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 100
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 50
)";

std::vector<std::string> CountedValues(const DescriptorMatcher& matcher,
                                       const std::vector<DescriptorEntry>& entries) {
  std::vector<std::string_view> values;
  if (matcher.Match("test-domain", entries, &values) == nullptr) return {"(none)"};
  return std::vector<std::string>(values.begin(), values.end());
}

TEST(DescriptorMatcherTest, ShareThresholdCountsEveryValueUnderTheWildcard) {
  std::unique_ptr<DescriptorMatcher> matcher = MatcherOf(kPeerShareThreshold);
  ASSERT_NE(matcher, nullptr);
  using ::testing::ElementsAre;
  EXPECT_THAT(CountedValues(*matcher, {{"files", "files/a.pdf"}}), ElementsAre("files/*"));
  EXPECT_THAT(CountedValues(*matcher, {{"files", "files/b.csv"}}), ElementsAre("files/*"));
  // An intermediate level's share_threshold applies; a level without it keeps its value.
  EXPECT_THAT(CountedValues(*matcher, {{"path", "path/x"}, {"file", "file/y"}, {"type", "pdf"}}),
              ElementsAre("path/*", "file/y", "pdf"));
  // The exact value wins over the sharing wildcard and keeps its own counter.
  EXPECT_THAT(CountedValues(*matcher, {{"file", "test1"}}), ElementsAre("test1"));
  EXPECT_EQ(Rule(*matcher, {{"file", "test1"}}), "test-domain.file_test1");
  EXPECT_THAT(CountedValues(*matcher, {{"file", "test2"}}), ElementsAre("test*"));
  EXPECT_THAT(CountedValues(*matcher, {{"multiroute", "svc1ep2rpc"}}), ElementsAre("svc*ep*rpc"));
  EXPECT_THAT(CountedValues(*matcher, {{"multiroute", "svc1ep2"}}), ElementsAre("(none)"));
}

TEST(DescriptorMatcherTest, UnitMultiplierLengthensTheWindow) {
  std::unique_ptr<DescriptorMatcher> matcher = MatcherOf(R"(domain: test-domain
descriptors:
  - key: half_minute
    rate_limit: {unit: second, unit_multiplier: 30, requests_per_unit: 10}
  - key: five_minutes
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 100, algorithm: token_bucket}
)");
  ASSERT_NE(matcher, nullptr);
  ASSERT_EQ(matcher->limits().size(), 2u);
  EXPECT_EQ(matcher->limits()[0].numbers.window_micros, 30'000'000);
  EXPECT_EQ(matcher->limits()[0].numbers.limit, 10);
  EXPECT_EQ(matcher->limits()[1].numbers.capacity, 100);
  EXPECT_DOUBLE_EQ(matcher->limits()[1].numbers.refill_per_second, 100.0 / 300);
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
                         "edge.remote_address", "edge.remote_address_10.1.*",
                         "edge.remote_address_10.*", "edge.message_type_marketing.to_number",
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

// `durable` (docs/redis.md#durable-limits) reaches the limits Envoy rules make.
TEST(DescriptorMatcherTest, EnvoyRulesCarryDurable) {
  const std::string yaml = R"(domain: auth
descriptors:
  - key: phone
    rate_limit: {unit: minute, requests_per_unit: 3, on_store_failure: fail_closed, durable: true}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
)";
  absl::StatusOr<EnvoyDomainConfig> domain = ParseEnvoyConfig(yaml, "auth.yaml");
  ASSERT_TRUE(domain.ok()) << domain.status();
  absl::StatusOr<std::unique_ptr<DescriptorMatcher>> matcher = DescriptorMatcher::Create({*domain});
  ASSERT_TRUE(matcher.ok()) << matcher.status();
  ASSERT_EQ((*matcher)->limits().size(), 2u);
  for (const Limit& limit : (*matcher)->limits()) {
    EXPECT_EQ(limit.durable, limit.name == "auth.phone" ? std::optional<bool>(true) : std::nullopt)
        << limit.name;
  }
  absl::StatusOr<EnvoyDomainConfig> bad = ParseEnvoyConfig(R"(domain: auth
descriptors:
  - key: phone
    rate_limit:
      unit: minute
      requests_per_unit: 3
      durable: 1
)",
                                                           "bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("bad.yaml:7:16: descriptors[0].rate_limit.durable:"));
}

}  // namespace
}  // namespace tollgate
