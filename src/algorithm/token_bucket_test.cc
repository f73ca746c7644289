// Copyright tollgate authors.
#include "src/algorithm/token_bucket.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

constexpr int64_t kStart = 1'700'000'000'000'000;  // an ordinary present-day time

using State = std::optional<TokenBucketState>;

TEST(TokenBucketTest, MissingStateIsAFullBucket) {
  const TokenBucketParams params{.capacity = 10, .refill_per_second = 1};
  auto out = TokenBucketCheck(std::nullopt, kStart, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kNone);
  EXPECT_EQ(out.decision.limit, 10);
  EXPECT_EQ(out.decision.remaining, 9);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  // One token short of full: one second at 1/s.
  EXPECT_EQ(out.decision.reset_after_micros, 1'000'000);
  EXPECT_TRUE(out.changed);
  EXPECT_EQ(out.expires_at_micros, kStart + 1'000'000);
}

TEST(TokenBucketTest, DrainsThenRefusesWithRetryAfter) {
  const TokenBucketParams params{.capacity = 3, .refill_per_second = 2};
  State state;
  for (int i = 0; i < 3; ++i) {
    auto out = TokenBucketCheck(state, kStart, params, 1);
    ASSERT_TRUE(out.decision.allowed) << i;
    EXPECT_EQ(out.decision.remaining, 2 - i);
    state = out.state;
  }
  auto out = TokenBucketCheck(state, kStart, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
  EXPECT_EQ(out.decision.remaining, 0);
  EXPECT_EQ(out.decision.retry_after_micros, 500'000);    // one token at 2/s
  EXPECT_EQ(out.decision.reset_after_micros, 1'500'000);  // three tokens at 2/s
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);

  // Half a second later exactly one token is back.
  out = TokenBucketCheck(state, kStart + 500'000, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.remaining, 0);
}

TEST(TokenBucketTest, FractionalRate) {
  const TokenBucketParams params{.capacity = 1, .refill_per_second = 0.5};
  auto out = TokenBucketCheck(std::nullopt, kStart, params, 1);
  ASSERT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.reset_after_micros, 2'000'000);
  const State state = out.state;

  out = TokenBucketCheck(state, kStart + 1'000'000, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.retry_after_micros, 1'000'000);

  out = TokenBucketCheck(state, kStart + 1'999'999, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.retry_after_micros, 1);

  out = TokenBucketCheck(state, kStart + 2'000'000, params, 1);
  EXPECT_TRUE(out.decision.allowed);
}

TEST(TokenBucketTest, CostZeroPeeksWithoutChangingState) {
  const TokenBucketParams params{.capacity = 5, .refill_per_second = 1};
  auto first = TokenBucketCheck(std::nullopt, kStart, params, 2);
  ASSERT_TRUE(first.decision.allowed);

  auto peek = TokenBucketCheck(first.state, kStart, params, 0);
  EXPECT_TRUE(peek.decision.allowed);
  EXPECT_FALSE(peek.changed);
  EXPECT_EQ(peek.state, first.state);
  EXPECT_EQ(peek.decision.remaining, 3);

  // A peek at a key never seen stores nothing either.
  auto fresh = TokenBucketCheck(std::nullopt, kStart, params, 0);
  EXPECT_TRUE(fresh.decision.allowed);
  EXPECT_FALSE(fresh.changed);
  EXPECT_EQ(fresh.decision.remaining, 5);
  EXPECT_LE(fresh.expires_at_micros, kStart + 1);

  // A peek on an empty bucket is still allowed: it asks for nothing.
  State state;
  for (int i = 0; i < 5; ++i) state = TokenBucketCheck(state, kStart, params, 1).state;
  peek = TokenBucketCheck(state, kStart, params, 0);
  EXPECT_TRUE(peek.decision.allowed);
  EXPECT_EQ(peek.decision.remaining, 0);
  EXPECT_FALSE(peek.changed);
}

// A peek says when a cost of 1 would pass: 0 while a token is left, else when the next one
// has refilled, as a refused cost-1 check would.
TEST(TokenBucketTest, APeekSaysWhenACostOfOneWouldPass) {
  const TokenBucketParams params{.capacity = 5, .refill_per_second = 1};
  EXPECT_EQ(TokenBucketCheck(std::nullopt, kStart, params, 0).decision.retry_after_micros, 0);
  const State spent = TokenBucketCheck(std::nullopt, kStart, params, 5).state;
  for (int64_t later : {0, 1, 400'000, 999'999}) {
    SCOPED_TRACE(later);
    auto peek = TokenBucketCheck(spent, kStart + later, params, 0);
    EXPECT_TRUE(peek.decision.allowed);
    EXPECT_EQ(peek.decision.reason, DenyReason::kNone);
    EXPECT_EQ(peek.decision.retry_after_micros, 1'000'000 - later);
    EXPECT_EQ(peek.decision.retry_after_micros,
              TokenBucketCheck(spent, kStart + later, params, 1).decision.retry_after_micros);
  }
  EXPECT_EQ(TokenBucketCheck(spent, kStart + 1'000'000, params, 0).decision.retry_after_micros, 0);
}

TEST(TokenBucketTest, CostAboveCapacityIsRefusedForGood) {
  const TokenBucketParams params{.capacity = 5, .refill_per_second = 1};
  auto out = TokenBucketCheck(std::nullopt, kStart, params, 6);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_EQ(out.decision.remaining, 5);
  EXPECT_FALSE(out.changed);

  const State state = TokenBucketCheck(std::nullopt, kStart, params, 1).state;
  out = TokenBucketCheck(state, kStart, params, 100);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);
}

