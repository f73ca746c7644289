// Copyright tollgate authors. Sync rounds against fake replies: what a round takes from the
// key table, the script call it builds, and what the reply changes in the decisions. No Redis.
#include "src/store/sync/round.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/router.h"
#include "src/store/redis/slot.h"
#include "src/store/sync/key_table.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"

namespace tollgate::sync {
namespace {

using redis::RedisReply;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = 1'700'000'000LL * kSecond;  // a 10 s window start

Limit SyncWindow(std::string name, Algorithm algorithm, int64_t max) {
  Limit limit = testing::Window(std::move(name), algorithm, max, 10 * kSecond);
  limit.mode = Mode::kSync;
  limit.sync_interval_micros = 100'000;
  limit.shares = Shares::kEqual;  // first shares of limit / N, unless a test says otherwise
  return limit;
}

RedisReply Integer(int64_t value) {
  RedisReply reply;
  reply.type = RedisReply::Type::kInteger;
  reply.integer = value;
  return reply;
}

// What sync.lua answers: its time, then (total, grant, next first share) per item of the
// call's last batch.
RedisReply ScriptReply(int64_t now, const std::vector<CounterReply>& counters) {
  RedisReply reply;
  reply.type = RedisReply::Type::kArray;
  reply.elements.push_back(Integer(now));
  for (const CounterReply& counter : counters) {
    reply.elements.push_back(Integer(counter.total));
    reply.elements.push_back(Integer(counter.grant));
    reply.elements.push_back(Integer(counter.next_first_share));
  }
  return reply;
}

class SyncRoundTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<KeyTable>> table =
        KeyTable::Create({.clock = &clock_, .shards = 4});
    ASSERT_TRUE(table.ok()) << table.status();
    table_ = *std::move(table);
    table_->SetInstances(2);
  }

  int64_t Admit(const Limit& limit, const std::string& key, int64_t count) {
    int64_t admitted = 0;
    for (int64_t i = 0; i < count; ++i) {
      absl::StatusOr<std::vector<Decision>> d = table_->Check({CheckItem{&limit, key, 1}});
      EXPECT_TRUE(d.ok()) << d.status();
      admitted += d.ok() && (*d)[0].allowed ? 1 : 0;
    }
    return admitted;
  }

  // Takes a round and answers its one call with `reply`, as the store does.
  void RoundAnswered(const std::vector<CounterReply>& counters) {
    PendingBatches::Calls calls = pending_.Take(++sequence_, table_->TakeCounters(false), now());
    ASSERT_EQ(calls.calls.size(), 1u);
    const SlotCall& call = calls.calls[0];
    absl::StatusOr<SlotReply> reply = ParseReply(ScriptReply(now(), counters), call);
    ASSERT_TRUE(reply.ok()) << reply.status();
    for (size_t b = 0; b + 1 < call.batches.size(); ++b)
      table_->Apply(call.batches[b].items, nullptr);
    table_->Apply(call.batches.back().items, &reply->counters);
  }

  int64_t now() const { return clock_.NowMicros(); }

  SimulatedClock clock_{kStart};
  std::unique_ptr<KeyTable> table_;
  PendingBatches pending_;
  int64_t sequence_ = 0;
};

