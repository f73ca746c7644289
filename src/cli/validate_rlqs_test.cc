// Copyright tollgate authors.
#include "src/cli/validate_rlqs.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/config/envoy_config.h"

namespace tollgate::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

LoadedConfigs Config(const char* yaml) {
  LoadedConfigs config;
  absl::StatusOr<EnvoyDomainConfig> domain = ParseEnvoyConfig(yaml, "tiffin.yaml");
  EXPECT_TRUE(domain.ok()) << domain.status();
  if (domain.ok()) config.envoy_domains.push_back(*std::move(domain));
  return config;
}

constexpr char kTiffin[] = R"(domain: tiffin
descriptors:
  - key: name
    value: api
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 600}
  - key: user
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: zone
    rate_limit: {unit: second, requests_per_unit: 0}
)";

TEST(RlqsUnreachableRulesTest, ARuleWhoseKeysAreNotInKeyOrderIsNamedWithItsLine) {
  EXPECT_THAT(RlqsUnreachableRules(Config(kTiffin)),
              ElementsAre("tiffin.yaml:10: domain tiffin: the rule of keys user, path is not in "
                          "key order: no RLQS bucket can match it (a BucketId's pairs are matched "
                          "in key order)"));
}

TEST(DescribeRlqsBucketTest, SaysWhatABucketCountsAgainstWhateverTheOrderOfItsPairs) {
  absl::StatusOr<std::string> counted =
      DescribeRlqsBucket(Config(kTiffin), "tiffin:tenant=acme,name=api");
  ASSERT_TRUE(counted.ok()) << counted.status();
  EXPECT_EQ(*counted,
            "bucket {name=api,tenant=acme} in tiffin: counted by rule tiffin.name_api.tenant, 600 "
            "per 60 s window, key name=api,tenant=acme");
  EXPECT_THAT(*DescribeRlqsBucket(Config(kTiffin), "tiffin:name=other"),
              HasSubstr("not limited (ALLOW_ALL)"));
  EXPECT_THAT(*DescribeRlqsBucket(Config(kTiffin), "tiffin:zone=eu"),
              HasSubstr("blocked by rule tiffin.zone (DENY_ALL)"));
}

TEST(DescribeRlqsBucketTest, ABadSpecOrBucketIdIsAnError) {
  EXPECT_THAT(DescribeRlqsBucket(Config(kTiffin), "name=api").status().message(),
              HasSubstr("expected DOMAIN:key=value"));
  EXPECT_THAT(DescribeRlqsBucket(Config(kTiffin), "tiffin:name").status().message(),
              HasSubstr("pair 'name' has no '='"));
  EXPECT_THAT(DescribeRlqsBucket(Config(kTiffin), "tiffin:=x").status().message(),
              HasSubstr("a key is empty"));
}

}  // namespace
}  // namespace tollgate::cli
