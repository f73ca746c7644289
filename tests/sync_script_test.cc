// Copyright tollgate authors. src/store/redis/lua/sync.lua against the share rule it mirrors
// (src/algorithm/share.h), on a real redis-server: one table of window states and syncs, each
// run through the script (as src/store/sync/round.cc encodes a call) and through SyncGrant,
// must give the same grant and total.
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
};

std::string Describe(const Row& row) {
  std::string out =
      absl::StrCat(row.sliding ? "sliding" : "fixed", " limit ", row.limit, " N ", row.instances,
                   " elapsed ", row.elapsed_micros, "/", row.window_micros, " counted ",
                   row.counted, " previous ", row.previous, " delta ", row.delta, " grants {");
  for (const auto& [id, grant] : row.grants) absl::StrAppend(&out, id, ":", grant, " ");
  absl::StrAppend(&out, "} carried {");
  for (const auto& [id, grant] : row.carried) absl::StrAppend(&out, id, ":", grant, " ");
  return out + "}";
}

// The grant by the share module, with the script's accounting of what the others hold.
int64_t ExpectedGrant(const Row& row) {
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
  return algorithm::SyncGrant(
      {.limit = row.limit,
       .used = used,
       .held_by_others = held,
       .others_without_grant = std::max<int64_t>(0, row.instances - 1 - seen),
       .instances = row.instances,
       .weights = algorithm::EqualWeights(row.instances)});
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
    const int64_t expected = ExpectedGrant(row);
    EXPECT_EQ(mine.grant, expected) << Describe(row);
    // What Redis now holds for this instance is the grant it was told.
    absl::StatusOr<RedisReply> held = client_->Command({"HGET", counter + ":grants", kMe});
    ASSERT_TRUE(held.ok());
    int64_t stored = -1;
    EXPECT_TRUE(absl::SimpleAtoi(held->str, &stored));
    EXPECT_EQ(stored, mine.grant);
    if (row.sliding) {
      EXPECT_EQ(parsed->counters.front().grant, -1);  // the previous window's counter: none
    }
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
    const std::vector<std::string> ids = {kMe, "b", "c", "d", "e"};
    for (int64_t j = 0; j < row.instances && j < 5; ++j) {
      if (random() % 2 == 0)
        row.grants[ids[j]] = static_cast<int64_t>(random() % (row.limit / 3 + 1));
      if (row.sliding && random() % 3 == 0) {
        row.carried[ids[j]] = static_cast<int64_t>(random() % (row.limit / 3 + 1));
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
