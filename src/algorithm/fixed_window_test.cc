// Copyright tollgate authors.
#include "src/algorithm/fixed_window.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace tollgate::algorithm {
namespace {

constexpr int64_t kSecond = 1'000'000;
// A window boundary for one-second windows (and for 10 s and 1 min windows too).
constexpr int64_t kStart = 1'700'000'000'000'000;

using State = std::optional<FixedWindowState>;

TEST(WindowIndexTest, FloorsNegativeTimes) {
  EXPECT_EQ(WindowIndex(0, 10), 0);
  EXPECT_EQ(WindowIndex(9, 10), 0);
  EXPECT_EQ(WindowIndex(10, 10), 1);
  EXPECT_EQ(WindowIndex(-1, 10), -1);
  EXPECT_EQ(WindowIndex(-10, 10), -1);
  EXPECT_EQ(WindowIndex(-11, 10), -2);
}

// The hinted index is the same floor division whatever the hint: the window of now or the
// one before (the fast path), a stale or future hint, one from a redefined limit whose
// index times the window overflows, and negative times.
TEST(WindowIndexTest, HintNeverChangesTheIndex) {
  std::mt19937_64 random(5);
  const std::vector<int64_t> windows = {1, 7, 1000, kSecond, 3'600 * kSecond, int64_t{1} << 40};
  for (int i = 0; i < 20'000; ++i) {
    const int64_t window = windows[random() % windows.size()];
    const int64_t now = kStart + static_cast<int64_t>(random() % (int64_t{1} << 45)) -
                        (i % 7 == 0 ? kStart * 2 : 0);  // some negative times too
    const int64_t exact = WindowIndex(now, window);
    const int64_t offsets[] = {0, -1, -2, 1, 2, -1'000'000};
    for (const int64_t offset : offsets) {
      EXPECT_EQ(WindowIndexNear(now, window, exact + offset), exact)
          << "now " << now << " window " << window << " offset " << offset;
    }
    EXPECT_EQ(WindowIndexNear(now, window, std::numeric_limits<int64_t>::max()), exact);
    EXPECT_EQ(WindowIndexNear(now, window, std::numeric_limits<int64_t>::min()), exact);
  }
  // At the edges of a window: its first and last microsecond, and the next window's first.
  EXPECT_EQ(WindowIndexNear(kStart, kSecond, WindowIndex(kStart, kSecond) - 1),
            WindowIndex(kStart, kSecond));
  EXPECT_EQ(WindowIndexNear(kStart - 1, kSecond, WindowIndex(kStart, kSecond) - 1),
            WindowIndex(kStart, kSecond) - 1);
  EXPECT_EQ(WindowIndexNear(kStart + 2 * kSecond, kSecond, WindowIndex(kStart, kSecond)),
            WindowIndex(kStart, kSecond) + 2);
}

TEST(FixedWindowTest, MissingStateIsAnEmptyWindow) {
  const WindowParams params{.limit = 3, .window_micros = kSecond};
  auto out = FixedWindowCheck(std::nullopt, kStart + 250'000, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.limit, 3);
  EXPECT_EQ(out.decision.remaining, 2);
  EXPECT_EQ(out.decision.reset_after_micros, 750'000);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_TRUE(out.changed);
  EXPECT_EQ(out.state, (FixedWindowState{WindowIndex(kStart, kSecond), 1}));
  EXPECT_EQ(out.expires_at_micros, kStart + kSecond);
}

TEST(FixedWindowTest, RefusesOverLimitUntilTheNextWindow) {
  const WindowParams params{.limit = 2, .window_micros = kSecond};
  State state;
  for (int i = 0; i < 2; ++i) {
    auto out = FixedWindowCheck(state, kStart + 100'000, params, 1);
    ASSERT_TRUE(out.decision.allowed);
    state = out.state;
  }
  auto out = FixedWindowCheck(state, kStart + 400'000, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
  EXPECT_EQ(out.decision.remaining, 0);
  EXPECT_EQ(out.decision.retry_after_micros, 600'000);
  EXPECT_EQ(out.decision.reset_after_micros, 600'000);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);

  out = FixedWindowCheck(state, kStart + 999'999, params, 1);
  EXPECT_FALSE(out.decision.allowed);
  out = FixedWindowCheck(state, kStart + kSecond, params, 2);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.decision.remaining, 0);
}

TEST(FixedWindowTest, CostZeroPeeksWithoutChangingState) {
  const WindowParams params{.limit = 2, .window_micros = kSecond};
  const State state = FixedWindowCheck(std::nullopt, kStart, params, 2).state;
  auto out = FixedWindowCheck(state, kStart + 1, params, 0);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);
  EXPECT_EQ(out.decision.remaining, 0);

  out = FixedWindowCheck(std::nullopt, kStart, params, 0);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.decision.remaining, 2);
}

// A peek says when a cost of 1 would pass: 0 while the window has room, else its end.
TEST(FixedWindowTest, APeekSaysWhenACostOfOneWouldPass) {
  const WindowParams params{.limit = 2, .window_micros = kSecond};
  const State one = FixedWindowCheck(std::nullopt, kStart, params, 1).state;
  EXPECT_EQ(FixedWindowCheck(one, kStart + 5, params, 0).decision.retry_after_micros, 0);
  const State spent = FixedWindowCheck(one, kStart + 5, params, 1).state;
  auto peek = FixedWindowCheck(spent, kStart + 250'000, params, 0);
  EXPECT_TRUE(peek.decision.allowed);
  EXPECT_EQ(peek.decision.reason, DenyReason::kNone);
  EXPECT_EQ(peek.decision.retry_after_micros, peek.decision.reset_after_micros);
  EXPECT_EQ(peek.decision.retry_after_micros,
            FixedWindowCheck(spent, kStart + 250'000, params, 1).decision.retry_after_micros);
  EXPECT_EQ(FixedWindowCheck(spent, kStart + kSecond, params, 0).decision.retry_after_micros, 0);
}

TEST(FixedWindowTest, CostAboveLimitIsRefusedForGood) {
  const WindowParams params{.limit = 5, .window_micros = kSecond};
  auto out = FixedWindowCheck(std::nullopt, kStart, params, 6);
  EXPECT_FALSE(out.decision.allowed);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_EQ(out.decision.remaining, 5);
  EXPECT_FALSE(out.changed);

  const State state = FixedWindowCheck(std::nullopt, kStart, params, 1).state;
  out = FixedWindowCheck(state, kStart, params, 6);
  EXPECT_EQ(out.decision.reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(out.decision.retry_after_micros, 0);
  EXPECT_FALSE(out.changed);
  EXPECT_EQ(out.state, *state);
}

TEST(FixedWindowTest, StaleStateCountsAsZero) {
  const WindowParams params{.limit = 1, .window_micros = kSecond};
  const State state = FixedWindowCheck(std::nullopt, kStart, params, 1).state;
  auto out = FixedWindowCheck(state, kStart + 5 * kSecond + 3, params, 1);
  EXPECT_TRUE(out.decision.allowed);
  EXPECT_EQ(out.state.window_index, WindowIndex(kStart, kSecond) + 5);
  EXPECT_EQ(out.state.count, 1);
}

TEST(FixedWindowTest, TimeGoingBackwardsAddsNothing) {
  const WindowParams params{.limit = 2, .window_micros = kSecond};
  const State state = FixedWindowCheck(std::nullopt, kStart + 500'000, params, 2).state;
  // Back within the same window, and back into earlier windows: the window already spent
  // stays spent.
  for (int64_t back : std::vector<int64_t>{1, 500'000, 500'001, 3 * kSecond}) {
    auto out = FixedWindowCheck(state, kStart + 500'000 - back, params, 1);
    EXPECT_FALSE(out.decision.allowed) << back;
    EXPECT_EQ(out.decision.reason, DenyReason::kOverLimit);
    EXPECT_EQ(out.decision.remaining, 0);
    EXPECT_FALSE(out.changed);
    EXPECT_EQ(out.state, *state);
    // Honest in the caller's clock: the spent window ends at kStart + kSecond.
    EXPECT_EQ(out.decision.retry_after_micros, kSecond - 500'000 + back);
    EXPECT_EQ(out.expires_at_micros, kStart + kSecond);
  }
}

// ---- Charges (consumption after the fact) and refunds. ------------------------------

TEST(FixedWindowTest, AChargePassesTheLimitAndTheNextWindowForgivesIt) {
  const WindowParams params{.limit = 1000, .window_micros = 60 * kSecond};
  State state = FixedWindowCharge(std::nullopt, kStart, params, 900).state;
  auto charged = FixedWindowCharge(state, kStart + 1, params, 300);
  EXPECT_TRUE(charged.decision.allowed);
  EXPECT_TRUE(charged.changed);
  EXPECT_EQ(charged.state.count, 1200);
  EXPECT_EQ(charged.decision.remaining, 0);
  EXPECT_EQ(charged.decision.debt, 200);
  const int64_t window_end = (WindowIndex(kStart, 60 * kSecond) + 1) * 60 * kSecond;
  EXPECT_EQ(charged.decision.retry_after_micros, window_end - kStart - 1);
  state = charged.state;
  auto peek = FixedWindowCheck(state, kStart + 2, params, 0);
  EXPECT_FALSE(peek.decision.allowed);
  EXPECT_EQ(peek.decision.debt, 200);
  EXPECT_EQ(peek.decision.retry_after_micros, window_end - kStart - 2);
  EXPECT_TRUE(FixedWindowCheck(state, window_end, params, 1000).decision.allowed);
}

TEST(FixedWindowTest, ARefundGoesBackToItsWindowOnlyWhileItLasts) {
  const WindowParams params{.limit = 10, .window_micros = kSecond};
  const int64_t start = WindowIndex(kStart, kSecond) * kSecond;
  State state = FixedWindowCheck(std::nullopt, start + 10, params, 8).state;
  auto refunded = FixedWindowRefund(state, start + 20, params, 5, start + 10);
  EXPECT_TRUE(refunded.changed);
  EXPECT_EQ(refunded.state.count, 3);
  EXPECT_EQ(refunded.decision.remaining, 7);
  EXPECT_EQ(FixedWindowRefund(state, start + 20, params, 50, start + 10).state.count, 0);
  // Reserved in the window before: nothing comes back.
  EXPECT_FALSE(FixedWindowRefund(state, start + 20, params, 5, start - 1).changed);
  // The window is over: nothing comes back.
  auto late = FixedWindowRefund(state, start + kSecond, params, 5, start + 10);
  EXPECT_FALSE(late.changed);
  EXPECT_EQ(late.decision.remaining, 10);
}

// ---- Properties over random traffic. -------------------------------------------------

class FixedWindowPropertyTest : public ::testing::TestWithParam<WindowParams> {};

TEST_P(FixedWindowPropertyTest, NeverAdmitsMoreThanLimitPerWindow) {
  const WindowParams params = GetParam();
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::mt19937_64 rng(seed);
    const uint64_t step = static_cast<uint64_t>(params.window_micros / params.limit * 2 + 2);
    std::map<int64_t, int64_t> used_per_window;
    State state;
    int64_t now = kStart + static_cast<int64_t>(rng() % 1'000'000'000);
    for (int i = 0; i < 5000; ++i) {
      const uint64_t kind = rng() % 10;
      if (kind >= 4 && kind < 9) now += static_cast<int64_t>(rng() % step);
      if (kind == 9) now += static_cast<int64_t>(rng() % (3 * params.window_micros));
      int64_t cost = static_cast<int64_t>(rng() % static_cast<uint64_t>(params.limit + 1));
      if (rng() % 50 == 0) cost = params.limit + 1;

      auto out = FixedWindowCheck(state, now, params, cost);
      if (out.decision.allowed) {
        EXPECT_EQ(out.changed, cost > 0);
        used_per_window[WindowIndex(now, params.window_micros)] += cost;
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
      EXPECT_TRUE(FixedWindowCheck(state, now + retry, params, cost).decision.allowed);
      EXPECT_FALSE(FixedWindowCheck(state, now + retry - 1, params, cost).decision.allowed);
    }
    for (const auto& [window, used] : used_per_window) {
      ASSERT_LE(used, params.limit) << "seed " << seed << " window " << window;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FixedWindowPropertyTest,
                         ::testing::Values(WindowParams{.limit = 1, .window_micros = kSecond},
                                           WindowParams{.limit = 10, .window_micros = kSecond},
                                           WindowParams{.limit = 100,
                                                        .window_micros = 60 * kSecond},
                                           WindowParams{.limit = 7, .window_micros = 333}));

}  // namespace
}  // namespace tollgate::algorithm
