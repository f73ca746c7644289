// Copyright tollgate authors. RedisStore behind Redis Sentinel: a primary, a replica and a
// sentinel (quorum 1) on loopback ports (tests/support/redis_cluster.h).
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/redis_stores.h"
#include "tollgate/limiter.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::RedisSentinelSet;
using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

TEST(RedisSentinelTest, FollowsTheNewPrimaryAfterFailover) {
  absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set = RedisSentinelSet::Start("limits");
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> redis =
      testing::ConnectRedisStore({.url = (*set)->url(), .refresh_interval_ms = 200});
  ASSERT_TRUE(redis.ok()) << redis.status();
  ResilienceOptions resilience;
  resilience.breaker.open_duration_ms = 100;
  absl::StatusOr<std::unique_ptr<ResilientStore>> resilient =
      ResilientStore::Create(std::shared_ptr<Store>(*std::move(redis)), resilience);
  ASSERT_TRUE(resilient.ok()) << resilient.status();
  Store& store = **resilient;

  Limit limit = TokenBucket("otp", 5, 0.001);
  limit.on_store_failure = FailureMode::kFailClosed;
  limit.timeout_micros = 200'000;  // generous: the machine is loaded
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, "user:1"}});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE((*d)[0].allowed);
    EXPECT_EQ((*d)[0].source, DecisionSource::kRedis);
  }
  const int old_primary = (*set)->port(0);
  ASSERT_EQ(*(*set)->PrimaryPort(), old_primary);
  ASSERT_TRUE((*set)->WaitReplicaKnown(std::chrono::seconds(30)).ok());
  // Let the replica have both writes (a graceful failover waits for it anyway).
  ASSERT_TRUE(RedisCommand(old_primary, {"WAIT", "1", "5000"}).ok());

  absl::StatusOr<redis::RedisReply> failover =
      RedisCommand((*set)->sentinel_port(), {"SENTINEL", "FAILOVER", "limits"});
  ASSERT_TRUE(failover.ok()) << failover.status();
  ASSERT_FALSE(failover->is_error()) << failover->str;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<int> primary = (*set)->PrimaryPort();
    if (primary.ok() && *primary != old_primary) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(*(*set)->PrimaryPort(), (*set)->port(1)) << "the sentinel did not fail over";
  // Sentinel names the new primary before it has turned the old one into a replica; until
  // then the old one still takes writes, and what it takes is lost when it resyncs (Redis'
  // asynchronous failover, docs/redis.md#redis-sentinel). Wait until it is a replica.
  bool demoted = false;
  while (!demoted && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<redis::RedisReply> role = RedisCommand(old_primary, {"ROLE"});
    demoted = role.ok() && !role->elements.empty() && role->elements[0].str == "slave";
    if (!demoted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(demoted) << "the old primary was not demoted";

  // Checks continue (the failure policy answers if the store is caught mid-switch), and
  // are soon exact on the new primary: 3 of the bucket's 5 are left, not one more.
  int admitted = 0;
  int fallback = 0;
  int exact = 0;
  while (std::chrono::steady_clock::now() < deadline && exact < 8) {
    absl::StatusOr<std::vector<Decision>> d = store.Apply({{&limit, "user:1"}});
    ASSERT_TRUE(d.ok()) << d.status();
    if ((*d)[0].source == DecisionSource::kFallback) {
      ++fallback;
      EXPECT_FALSE((*d)[0].allowed);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    ++exact;
    admitted += (*d)[0].allowed ? 1 : 0;
  }
  EXPECT_EQ(exact, 8) << "no exact decisions after the failover (" << fallback << " fallback)";
  EXPECT_EQ(admitted, 3);
  // The state lives on the new primary.
  absl::StatusOr<redis::RedisReply> exists =
      RedisCommand((*set)->port(1), {"EXISTS", "tollgate:otp:{user:1}"});
  ASSERT_TRUE(exists.ok()) << exists.status();
  EXPECT_EQ(exists->integer, 1);
}

// Metered work through Sentinel's primary: a lease, a charge into debt, a reservation settled,
// all as on one Redis (the same scripts on the primary Sentinel names).
TEST(RedisSentinelTest, LeasesChargesAndReservationsOnThePrimary) {
  absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set = RedisSentinelSet::Start("limits");
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> redis =
      testing::ConnectRedisStore({.url = (*set)->url()});
  ASSERT_TRUE(redis.ok()) << redis.status();
  Limit slots = Window("slots", Algorithm::kConcurrency, 1, 60'000'000);
  Limit tokens = TokenBucket("tokens", 100, 0.001);
  for (Limit* limit : {&slots, &tokens}) limit->timeout_micros = 2'000'000;
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(
      {.limits = {slots, tokens}, .store = std::shared_ptr<Store>(*std::move(redis))});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  {
    absl::StatusOr<Lease> lease = (*limiter)->Acquire("slots", "t");
    ASSERT_TRUE(lease.ok()) << lease.status();
    EXPECT_TRUE(lease->held());
    EXPECT_EQ(lease->decision().source, DecisionSource::kRedis);
    absl::StatusOr<Lease> second = (*limiter)->Acquire("slots", "t");
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_FALSE(second->held());
    ASSERT_TRUE(lease->Renew().ok());
  }  // released here
  absl::StatusOr<Lease> after = (*limiter)->Acquire("slots", "t");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_TRUE(after->held());

  absl::StatusOr<Reservation> reservation = (*limiter)->Reserve("tokens", "t", 80);
  ASSERT_TRUE(reservation.ok()) << reservation.status();
  ASSERT_FALSE(reservation->token.empty());
  absl::StatusOr<Decision> settled = (*limiter)->Settle(reservation->token, 30);
  ASSERT_TRUE(settled.ok()) << settled.status();
  EXPECT_EQ(settled->remaining, 70);
  absl::StatusOr<Decision> charged = (*limiter)->Charge("tokens", "t", 90);
  ASSERT_TRUE(charged.ok()) << charged.status();
  EXPECT_EQ(charged->debt, 20);
}

TEST(RedisSentinelTest, UnknownMasterNameIsAnError) {
  absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set = RedisSentinelSet::Start("limits");
  ASSERT_TRUE(set.ok()) << set.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> redis = testing::ConnectRedisStore(
      {.url = "redis-sentinel://127.0.0.1:" + std::to_string((*set)->sentinel_port()) + "/nope"});
  ASSERT_FALSE(redis.ok());
  EXPECT_NE(std::string(redis.status().message()).find("\"nope\""), std::string::npos)
      << redis.status();
}

}  // namespace
}  // namespace tollgate
