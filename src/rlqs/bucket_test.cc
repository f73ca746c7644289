// Copyright tollgate authors.
#include "src/rlqs/bucket.h"

#include <memory>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "src/config/envoy_config.h"
#include "src/server/check_service.h"

namespace tollgate::rlqs {
namespace {

BucketId Bucket(const std::vector<std::pair<std::string, std::string>>& pairs) {
  BucketId id;
  for (const auto& [key, value] : pairs) (*id.mutable_bucket())[key] = value;
  return id;
}

TEST(ReadBucketEntriesTest, PairsInKeyOrderWhateverTheMapsOrder) {
  BucketEntries entries;
  ASSERT_TRUE(
      ReadBucketEntries(Bucket({{"user", "42"}, {"name", "api"}, {"a", "b"}}), "f", &entries).ok());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].first, "a");
  EXPECT_EQ(entries[1].first, "name");
  EXPECT_EQ(entries[2].first, "user");
  EXPECT_EQ(BucketKey(entries), "a=b,name=api,user=42");
}

TEST(ReadBucketEntriesTest, NoPairOrAnEmptyKeyIsAnErrorNamingTheField) {
  BucketEntries entries;
  absl::Status empty = ReadBucketEntries(BucketId(), "bucket_quota_usages[2].bucket_id", &entries);
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(),
            "bucket_quota_usages[2].bucket_id: a BucketId needs at least one pair");
  absl::Status no_key = ReadBucketEntries(Bucket({{"", "x"}}), "b", &entries);
  EXPECT_EQ(no_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_key.message().find("b.bucket: a key is empty"), absl::string_view::npos);
}

TEST(BucketKeyTest, SeparatorsInKeysAndValuesNeverMakeTwoBucketsOne) {
  EXPECT_NE(BucketKey({{"a", "b,c=d"}}), BucketKey({{"a", "b"}, {"c", "d"}}));
}

class MatchBucketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LoadedConfigs config;
    absl::StatusOr<EnvoyDomainConfig> domain = ParseEnvoyConfig(R"(domain: tiffin
descriptors:
  - key: name
    value: api
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: name
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: name
    value: "shop*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket}
)",
                                                                "tiffin.yaml");
    ASSERT_TRUE(domain.ok()) << domain.status();
    config.envoy_domains.push_back(*std::move(domain));
    absl::StatusOr<std::unique_ptr<server::CheckService>> service =
        server::CheckService::Create({}, config);
    ASSERT_TRUE(service.ok()) << service.status();
    service_ = *std::move(service);
  }

  absl::StatusOr<BucketTarget> Match(std::string_view domain, const BucketId& id) {
    BucketEntries entries;
    EXPECT_TRUE(ReadBucketEntries(id, "f", &entries).ok());
    auto snapshot = service_->snapshot();
    return MatchBucket(domain, entries, *snapshot->matcher, *snapshot->limiter);
  }

  std::unique_ptr<server::CheckService> service_;
};

TEST_F(MatchBucketTest, ABucketIsOneDescriptorOfItsPairsInKeyOrder) {
  absl::StatusOr<BucketTarget> target = Match("tiffin", Bucket({{"user", "7"}, {"name", "api"}}));
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->kind, BucketTarget::Kind::kCounted);
  EXPECT_EQ(target->key, "name=api,user=7");
  ASSERT_NE(target->limit, nullptr);
  EXPECT_EQ(target->limit->numbers.limit, 10);
}

TEST_F(MatchBucketTest, NoRuleOrAnUnknownDomainIsNotLimitedAndZeroIsBlocked) {
  EXPECT_EQ(Match("tiffin", Bucket({{"name", "other"}}))->kind, BucketTarget::Kind::kNotLimited);
  EXPECT_EQ(Match("elsewhere", Bucket({{"name", "api"}}))->kind, BucketTarget::Kind::kNotLimited);
  EXPECT_EQ(Match("tiffin", Bucket({{"name", "blocked"}}))->kind, BucketTarget::Kind::kBlocked);
}

TEST_F(MatchBucketTest, AShareThresholdWildcardCountsEveryValueUnderOneKey) {
  EXPECT_EQ(Match("tiffin", Bucket({{"name", "shop1"}}))->key, "name=shop*");
  EXPECT_EQ(Match("tiffin", Bucket({{"name", "shop2"}}))->key, "name=shop*");
}

TEST(RlqsWindowNumbersTest, ATokenBucketIsEnforcedAsAFixedWindowOfItsCapacity) {
  LimitNumbers bucket;
  bucket.algorithm = Algorithm::kTokenBucket;
  bucket.capacity = 5;
  bucket.refill_per_second = 5.0 / 3600;
  const LimitNumbers window = RlqsWindowNumbers(bucket);
  EXPECT_EQ(window.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(window.limit, 5);
  EXPECT_EQ(window.window_micros, 3'600'000'000);
}

}  // namespace
}  // namespace tollgate::rlqs
