// A test fixture whose Redis is a primary, a replica and a sentinel, the replica's
// replication link to the primary through a FaultProxy (RedisSentinelSet::
// StartWithProxiedReplication): each test starts with the replica known and linked.
#pragma once

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/support/redis_cluster.h"

namespace tollgate::testing {

class ProxiedReplicationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set =
        RedisSentinelSet::StartWithProxiedReplication();
    ASSERT_TRUE(set.ok()) << set.status();
    set_ = *std::move(set);
    ASSERT_TRUE(set_->WaitReplicaKnown(std::chrono::seconds(30)).ok());
  }

  // The replica's link to the first primary: a partition or a lag on demand.
  FaultProxy& link() const { return *set_->replication_link(); }

  std::unique_ptr<RedisSentinelSet> set_;
};

}  // namespace tollgate::testing
