// Copyright tollgate authors. The decision of one sync entry, in plain numbers.
#include "src/store/sync/entry.h"

#include <cstdint>
#include <memory>

#include "gtest/gtest.h"

namespace tollgate::sync {
namespace {

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = 1'700'000'000LL * kSecond;  // a window start

std::shared_ptr<const KeyInfo> Info(Algorithm algorithm, int64_t limit, int64_t window_micros,
                                    Shares shares = Shares::kEqual) {
  auto info = std::make_shared<KeyInfo>();
  info->shares = shares;
  info->limit_name = "api";
  info->numbers.algorithm = algorithm;
  info->numbers.limit = limit;
  info->numbers.window_micros = window_micros;
  info->sync_interval_micros = 100'000;
  info->counter_base = "tollgate:api:{k}";
  return info;
}

DecideContext At(int64_t now, int64_t instances = 1) {
  return DecideContext{
      .clock_micros = now, .now_micros = now, .instances = instances, .last_sync_micros = now};
}

int64_t Admit(Entry& entry, int64_t count, const DecideContext& context) {
  int64_t admitted = 0;
  int64_t dropped = 0;
  for (int64_t i = 0; i < count; ++i) {
    admitted += Decide(entry, FailureMode::kFailOpen, 1, context, &dropped).allowed ? 1 : 0;
  }
  return admitted;
}

TEST(SyncEntryTest, BeforeAGrantAnInstanceSpendsItsFirstShare) {
  Entry entry = NewEntry(Info(Algorithm::kFixedWindow, 100, 60 * kSecond), kStart, kStart);
  EXPECT_EQ(Admit(entry, 40, At(kStart, 3)), 33);
  EXPECT_EQ(entry.unsent_current, 33);
  EXPECT_EQ(entry.demand, 40);  // refused units are asked too
  // The view counts against the share: 60 known used leave 40, a third of which is 13.
  Entry seen = NewEntry(Info(Algorithm::kFixedWindow, 100, 60 * kSecond), kStart, kStart);
  seen.view_current = 60;
  EXPECT_EQ(Admit(seen, 40, At(kStart, 3)), 13);
}

// shares: demand: a key nobody set a first share aside for starts from the floor, 1/(10N);
// a fixed window right after a sync that set one aside starts from that.
TEST(SyncEntryTest, WithDemandSharesAWindowStartsFromTheFirstShareSetAsideOrTheFloor) {
  const auto info = Info(Algorithm::kFixedWindow, 1000, 60 * kSecond, Shares::kDemand);
  Entry entry = NewEntry(info, kStart, kStart);
  EXPECT_EQ(Admit(entry, 100, At(kStart, 4)), 25);
  entry.next_first_share = 900;  // as the last reply of this window set it
  entry.grant_current = 0;
  EXPECT_EQ(Admit(entry, 1000, At(kStart + 60 * kSecond, 4)), 900);
  EXPECT_EQ(entry.first_share, 900);
  EXPECT_EQ(entry.next_first_share, -1);
  // A window skipped: nothing was set aside for this one.
  entry.next_first_share = 900;
  EXPECT_EQ(Admit(entry, 1000, At(kStart + 3 * 60 * kSecond, 4)), 25);
}

TEST(SyncEntryTest, AGrantBoundsWhatIsAdmittedAndARefusalWaitsForTheNextSync) {
  Entry entry = NewEntry(Info(Algorithm::kFixedWindow, 100, 60 * kSecond), kStart, kStart);
  entry.view_current = 50;
  entry.grant_current = 4;
  int64_t dropped = 0;
  Decision first = Decide(entry, FailureMode::kFailOpen, 3, At(kStart + 10), &dropped);
  ASSERT_TRUE(first.allowed);
  EXPECT_EQ(first.remaining, 1);  // of the grant, not the 47 left in the window
  EXPECT_EQ(first.source, DecisionSource::kSync);
  Decision refused = Decide(entry, FailureMode::kFailOpen, 2, At(kStart + 10), &dropped);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.reason, DenyReason::kOverLimit);
  EXPECT_EQ(refused.retry_after_micros, entry.next_sync_micros - (kStart + 10));
  // A peek is allowed and says when a cost of 1 passes: now, with 1 left of the grant...
  Decision peek = Decide(entry, FailureMode::kFailOpen, 0, At(kStart + 10), &dropped);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.remaining, 1);
  EXPECT_EQ(peek.retry_after_micros, 0);
  ASSERT_TRUE(Decide(entry, FailureMode::kFailOpen, 1, At(kStart + 10), &dropped).allowed);
  // ...and at the next sync once it is spent, as a refused cost of 1 would.
  peek = Decide(entry, FailureMode::kFailOpen, 0, At(kStart + 10), &dropped);
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.remaining, 0);
  EXPECT_EQ(peek.retry_after_micros,
            Decide(entry, FailureMode::kFailOpen, 1, At(kStart + 10), &dropped).retry_after_micros);
  // A grant larger than what the window has left never admits past the limit.
  entry.grant_current = 1000;
  EXPECT_EQ(Admit(entry, 100, At(kStart + 10)), 46);
  EXPECT_EQ(dropped, 0);
}