TEST_F(SyncRoundTest, TheScriptCallCarriesEveryCounterInSyncLuaLayout) {
  const Limit fixed = SyncWindow("fixed", Algorithm::kFixedWindow, 100);
  Limit sliding = SyncWindow("sliding", Algorithm::kSlidingWindow, 50);
  sliding.shares = Shares::kDemand;
  ASSERT_EQ(Admit(fixed, "a", 3), 3);
  ASSERT_EQ(Admit(sliding, "b", 2), 2);
  ASSERT_TRUE(table_->Check({CheckItem{&fixed, "a", 60}}).ok());  // refused: asked all the same
  clock_.AdvanceMicros(100'000);
  std::vector<CounterItem> items = table_->TakeCounters(false);
  PendingBatches::Calls calls = pending_.Take(7, std::move(items), now());
  ASSERT_EQ(calls.calls.size(), 1u);
  const SlotCall& call = calls.calls[0];
  EXPECT_EQ(call.slot, redis::kAnySlot);  // one server: one call for every key
  const CallContext context{
      .sequence_key = "tollgate:sync:i1", .instance_id = "i1", .instances = 2};
  const std::vector<std::string> args = ScriptCommand("EVALSHA", "abc", context, call);
  const int64_t w = kStart / (10 * kSecond);
  // fixed: the current window only; sliding: the previous window's counter, then the current.
  std::vector<std::string> keys(args.begin() + 4, args.begin() + 7);
  std::sort(keys.begin(), keys.end());
  EXPECT_THAT(keys, ElementsAre(absl::StrCat("tollgate:fixed:{a}:", w),
                                absl::StrCat("tollgate:sliding:{b}:", w - 1),
                                absl::StrCat("tollgate:sliding:{b}:", w)));
  EXPECT_THAT(std::vector<std::string>(args.begin(), args.begin() + 4),
              ElementsAre("EVALSHA", "abc", "4", "tollgate:sync:i1"));
  EXPECT_THAT(std::vector<std::string>(args.begin() + 7, args.begin() + 14),
              ElementsAre("86400000", "i1", "2", "0", "1", "7", "3"));
  ASSERT_EQ(args.size(), 14u + 3 * 8);
  // Per item: delta, TTL, limit (0: no grant asked), sliding window, window index, demand,
  // shares (1: demand), sync interval (the last three read with a grant only).
  std::vector<std::vector<std::string>> fields;
  for (size_t i = 14; i < args.size(); i += 8)
    fields.emplace_back(args.begin() + i, args.begin() + i + 8);
  std::sort(fields.begin(), fields.end(), [](const auto& a, const auto& b) { return a[2] < b[2]; });
  EXPECT_THAT(fields[0], ElementsAre("0", "9900", "0", "0", absl::StrCat(w - 1), "0", "1", "0"));
  EXPECT_THAT(fields[1],
              ElementsAre("3", "19900", "100", "0", absl::StrCat(w), "63", "0", "100000"));
  EXPECT_THAT(fields[2],
              ElementsAre("2", "19900", "50", "10000000", absl::StrCat(w), "2", "1", "100000"));
}

TEST_F(SyncRoundTest, AReplysGrantBoundsWhatTheTableAdmitsUntilTheNextRound) {
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  EXPECT_EQ(Admit(limit, "k", 80), 50);  // the first share: 100 / 2
  clock_.AdvanceMicros(100'000);
  RoundAnswered({{70, 7}});  // the other instance counted 20 meanwhile; 7 granted
  EXPECT_EQ(Admit(limit, "k", 10), 7);
  absl::StatusOr<std::vector<Decision>> refused = table_->Check({CheckItem{&limit, "k", 1}});
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE((*refused)[0].allowed);
  EXPECT_EQ((*refused)[0].retry_after_micros, 100'000);  // the key's next sync
  // The next round counts the 7 and brings a grant of 0: nothing more.
  clock_.AdvanceMicros(100'000);
  RoundAnswered({{77, 0}});
  EXPECT_EQ(Admit(limit, "k", 5), 0);
}

TEST_F(SyncRoundTest, RepliesThatDoNotMatchTheCallAreErrors) {
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  ASSERT_EQ(Admit(limit, "k", 1), 1);
  PendingBatches::Calls calls = pending_.Take(1, table_->TakeCounters(true), now());
  ASSERT_EQ(calls.calls.size(), 1u);
  const SlotCall& call = calls.calls[0];
  EXPECT_TRUE(ParseReply(ScriptReply(now(), {{1, 49}}), call).ok());
  EXPECT_FALSE(ParseReply(ScriptReply(now(), {}), call).ok());
  EXPECT_FALSE(ParseReply(ScriptReply(now(), {{1, 49}, {2, 3}}), call).ok());
  RedisReply text = ScriptReply(now(), {{1, 49}});
  text.elements[1].type = RedisReply::Type::kString;
  EXPECT_FALSE(ParseReply(text, call).ok());
  RedisReply error;
  error.type = RedisReply::Type::kError;
  error.str = "ERR something";
  EXPECT_THAT(ParseReply(error, call).status().message(), HasSubstr("ERR something"));
}

// A call that failed (its reply lost: Redis may have run it) goes again with the next
// round, first, under its own sequence number; once answered, its units are released.
TEST_F(SyncRoundTest, AFailedCallsBatchesGoAgainFirst) {
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  ASSERT_EQ(Admit(limit, "k", 10), 10);
  PendingBatches::Calls first = pending_.Take(1, table_->TakeCounters(true), now());
  ASSERT_EQ(first.calls.size(), 1u);
  pending_.Keep(std::move(first.calls[0]));
  ASSERT_EQ(Admit(limit, "k", 5), 5);
  PendingBatches::Calls second = pending_.Take(2, table_->TakeCounters(true), now());
  ASSERT_EQ(second.calls.size(), 1u);
  const SlotCall& call = second.calls[0];
  ASSERT_EQ(call.batches.size(), 2u);
  EXPECT_EQ(call.batches[0].sequence, 1);
  EXPECT_EQ(call.batches[0].items[0].delta, 10);
  EXPECT_EQ(call.batches[1].sequence, 2);
  EXPECT_EQ(call.batches[1].items[0].delta, 5);
  // Both batches acknowledged: 15 counted, nothing left unacknowledged; a grant of 20.
  table_->Apply(call.batches[0].items, nullptr);
  std::vector<CounterReply> replies = {{15, 20}};
  table_->Apply(call.batches[1].items, &replies);
  EXPECT_EQ(Admit(limit, "k", 30), 20);
  EXPECT_TRUE(pending_.empty());
}

TEST_F(SyncRoundTest, KeptBatchesLoseWindowsOverAndReadsButNotUnits) {
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  ASSERT_EQ(Admit(limit, "k", 4), 4);
  PendingBatches::Calls first = pending_.Take(1, table_->TakeCounters(true), now());
  pending_.Keep(std::move(first.calls[0]));
  // A round with nothing new still resends what is pending.
  PendingBatches::Calls second = pending_.Take(2, {}, now());
  ASSERT_EQ(second.calls.size(), 1u);
  EXPECT_EQ(second.calls[0].batches.size(), 2u);
  EXPECT_TRUE(second.calls[0].batches[1].items.empty());
  pending_.Keep(std::move(second.calls[0]));
  // Two windows later the 4 units belong to no window that matters: dropped, and counted.
  clock_.AdvanceMicros(20 * kSecond);
  PendingBatches::Calls third = pending_.Take(3, {}, now());
  EXPECT_TRUE(third.calls.empty());
  EXPECT_EQ(third.dropped_units, 4);
  EXPECT_TRUE(pending_.empty());
}

TEST_F(SyncRoundTest, BeyondTheBoundTheOldestBatchIsGivenUp) {
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 1'000'000);
  table_->SetInstances(1);
  for (size_t round = 1; round <= PendingBatches::kMaxPerCall + 1; ++round) {
    ASSERT_EQ(Admit(limit, "k", 1), 1);
    PendingBatches::Calls calls =
        pending_.Take(static_cast<int64_t>(round), table_->TakeCounters(true), now());
    ASSERT_EQ(calls.calls.size(), 1u);
    if (round <= PendingBatches::kMaxPerCall) {
      EXPECT_TRUE(calls.given_up.empty());
      pending_.Keep(std::move(calls.calls[0]));
      continue;
    }
    ASSERT_EQ(calls.given_up.size(), 1u);
    EXPECT_EQ(calls.given_up[0].sequence, 1);
    EXPECT_EQ(calls.dropped_units, 1);
    EXPECT_EQ(calls.calls[0].batches.size(), PendingBatches::kMaxPerCall);
  }
}

// A sync sent just before a sliding window's boundary is answered after it: its grant is
// what the others hold for this instance now, less what it admitted since the round took it.
TEST_F(SyncRoundTest, ALateReplyReplacesACarriedSlidingGrant) {
  const Limit limit = SyncWindow("slide", Algorithm::kSlidingWindow, 100);
  clock_.AdvanceMicros(10 * kSecond - 300'000);
  ASSERT_EQ(Admit(limit, "k", 10), 10);
  clock_.AdvanceMicros(100'000);
  RoundAnswered({{0, -1}, {10, 30}});  // previous window's counter, then this one's
  PendingBatches::Calls late = pending_.Take(++sequence_, table_->TakeCounters(true), now());
  ASSERT_EQ(late.calls.size(), 1u);
  clock_.AdvanceMicros(200'000);       // the boundary passes before the reply comes
  ASSERT_EQ(Admit(limit, "k", 4), 4);  // from the carried grant (30)
  std::vector<CounterReply> replies = {{0, -1}, {10, 12}};
  table_->Apply(late.calls[0].batches.back().items, &replies);
  // 12 granted at the sync, 4 admitted since: 8 more.
  EXPECT_EQ(Admit(limit, "k", 20), 8);
}

// shares: demand: a fixed window's reply sets aside a first share of the next window, which
// the entry spends there before its first sync of it; a reply that comes after the boundary
// replaces the one it started with.
TEST_F(SyncRoundTest, ADemandReplySetsAsideTheNextWindowsFirstShare) {
  Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  limit.shares = Shares::kDemand;
  EXPECT_EQ(Admit(limit, "k", 10), 5);  // the floor: 100 / (10 * 2)
  clock_.AdvanceMicros(100'000);
  RoundAnswered({{5, 40, 90}});
  EXPECT_EQ(Admit(limit, "k", 50), 40);
  clock_.AdvanceMicros(10 * kSecond);  // the next window: 90 before its first sync
  EXPECT_EQ(Admit(limit, "k", 100), 90);
  // A round taken before the following boundary, answered after it.
  clock_.AdvanceMicros(10 * kSecond - 200'000 - 1);
  RoundAnswered({{40, -1}, {90, 0, 20}});  // the previous window's 40, then this one's
  EXPECT_EQ(Admit(limit, "k", 1), 0);      // nothing granted, but checked: not cold
  PendingBatches::Calls late = pending_.Take(++sequence_, table_->TakeCounters(true), now());
  ASSERT_EQ(late.calls.size(), 1u);
  clock_.AdvanceMicros(200'000);
  EXPECT_EQ(Admit(limit, "k", 5), 5);  // from the 20 set aside by the last reply
  std::vector<CounterReply> replies = {{90, 0, 12}};
  table_->Apply(late.calls[0].batches.back().items, &replies);
  EXPECT_EQ(Admit(limit, "k", 20), 7);  // 12 set aside now, 5 admitted
}

TEST_F(SyncRoundTest, OnAClusterEachSlotGetsItsOwnCall) {
  absl::StatusOr<std::unique_ptr<KeyTable>> table =
      KeyTable::Create({.clock = &clock_, .shards = 4, .group_by_slot = true});
  ASSERT_TRUE(table.ok());
  const Limit limit = SyncWindow("api", Algorithm::kFixedWindow, 100);
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_TRUE((*table)->Check({CheckItem{&limit, key, 1}}).ok());
  }
  PendingBatches::Calls calls = pending_.Take(1, (*table)->TakeCounters(true), now());
  ASSERT_EQ(calls.calls.size(), 3u);  // {a}, {b} and {c} hash to three slots
  for (const SlotCall& call : calls.calls) {
    ASSERT_EQ(call.batches.size(), 1u);
    ASSERT_EQ(call.batches[0].items.size(), 1u);
    EXPECT_EQ(call.slot, call.batches[0].items[0].slot);
    EXPECT_NE(call.slot, redis::kAnySlot);
    // Every key the call declares (its sequence key, its counters) is in its slot.
    const std::vector<std::string> command =
        ScriptCommand("EVALSHA", "sha", {.sequence_key = "tollgate:sync:id"}, call);
    int64_t keys = 0;
    ASSERT_TRUE(absl::SimpleAtoi(command[2], &keys));
    ASSERT_EQ(keys, 2);
    for (int64_t k = 0; k < keys; ++k) EXPECT_EQ(redis::KeySlot(command[3 + k]), call.slot);
  }
}

}  // namespace
}  // namespace tollgate::sync
