// Copyright tollgate authors.
#include "src/rlqs/assign.h"

#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::rlqs {
namespace {

using ::testing::ElementsAre;

int64_t Sum(const std::vector<int64_t>& values) {
  return std::accumulate(values.begin(), values.end(), int64_t{0});
}

TEST(SplitGrantTest, RefreshedBucketsShareInProportionToTheirDemand) {
  EXPECT_THAT(SplitGrant(100, std::vector<RlqsShareInput>{{80, true}, {20, true}}),
              ElementsAre(80, 20));
}

TEST(SplitGrantTest, WithoutDemandEveryBucketWeighsTheSame) {
  EXPECT_THAT(SplitGrant(90, std::vector<RlqsShareInput>{{0, true}, {0, true}, {0, true}}),
              ElementsAre(30, 30, 30));
}

TEST(SplitGrantTest, AQuietBucketKeepsATenthOfAnEqualShare) {
  // Four buckets, one asking nothing: it weighs D (the fleet's demand), the others 40 d.
  const std::vector<int64_t> fresh =
      SplitGrant(1000, std::vector<RlqsShareInput>{{10, true}, {10, true}, {10, true}, {0, true}});
  EXPECT_GT(fresh[3], 0);
  EXPECT_LE(fresh[3], 1000 / 40 + 1);
  EXPECT_LE(Sum(fresh), 1000);
}

TEST(SplitGrantTest, BucketsNotRefreshedGetNothingAndTheirShareIsNotGivenAway) {
  EXPECT_THAT(SplitGrant(100, std::vector<RlqsShareInput>{{50, false}, {50, true}}),
              ElementsAre(0, 50));
}

TEST(SplitGrantTest, NeverMoreThanAvailable) {
  for (int64_t available : {0, 1, 7, 99, 1'000'000}) {
    const std::vector<int64_t> fresh = SplitGrant(
        available, std::vector<RlqsShareInput>{{3, true}, {1e9, true}, {0, true}, {7, true}});
    EXPECT_LE(Sum(fresh), available);
    for (int64_t f : fresh) EXPECT_GE(f, 0);
  }
  EXPECT_THAT(SplitGrant(-5, std::vector<RlqsShareInput>{{1, true}}), ElementsAre(0));
}

TEST(GrantAssignmentTest, ZeroIsDenyAllAndAGrantIsATokenBucketThatNeverRefillsWhileItLives) {
  EXPECT_EQ(GrantAssignment(0, false, 3).strategy, RlqsAssignment::Strategy::kDenyAll);
  const RlqsAssignment grant = GrantAssignment(42, true, 3);
  ASSERT_EQ(grant.strategy, RlqsAssignment::Strategy::kTokenBucket);
  envoy::service::rate_limit_quota::v3::BucketId id;
  (*id.mutable_bucket())["name"] = "api";
  RlqsBucketAction action;
  WriteAssignment(grant, id.SerializeAsString(), &action);
  const auto& assignment = action.quota_assignment_action();
  EXPECT_EQ(assignment.assignment_time_to_live().seconds(), 3);
  const auto& bucket = assignment.rate_limit_strategy().token_bucket();
  EXPECT_EQ(bucket.max_tokens(), 42u);
  EXPECT_EQ(bucket.tokens_per_fill().value(), 2u);  // parity: the next grant differs
  EXPECT_GT(bucket.fill_interval().seconds(), assignment.assignment_time_to_live().seconds());
  EXPECT_EQ(action.bucket_id().bucket().at("name"), "api");
}

TEST(AssignmentTtlSecondsTest, ALittleOverTwoReportingIntervalsInWholeSeconds) {
  EXPECT_EQ(AssignmentTtlSeconds(5'000'000, 1'000'000), 11);
  EXPECT_EQ(AssignmentTtlSeconds(1'000'000, 500'000), 3);
  EXPECT_EQ(AssignmentTtlSeconds(0, 0), 1);
}

}  // namespace
}  // namespace tollgate::rlqs
