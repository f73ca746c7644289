// Copyright tollgate authors.
//
// fail_open's demand-weighted shares (issue 26) on real parts: four instances (each a
// ResilientStore over a RedisStore and an InstanceRegistry sharing a FallbackShares, as
// `tollgate serve --redis` wires them) on one real redis-server. Traffic on two of the four
// while Redis answers; then Redis is killed and a burst on one key goes to the same instances.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/client.h"
#include "tests/support/redis_test.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

constexpr int kInstances = 4;
constexpr int64_t kCapacity = 200;

Limit Bucket(std::string name, Shares shares) {
  Limit limit;
  limit.name = std::move(name);
  limit.numbers.algorithm = Algorithm::kTokenBucket;
  limit.numbers.capacity = kCapacity;
  limit.numbers.refill_per_second = 0.001;  // no refill within the test
  limit.on_store_failure = FailureMode::kFailOpen;
  limit.shares = shares;
  limit.timeout_micros = 50'000;
  return limit;
}

// One instance: what `tollgate serve --redis` makes, with short periods.
struct Instance {
  std::shared_ptr<FallbackShares> shares = FallbackShares::Create();
  std::unique_ptr<InstanceRegistry> registry;
  std::unique_ptr<ResilientStore> store;
  absl::Mutex mu;
  std::string fallback_started ABSL_GUARDED_BY(mu);
};

class DemandFallbackTest : public testing::RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    for (int i = 0; i < kInstances; ++i) {
      auto instance = std::make_unique<Instance>();
      absl::StatusOr<std::shared_ptr<RedisConnections>> connections =
          RedisConnections::Connect({.url = server_->url(), .connections = 1});
      ASSERT_TRUE(connections.ok()) << connections.status();
      InstanceRegistryOptions registry_options;
      registry_options.redis = *connections;
      registry_options.instance_id = absl::StrCat("instance-", i);
      registry_options.heartbeat_interval_ms = 50;
      registry_options.probe_interval_ms = 50;
      registry_options.instance_ttl_ms = 1000;
      registry_options.fallback_shares = instance->shares;
      registry_options.demand_period_ms = 500;  // ten heartbeats, as the defaults
      auto registry = InstanceRegistry::Start(registry_options);
      ASSERT_TRUE(registry.ok()) << registry.status();
      instance->registry = std::move(*registry);

      auto redis = RedisStore::Create({.redis = *connections});
      ASSERT_TRUE(redis.ok()) << redis.status();
      ResilienceOptions options;
      InstanceRegistry* counted = instance->registry.get();
      options.instance_count = [counted] { return counted->Count(); };
      options.fallback_shares = instance->shares;
      Instance* raw = instance.get();
      options.on_event = [raw](const ResilienceEvent& event) {
        if (event.kind != ResilienceEvent::Kind::kFallbackStarted) return;
        absl::MutexLock lock(&raw->mu);
        raw->fallback_started = event.detail;
      };
      auto store = ResilientStore::Create(std::shared_ptr<Store>(std::move(*redis)), options);
      ASSERT_TRUE(store.ok()) << store.status();
      instance->store = std::move(*store);
      instances_.push_back(std::move(instance));
    }
  }

  // Whether `limit` is allowed for `key` through instance `i`.
  bool Allowed(int i, const Limit& limit, const std::string& key) {
    absl::StatusOr<std::vector<Decision>> decisions =
        instances_[i]->store->Apply({CheckItem{&limit, key, 1}});
    EXPECT_TRUE(decisions.ok()) << decisions.status();
    return decisions.ok() && (*decisions)[0].allowed;
  }

  // Sends `rounds` checks of `limit` on `key` to each of `on` in turn; returns those allowed.
  int64_t Burst(const Limit& limit, const std::vector<int>& on, const std::string& key,
                int rounds) {
    int64_t allowed = 0;
    for (int round = 0; round < rounds; ++round) {
      for (int i : on) allowed += Allowed(i, limit, key) ? 1 : 0;
    }
    return allowed;
  }

  std::vector<std::unique_ptr<Instance>> instances_;
  const Limit demand_ = Bucket("demand", Shares::kDemand);
  const Limit equal_ = Bucket("equal", Shares::kEqual);
  const Limit even_ = Bucket("even", Shares::kDemand);
};

