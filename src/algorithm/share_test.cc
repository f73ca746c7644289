// Copyright tollgate authors.
#include "src/algorithm/share.h"

#include <cstdint>
#include <random>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

TEST(ShareTest, FloorsTheWeightedPartOfWhatIsLeft) {
  EXPECT_EQ(Share(100, EqualWeights(3)), 33);
  EXPECT_EQ(Share(100, EqualWeights(1)), 100);
  EXPECT_EQ(Share(2, EqualWeights(3)), 0);
  EXPECT_EQ(Share(-5, EqualWeights(2)), 0);
  EXPECT_EQ(Share(100, ShareWeights{3, 4}), 75);
  // A sliding window's weight leaves fractions a hair under a whole number: counted whole.
  EXPECT_EQ(Share(49.9999999999, EqualWeights(1)), 50);
  EXPECT_EQ(Share(49.99, EqualWeights(1)), 49);
  EXPECT_EQ(EqualWeights(0).total, 1);
}

TEST(ShareTest, FirstSharesOfAllInstancesFitInTheLimit) {
  for (int64_t limit : {1, 2, 7, 100, 103, 1000, 999'999}) {
    for (int64_t n : {1, 2, 3, 4, 8, 1000}) {
      EXPECT_LE(FirstShare(limit, n) * n, limit) << limit << " / " << n;
      EXPECT_GT((FirstShare(limit, n) + 1) * n, limit) << limit << " / " << n;
    }
  }
}

// The sync invariant: a grant never takes the window past its limit, counted and held
// included, and is 0 once nothing is left.
TEST(ShareTest, SyncGrantsNeverTakeCountedPlusGrantedPastTheLimit) {
  std::mt19937_64 random(42);
  for (int i = 0; i < 100'000; ++i) {
    SyncGrantInput in;
    in.limit = static_cast<int64_t>(random() % 5000) + 1;
    in.instances = static_cast<int64_t>(random() % 16) + 1;
    in.weights = EqualWeights(in.instances);
    in.used = static_cast<double>(random() % (in.limit + 50)) + (random() % 1000) / 1000.0;
    in.held_by_others = static_cast<int64_t>(random() % (in.limit + 1));
    in.others_without_grant = static_cast<int64_t>(random() % in.instances);
    const int64_t grant = SyncGrant(in);
    const int64_t first_share = in.limit / in.instances;  // floor(limit / N)
    const double held = static_cast<double>(in.held_by_others) +
                        static_cast<double>(in.others_without_grant * first_share);
    ASSERT_GE(grant, 0);
    if (in.used + held <= static_cast<double>(in.limit)) {
      EXPECT_LE(in.used + held + static_cast<double>(grant), static_cast<double>(in.limit) + 1e-6)
          << "limit " << in.limit << " used " << in.used << " held " << held;
    } else {
      EXPECT_EQ(grant, 0);
    }
  }
}

TEST(ShareTest, SyncGrantIsOneNthOfWhatNobodyHolds) {
  // Two instances, a limit of 100: 60 counted, the other holds 20: half of the 20 left.
  EXPECT_EQ(SyncGrant({.limit = 100,
                       .used = 60,
                       .held_by_others = 20,
                       .instances = 2,
                       .weights = EqualWeights(2)}),
            10);
  // The other has not synced the window: it may still spend its first 50.
  EXPECT_EQ(SyncGrant({.limit = 100,
                       .used = 50,
                       .others_without_grant = 1,
                       .instances = 2,
                       .weights = EqualWeights(2)}),
            0);
  // Sliding: previous 100 at weight 0.5 and 25 counted now.
  EXPECT_EQ(SyncGrant({.limit = 100, .used = 100 * 0.5 + 25, .instances = 1}), 25);
}

TEST(ShareTest, FallbackSharesAreAtLeastOneAndSumToAtMostTheLargerOfLimitAndN) {
  for (int64_t limit : {1, 3, 10, 100, 1001}) {
    for (int64_t n : {1, 2, 4, 7, 50}) {
      const int64_t share = FallbackShare(limit, EqualWeights(n));
      EXPECT_GE(share, 1);
      EXPECT_LE(share * n, std::max(limit, n)) << limit << " / " << n;
    }
  }
}

TEST(ShareTest, FallbackNumbersShareEveryAlgorithm) {
  LimitNumbers bucket{.algorithm = Algorithm::kTokenBucket, .capacity = 10, .refill_per_second = 4};
  const LimitNumbers bucket_share = FallbackNumbers(bucket, EqualWeights(4));
  EXPECT_EQ(bucket_share.capacity, 2);
  EXPECT_DOUBLE_EQ(bucket_share.refill_per_second, 1.0);
  LimitNumbers window{.algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 1};
  EXPECT_EQ(FallbackNumbers(window, EqualWeights(4)).limit, 1);  // never below 1
  // One instance keeps the numbers as they are, however large.
  window.limit = (int64_t{1} << 62) + 1;
  EXPECT_EQ(FallbackNumbers(window, EqualWeights(1)).limit, window.limit);
}

}  // namespace
}  // namespace tollgate::algorithm
