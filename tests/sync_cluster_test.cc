// Copyright tollgate authors. SyncStore (`mode: sync`) on a real Redis Cluster of 3 primaries
// and behind Redis Sentinel (tests/support/redis_cluster.h), against one redis-server, and
// `tollgate serve` with a sync limit on those URLs.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/store/redis/slot.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"
#include "tests/support/sync_stores.h"
#include "tollgate/clock.h"
#include "tollgate/sync_store.h"

namespace tollgate {
namespace {

using ::tollgate::testing::RedisCluster;
using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::RedisSentinelSet;
using ::tollgate::testing::RedisServer;
using ::tollgate::testing::SimulatedSyncStore;

constexpr int64_t kSecond = 1'000'000;
constexpr int64_t kStart = 1'700'000'000LL * kSecond;  // a window start
constexpr int kKeys = 12;

// A `mode: sync` window limit (tests/support/limits.h's Window) synced every 100 ms.
Limit SyncLimit(std::string name, Algorithm algorithm, int64_t max, int64_t window_micros) {
  Limit limit = ::tollgate::testing::Window(std::move(name), algorithm, max, window_micros);
  limit.mode = Mode::kSync;
  limit.sync_interval_micros = 100'000;
  return limit;
}

std::string Key(int i) { return absl::StrCat("user:", i); }

// Two instances checking a fixed and a sliding window over kKeys keys for 30 s of simulated
// time, unevenly, each syncing on its own rhythm: every decision in order ('1' admitted).
std::string Decisions(const std::string& url) {
  SimulatedClock clock(kStart);
  std::unique_ptr<SyncStore> a = SimulatedSyncStore(url, &clock, 2);
  std::unique_ptr<SyncStore> b = SimulatedSyncStore(url, &clock, 2);
  if (a == nullptr || b == nullptr) return "";
  const Limit fixed = SyncLimit("fixed", Algorithm::kFixedWindow, 40, 10 * kSecond);
  const Limit sliding = SyncLimit("sliding", Algorithm::kSlidingWindow, 40, 10 * kSecond);
  std::string out;
  auto check = [&](SyncStore& store, const Limit& limit, int key) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, Key(key), 1}});
    EXPECT_TRUE(d.ok()) << d.status();
    out += d.ok() && (*d)[0].allowed ? '1' : '0';
  };
  for (int step = 0; step < 30; ++step) {
    for (int key = 0; key < kKeys; ++key) {
      for (int i = 0; i <= (step + key) % 4; ++i) {
        check(*a, fixed, key);
        check(*a, sliding, key);
      }
      check(*b, fixed, key);
      check(*b, sliding, key);
    }
    if (step % 2 == 0) {
      EXPECT_TRUE(a->SyncNow().ok());
    }
    if (step % 3 == 0) {
      EXPECT_TRUE(b->SyncNow().ok());
    }
    clock.AdvanceMicros(kSecond);
  }
  return out;
}

// calls= of `command` in INFO commandstats of the node on `port`.
int64_t CommandCalls(int port, const std::string& command) {
  absl::StatusOr<redis::RedisReply> info = RedisCommand(port, {"INFO", "commandstats"});
  EXPECT_TRUE(info.ok()) << info.status();
  if (!info.ok()) return -1;
  for (absl::string_view line : absl::StrSplit(info->str, '\n')) {
    const std::string prefix = absl::StrCat("cmdstat_", command, ":calls=");
    if (!absl::StartsWith(line, prefix)) continue;
    line.remove_prefix(prefix.size());
    int64_t calls = 0;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(0, line.find(',')), &calls)) << line;
    return calls;
  }
  return 0;
}

class SyncClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisCluster>> cluster =
        RedisCluster::Start(3, /*replicas_per_primary=*/0);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  std::vector<int> PrimaryPorts() const {
    absl::StatusOr<std::vector<RedisCluster::Node>> nodes = cluster_->Nodes();
    EXPECT_TRUE(nodes.ok()) << nodes.status();
    std::vector<int> ports;
    if (nodes.ok()) {
      for (const RedisCluster::Node& node : *nodes) {
        if (node.primary) ports.push_back(node.port);
      }
    }
    return ports;
  }

  // The primary serving each key's slot (every limit of a key shares the slot of `{key}`).
  std::map<int, int> SlotOwners() const {
    std::map<int, int> owners;
    for (int key = 0; key < kKeys; ++key) {
      const int slot = redis::KeySlot(absl::StrCat("{", Key(key), "}"));
      absl::StatusOr<int> owner = cluster_->SlotOwner(slot);
      EXPECT_TRUE(owner.ok()) << owner.status();
      owners[slot] = owner.ok() ? *owner : 0;
    }
    return owners;
  }

  std::unique_ptr<RedisCluster> cluster_;
};

TEST_F(SyncClusterTest, DecidesAsOnOneRedis) {
  std::set<int> primaries_used;
  for (const auto& [slot, owner] : SlotOwners()) primaries_used.insert(owner);
  ASSERT_EQ(primaries_used.size(), 3U);  // the keys' calls go to every primary

  absl::StatusOr<std::unique_ptr<RedisServer>> one = RedisServer::Start();
  ASSERT_TRUE(one.ok()) << one.status();
  const std::string on_one = Decisions((*one)->url());
  const std::string on_cluster = Decisions(cluster_->url());
  ASSERT_FALSE(on_one.empty());
  const int64_t admitted = std::count(on_one.begin(), on_one.end(), '1');
  EXPECT_GT(admitted, 0);
  EXPECT_LT(admitted, static_cast<int64_t>(on_one.size()));  // the limits refused some
  EXPECT_EQ(std::count(on_cluster.begin(), on_cluster.end(), '1'), admitted);
  EXPECT_EQ(on_cluster, on_one);
}

