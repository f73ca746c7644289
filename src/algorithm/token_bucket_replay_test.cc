// Copyright tollgate authors.
#include "src/algorithm/token_bucket_replay.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

constexpr int64_t kStart = 1'700'000'000'000'000;
constexpr int64_t kSecond = 1'000'000;

TEST(TokenBucketReplayTest, SliceIsAnEighthOfTheFillTimeAndAtLeastAMillisecond) {
  EXPECT_EQ(ReplaySliceMicros({.capacity = 10, .refill_per_second = 5}), 250'000);
  EXPECT_EQ(ReplaySliceMicros({.capacity = 1, .refill_per_second = 1e6}), 1000);
}

TEST(TokenBucketReplayTest, NothingRecordedOwesNothing) {
  EXPECT_EQ(TokenBucketOwedTokens({}, kStart, {.capacity = 10, .refill_per_second = 5}, 1), 0);
}

TEST(TokenBucketReplayTest, ConsumptionJustNowIsOwedInFull) {
  const std::vector<ConsumptionSlice> slices = {{kStart, 7}};
  const TokenBucketParams limit{.capacity = 10, .refill_per_second = 5};
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart, limit, 1), 7);
  // Half a second later 2.5 tokens have come back: 4.5 owed, rounded up.
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + kSecond / 2, limit, 1), 5);
  // Refilled since.
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + 2 * kSecond, limit, 1), 0);
  // One of 5 instances: its share (2 tokens, 1/s) refills in the same 2 s, at a fifth of the
  // rate. Half a second later 7 - 0.5 is owed; 2 s later, 5.
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + kSecond / 2, limit, 5), 7);
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + 2 * kSecond, limit, 5), 5);
}

// The bug of the lump rule: consumption at the refill rate, spread over an outage, became
// debt. Replayed in time order it owes about one slice's worth.
TEST(TokenBucketReplayTest, ConsumptionAtTheRefillRateOwesAlmostNothing) {
  const TokenBucketParams params{.capacity = 10, .refill_per_second = 5};
  std::vector<ConsumptionSlice> slices;
  for (int64_t t = 0; t < 6 * kSecond; t += 200'000) slices.push_back({kStart + t, 1});
  const int64_t now = slices.back().at_micros + 100'000;
  EXPECT_LE(TokenBucketOwedTokens(slices, now, params, 1), 1);
}

TEST(TokenBucketReplayTest, ABucketDrainedToTheEndOwesItsCapacity) {
  // A share (capacity 2, 1/s: a quarter of 8 at 4/s) spent at once, then every token as it
  // refills.
  const TokenBucketParams limit{.capacity = 8, .refill_per_second = 4};
  std::vector<ConsumptionSlice> slices = {{kStart, 2}};
  for (int64_t t = kSecond; t <= 6 * kSecond; t += kSecond) slices.push_back({kStart + t, 1});
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + 6 * kSecond, limit, 4), 2);
}

TEST(TokenBucketReplayTest, ConsumptionBeyondTheShareIsOwedAll) {
  const std::vector<ConsumptionSlice> slices = {{kStart, 30}};
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart, {.capacity = 10, .refill_per_second = 5}, 1), 30);
}

// What a real bucket (the limit's own numbers) fed with every slice would miss at `now`.
int64_t MissingFromOneBucket(std::vector<ConsumptionSlice> slices, int64_t now,
                             const TokenBucketParams& limit) {
  std::sort(slices.begin(), slices.end(),
            [](const auto& a, const auto& b) { return a.at_micros < b.at_micros; });
  return TokenBucketOwedTokens(slices, now, limit, 1);
}

// The charges of N instances, each replayed at its share, add up to at least what one
// bucket fed with all their consumption misses (so reconciliation never under-charges),
// and to about it when the consumption was spread evenly.
TEST(TokenBucketReplayTest, SharesOfNInstancesBoundTheWholeBucketFromAbove) {
  // 4 instances; 10 / 4 is not whole: the share is exact (2.5 tokens, 2.5/s), not rounded.
  const TokenBucketParams limit{.capacity = 10, .refill_per_second = 10};
  const int instances = 4;
  std::mt19937_64 random(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::vector<ConsumptionSlice>> per_instance(instances);
    std::vector<ConsumptionSlice> all;
    int64_t t = kStart;
    for (int i = 0; i < 60; ++i) {
      t += static_cast<int64_t>(random() % 300'000);
      const ConsumptionSlice slice{t, static_cast<int64_t>(random() % 4)};
      per_instance[random() % instances].push_back(slice);
      all.push_back(slice);
    }
    const int64_t now = t + static_cast<int64_t>(random() % 2'000'000);
    int64_t charged = 0;
    for (const auto& slices : per_instance) {
      charged += TokenBucketOwedTokens(slices, now, limit, instances);
    }
    EXPECT_GE(charged, MissingFromOneBucket(all, now, limit)) << "round " << round;
  }

  // Even spread: a user offering 4x the rate, each instance admitting its whole share (2
  // tokens, then one every 400 ms) for 6 s. One bucket would be (about) empty at the end: the
  // charges sum to about the capacity, not to 6 s of consumption.
  std::vector<ConsumptionSlice> even = {{kStart, 2}};
  for (int64_t at = kStart + 400'000; at <= kStart + 6 * kSecond; at += 400'000) {
    even.push_back({at, 1});
  }
  const int64_t now = kStart + 6 * kSecond;
  const int64_t charged = instances * TokenBucketOwedTokens(even, now, limit, instances);
  EXPECT_GE(charged, 8);
  EXPECT_LE(charged, limit.capacity);
}

}  // namespace
}  // namespace tollgate::algorithm
