// Copyright tollgate authors. src/store/redis/lua/sync.lua against the share rule it mirrors
// (src/algorithm/share.h), on a real redis-server: one table of window states and syncs, each
// run through the script (as src/store/sync/round.cc encodes a call) and through the share
// module (SyncGrant with EqualWeights or DemandWeights, NextFirstShare), must give the same
// total, grant and next first share, under both `shares:` policies.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/algorithm/fixed_window.h"
#include "src/algorithm/share.h"
#include "src/algorithm/sliding_window.h"
#include "src/store/redis/client.h"
#include "src/store/redis/lua_scripts.h"
#include "src/store/sync/round.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_test.h"

namespace tollgate {
namespace {

using redis::RedisReply;

constexpr char kMe[] = "me";
// Report::window_offset of a report that sets nothing aside.
constexpr int64_t kNoFirstShare = -100;

// One instance's field in <base>:demand before the sync.
struct Report {
  int64_t demand = 0;
  int64_t age_micros = 0;  // reported this long before the sync
  // Its first share is of window index + window_offset (kNoFirstShare: of none).
  int64_t window_offset = kNoFirstShare;
  int64_t first_share = 0;
};

// One sync of instance "me" for one key, and what Redis holds before it.
struct Row {
  bool sliding = false;
  int64_t limit = 100;
  int64_t instances = 1;
  int64_t window_micros = 10'000'000;
  int64_t elapsed_micros = 0;  // into the current window, when the script runs
  int64_t counted = 0;         // the current window's counter
  int64_t previous = 0;        // the previous window's counter (sliding)
  int64_t delta = 0;           // this instance's units, counted by this sync
  // <counter>:grants (this instance's own field, if any, is released by the sync).
  std::map<std::string, int64_t> grants = {};
  // <previous counter>:grants: what instances not yet synced in this window carry over.
  std::map<std::string, int64_t> carried = {};
  Shares shares = Shares::kEqual;
  int64_t demand = 0;  // this instance's report
  int64_t interval_micros = 1'000'000;
  std::map<std::string, Report> reports = {};
  bool next_started = false;  // another instance has synced the next window
};

// What the script should answer and leave, by the share module.
struct Expected {
  int64_t grant = -1;
  int64_t next_first_share = -1;
};

std::string Describe(const Row& row) {
  std::string out =
      absl::StrCat(row.sliding ? "sliding" : "fixed", " limit ", row.limit, " N ", row.instances,
                   " elapsed ", row.elapsed_micros, "/", row.window_micros, " counted ",
                   row.counted, " previous ", row.previous, " delta ", row.delta, " grants {");
  for (const auto& [id, grant] : row.grants) absl::StrAppend(&out, id, ":", grant, " ");
  absl::StrAppend(&out, "} carried {");
  for (const auto& [id, grant] : row.carried) absl::StrAppend(&out, id, ":", grant, " ");
  absl::StrAppend(&out, "} shares ", std::string(SharesName(row.shares)), " demand ", row.demand,
                  " interval ", row.interval_micros);
  absl::StrAppend(&out, " next started ", row.next_started ? 1 : 0, " reports {");
  for (const auto& [id, r] : row.reports) {
    absl::StrAppend(&out, id, ":", r.demand, "@-", r.age_micros, "/w", r.window_offset, "=",
                    r.first_share, " ");
  }
  return out + "}";
}

// The grant and next first share by the share module, with the script's accounting of what
// the others hold and which reports are fresh.
Expected ExpectedShares(const Row& row) {
  double used = static_cast<double>(row.counted + row.delta);
  if (row.sliding) {
    used = algorithm::SlidingWindowEstimate(row.previous, row.counted + row.delta,
                                            row.elapsed_micros, {row.limit, row.window_micros});
  }
  int64_t held = 0;
  int64_t seen = 0;
  for (const auto& [id, grant] : row.grants) {
    if (id == kMe) continue;
    held += grant;
    ++seen;
  }
  if (row.sliding) {
    for (const auto& [id, grant] : row.carried) {
      if (id == kMe || row.grants.contains(id)) continue;
      held += grant;
      ++seen;
    }
  }
  algorithm::ShareWeights weights = algorithm::EqualWeights(row.instances);
  algorithm::NextFirstShareInput next{
      .limit = row.limit, .instances = row.instances, .weights = {}};
  if (row.shares == Shares::kDemand) {
    std::vector<int64_t> fresh;
    for (const auto& [id, report] : row.reports) {
      if (id == kMe) {
        if (report.window_offset == 1) next.own_first_share = report.first_share;
        continue;
      }
      if (report.age_micros <= algorithm::kDemandHorizonIntervals * row.interval_micros) {
        fresh.push_back(report.demand);
      }
      if (report.window_offset == 0 && !row.grants.contains(id)) {
        held += report.first_share;
        ++seen;
      } else if (report.window_offset == 1) {
        next.others_first_shares += report.first_share;
        ++next.others_with_first_share;
      }
    }
    weights = algorithm::DemandWeights(row.demand, fresh, row.instances);
  }
  Expected out;
  out.grant =
      algorithm::SyncGrant({.limit = row.limit,
                            .used = used,
                            .held_by_others = held,
                            .others_without_grant = std::max<int64_t>(0, row.instances - 1 - seen),
                            .instances = row.instances,
                            .shares = row.shares,
                            .weights = weights});
  if (row.shares == Shares::kDemand && !row.sliding) {
    next.weights = weights;
    next.next_window_started = row.next_started;
    out.next_first_share = algorithm::NextFirstShare(next);
  }
  return out;
}

class SyncScriptTest : public testing::RedisTest {
 protected:
  void Redis(const std::vector<std::string>& args) {
    absl::StatusOr<RedisReply> reply = client_->Command(args);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_FALSE(reply->is_error()) << reply->str;
  }