TEST_F(SyncClusterTest, SendsOneScriptCallPerSlotPerRound) {
  SimulatedClock clock(kStart);
  std::unique_ptr<SyncStore> store = SimulatedSyncStore(cluster_->url(), &clock, 1);
  ASSERT_NE(store, nullptr);
  const Limit fixed = SyncLimit("fixed", Algorithm::kFixedWindow, 1000, 60 * kSecond);
  const Limit sliding = SyncLimit("sliding", Algorithm::kSlidingWindow, 1000, 60 * kSecond);
  auto check_all = [&] {
    for (int key = 0; key < kKeys; ++key) {
      absl::StatusOr<std::vector<Decision>> d =
          store->Apply({{&fixed, Key(key), 1}, {&sliding, Key(key), 1}});
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_TRUE((*d)[0].allowed && (*d)[1].allowed);
    }
  };
  // A first round loads the script on the primaries that lack it (NOSCRIPT, then EVAL).
  check_all();
  ASSERT_TRUE(store->SyncNow().ok());
  const std::vector<int> primaries = PrimaryPorts();
  ASSERT_EQ(primaries.size(), 3U);
  for (int port : primaries) ASSERT_TRUE(RedisCommand(port, {"CONFIG", "RESETSTAT"}).ok());

  constexpr int kRounds = 5;
  const int64_t commands_before = store->stats().redis_commands;
  for (int round = 0; round < kRounds; ++round) {
    check_all();
    ASSERT_TRUE(store->SyncNow().ok());
  }
  const std::map<int, int> owners = SlotOwners();
  std::map<int, int64_t> slots_on;
  for (const auto& [slot, owner] : owners) ++slots_on[owner];
  for (int port : primaries) {
    EXPECT_EQ(CommandCalls(port, "evalsha"), kRounds * slots_on[port]) << port;
    EXPECT_EQ(CommandCalls(port, "eval"), 0) << port;
  }
  EXPECT_EQ(store->stats().redis_commands - commands_before,
            kRounds * static_cast<int64_t>(owners.size()));
  // Every unit reached its counter, on the node of its slot.
  const int64_t index = kStart / (60 * kSecond);
  absl::StatusOr<redis::RedisReply> count =
      RedisCommand(owners.at(redis::KeySlot("{user:0}")),
                   {"GET", absl::StrCat("tollgate:fixed:{user:0}:", index)});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->str, absl::StrCat(kRounds + 1));
}

// `tollgate serve` with a sync limit on `url` starts and answers from the sync store.
void ServeAnswersFromSync(const std::string& url) {
  std::unique_ptr<::tollgate::testing::ServeProcess> serve =
      ::tollgate::testing::ServeProcess::Start(
          "limits:\n  partner_hot_key: {algorithm: fixed_window, limit: 3, window: 1m, mode: sync, "
          "sync_interval: 100ms}\n",
          {"--redis", url});
  ASSERT_NE(serve, nullptr) << url;
  ::tollgate::testing::HttpTestClient client(serve->port());
  for (int i = 0; i < 4; ++i) {
    std::optional<::tollgate::testing::HttpTestResponse> response =
        client.Check(R"({"limit":"partner_hot_key","key":"partner:1"})");
    ASSERT_TRUE(response.has_value()) << url;
    const nlohmann::json json = nlohmann::json::parse(response->body(), nullptr, false);
    EXPECT_EQ(json["source"], "sync") << response->body();
    // One instance: its first share is the whole limit.
    EXPECT_EQ(json["allowed"], i < 3) << response->body();
  }
  EXPECT_EQ(serve->Stop(), 0) << serve->log();
}

TEST_F(SyncClusterTest, ServeWithASyncLimitStartsAndAnswers) {
  ServeAnswersFromSync(cluster_->url());
}

// Sentinel names one primary: the store's one call per round goes there.
TEST(SyncSentinelTest, CountsOnThePrimaryAndServeAnswers) {
  absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set = RedisSentinelSet::Start("limits");
  ASSERT_TRUE(set.ok()) << set.status();
  SimulatedClock clock(kStart);
  std::unique_ptr<SyncStore> store = SimulatedSyncStore((*set)->url(), &clock, 1);
  ASSERT_NE(store, nullptr);
  const Limit limit = SyncLimit("fixed", Algorithm::kFixedWindow, 5, 60 * kSecond);
  int admitted = 0;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<std::vector<Decision>> d = store->Apply({{&limit, "user:1", 1}});
    ASSERT_TRUE(d.ok()) << d.status();
    admitted += (*d)[0].allowed ? 1 : 0;
  }
  EXPECT_EQ(admitted, 5);
  ASSERT_TRUE(store->SyncNow().ok());
  absl::StatusOr<int> primary = (*set)->PrimaryPort();
  ASSERT_TRUE(primary.ok()) << primary.status();
  absl::StatusOr<redis::RedisReply> count = RedisCommand(
      *primary, {"GET", absl::StrCat("tollgate:fixed:{user:1}:", kStart / (60 * kSecond))});
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(count->str, "5");
  ServeAnswersFromSync((*set)->url());
}

}  // namespace
}  // namespace tollgate
