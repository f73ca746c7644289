// Copyright tollgate authors. Fleet without Redis: the limits in this process's memory
// (tests/fleet_redis_test.cc runs it on Redis).
#include "tollgate/fleet.h"

#include <memory>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;
using ::tollgate::testing::TokenBucket;

TEST(FleetTest, WithoutARedisUrlTheLimitsLiveInMemory) {
  SimulatedClock clock;
  absl::StatusOr<std::unique_ptr<Fleet>> fleet = Fleet::Connect(
      {.limits = {TokenBucket("api", 2, 1)}, .memory_max_keys = 10, .clock = &clock});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_FALSE((*fleet)->shared());
  EXPECT_TRUE((*fleet)->StoreReachable());
  EXPECT_EQ((*fleet)->InstanceCount(), 1);
  EXPECT_EQ((*fleet)->resilient_store(), nullptr);
  EXPECT_EQ((*fleet)->sync_store(), nullptr);
  EXPECT_EQ((*fleet)->fallback_shares(), nullptr);
  EXPECT_EQ((*fleet)->instance_id(), "");
  ASSERT_NE((*fleet)->memory_store(), nullptr);

  Limiter& limiter = (*fleet)->limiter();
  EXPECT_EQ(limiter.Check("api", "u")->source, DecisionSource::kMemory);
  EXPECT_TRUE(limiter.Check("api", "u")->allowed);
  EXPECT_FALSE(limiter.Check("api", "u")->allowed);
  EXPECT_EQ((*fleet)->memory_store()->Size(), 1);
  clock.AdvanceMillis(1000);
  EXPECT_TRUE(limiter.Check("api", "u")->allowed);
  EXPECT_EQ((*Fleet::Connect({.instances = 4}))->InstanceCount(), 4);  // a fixed N stays N
}

// A reload: another limiter on the same store, where the counters of an unchanged limit
// carry on.
TEST(FleetTest, NewLimitersShareTheStores) {
  SimulatedClock clock;
  absl::StatusOr<std::unique_ptr<Fleet>> fleet =
      Fleet::Connect({.limits = {TokenBucket("api", 2, 1)}, .clock = &clock});
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  ASSERT_TRUE((*fleet)->limiter().Check("api", "u", 2)->allowed);
  absl::StatusOr<std::unique_ptr<Limiter>> reloaded =
      (*fleet)->NewLimiter({TokenBucket("api", 2, 1), TokenBucket("new", 1, 1)});
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_FALSE((*reloaded)->Check("api", "u")->allowed);  // spent through the first one
  EXPECT_TRUE((*reloaded)->Check("new", "u")->allowed);
  EXPECT_EQ((*fleet)->NewLimiter({TokenBucket("bad", 0, 1)}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FleetTest, RefusesWhatCannotBeServed) {
  Limit sync_otp = TokenBucket("otp", 5, 1);
  sync_otp.mode = Mode::kSync;
  absl::StatusOr<std::unique_ptr<Fleet>> bad = Fleet::Connect({.limits = {sync_otp}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'otp'"));
  EXPECT_EQ(Fleet::Connect({.limits = {}, .redis = {.url = "http://127.0.0.1:1"}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Fleet::Connect({.memory_max_keys = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tollgate
