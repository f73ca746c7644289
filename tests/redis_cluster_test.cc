// Copyright tollgate authors. RedisStore on a real Redis Cluster: 3 primaries and 3
// replicas of redis-server on loopback ports (tests/support/redis_cluster.h).
#include "tests/support/redis_cluster.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/store/redis/redis_store_impl.h"
#include "src/store/redis/slot.h"
#include "tests/support/limits.h"
#include "tests/support/redis_stores.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using ::tollgate::testing::RedisCluster;
using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::WaitClearOfWindowEdge;
using ::tollgate::testing::Window;

constexpr int64_t kTenMinutesMicros = 600'000'000;

class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisCluster>> cluster = RedisCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  std::unique_ptr<RedisStore> NewStore() {
    absl::StatusOr<std::unique_ptr<RedisStore>> store =
        testing::ConnectRedisStore({.url = cluster_->url(), .refresh_interval_ms = 200});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  int Slot(const Limit& limit, const std::string& key) {
    return redis::ItemSlot("tollgate:", CheckItem{&limit, key});
  }

  // Port of the primary that serves the state key of (limit, key) now.
  int Owner(const Limit& limit, const std::string& key) {
    absl::StatusOr<int> port = cluster_->SlotOwner(Slot(limit, key));
    EXPECT_TRUE(port.ok()) << port.status();
    return port.ok() ? *port : 0;
  }

  // A key (key<i>) whose state for `limit` lives on the primary at `port`.
  std::string KeyOn(const Limit& limit, int port, const std::string& prefix = "key") {
    for (int i = 0; i < 10'000; ++i) {
      std::string key = absl::StrCat(prefix, i);
      if (Owner(limit, key) == port) return key;
    }
    ADD_FAILURE() << "no key found on " << port;
    return "";
  }

  std::vector<int> PrimaryPorts() {
    absl::StatusOr<std::vector<RedisCluster::Node>> nodes = cluster_->Nodes();
    EXPECT_TRUE(nodes.ok()) << nodes.status();
    std::vector<int> ports;
    if (nodes.ok()) {
      for (const auto& node : *nodes) {
        if (node.primary) ports.push_back(node.port);
      }
    }
    return ports;
  }

  std::unique_ptr<RedisCluster> cluster_;
};

// The seed's concurrent burst, on keys spread over every primary: each key admits exactly
// its capacity, and its state lives on the primary that owns its slot.
TEST_F(RedisClusterTest, ConcurrentBurstIsExactOnEveryPrimary) {
  std::unique_ptr<RedisStore> store = NewStore();
  ASSERT_NE(store, nullptr);
  const Limit bucket = TokenBucket("burst", 10, 0.001);
  constexpr int kKeys = 24;
  std::vector<std::string> keys;
  std::set<int> owners;
  for (int i = 0; i < kKeys; ++i) {
    keys.push_back(absl::StrCat("user:", i));
    owners.insert(Owner(bucket, keys.back()));
  }
  ASSERT_EQ(owners.size(), 3u) << "the keys must cover every primary";

  std::vector<std::atomic<int>> admitted(kKeys);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 4; ++round) {
        for (int k = 0; k < kKeys; ++k) {
          const int key = (k + t) % kKeys;
          absl::StatusOr<std::vector<Decision>> d = store->Apply({{&bucket, keys[key]}});
          if (!d.ok()) {
            ++errors;
            continue;
          }
          admitted[key] += (*d)[0].allowed ? 1 : 0;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  for (int k = 0; k < kKeys; ++k) {
    EXPECT_EQ(admitted[k].load(), 10) << keys[k] << " offered 32";
    absl::StatusOr<redis::RedisReply> exists = RedisCommand(
        Owner(bucket, keys[k]), {"EXISTS", absl::StrCat("tollgate:burst:{", keys[k], "}")});
    ASSERT_TRUE(exists.ok()) << exists.status();
    EXPECT_EQ(exists->integer, 1) << keys[k] << " is not on its slot's primary";
  }
}

// Limits on one entity key share a slot and are checked in one script call: all or nothing
// as on one Redis.
TEST_F(RedisClusterTest, LimitsOfOneKeyShareASlotAndOneCall) {
  std::unique_ptr<RedisStore> store = NewStore();
  ASSERT_NE(store, nullptr);
  const Limit bucket = TokenBucket("api", 5, 0.001);
  const Limit window = Window("otp", Algorithm::kFixedWindow, 1, kTenMinutesMicros);
  ASSERT_EQ(Slot(bucket, "user:7"), Slot(window, "user:7"));
  absl::StatusOr<std::vector<Decision>> first =
      store->Apply({{&bucket, "user:7"}, {&window, "user:7"}});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE((*first)[0].allowed && (*first)[1].allowed);
  absl::StatusOr<std::vector<Decision>> second =
      store->Apply({{&bucket, "user:7"}, {&window, "user:7"}});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FALSE((*second)[1].allowed);
  absl::StatusOr<std::vector<Decision>> peek = store->Apply({{&bucket, "user:7", 0}});
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ((*peek)[0].remaining, 4) << "the refused call consumed the bucket";
}

// Items on different primaries: a refusal on one node consumes nothing on the others, for
// token buckets and windows alike.
TEST_F(RedisClusterTest, MultiSlotRefusalConsumesNothingElsewhere) {
  std::unique_ptr<RedisStore> store = NewStore();
  ASSERT_NE(store, nullptr);
  const std::vector<int> primaries = PrimaryPorts();
  ASSERT_EQ(primaries.size(), 3u);
  const Limit bucket = TokenBucket("api", 5, 0.001);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 5, kTenMinutesMicros);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 5, kTenMinutesMicros);
  const Limit strict = Window("otp", Algorithm::kFixedWindow, 1, kTenMinutesMicros);
  const std::string bucket_key = KeyOn(bucket, primaries[0], "a");
  const std::string fixed_key = KeyOn(fixed, primaries[1], "b");
  const std::string sliding_key = KeyOn(sliding, primaries[0], "c");
  const std::string strict_key = KeyOn(strict, primaries[2], "d");

  auto check = [&]() {
    return store->Apply({{&bucket, bucket_key},
                         {&fixed, fixed_key},
                         {&sliding, sliding_key},
                         {&strict, strict_key}});
  };
  absl::StatusOr<std::vector<Decision>> first = check();
  ASSERT_TRUE(first.ok()) << first.status();
  for (const Decision& d : *first) EXPECT_TRUE(d.allowed);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<std::vector<Decision>> refused = check();
    ASSERT_TRUE(refused.ok()) << refused.status();
    EXPECT_TRUE((*refused)[0].allowed) << "alone it would pass";
    EXPECT_FALSE((*refused)[3].allowed);
  }
  absl::StatusOr<std::vector<Decision>> peek =
      store->Apply({{&bucket, bucket_key, 0}, {&fixed, fixed_key, 0}, {&sliding, sliding_key, 0}});
  ASSERT_TRUE(peek.ok()) << peek.status();
  EXPECT_EQ((*peek)[0].remaining, 4);
  EXPECT_EQ((*peek)[1].remaining, 4);
  EXPECT_EQ((*peek)[2].remaining, 4);
}

