// Copyright tollgate authors.
#include "src/store/redis/durability.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::redis {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

Limit Otp(FailureMode failure, std::optional<bool> durable = std::nullopt) {
  Limit limit;
  limit.name = "otp";
  limit.numbers = {.algorithm = Algorithm::kFixedWindow, .limit = 3, .window_micros = 600'000'000};
  limit.on_store_failure = failure;
  limit.durable = durable;
  return limit;
}

PrimaryReplication Primary(std::string address, int64_t replicas, int64_t min_replicas_to_write,
                           int64_t validity_factor = -1) {
  PrimaryReplication primary;
  primary.address = std::move(address);
  primary.online_replicas = replicas;
  primary.min_replicas_to_write = min_replicas_to_write;
  primary.cluster_replica_validity_factor = validity_factor;
  return primary;
}

TEST(DurabilityTest, OnlineReplicasCountsOnlyOnlineOnes) {
  EXPECT_EQ(OnlineReplicas("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"), 0);
  EXPECT_EQ(OnlineReplicas("role:master\r\nconnected_slaves:2\r\n"
                           "slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n"
                           "slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n"),
            1);
  EXPECT_EQ(OnlineReplicas("garbage"), -1);
}

TEST(DurabilityTest, DefaultIsOnForFailClosedWhereAFailoverCanPromoteAReplica) {
  const std::vector<PrimaryReplication> replicated = {Primary("a:1", 1, 1)};
  EXPECT_TRUE(AssessReplication(Topology::kSentinel, replicated).durable_by_default);
  EXPECT_TRUE(AssessReplication(Topology::kCluster, replicated).durable_by_default);
  // One Redis: nothing promotes a replica by itself.
  EXPECT_FALSE(AssessReplication(Topology::kStandalone, replicated).durable_by_default);

  EXPECT_TRUE(IsDurable(Otp(FailureMode::kFailClosed), true));
  EXPECT_FALSE(IsDurable(Otp(FailureMode::kFailOpen), true));
  EXPECT_FALSE(IsDurable(Otp(FailureMode::kFailClosed), false));
  EXPECT_FALSE(IsDurable(Otp(FailureMode::kFailClosed, false), true));
  EXPECT_TRUE(IsDurable(Otp(FailureMode::kFailOpen, true), false));
}

TEST(DurabilityTest, APrimaryWithoutReplicaTurnsTheDefaultOffAndRefusesDurableTrue) {
  const DurabilityAssessment assessment =
      AssessReplication(Topology::kCluster, {Primary("a:1", 1, 1), Primary("b:2", 0, 0)});
  EXPECT_FALSE(assessment.durable_by_default);
  EXPECT_THAT(assessment.without_replica, ElementsAre("b:2"));
  ASSERT_EQ(assessment.warnings.size(), 1u);
  EXPECT_THAT(assessment.warnings[0], HasSubstr("Redis primary b:2 has no connected replica"));

  EXPECT_TRUE(CheckDurableLimits({Otp(FailureMode::kFailClosed)}, assessment).ok());
  const absl::Status refused = CheckDurableLimits({Otp(FailureMode::kFailOpen, true)}, assessment);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("limit 'otp' says durable: true (answered once a replica holds the "
                        "count), but Redis primary b:2 reported no connected replica"));
}

TEST(DurabilityTest, WarnsWhereAFailoverLosesWithoutABound) {
  const DurabilityAssessment bounded =
      AssessReplication(Topology::kSentinel, {Primary("a:1", 1, 1)});
  EXPECT_THAT(bounded.warnings, IsEmpty());
  const DurabilityAssessment unbounded =
      AssessReplication(Topology::kCluster, {Primary("a:1", 1, 0, 0)});
  ASSERT_EQ(unbounded.warnings.size(), 2u);
  EXPECT_THAT(unbounded.warnings[0], HasSubstr("min-replicas-to-write 0"));
  EXPECT_THAT(unbounded.warnings[1], HasSubstr("cluster-replica-validity-factor 0"));
  // One Redis without replicas: nothing fails over, nothing to say.
  EXPECT_THAT(AssessReplication(Topology::kStandalone, {Primary("a:1", 0, 0)}).warnings, IsEmpty());
}

TEST(DurabilityTest, ACallIsDurableWhenAnyItemIsAndHasItsItemsSmallestTimeout) {
  Limit durable = Otp(FailureMode::kFailClosed, true);
  durable.timeout_micros = 200'000;
  Limit plain = Otp(FailureMode::kFailOpen);
  plain.timeout_micros = 50'000;
  EXPECT_EQ(DurableTimeoutMicros({{&plain, "k"}}, true), 0);
  EXPECT_EQ(DurableTimeoutMicros({{&durable, "k"}}, false), 200'000);
  EXPECT_EQ(DurableTimeoutMicros({{&durable, "k"}, {&plain, "k"}}, false), 50'000);
  // A peek writes nothing.
  EXPECT_EQ(DurableTimeoutMicros({{&durable, "k", 0}}, false), 0);
  CheckItem release{&durable, "k", 0};
  release.op = ItemOp::kRelease;
  EXPECT_EQ(DurableTimeoutMicros({release}, false), 200'000);
}

TEST(DurabilityTest, AReplyThatAllowsNothingWroteNothing) {
  RedisReply reply;
  reply.type = RedisReply::Type::kString;
  reply.str = std::string(8, '\0') + std::string(1, '\x02') + std::string(24, '\0');  // refused
  EXPECT_FALSE(ScriptReplyWrote(reply));
  reply.str += std::string(1, '\x01') + std::string(24, '\0');  // and one allowed
  EXPECT_TRUE(ScriptReplyWrote(reply));
  reply.str = "unexpected";
  EXPECT_TRUE(ScriptReplyWrote(reply));
}

}  // namespace
}  // namespace tollgate::redis