// The wait for the next sync never outlasts the window, where a fresh first share starts.
TEST(SyncEntryTest, ARefusalWaitsNoLongerThanTheWindow) {
  Entry entry = NewEntry(Info(Algorithm::kFixedWindow, 10, kSecond), kStart, kStart);
  entry.next_sync_micros = kStart + 10 * kSecond;
  entry.grant_current = 0;
  int64_t dropped = 0;
  const Decision refused =
      Decide(entry, FailureMode::kFailOpen, 1, At(kStart + kSecond - 5), &dropped);
  EXPECT_EQ(refused.retry_after_micros, 5);
}

TEST(SyncEntryTest, SlidingWindowsWeighThePreviousWindowAsTheAlgorithmDoes) {
  Entry entry = NewEntry(Info(Algorithm::kSlidingWindow, 100, 10 * kSecond), kStart, kStart);
  entry.view_previous = 80;
  // Halfway through: the previous window weighs 40, so 60 are left, 30 for each of two.
  EXPECT_EQ(Admit(entry, 50, At(kStart + 5 * kSecond, 2)), 30);
}

TEST(SyncEntryTest, RollingKeepsASlidingGrantAndDropsUnitsOfWindowsOver) {
  Entry sliding = NewEntry(Info(Algorithm::kSlidingWindow, 100, 10 * kSecond), kStart, kStart);
  sliding.grant_current = 20;
  sliding.unsent_current = 5;
  EXPECT_EQ(Roll(sliding, sliding.window_index + 1), 0);
  EXPECT_EQ(sliding.grant_current, 15);  // what is left of it, held for us by the others
  EXPECT_TRUE(sliding.grant_carried);
  EXPECT_EQ(sliding.unsent_previous, 5);

  Entry fixed = NewEntry(Info(Algorithm::kFixedWindow, 100, 10 * kSecond), kStart, kStart);
  fixed.grant_current = 20;
  fixed.unsent_current = 5;
  fixed.unsent_previous = 2;
  EXPECT_EQ(Roll(fixed, fixed.window_index + 2), 7);  // neither window matters any more
  EXPECT_EQ(fixed.grant_current, -1);                 // a fresh first share
  EXPECT_EQ(Roll(fixed, fixed.window_index - 1), 0);  // time going back changes nothing
}

TEST(SyncEntryTest, FailClosedRefusesOnceTheLastSyncIsTwoIntervalsOld) {
  Entry entry = NewEntry(Info(Algorithm::kFixedWindow, 100, 60 * kSecond), kStart, kStart);
  DecideContext context = At(kStart + 200'001);
  context.last_sync_micros = kStart;
  int64_t dropped = 0;
  const Decision refused = Decide(entry, FailureMode::kFailClosed, 1, context, &dropped);
  EXPECT_EQ(refused.reason, DenyReason::kStoreUnavailable);
  EXPECT_EQ(entry.unsent_current, 0);
  EXPECT_TRUE(Decide(entry, FailureMode::kFailOpen, 1, context, &dropped).allowed);
}

}  // namespace
}  // namespace tollgate::sync