// Slots move between primaries (SETSLOT MIGRATING/IMPORTING, MIGRATE in small batches,
// SETSLOT NODE) while 6 threads check keys in those slots: no error reaches a caller, and
// no key admits more than its limit. Token buckets follow ASK; windows wait for the slot.
TEST_F(RedisClusterTest, ReshardingWhileCheckingNeverErrsNorOverAdmits) {
  std::unique_ptr<RedisStore> store = NewStore();
  ASSERT_NE(store, nullptr);
  const std::vector<int> primaries = PrimaryPorts();
  ASSERT_EQ(primaries.size(), 3u);
  const Limit bucket = TokenBucket("bucket", 20, 0.001);
  const Limit fixed = Window("fixed", Algorithm::kFixedWindow, 20, kTenMinutesMicros);
  const Limit sliding = Window("sliding", Algorithm::kSlidingWindow, 20, kTenMinutesMicros);
  const Limit* limits[] = {&bucket, &fixed, &sliding};
  // Every window's count is asserted exact over the whole run, moves included.
  WaitClearOfWindowEdge(kTenMinutesMicros, 60'000'000);
  // Keys on the first primary; their slots move to the second.
  std::vector<std::string> keys;
  std::set<int> slots;
  for (int i = 0; keys.size() < 12; ++i) {
    std::string key = absl::StrCat("m", i);
    if (Owner(bucket, key) != primaries[0]) continue;
    keys.push_back(key);
    slots.insert(Slot(bucket, key));
  }
  // Some state in every slot first, so MIGRATE has keys to move.
  for (const std::string& key : keys) {
    for (const Limit* limit : limits) ASSERT_TRUE(store->Apply({{limit, key}}).ok());
  }
  std::map<std::pair<int, int>, std::atomic<int>> admitted;
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int l = 0; l < 3; ++l) admitted[{static_cast<int>(k), l}] = 1;  // the first check
  }
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  std::atomic<int64_t> checks{0};
  std::string first_error;
  std::mutex error_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      int i = t;
      while (!stop.load()) {
        const int k = i % static_cast<int>(keys.size());
        const int l = (i / 7) % 3;
        ++i;
        absl::StatusOr<std::vector<Decision>> d = store->Apply({{limits[l], keys[k]}});
        ++checks;
        if (!d.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          if (errors++ == 0) first_error = d.status().ToString();
          continue;
        }
        if ((*d)[0].allowed) ++admitted.at({k, l});
      }
    });
  }
  for (int slot : slots) {
    absl::Status moved =
        cluster_->MoveSlot(slot, primaries[0], primaries[1], 1, std::chrono::milliseconds(20));
    ASSERT_TRUE(moved.ok()) << moved;
  }
  // Keep checking a little after the last move.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0) << first_error;
  EXPECT_GT(checks.load(), 100);
  auto count = [&](size_t k, int l) { return admitted.at({static_cast<int>(k), l}).load(); };
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(Owner(bucket, keys[k]), primaries[1]);
    for (int l = 0; l < 3; ++l) {
      EXPECT_LE(count(k, l), 20) << keys[k] << " limit " << l;
    }
  }
  // Exact after the move: each key admits what is left of its 20 and not one more.
  for (size_t k = 0; k < keys.size(); ++k) {
    for (int l = 0; l < 3; ++l) {
      int more = 0;
      for (int i = 0; i < 25; ++i) {
        absl::StatusOr<std::vector<Decision>> d = store->Apply({{limits[l], keys[k]}});
        ASSERT_TRUE(d.ok()) << d.status();
        more += (*d)[0].allowed ? 1 : 0;
      }
      EXPECT_EQ(count(k, l) + more, 20) << keys[k] << " limit " << l;
    }
  }
}

