// Copyright tollgate authors. Durable limits on a Redis Cluster (docs/redis.md, "Durable
// limits"): three primaries with a replica each, real processes on loopback, and a Fleet on the
// cluster URL. The phone's slot lives on one primary; two OTPs of each limit are admitted and
// replicated; that primary's replica is cut off (its link killed, and the primary made to
// refuse it back: `ACL SETUSER default off` leaves connections already made alone); a third OTP
// is asked of each limit; the primary is SIGKILLed and the cluster promotes its replica, which
// never saw the third. The limit without durable admits a fourth OTP; the durable one, whose
// WAIT goes to the primary of its slot, refused the third (no replica confirmed it) and admits
// at most three over the run. The non-durable limit is decided by Redis throughout the cut.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/redis/client.h"
#include "src/store/redis/slot.h"
#include "tests/support/limits.h"
#include "tests/support/redis_cluster.h"
#include "tollgate/fleet.h"

namespace tollgate {
namespace {

using ::tollgate::testing::RedisCluster;
using ::tollgate::testing::RedisCommand;

constexpr char kPhone[] = "+919800000000";

Limit Otp(std::string name, std::optional<bool> durable) {
  Limit otp;
  otp.name = std::move(name);
  otp.numbers = {.algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 600'000'000};
  otp.on_store_failure = FailureMode::kFailClosed;
  otp.timeout_micros = 500'000;
  otp.durable = durable;
  return otp;
}

template <typename Condition>
bool Eventually(Condition condition, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return condition();
}

// Cuts the replication link of the primary on `port` for good: on one connection, the
// primary stops taking connections that have not authenticated (its replica's next attempt)
// and drops the replica's link.
absl::Status CutReplication(int port) {
  redis::ClientOptions options;
  options.connection.url.host = "127.0.0.1";
  options.connection.url.port = port;
  options.connections = 1;
  absl::StatusOr<std::unique_ptr<redis::RedisClient>> client = redis::RedisClient::Connect(options);
  if (!client.ok()) return client.status();
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"ACL", "SETUSER", "default", "off"},
        std::vector<std::string>{"CLIENT", "KILL", "TYPE", "replica"}}) {
    absl::StatusOr<redis::RedisReply> reply = (*client)->Command(command);
    if (!reply.ok()) return reply.status();
    if (reply->is_error()) return absl::InternalError(reply->str);
  }
  return absl::OkStatus();
}

TEST(DurableClusterTest, ADurableLimitLosesNoneOfItsAdmissionsAtAFailover) {
  // The OTPs are counted in one 10-minute window over the whole run, failover included.
  testing::WaitClearOfWindowEdge(600'000'000, 60'000'000);
  absl::StatusOr<std::unique_ptr<RedisCluster>> started = RedisCluster::Start(3, 1);
  ASSERT_TRUE(started.ok()) << started.status();
  RedisCluster& cluster = **started;

  FleetOptions options;
  // Left to the default: a fail_closed limit on a cluster whose every primary has a replica
  // is durable.
  options.limits = {Otp("otp", std::nullopt), Otp("otp_plain", false)};
  options.redis.url = cluster.url();
  options.instances = 1;
  absl::StatusOr<std::unique_ptr<Fleet>> fleet = Fleet::Connect(options);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  Limiter& limiter = (*fleet)->limiter();
  EXPECT_TRUE((*fleet)->redis_store()->Durable(options.limits[0]));
  EXPECT_FALSE((*fleet)->redis_store()->Durable(options.limits[1]));

  // Both limits' keys carry the phone as hash tag: one slot, one primary.
  const int slot = redis::KeySlot(absl::StrCat("{", kPhone, "}"));
  absl::StatusOr<int> primary = cluster.SlotOwner(slot);
  ASSERT_TRUE(primary.ok()) << primary.status();
  absl::StatusOr<std::vector<RedisCluster::Node>> nodes = cluster.Nodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  std::string primary_id;
  for (const RedisCluster::Node& node : *nodes) {
    if (node.port == *primary) primary_id = node.id;
  }
  int replica = 0;
  for (const RedisCluster::Node& node : *nodes) {
    if (node.primary_id == primary_id) replica = node.port;
  }
  ASSERT_NE(replica, 0);

  int admitted = 0;
  int admitted_plain = 0;
  auto ask = [&](const char* limit) {
    absl::StatusOr<Decision> decision = limiter.Check(limit, kPhone);
    EXPECT_TRUE(decision.ok()) << decision.status();
    return decision.ok() ? *decision : Decision{};
  };
  for (int i = 0; i < 2; ++i) {
    admitted += ask("otp").allowed;
    admitted_plain += ask("otp_plain").allowed;
  }
  ASSERT_EQ(admitted, 2);
  ASSERT_EQ(admitted_plain, 2);
  absl::StatusOr<redis::RedisReply> replicated = RedisCommand(*primary, {"WAIT", "1", "5000"});
  ASSERT_TRUE(replicated.ok() && replicated->integer == 1);
  EXPECT_GE((*fleet)->redis_store()->durable_waits().calls_confirmed, 2);

  ASSERT_TRUE(CutReplication(*primary).ok());
  const Decision third = ask("otp");
  admitted += third.allowed;
  // Written on the primary, confirmed by no replica: the fail_closed policy refuses it.
  EXPECT_FALSE(third.allowed);
  EXPECT_EQ(third.reason, DenyReason::kStoreUnavailable);
  const Decision third_plain = ask("otp_plain");
  admitted_plain += third_plain.allowed;
  // The limit that is not durable is decided by Redis, as usual.
  EXPECT_TRUE(third_plain.allowed);
  EXPECT_EQ(third_plain.source, DecisionSource::kRedis);

  cluster.Kill(*primary);
  ASSERT_TRUE(cluster.WaitHealthy(std::chrono::seconds(60), replica).ok());
  // Once the fleet follows the promoted replica, it decides: it never saw either third OTP.
  Decision after_plain;
  EXPECT_TRUE(Eventually(
      [&] {
        after_plain = ask("otp_plain");
        return after_plain.source == DecisionSource::kRedis;
      },
      std::chrono::seconds(60)));
  admitted_plain += after_plain.allowed;
  for (int i = 0; i < 3; ++i) {
    admitted += ask("otp").allowed;
    admitted_plain += ask("otp_plain").allowed;
  }
  EXPECT_EQ(admitted_plain, 4);  // the loss is real
  EXPECT_LE(admitted, 3);
  EXPECT_EQ(admitted, 2);  // the promoted replica has no replica to confirm more
}

}  // namespace
}  // namespace tollgate
