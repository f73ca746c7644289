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
  EXPECT_EQ(TokenBucketOwedTokens({}, kStart, {.capacity = 10, .refill_per_second = 5}), 0);
}

TEST(TokenBucketReplayTest, ConsumptionJustNowIsOwedInFull) {
  const std::vector<ConsumptionSlice> slices = {{kStart, 7}};
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart, {.capacity = 10, .refill_per_second = 5}), 7);
  // Half a second later 2.5 tokens have come back: 4.5 owed, rounded up.
  EXPECT_EQ(
      TokenBucketOwedTokens(slices, kStart + kSecond / 2, {.capacity = 10, .refill_per_second = 5}),
      5);
  // Refilled since.
  EXPECT_EQ(
      TokenBucketOwedTokens(slices, kStart + 2 * kSecond, {.capacity = 10, .refill_per_second = 5}),
      0);
}

// The bug of the lump rule: consumption at the refill rate, spread over an outage, became
// debt. Replayed in time order it owes about one slice's worth.
TEST(TokenBucketReplayTest, ConsumptionAtTheRefillRateOwesAlmostNothing) {
  const TokenBucketParams params{.capacity = 10, .refill_per_second = 5};
  std::vector<ConsumptionSlice> slices;
  for (int64_t t = 0; t < 6 * kSecond; t += 200'000) slices.push_back({kStart + t, 1});
  const int64_t now = slices.back().at_micros + 100'000;
  EXPECT_LE(TokenBucketOwedTokens(slices, now, params), 1);
}

TEST(TokenBucketReplayTest, ABucketDrainedToTheEndOwesItsCapacity) {
  // A share (capacity 2, 1/s) spent at once, then every token as it refills.
  const TokenBucketParams share{.capacity = 2, .refill_per_second = 1};
  std::vector<ConsumptionSlice> slices = {{kStart, 2}};
  for (int64_t t = kSecond; t <= 6 * kSecond; t += kSecond) slices.push_back({kStart + t, 1});
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart + 6 * kSecond, share), 2);
}

TEST(TokenBucketReplayTest, ConsumptionBeyondTheShareIsOwedAll) {
  const std::vector<ConsumptionSlice> slices = {{kStart, 30}};
  EXPECT_EQ(TokenBucketOwedTokens(slices, kStart, {.capacity = 10, .refill_per_second = 5}), 30);
}

// What a real bucket (the limit's own numbers) fed with every slice would miss at `now`.
int64_t MissingFromOneBucket(std::vector<ConsumptionSlice> slices, int64_t now,
                             const TokenBucketParams& limit) {
  std::sort(slices.begin(), slices.end(),
            [](const auto& a, const auto& b) { return a.at_micros < b.at_micros; });
  return TokenBucketOwedTokens(slices, now, limit);
}

// The charges of N instances, each replayed at its share, add up to at least what one
// bucket fed with all their consumption misses (so reconciliation never under-charges),
// and to about it when the consumption was spread evenly.
TEST(TokenBucketReplayTest, SharesOfNInstancesBoundTheWholeBucketFromAbove) {
  const TokenBucketParams limit{.capacity = 40, .refill_per_second = 20};
  const int instances = 4;
  const TokenBucketParams share{.capacity = 10, .refill_per_second = 5};
  std::mt19937_64 random(42);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::vector<ConsumptionSlice>> per_instance(instances);
    std::vector<ConsumptionSlice> all;
    int64_t t = kStart;
    for (int i = 0; i < 60; ++i) {
      t += static_cast<int64_t>(random() % 300'000);
      const ConsumptionSlice slice{t, static_cast<int64_t>(random() % 6)};
      per_instance[random() % instances].push_back(slice);
      all.push_back(slice);
    }
    const int64_t now = t + static_cast<int64_t>(random() % 2'000'000);
    int64_t charged = 0;
    for (const auto& slices : per_instance) charged += TokenBucketOwedTokens(slices, now, share);
    EXPECT_GE(charged, MissingFromOneBucket(all, now, limit)) << "round " << round;
  }

  // Even spread: a user offering 4x the rate, each instance admitting its whole share
  // (its capacity, then its refill) for 6 s. One bucket would be empty at the end: the
  // charges sum to the capacity, not to 6 s of consumption.
  std::vector<ConsumptionSlice> even = {{kStart, share.capacity}};
  for (int64_t at = kStart + 200'000; at <= kStart + 6 * kSecond; at += 200'000) {
    even.push_back({at, 1});
  }
  const int64_t now = kStart + 6 * kSecond;
  EXPECT_EQ(instances * TokenBucketOwedTokens(even, now, share), limit.capacity);
}

}  // namespace
}  // namespace tollgate::algorithm