TEST_F(DemandFallbackTest, AnOutageWithTrafficOnTwoOfFourInstancesAdmitsAboutTheLimit) {
  // Traffic while Redis answers: `demand` and `equal` on instances 0 and 1 only, `even` on
  // all four, until the busy instances have learned about half of `demand` each and every
  // instance about a quarter of `even` (over a few 500 ms periods; at most 20 s).
  const std::vector<int> busy = {0, 1};
  const std::vector<int> all = {0, 1, 2, 3};
  auto learned = [&] {
    for (const auto& instance : instances_) {
      if (instance->registry->Count() != kInstances) return false;
      if (instance->shares->Fraction("even", kInstances) < 0.2) return false;
    }
    return instances_[0]->shares->Fraction("demand", kInstances) > 0.4 &&
           instances_[1]->shares->Fraction("demand", kInstances) > 0.4;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!learned() && std::chrono::steady_clock::now() < deadline) {
    Burst(demand_, busy, "learning", 10);
    Burst(equal_, busy, "learning", 10);
    Burst(even_, all, "learning", 5);
  }
  ASSERT_TRUE(learned()) << "demand at 0: " << instances_[0]->shares->Fraction("demand", 4)
                         << ", even at 3: " << instances_[3]->shares->Fraction("even", 4);
  // The idle instances keep the floor of `demand`.
  EXPECT_LT(instances_[2]->shares->Fraction("demand", kInstances), 0.1);
  EXPECT_GE(instances_[2]->shares->Fraction("demand", kInstances), 1.0 / 40 - 1e-9);
  // Every key carries a TTL: the buckets, the set of instances and the periods' demand.
  absl::StatusOr<redis::RedisReply> keys = client_->Command({"KEYS", "*"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_GE(keys->elements.size(), 5u);
  for (const redis::RedisReply& key : keys->elements) {
    absl::StatusOr<redis::RedisReply> ttl = client_->Command({"PTTL", key.str});
    ASSERT_TRUE(ttl.ok());
    EXPECT_GT(ttl->integer, 0) << key.str;
  }

  server_->Kill();
  // The same two instances take a burst on one key: 2 x the limit each.
  const int64_t demand_admitted = Burst(demand_, busy, "burst", 2 * kCapacity);
  const int64_t equal_admitted = Burst(equal_, busy, "burst", 2 * kCapacity);
  // Traffic on all four: about the limit, never more than the bound (1.1 x).
  const int64_t even_admitted = Burst(even_, all, "burst", kCapacity);
  EXPECT_GE(demand_admitted, kCapacity * 80 / 100);
  EXPECT_LE(demand_admitted, kCapacity * 110 / 100);
  EXPECT_EQ(equal_admitted, kCapacity / 2);  // limit / N on each of the two
  EXPECT_GE(even_admitted, kCapacity * 80 / 100);
  EXPECT_LE(even_admitted, kCapacity * 110 / 100);
  RecordProperty("demand_admitted", static_cast<int>(demand_admitted));
  RecordProperty("equal_admitted", static_cast<int>(equal_admitted));
  RecordProperty("even_admitted", static_cast<int>(even_admitted));

  // The fallback-started event says the shares used.
  absl::MutexLock lock(&instances_[0]->mu);
  EXPECT_THAT(instances_[0]->fallback_started, HasSubstr("N=4"));
  EXPECT_THAT(instances_[0]->fallback_started, HasSubstr("demand 0."));
}

TEST_F(DemandFallbackTest, WithoutLearnedDemandAnInstanceTakesTheEqualShare) {
  // Redis goes before any demand was seen: every instance's share is limit / N.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (instances_[0]->registry->Count() != kInstances &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(instances_[0]->registry->Count(), kInstances);
  server_->Kill();
  EXPECT_EQ(Burst(demand_, {0}, "burst", kCapacity), kCapacity / kInstances);
}

}  // namespace
}  // namespace tollgate
