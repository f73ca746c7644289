// Copyright tollgate authors. The production stack in one call (tollgate/fleet.h) on a real
// redis-server: what `tollgate serve --redis`, the demo and examples/embed run.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_test.h"
#include "tollgate/fleet.h"

namespace tollgate {
namespace {

using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

constexpr int64_t kMinute = 60'000'000;

std::vector<Limit> Limits() {
  Limit hot = Window("partner", Algorithm::kFixedWindow, 1000, kMinute);
  hot.mode = Mode::kSync;
  hot.sync_interval_micros = 100'000;
  return {TokenBucket("api", 10, 1), hot};
}

class FleetTest : public testing::RedisTest {
 protected:
  std::unique_ptr<Fleet> Connect(std::string group, int64_t instances = 0) {
    absl::StatusOr<std::unique_ptr<Fleet>> fleet =
        Fleet::Connect({.limits = Limits(),
                        .redis = {.url = server_->url()},
                        .key_prefix = "fleet:",
                        .instance_group = std::move(group),
                        .instances = instances,
                        .heartbeat_interval_ms = 50,
                        .demand_period_ms = 500});
    EXPECT_TRUE(fleet.ok()) << fleet.status();
    return fleet.ok() ? *std::move(fleet) : nullptr;
  }

  int64_t Redis(const std::vector<std::string>& command) {
    absl::StatusOr<redis::RedisReply> reply = client_->Command(command);
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? reply->integer : -1;
  }

  // N as `fleet` learns it, once it says `want` (or after 10 s).
  static int64_t WaitForCount(const Fleet& fleet, int64_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (fleet.InstanceCount() != want && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return fleet.InstanceCount();
  }
};

TEST_F(FleetTest, ExactLimitsInRedisSyncLimitsInTheSyncStore) {
  std::unique_ptr<Fleet> fleet = Connect("a");
  ASSERT_NE(fleet, nullptr);
  EXPECT_TRUE(fleet->shared());
  EXPECT_TRUE(fleet->StoreReachable());
  EXPECT_EQ(fleet->memory_store(), nullptr);
  ASSERT_NE(fleet->resilient_store(), nullptr);
  ASSERT_NE(fleet->sync_store(), nullptr);
  ASSERT_NE(fleet->fallback_shares(), nullptr);
  EXPECT_FALSE(fleet->instance_id().empty());

  absl::StatusOr<Decision> exact = fleet->limiter().Check("api", "u");
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->source, DecisionSource::kRedis);
  EXPECT_EQ(Redis({"EXISTS", "fleet:api:{u}"}), 1);  // the key prefix
  absl::StatusOr<Decision> hot = fleet->limiter().Check("partner", "p");
  ASSERT_TRUE(hot.ok()) << hot.status();
  EXPECT_EQ(hot->source, DecisionSource::kSync);
  EXPECT_EQ(fleet->resilient_store()->stats().store_decisions, 1);
}

// N counts the instances of one group, on one key prefix.
TEST_F(FleetTest, InstancesOfOneGroupCountEachOther) {
  std::unique_ptr<Fleet> first = Connect("a");
  std::unique_ptr<Fleet> second = Connect("a");
  std::unique_ptr<Fleet> other = Connect("b");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(WaitForCount(*first, 2), 2);
  EXPECT_EQ(WaitForCount(*other, 1), 1);
  EXPECT_EQ(Redis({"ZCARD", "fleet:instances:a"}), 2);

  // A fixed N joins no group and takes no shares by demand.
  std::unique_ptr<Fleet> fixed = Connect("a", 3);
  ASSERT_NE(fixed, nullptr);
  EXPECT_EQ(fixed->InstanceCount(), 3);
  EXPECT_EQ(fixed->fallback_shares(), nullptr);
  EXPECT_EQ(Redis({"ZCARD", "fleet:instances:a"}), 2);
}

// The shutdown order: the last sync round sends this instance's deltas, and the registry
// leaves the set, before the connections close.
TEST_F(FleetTest, ShutdownSendsTheLastDeltasAndLeavesTheRegistry) {
  std::unique_ptr<Fleet> fleet = Connect("a");
  ASSERT_NE(fleet, nullptr);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(fleet->limiter().Check("partner", "p")->allowed);
  EXPECT_EQ(Redis({"ZCARD", "fleet:instances:a"}), 1);
  fleet.reset();
  EXPECT_EQ(Redis({"ZCARD", "fleet:instances:a"}), 0);
  absl::StatusOr<redis::RedisReply> keys = client_->Command({"KEYS", "fleet:partner:{p}:*"});
  ASSERT_TRUE(keys.ok()) << keys.status();
  int64_t counted = 0;
  for (const redis::RedisReply& key : keys->elements) {
    if (key.str.find(":grants") != std::string::npos) continue;
    absl::StatusOr<redis::RedisReply> value = client_->Command({"GET", key.str});
    if (value.ok() && value->type == redis::RedisReply::Type::kString) {
      counted += std::stoll(value->str);
    }
  }
  EXPECT_EQ(counted, 7);
}

}  // namespace
}  // namespace tollgate
