// Copyright tollgate authors.
#include "src/algorithm/sliding_window.h"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

constexpr int64_t kSecond = 1'000'000;
// A window boundary for one-second windows.
constexpr int64_t kStart = 1'700'000'000'000'000;

using State = std::optional<SlidingWindowState>;

TEST(SlidingWindowTest, MissingStateIsEmpty) {
  const WindowParams params{.limit = 4, .window_micros = kSecond};
  auto out = SlidingWindowCheck(std::nullopt, kStart + 100'000, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.limit, 4);
  EXPECT_EQ(out.decision.remaining, 3);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  // The count influences this window and the next one.
  EXPECT_EQ(out.decision.reset_after_micros, 2 * kSecond - 100'000);
  EXPECT_EQ(out.expires_at_micros, kStart + 2 * kSecond);
  EXPECT_TRUE(out.changed);
  EXPECT_EQ(out.state, (SlidingWindowState{WindowIndex(kStart, kSecond), 1, 0}));
}

TEST(SlidingWindowTest, PreviousWindowIsWeightedByOverlap) {
  const WindowParams params{.limit = 10, .window_micros = kSecond};
  State state;
  for (int i = 0; i < 10; ++i) {
    auto out = SlidingWindowCheck(state, kStart + 900'000, params, 1);
    ASSERT_TRUE(out.decision.allowed);
    state = out.state;
  }
  // A quarter into the next window the previous 10 weigh 7.5: two more pass, the third not.
  State next = state;
  for (int i = 0; i < 2; ++i) {
    auto out = SlidingWindowCheck(next, kStart + kSecond + 250'000, params, 1);
    ASSERT_TRUE(out.decision.allowed) << i;
    next = out.state;
  }
  auto out = SlidingWindowCheck(next, kStart + kSecond + 250'000, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
  EXPECT_EQ(out.decision.remaining, 0);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *next);
  // 10 * (1 - e) + 2 + 1 <= 10 from e = 0.3: 50 ms later (plus the 1 µs of slack).
  EXPECT_EQ(out.decision.retry_after_micros, 50'001);
  EXPECT_TRUE(SlidingWindowCheck(next, kStart + kSecond + 300'000, params, 1).decision.allowed);

  // Two windows later nothing is left.
  out = SlidingWindowCheck(state, kStart + 2 * kSecond, params, 10);
  EXPECT_TRUE(out.decision.allowed);
}

TEST(SlidingWindowTest, CostZeroPeeksWithoutChangingState) {
  const WindowParams params{.limit = 3, .window_micros = kSecond};
  const State state = SlidingWindowCheck(std::nullopt, kStart, params, 3).state;
  auto out = SlidingWindowCheck(state, kStart + 10, params, 0);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);
  EXPECT_EQ(out.decision.remaining, 0);

  out = SlidingWindowCheck(std::nullopt, kStart, params, 0);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.decision.remaining, 3);
  EXPECT_LE(out.expires_at_micros, kStart);
}

// A peek says when a cost of 1 would pass, as a refused cost-1 check would: in this window
// once the previous one's weight has shrunk, or in the next one.
TEST(SlidingWindowTest, APeekSaysWhenACostOfOneWouldPass) {
  const WindowParams params{.limit = 4, .window_micros = kSecond};
  EXPECT_EQ(SlidingWindowCheck(std::nullopt, kStart, params, 0).decision.retry_after_micros, 0);
  // Previous window full, nothing in the current one yet: passes once its weight shrinks.
  const State previous_full = SlidingWindowCheck(std::nullopt, kStart, params, 4).state;
  // Previous window part full, the current one nearly: passes once the previous one is over.
  const State nearly_full =
      SlidingWindowCheck(previous_full, kStart + kSecond + 900'000, params, 3).state;
  // The current window full: only in the next window, once its weight has shrunk.
  const State current_full = SlidingWindowCheck(std::nullopt, kStart + kSecond, params, 4).state;
  struct Case {
    State state;
    int64_t at;
  };
  for (const Case& c :
       {Case{previous_full, kStart + kSecond + 10}, Case{previous_full, kStart + kSecond + 200'000},
        Case{nearly_full, kStart + kSecond + 900'000},
        Case{current_full, kStart + kSecond + 900'000}}) {
    SCOPED_TRACE(c.at);
    auto peek = SlidingWindowCheck(c.state, c.at, params, 0);
    EXPECT_TRUE(peek.decision.allowed);
    EXPECT_EQ(peek.decision.reason, DenyReason::kNone);
    EXPECT_EQ(peek.decision.remaining, 0);
    const auto refused = SlidingWindowCheck(c.state, c.at, params, 1);
    ASSERT_FALSE(refused.decision.allowed);
    EXPECT_GT(peek.decision.retry_after_micros, 0);
    EXPECT_EQ(peek.decision.retry_after_micros, refused.decision.retry_after_micros);
    // And then it does pass (and not 2 µs before).
    EXPECT_TRUE(SlidingWindowCheck(c.state, c.at + peek.decision.retry_after_micros, params, 1)
                    .decision.allowed);
    EXPECT_FALSE(SlidingWindowCheck(c.state, c.at + peek.decision.retry_after_micros - 2, params, 1)
                     .decision.allowed);
  }
}

TEST(SlidingWindowTest, CostAboveLimitIsRefusedForGood) {
  const WindowParams params{.limit = 3, .window_micros = kSecond};
  auto out = SlidingWindowCheck(std::nullopt, kStart, params, 4);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_FALSE(out.changed);

  const State state = SlidingWindowCheck(std::nullopt, kStart, params, 1).state;
  out = SlidingWindowCheck(state, kStart, params, 4);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);
}

TEST(SlidingWindowTest, TimeGoingBackwardsAddsNothing) {
  const WindowParams params{.limit = 2, .window_micros = kSecond};
  const State state = SlidingWindowCheck(std::nullopt, kStart + 500'000, params, 2).state;
  for (int64_t back : std::vector<int64_t>{1, 500'000, 500'001, 3 * kSecond}) {
    const int64_t now = kStart + 500'000 - back;
    auto out = SlidingWindowCheck(state, now, params, 1);
    EXPECT_FALSE(out.decision.allowed) << back;
    EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
    EXPECT_EQ(out.decision.remaining, 0);
    EXPECT_FALSE(out.changed);
    EXPECT_EQ(out.state, *state);
    // Still honest in the caller's clock.
    EXPECT_TRUE(SlidingWindowCheck(state, now + out.decision.retry_after_micros, params, 1)
                    .decision.allowed)
        << back;
  }
}

// ---- Charges (consumption after the fact) and refunds. ------------------------------

TEST(SlidingWindowTest, AChargeWeighsUntilTheWindowHasSlidPastIt) {
  const WindowParams params{.limit = 1000, .window_micros = kSecond};
  const int64_t start = WindowIndex(kStart, kSecond) * kSecond;
  State state = SlidingWindowCharge(std::nullopt, start, params, 1200).state;
  auto peek = SlidingWindowCheck(state, start, params, 0);
  EXPECT_FALSE(peek.decision.allowed);
  EXPECT_EQ(peek.decision.debt, 200);
  // In the next window the 1200 weigh (1 - elapsed) * 1200: 1 passes once that is <= 999.
  const int64_t retry = peek.decision.retry_after_micros;
  EXPECT_FALSE(SlidingWindowCheck(state, start + kSecond, params, 1).decision.allowed);
  EXPECT_FALSE(SlidingWindowCheck(state, start + retry - 10, params, 1).decision.allowed);
  EXPECT_TRUE(SlidingWindowCheck(state, start + retry, params, 1).decision.allowed);
  EXPECT_GT(retry, kSecond);
  EXPECT_LT(retry, kSecond + kSecond / 5);
}

TEST(SlidingWindowTest, ARefundGoesBackWhileItsWindowStillWeighs) {
  const WindowParams params{.limit = 10, .window_micros = kSecond};
  const int64_t start = WindowIndex(kStart, kSecond) * kSecond;
  State state = SlidingWindowCheck(std::nullopt, start + 10, params, 8).state;
  auto now = SlidingWindowRefund(state, start + 20, params, 5, start + 10);
  EXPECT_TRUE(now.changed);
  EXPECT_EQ(now.state.current, 3);
  // In the next window the reservation's count is the previous one, refunded there.
  auto next = SlidingWindowRefund(state, start + kSecond, params, 5, start + 10);
  EXPECT_TRUE(next.changed);
  EXPECT_EQ(next.state.previous, 3);
  EXPECT_EQ(next.state.current, 0);
  // Two windows on it no longer weighs: nothing comes back.
  EXPECT_FALSE(SlidingWindowRefund(state, start + 2 * kSecond, params, 5, start + 10).changed);
  // A charge adds to the current window.
  EXPECT_EQ(SlidingWindowCharge(state, start + 30, params, 4).state.current, 12);
}

// ---- Properties over random traffic. -------------------------------------------------

struct Event {
  int64_t now_micros;
  int64_t cost;
};

class SlidingWindowPropertyTest : public ::testing::TestWithParam<WindowParams> {};

TEST_P(SlidingWindowPropertyTest, BoundedPerWindowAndPerSlidingInterval) {
  const WindowParams params = GetParam();
  const int64_t window = params.window_micros;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 rng(seed);
    const uint64_t step = static_cast<uint64_t>(window / params.limit * 2 + 2);
    std::vector<Event> allowed;
    std::map<int64_t, int64_t> used_per_window;
    State state;
    int64_t now = kStart + static_cast<int64_t>(rng() % 1'000'000'000);
    for (int i = 0; i < 5000; ++i) {
      const uint64_t kind = rng() % 10;
      if (kind >= 4 && kind < 9) now += static_cast<int64_t>(rng() % step);
      if (kind == 9) now += static_cast<int64_t>(rng() % (3 * window));
      int64_t cost = static_cast<int64_t>(rng() % static_cast<uint64_t>(params.limit + 1));
      if (rng() % 50 == 0) cost = params.limit + 1;

      auto out = SlidingWindowCheck(state, now, params, cost);
      if (out.decision.allowed) {
        EXPECT_EQ(out.changed, cost > 0);
        if (cost > 0) allowed.push_back({now, cost});
        used_per_window[WindowIndex(now, window)] += cost;
        state = out.state;
        continue;
      }
      EXPECT_FALSE(out.changed);
      if (state.has_value()) {
        EXPECT_EQ(out.state, *state);
      }
      if (out.decision.reason == DenyReason::kCostExceedsLimit) {
        EXPECT_EQ(out.decision.retry_after_micros, 0);
        continue;
      }
      const int64_t retry = out.decision.retry_after_micros;
      EXPECT_GT(retry, 0);
      EXPECT_TRUE(SlidingWindowCheck(state, now + retry, params, cost).decision.allowed)
          << "seed " << seed << " step " << i;
    }
    for (const auto& [index, used] : used_per_window) {
      ASSERT_LE(used, params.limit) << "seed " << seed << " window " << index;
    }
    // Any interval [t, t + window) admits less than 2 * limit.
    int64_t in_interval = 0;
    size_t end = 0;
    for (size_t begin = 0; begin < allowed.size(); ++begin) {
      while (end < allowed.size() && allowed[end].now_micros < allowed[begin].now_micros + window) {
        in_interval += allowed[end++].cost;
      }
      ASSERT_LT(in_interval, 2 * params.limit) << "seed " << seed << " from event " << begin;
      in_interval -= allowed[begin].cost;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SlidingWindowPropertyTest,
                         ::testing::Values(WindowParams{.limit = 1, .window_micros = kSecond},
                                           WindowParams{.limit = 10, .window_micros = kSecond},
                                           WindowParams{.limit = 100,
                                                        .window_micros = 60 * kSecond},
                                           WindowParams{.limit = 7, .window_micros = 333}));

}  // namespace
}  // namespace tollgate::algorithm