TEST(TokenBucketTest, CostEqualToCapacityPassesOnAFullBucket) {
  const TokenBucketParams params{.capacity = 7, .refill_per_second = 3};
  auto out = TokenBucketCheck(std::nullopt, kStart, params, 7);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.remaining, 0);
}

TEST(TokenBucketTest, RefillStopsAtCapacity) {
  const TokenBucketParams params{.capacity = 2, .refill_per_second = 1};
  State state = TokenBucketCheck(std::nullopt, kStart, params, 2).state;
  // An hour idle refills only up to capacity.
  auto out = TokenBucketCheck(state, kStart + 3'600'000'000, params, 0);
  EXPECT_EQ(out.decision.remaining, 2);
  out = TokenBucketCheck(state, kStart + 3'600'000'000, params, 3);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  state = TokenBucketCheck(state, kStart + 3'600'000'000, params, 2).state;
  out = TokenBucketCheck(state, kStart + 3'600'000'000, params, 1);
  EXPECT_FALSE(out.decision.allowed);
}

TEST(TokenBucketTest, TimeGoingBackwardsAddsNoTokens) {
  const TokenBucketParams params{.capacity = 2, .refill_per_second = 1};
  State state = TokenBucketCheck(std::nullopt, kStart, params, 2).state;
  for (int64_t back : std::vector<int64_t>{1, 1'000, 1'000'000, 3'600'000'000}) {
    auto out = TokenBucketCheck(state, kStart - back, params, 1);
    EXPECT_FALSE(out.decision.allowed) << back;
    EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
    EXPECT_EQ(out.decision.remaining, 0);
    EXPECT_GT(out.decision.retry_after_micros, 0);
    EXPECT_FALSE(out.changed);
    EXPECT_EQ(out.state, *state);
  }
  // The clock comes back: the bucket refills from where it was.
  auto out = TokenBucketCheck(state, kStart + 1'000'000, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.remaining, 0);
}

TEST(TokenBucketTest, HugeRefillTimesAreCappedNotUndefined) {
  // 1e15 tokens at one per 1000 s: an empty bucket is full again after 1e24 µs, which no
  // int64 holds.
  const TokenBucketParams params{.capacity = 1'000'000'000'000'000, .refill_per_second = 1e-3};
  auto out = TokenBucketCheck(std::nullopt, kStart, params, params.capacity);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.remaining, 0);
  EXPECT_EQ(out.decision.reset_after_micros, int64_t{1} << 62);
  EXPECT_EQ(out.expires_at_micros, kStart + (int64_t{1} << 62));
  out = TokenBucketCheck(out.state, kStart, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_GT(out.decision.retry_after_micros, 0);
}

// ---- Charges (consumption after the fact) and refunds. ------------------------------

TEST(TokenBucketTest, AChargeAppliesInFullAndLeavesDebtThatChecksWaitOut) {
  const TokenBucketParams params{.capacity = 1000, .refill_per_second = 100};
  // 900 of 1000 used, then a response of 300 is reported: 200 tokens of debt.
  State state =
      TokenBucketCharge(std::nullopt, kStart, params, TokenBucketTimesFor(params), 900).state;
  auto charged = TokenBucketCharge(state, kStart, params, TokenBucketTimesFor(params), 300);
  EXPECT_TRUE(charged.decision.allowed);
  EXPECT_EQ(charged.decision.reason, DenyReason::kNone);
  EXPECT_TRUE(charged.changed);
  EXPECT_EQ(charged.decision.remaining, 0);
  EXPECT_EQ(charged.decision.debt, 200);
  // A cost of 1 passes once the debt and one token are refilled: 201 tokens at 100/s.
  EXPECT_EQ(charged.decision.retry_after_micros, 2'010'000);
  EXPECT_EQ(charged.decision.reset_after_micros, 12'000'000);  // 1200 tokens at 100/s
  EXPECT_EQ(charged.expires_at_micros, kStart + 12'000'000);
  state = charged.state;

  // The next check is refused, a peek too, both saying when a cost of 1 passes.
  auto refused = TokenBucketCheck(state, kStart, params, 1);
  EXPECT_FALSE(refused.decision.allowed);
  EXPECT_EQ(refused.decision.debt, 200);
  EXPECT_EQ(refused.decision.retry_after_micros, 2'010'000);
  auto peek = TokenBucketCheck(state, kStart, params, 0);
  EXPECT_FALSE(peek.decision.allowed);
  EXPECT_EQ(peek.decision.reason, DenyReason::kOverLimit);
  EXPECT_EQ(peek.decision.retry_after_micros, 2'010'000);
  EXPECT_FALSE(peek.changed);
  EXPECT_TRUE(TokenBucketCheck(state, kStart + 2'010'000 - 1, params, 1).decision.debt == 0);
  EXPECT_FALSE(TokenBucketCheck(state, kStart + 2'010'000 - 1, params, 1).decision.allowed);
  EXPECT_TRUE(TokenBucketCheck(state, kStart + 2'010'000, params, 1).decision.allowed);
  // Once repaid, a peek is allowed again.
  EXPECT_TRUE(TokenBucketCheck(state, kStart + 2'000'000, params, 0).decision.allowed);
}

TEST(TokenBucketTest, AChargeOfZeroChangesNothingAndDebtIsCapped) {
  const TokenBucketParams params{.capacity = 10, .refill_per_second = 1};
  const TokenBucketTimes times = TokenBucketTimesFor(params);
  auto zero = TokenBucketCharge(std::nullopt, kStart, params, times, 0);
  EXPECT_TRUE(zero.decision.allowed);
  EXPECT_FALSE(zero.changed);
  EXPECT_EQ(zero.decision.remaining, 10);
  // A trillion tokens at 1/s would be 31,700 years of debt: kept at 2^52 us.
  auto huge = TokenBucketCharge(std::nullopt, kStart, params, times, 1'000'000'000'000);
  EXPECT_EQ(huge.state.empty_at_micros, static_cast<double>(kStart) + kMaxDebtMicros);
  EXPECT_EQ(huge.decision.debt, static_cast<int64_t>(kMaxDebtMicros / 1e6) + 1);
  EXPECT_LT(huge.decision.reset_after_micros, int64_t{1} << 53);
}

TEST(TokenBucketTest, ARefundGivesTokensBackButNeverBeyondFull) {
  const TokenBucketParams params{.capacity = 100, .refill_per_second = 10};
  const TokenBucketTimes times = TokenBucketTimesFor(params);
  State state = TokenBucketCheck(std::nullopt, kStart, params, times, 80).state;
  auto refunded = TokenBucketRefund(state, kStart, params, times, 50);
  EXPECT_TRUE(refunded.decision.allowed);
  EXPECT_TRUE(refunded.changed);
  EXPECT_EQ(refunded.decision.remaining, 70);
  // More than was taken comes back only up to a full bucket.
  auto over = TokenBucketRefund(state, kStart, params, times, 500);
  EXPECT_EQ(over.decision.remaining, 100);
  // A bucket that refilled meanwhile gets nothing.
  auto late = TokenBucketRefund(state, kStart + 8'000'000, params, times, 50);
  EXPECT_FALSE(late.changed);
  EXPECT_EQ(late.decision.remaining, 100);
  // Nor does a missing (full) one.
  EXPECT_FALSE(TokenBucketRefund(std::nullopt, kStart, params, times, 5).changed);
  // A refund repays debt first.
  State debt = TokenBucketCharge(std::nullopt, kStart, params, times, 130).state;
  auto repaid = TokenBucketRefund(debt, kStart, params, times, 40);
  EXPECT_EQ(repaid.decision.debt, 0);
  EXPECT_EQ(repaid.decision.remaining, 10);
}

// ---- Properties over random traffic. -------------------------------------------------

struct Event {
  int64_t now_micros;
  int64_t cost;
};

// Random traffic against one bucket; checks each refusal and returns the allowed events.
std::vector<Event> RunRandomTraffic(const TokenBucketParams& params, uint64_t seed, int steps) {
  std::mt19937_64 rng(seed);
  const double token_micros = 1e6 / params.refill_per_second;
  std::vector<Event> allowed;
  State state;
  int64_t now = kStart + static_cast<int64_t>(rng() % 1'000'000'000);
  for (int i = 0; i < steps; ++i) {
    // Mostly bursts and steps of up to about two tokens' time, now and then a long pause.
    const uint64_t kind = rng() % 10;
    if (kind < 4) {
      // no time passes
    } else if (kind < 9) {
      now += static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * token_micros + 2));
    } else {
      now += static_cast<int64_t>(
          rng() %
          static_cast<uint64_t>(token_micros * static_cast<double>(params.capacity) * 2 + 2));
    }
    int64_t cost = static_cast<int64_t>(rng() % static_cast<uint64_t>(params.capacity + 1));
    if (rng() % 50 == 0) cost = params.capacity + 1 + static_cast<int64_t>(rng() % 3);

    auto out = TokenBucketCheck(state, now, params, cost);
    if (out.decision.allowed) {
      EXPECT_EQ(out.changed, cost > 0);
      if (cost > 0) allowed.push_back({now, cost});
      state = out.state;
      continue;
    }
    // A refusal consumes nothing.
    EXPECT_FALSE(out.changed);
    if (state.has_value()) {
      EXPECT_EQ(out.state, *state);
    }
    if (out.decision.reason == DenyReason::kCostExceedsLimit) {
      EXPECT_GT(cost, params.capacity);
      EXPECT_EQ(out.decision.retry_after_micros, 0);
      continue;
    }
    EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
    // retry_after is honest and tight: the same cost passes then, and not a microsecond
    // earlier.
    const int64_t retry = out.decision.retry_after_micros;
    EXPECT_GT(retry, 0);
    EXPECT_TRUE(TokenBucketCheck(state, now + retry, params, cost).decision.allowed)
        << "seed " << seed << " step " << i;
    EXPECT_FALSE(TokenBucketCheck(state, now + retry - 1, params, cost).decision.allowed)
        << "seed " << seed << " step " << i;
  }
  return allowed;
}

class TokenBucketPropertyTest : public ::testing::TestWithParam<TokenBucketParams> {};

TEST_P(TokenBucketPropertyTest, NeverAdmitsMoreThanCapacityPlusRefill) {
  const TokenBucketParams params = GetParam();
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    const std::vector<Event> allowed = RunRandomTraffic(params, seed, 3000);
    ASSERT_FALSE(allowed.empty());
    // Every interval between two allowed events [t_i, t_j] holds at most
    // capacity + rate * (t_j - t_i) units.
    std::vector<int64_t> prefix(allowed.size() + 1, 0);
    for (size_t i = 0; i < allowed.size(); ++i) prefix[i + 1] = prefix[i] + allowed[i].cost;
    for (size_t i = 0; i < allowed.size(); ++i) {
      for (size_t j = i; j < allowed.size(); ++j) {
        const double elapsed_seconds =
            static_cast<double>(allowed[j].now_micros - allowed[i].now_micros) / 1e6;
        const double bound = static_cast<double>(params.capacity) +
                             params.refill_per_second * elapsed_seconds + 1e-6;
        const int64_t used = prefix[j + 1] - prefix[i];
        ASSERT_LE(static_cast<double>(used), bound)
            << "seed " << seed << " events " << i << ".." << j;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TokenBucketPropertyTest,
    ::testing::Values(TokenBucketParams{.capacity = 1, .refill_per_second = 1},
                      TokenBucketParams{.capacity = 10, .refill_per_second = 5},
                      TokenBucketParams{.capacity = 5, .refill_per_second = 0.5},
                      TokenBucketParams{.capacity = 100, .refill_per_second = 1000},
                      TokenBucketParams{.capacity = 3, .refill_per_second = 3.7},
                      TokenBucketParams{.capacity = 1000, .refill_per_second = 1e6 / 3}));

}  // namespace
}  // namespace tollgate::algorithm