  // Sets Redis up as `row` says, runs one sync of "me" through sync.lua, and compares.
  void Check(const Row& row, int case_number) {
    const std::string base = absl::StrCat("tollgate:t", case_number, ":{k}");
    const int64_t now = 1'700'000'000'000'000 + static_cast<int64_t>(case_number) * 7'919;
    const int64_t index = algorithm::WindowIndex(now, row.window_micros);
    const int64_t at = index * row.window_micros + row.elapsed_micros;
    const std::string counter = absl::StrCat(base, ":", index);
    const std::string previous = absl::StrCat(base, ":", index - 1);
    if (row.counted > 0) Redis({"SET", counter, absl::StrCat(row.counted)});
    if (row.previous > 0) Redis({"SET", previous, absl::StrCat(row.previous)});
    for (const auto& [id, grant] : row.grants) {
      Redis({"HSET", counter + ":grants", id, absl::StrCat(grant)});
    }
    for (const auto& [id, grant] : row.carried) {
      Redis({"HSET", previous + ":grants", id, absl::StrCat(grant)});
    }
    const std::string reports = base + ":demand";
    for (const auto& [id, r] : row.reports) {
      const int64_t window = r.window_offset == kNoFirstShare ? 0 : index + r.window_offset;
      Redis({"HSET", reports, id,
             absl::StrCat(r.demand, " ", at - r.age_micros, " ", window, " ", r.first_share)});
    }
    if (row.next_started) {
      Redis({"HSET", absl::StrCat(base, ":", index + 1, ":grants"), "b", "1"});
    }

    sync::Batch batch;
    batch.sequence = 1;
    if (row.sliding) {
      sync::CounterItem& item = batch.items.emplace_back();
      item.counter_key = previous;
      item.window_index = index - 1;
      item.window_micros = row.window_micros;
      item.ttl_ms = 60'000;
    }
    sync::CounterItem& item = batch.items.emplace_back();
    item.counter_key = counter;
    item.window_index = index;
    item.window_micros = row.window_micros;
    item.delta = row.delta;
    item.ttl_ms = 60'000;
    item.limit = row.limit;
    item.sliding = row.sliding;
    item.demand = row.demand;
    item.shares = row.shares;
    item.sync_interval_micros = row.interval_micros;
    const sync::SlotCall call{.slot = -1, .batches = {batch}};
    const sync::CallContext context{.sequence_key = absl::StrCat("tollgate:sync:", case_number),
                                    .instance_id = kMe,
                                    .instances = row.instances,
                                    .weigh_at_micros = at};
    absl::StatusOr<RedisReply> reply =
        client_->Command(sync::ScriptCommand("EVAL", redis::kLuaSync, context, call));
    ASSERT_TRUE(reply.ok()) << reply.status();
    absl::StatusOr<sync::SlotReply> parsed = sync::ParseReply(*reply, call);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << " " << Describe(row);
    EXPECT_EQ(parsed->now_micros, at);
    const sync::CounterReply& mine = parsed->counters.back();
    EXPECT_EQ(mine.total, row.counted + row.delta) << Describe(row);
    const Expected expected = ExpectedShares(row);
    EXPECT_EQ(mine.grant, expected.grant) << Describe(row);
    EXPECT_EQ(mine.next_first_share, expected.next_first_share) << Describe(row);
    // What Redis now holds for this instance is the grant it was told.
    absl::StatusOr<RedisReply> held = client_->Command({"HGET", counter + ":grants", kMe});
    ASSERT_TRUE(held.ok());
    int64_t stored = -1;
    EXPECT_TRUE(absl::SimpleAtoi(held->str, &stored));
    EXPECT_EQ(stored, mine.grant);
    if (row.sliding) {
      EXPECT_EQ(parsed->counters.front().grant, -1);  // the previous window's counter: none
    }
    // Demand: this instance's report, and only stale reports of no current first share gone.
    absl::StatusOr<RedisReply> report = client_->Command({"HGET", reports, kMe});
    ASSERT_TRUE(report.ok());
    if (row.shares == Shares::kEqual) {
      EXPECT_EQ(report->type, RedisReply::Type::kNil) << Describe(row);
      return;
    }
    EXPECT_EQ(report->str, absl::StrCat(row.demand, " ", at, " ", row.sliding ? 0 : index + 1, " ",
                                        std::max<int64_t>(0, expected.next_first_share)))
        << Describe(row);
    for (const auto& [id, r] : row.reports) {
      if (id == kMe) continue;
      const bool stale = r.age_micros > algorithm::kDemandHorizonIntervals * row.interval_micros;
      const bool kept = !stale || (r.window_offset != kNoFirstShare && r.window_offset >= 0);
      absl::StatusOr<RedisReply> exists = client_->Command({"HEXISTS", reports, id});
      ASSERT_TRUE(exists.ok());
      EXPECT_EQ(exists->integer, kept ? 1 : 0) << id << " " << Describe(row);
    }
    absl::StatusOr<RedisReply> ttl = client_->Command({"PTTL", reports});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0);
  }
};

TEST_F(SyncScriptTest, GrantTableMatchesTheShareModule) {
  std::vector<Row> rows = {
      // One instance gets what is left.
      {.limit = 100, .instances = 1, .delta = 10},
      // Half of what neither the counter nor the other's grant holds.
      {.limit = 100, .instances = 2, .counted = 40, .delta = 10, .grants = {{"b", 20}}},
      // Three silent instances may each be spending their first share of 25.
      {.limit = 100, .instances = 4, .delta = 10},
      // This instance's old grant is released, not held against it.
      {.limit = 100, .instances = 3, .counted = 30, .grants = {{kMe, 40}, {"b", 10}}},
      // Nothing left: 0, never negative.
      {.limit = 10, .instances = 3, .counted = 9, .grants = {{"b", 1}, {"c", 1}}},
      {.limit = 100, .instances = 2, .counted = 120, .delta = 3},
      // Sliding: the previous window weighs by what the window still overlaps.
      {.sliding = true,
       .limit = 100,
       .instances = 2,
       .elapsed_micros = 5'000'000,
       .counted = 10,
       .previous = 80,
       .delta = 5},
      {.sliding = true,
       .limit = 100,
       .instances = 2,
       .elapsed_micros = 2'500'000,
       .previous = 40,
       .delta = 1,
       .carried = {{"b", 10}}},
      // A carried grant counts once, even if that instance synced this window too.
      {.sliding = true,
       .limit = 1000,
       .instances = 3,
       .elapsed_micros = 9'000'000,
       .counted = 100,
       .previous = 500,
       .grants = {{"b", 30}},
       .carried = {{"b", 50}, {"c", 7}}},
      // Weights that leave a hair under a whole number.
      {.sliding = true,
       .limit = 100,
       .instances = 3,
       .window_micros = 3'000'000,
       .elapsed_micros = 1'000'000,
       .previous = 33,
       .delta = 1},
      {.sliding = true,
       .limit = 7,
       .instances = 1,
       .window_micros = 3,
       .elapsed_micros = 1,
       .counted = 1,
       .previous = 3},
      {.sliding = true, .limit = 100, .instances = 2, .counted = 5, .previous = 90},
      // Large limits.
      {.limit = 1'000'000'000'000,
       .instances = 7,
       .counted = 123'456'789,
       .delta = 99,
       .grants = {{"b", 1'000'000}}},
      // Demand: a key pinned to this one of 4 instances holds back 3 floors of 25, and sets
      // aside 925 for the next window.
      {.limit = 1000, .instances = 4, .delta = 25, .shares = Shares::kDemand, .demand = 400},
      {.sliding = true,
       .limit = 1000,
       .instances = 4,
       .elapsed_micros = 5'000'000,
       .previous = 900,
       .delta = 10,
       .carried = {{kMe, 50}},
       .shares = Shares::kDemand,
       .demand = 400},
      // Even demand: a quarter of what is left; first shares set aside for this window held.
      {.limit = 1000,
       .instances = 4,
       .counted = 300,
       .delta = 50,
       .grants = {{"b", 40}},
       .shares = Shares::kDemand,
       .demand = 100,
       .reports = {{"b", {.demand = 100, .window_offset = 1, .first_share = 250}},
                   {"c", {.demand = 100, .window_offset = 0, .first_share = 250}},
                   {"d", {.demand = 100, .age_micros = 500'000}}}},
      // A stale report weighs the floor (and goes, unless its first share is still current);
      // no demand anywhere: equal weights.
      {.limit = 1000,
       .instances = 3,
       .shares = Shares::kDemand,
       .reports =
           {{"b", {.demand = 500, .age_micros = 3'000'001}},
            {"c",
             {.demand = 500, .age_micros = 9'000'000, .window_offset = 1, .first_share = 100}}}},
      {.limit = 1000, .instances = 3, .shares = Shares::kDemand, .demand = 0},
      // The next window started already: never more than set aside before.
      {.limit = 1000,
       .instances = 2,
       .shares = Shares::kDemand,
       .demand = 10,
       .reports = {{kMe, {.demand = 10, .window_offset = 1, .first_share = 300}}},
       .next_started = true},
  };
  std::mt19937_64 random(26);
  for (int i = 0; i < 300; ++i) {
    Row row;
    row.sliding = random() % 2 == 0;
    row.limit = static_cast<int64_t>(random() % 2000) + 1;
    row.instances = static_cast<int64_t>(random() % 9) + 1;
    row.window_micros = std::vector<int64_t>{3, 1000, 1'000'000, 60'000'000}[random() % 4];
    row.elapsed_micros = static_cast<int64_t>(random() % row.window_micros);
    row.counted = static_cast<int64_t>(random() % (row.limit + 10));
    row.previous = row.sliding ? static_cast<int64_t>(random() % (row.limit + 10)) : 0;
    row.delta = static_cast<int64_t>(random() % 20);
    row.shares = random() % 3 == 0 ? Shares::kEqual : Shares::kDemand;
    row.demand = random() % 4 == 0 ? 0 : static_cast<int64_t>(random() % 300);
    row.interval_micros = std::vector<int64_t>{10'000, 100'000, 1'000'000}[random() % 3];
    row.next_started = random() % 4 == 0;
    const std::vector<std::string> ids = {kMe, "b", "c", "d", "e"};
    for (int64_t j = 0; j < row.instances && j < 5; ++j) {
      if (random() % 2 == 0)
        row.grants[ids[j]] = static_cast<int64_t>(random() % (row.limit / 3 + 1));
      if (row.sliding && random() % 3 == 0) {
        row.carried[ids[j]] = static_cast<int64_t>(random() % (row.limit / 3 + 1));
      }
      if (row.shares == Shares::kDemand && random() % 3 != 0) {
        Report& report = row.reports[ids[j]];
        report.demand = static_cast<int64_t>(random() % 300);
        report.age_micros = static_cast<int64_t>(random() % (5 * row.interval_micros));
        if (!row.sliding && random() % 2 == 0) {
          report.window_offset = static_cast<int64_t>(random() % 3) - 1;
          report.first_share = static_cast<int64_t>(random() % (row.limit / 3 + 1));
        }
      }
    }
    rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("row ", i));
    Check(rows[i], static_cast<int>(i));
  }
}

}  // namespace
}  // namespace tollgate