// A primary is killed: checks of its slots follow the limit's failure policy (fail_closed:
// refused with kStoreUnavailable, never an error, never waiting past the deadline) until
// its replica is promoted, then are exact again.
TEST_F(RedisClusterTest, KilledPrimaryFailsOverThenExactAgain) {
  std::unique_ptr<RedisStore> redis = NewStore();
  ASSERT_NE(redis, nullptr);
  ResilienceOptions resilience;
  resilience.breaker.open_duration_ms = 100;
  absl::StatusOr<std::unique_ptr<ResilientStore>> resilient =
      ResilientStore::Create(std::shared_ptr<Store>(std::move(redis)), resilience);
  ASSERT_TRUE(resilient.ok()) << resilient.status();
  Store& store = **resilient;

  const std::vector<int> primaries = PrimaryPorts();
  ASSERT_EQ(primaries.size(), 3u);
  Limit limit = TokenBucket("otp", 3, 0.001);
  limit.on_store_failure = FailureMode::kFailClosed;
  limit.timeout_micros = 200'000;  // generous: the machine is loaded
  // Not durable (a fail_closed limit on a cluster is by default): the promoted replica has no
  // replica of its own to confirm writes (tests/durable_cluster_test.cc shows durable ones).
  limit.durable = false;
  const std::string key = KeyOn(limit, primaries[0], "victim");
  absl::StatusOr<std::vector<Decision>> before = store.Apply({{&limit, key}});
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ((*before)[0].source, DecisionSource::kRedis);

  cluster_->Kill(primaries[0]);
  int fallback = 0;
  bool back = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, key, 0}});
    ASSERT_TRUE(d.ok()) << d.status();
    if ((*d)[0].source == DecisionSource::kFallback) {
      ++fallback;
      EXPECT_FALSE((*d)[0].allowed) << "fail_closed admitted during the outage";
      EXPECT_EQ((*d)[0].reason, DenyReason::kStoreUnavailable);
    } else if (fallback > 0) {
      back = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GT(fallback, 0) << "the outage was never seen";
  ASSERT_TRUE(back) << "no exact decision within 30 s of the kill";
  // The replica had the bucket (replicated before the kill, usually); either way the key
  // now admits at most its capacity, and exactly what is left of it.
  int admitted = 0;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, key}});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ((*d)[0].source, DecisionSource::kRedis);
    admitted += (*d)[0].allowed ? 1 : 0;
  }
  EXPECT_GE(admitted, 2);
  EXPECT_LE(admitted, 3);
  // A fresh key on the promoted primary: exactly its capacity.
  const std::string fresh = absl::StrCat(key, ":fresh");
  int fresh_admitted = 0;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, fresh}});
    ASSERT_TRUE(d.ok()) << d.status();
    fresh_admitted += (*d)[0].allowed && (*d)[0].source == DecisionSource::kRedis ? 1 : 0;
  }
  EXPECT_EQ(fresh_admitted, 3);
}

// The instance registry's one key routes by slot: two registries on the cluster count 2.
TEST_F(RedisClusterTest, InstanceRegistryCountsOnACluster) {
  InstanceRegistryOptions options;
  options.heartbeat_interval_ms = 100;
  options.instance_ttl_ms = 5000;
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> first =
      testing::ConnectRegistry({.url = cluster_->url()}, options);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> second =
      testing::ConnectRegistry({.url = cluster_->url()}, options);
  ASSERT_TRUE(second.ok()) << second.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((*first)->Count() != 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ((*first)->Count(), 2);
}

}  // namespace
}  // namespace tollgate
