// Copyright tollgate authors.
#include "src/store/memory/limit_rule.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/sliding_window.h"
#include "src/algorithm/token_bucket.h"
#include "tests/support/limits.h"

namespace tollgate::memory {
namespace {

using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

constexpr int64_t kSecond = 1'000'000;

TEST(LimitRuleTest, RuleForRefusesNumbersItsAlgorithmCannotDecide) {
  std::vector<Limit> invalid = {TokenBucket("no_capacity", 0, 1),
                                TokenBucket("no_rate", 5, 0),
                                TokenBucket("negative_rate", 5, -1),
                                TokenBucket("endless_rate", 5, 1e301),
                                Window("no_limit", Algorithm::kFixedWindow, 0, kSecond),
                                Window("no_window", Algorithm::kFixedWindow, 5, 0),
                                Window("sliding_no_limit", Algorithm::kSlidingWindow, 0, kSecond),
                                Window("sliding_no_window", Algorithm::kSlidingWindow, 5, -1)};
  for (const Limit& limit : invalid) {
    const absl::StatusOr<LimitRule> rule = RuleFor(limit);
    EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument) << limit.name;
    EXPECT_NE(rule.status().message().find(absl::StrCat("'", limit.name, "'")), std::string::npos)
        << rule.status();
  }
  EXPECT_TRUE(std::holds_alternative<TokenBucketRule>(*RuleFor(TokenBucket("b", 1, 0.001))));
  EXPECT_TRUE(std::holds_alternative<FixedWindowRule>(
      *RuleFor(Window("f", Algorithm::kFixedWindow, 1, 1))));
  EXPECT_TRUE(std::holds_alternative<SlidingWindowRule>(
      *RuleFor(Window("s", Algorithm::kSlidingWindow, 1, 1))));
}

// What the pure algorithm decides for `limit`, computing every number from the limit itself.
algorithm::Outcome<algorithm::TokenBucketState> Expected(
    const Limit& limit, const std::optional<algorithm::TokenBucketState>& state, int64_t now,
    int64_t cost) {
  return algorithm::TokenBucketCheck(
      state, now, {limit.numbers.capacity, limit.numbers.refill_per_second}, cost);
}
algorithm::Outcome<algorithm::FixedWindowState> Expected(
    const Limit& limit, const std::optional<algorithm::FixedWindowState>& state, int64_t now,
    int64_t cost) {
  return algorithm::FixedWindowCheck(state, now, {limit.numbers.limit, limit.numbers.window_micros},
                                     cost);
}
algorithm::Outcome<algorithm::SlidingWindowState> Expected(
    const Limit& limit, const std::optional<algorithm::SlidingWindowState>& state, int64_t now,
    int64_t cost) {
  return algorithm::SlidingWindowCheck(state, now,
                                       {limit.numbers.limit, limit.numbers.window_micros}, cost);
}

// A rule, made once, decides every step exactly as the pure algorithm does from the limit's
// numbers (the values the rule computed ahead are those the step computes), and its Step
// carries the outcome whole.
template <typename State>
void ExpectDecidesAsTheAlgorithm(const Limit& limit) {
  const absl::StatusOr<LimitRule> rule = RuleFor(limit);
  ASSERT_TRUE(rule.ok()) << rule.status();
  std::mt19937 random(20261204);
  std::uniform_int_distribution<int64_t> pick_cost(0, 4);
  std::uniform_int_distribution<int64_t> pick_advance(0, 700'000);
  std::optional<State> state;
  int64_t now = 1'700'000'000'123'456;
  int allowed = 0;
  int refused = 0;
  for (int step = 0; step < 2000; ++step) {
    now += pick_advance(random);
    const int64_t cost = pick_cost(random);
    const algorithm::Outcome<State> expected = Expected(limit, state, now, cost);
    const AnyState held = state.has_value() ? AnyState(*state) : AnyState();
    const Step got = Apply(*rule, state.has_value() ? &held : nullptr, now, CheckOperation{cost});
    const std::string context = absl::StrCat(limit.name, " step ", step);
    ASSERT_EQ(got.decision.allowed, expected.decision.allowed) << context;
    ASSERT_EQ(got.decision.limit, expected.decision.limit) << context;
    ASSERT_EQ(got.decision.remaining, expected.decision.remaining) << context;
    ASSERT_EQ(got.decision.reset_after_micros, expected.decision.reset_after_micros) << context;
    ASSERT_EQ(got.decision.retry_after_micros, expected.decision.retry_after_micros) << context;
    ASSERT_EQ(got.decision.reason, expected.decision.reason) << context;
    ASSERT_EQ(got.decision.source, DecisionSource::kMemory) << context;
    ASSERT_EQ(got.changed, expected.changed) << context;
    ASSERT_EQ(got.expires_at_micros, expected.expires_at_micros) << context;
    ASSERT_TRUE(std::holds_alternative<State>(got.state)) << context;
    ASSERT_EQ(std::get<State>(got.state), expected.state) << context;
    if (expected.changed) state = expected.state;
    (expected.decision.allowed ? allowed : refused) += 1;
  }
  EXPECT_GT(allowed, 100) << limit.name;
  EXPECT_GT(refused, 50) << limit.name;
}

TEST(LimitRuleTest, ACheckIsThePureAlgorithm) {
  ExpectDecidesAsTheAlgorithm<algorithm::TokenBucketState>(TokenBucket("bucket", 7, 3.3));
  ExpectDecidesAsTheAlgorithm<algorithm::FixedWindowState>(
      Window("fixed", Algorithm::kFixedWindow, 9, kSecond));
  ExpectDecidesAsTheAlgorithm<algorithm::SlidingWindowState>(
      Window("sliding", Algorithm::kSlidingWindow, 9, 3 * kSecond / 2));
}

// A state of another algorithm (a limit redefined under the same name) counts as none.
TEST(LimitRuleTest, AStateOfAnotherAlgorithmCountsAsNone) {
  const int64_t now = 1'700'000'000'000'000;
  const AnyState spent_window = algorithm::FixedWindowState{now / kSecond, 5};
  const Step bucket =
      Apply(*RuleFor(TokenBucket("l", 5, 1)), &spent_window, now, CheckOperation{1});
  const Step fresh = Apply(*RuleFor(TokenBucket("l", 5, 1)), nullptr, now, CheckOperation{1});
  EXPECT_TRUE(bucket.decision.allowed);
  EXPECT_EQ(bucket.decision.remaining, 4);
  EXPECT_EQ(std::get<algorithm::TokenBucketState>(bucket.state),
            std::get<algorithm::TokenBucketState>(fresh.state));

  const AnyState bucket_state = bucket.state;
  const Step window = Apply(*RuleFor(Window("l", Algorithm::kFixedWindow, 5, kSecond)),
                            &bucket_state, now, CheckOperation{5});
  EXPECT_TRUE(window.decision.allowed);
  EXPECT_EQ(window.decision.remaining, 0);
}

}  // namespace
}  // namespace tollgate::memory
