// Copyright tollgate authors. What a Redis failover loses: a primary, a replica whose
// replication link goes through a TCP proxy, one Sentinel, and two `tollgate serve` on the
// Sentinel URL, all real processes on loopback. Two OTPs are admitted and replicated; the
// proxy stops forwarding (a partition between primary and replica, or a replica that lags);
// a third OTP is admitted by the primary alone; the primary is SIGKILLed and the Sentinel
// promotes the replica, which never saw the third. Redis replication is asynchronous, so the
// same phone then gets a fourth OTP against a limit of three: the loss is real.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

using ::tollgate::testing::FaultProxy;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::RedisSentinelSet;
using ::tollgate::testing::ServeProcess;

constexpr char kConfig[] = R"(limits:
  otp_per_phone:
    algorithm: fixed_window
    limit: 3
    window: 10m
    on_store_failure: fail_closed
    timeout: 200ms
)";

constexpr char kPhone[] = R"({"limit":"otp_per_phone","key":"+919800000000"})";

// The HTTP status of one OTP request through `server`.
int Otp(const ServeProcess& server) {
  HttpTestClient client(server.port());
  std::optional<testing::HttpTestResponse> response = client.Check(kPhone);
  return response ? static_cast<int>(response->result_int()) : -1;
}

// Waits (bounded) until `condition` holds.
template <typename Condition>
bool Eventually(Condition condition, std::chrono::seconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return condition();
}

class FailoverLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<RedisSentinelSet>> set =
        RedisSentinelSet::StartWithProxiedReplication();
    ASSERT_TRUE(set.ok()) << set.status();
    set_ = *std::move(set);
    ASSERT_TRUE(set_->WaitReplicaKnown(std::chrono::seconds(30)).ok());
  }

  std::unique_ptr<ServeProcess> Serve(const std::string& config) {
    return ServeProcess::Start(config, {"--redis", set_->url()});
  }

  // The OTPs admitted across a partition of the replication link and a failover, through
  // two servers (each asked in turn).
  int AdmittedAcrossAFailover(const std::string& config) {
    std::unique_ptr<ServeProcess> a = Serve(config);
    std::unique_ptr<ServeProcess> b = Serve(config);
    EXPECT_TRUE(a != nullptr && b != nullptr);
    if (a == nullptr || b == nullptr) return -1;
    int admitted = 0;
    admitted += Otp(*a) == 200;
    admitted += Otp(*b) == 200;
    EXPECT_EQ(admitted, 2);
    // Both on the replica before the link is cut.
    absl::StatusOr<redis::RedisReply> replicated =
        RedisCommand(set_->port(0), {"WAIT", "1", "5000"});
    EXPECT_TRUE(replicated.ok() && replicated->integer == 1);

    set_->replication_link()->set_fault(FaultProxy::Fault::kBlackHole);
    admitted += Otp(*a) == 200;
    set_->KillPrimary();
    // The Sentinel promotes the replica (down after 1 s).
    EXPECT_TRUE(Eventually(
        [&] {
          absl::StatusOr<int> primary = set_->PrimaryPort();
          return primary.ok() && *primary == set_->port(1);
        },
        std::chrono::seconds(60)));
    // Until both servers follow the new primary, fail_closed answers 503 (nothing admitted);
    // then the replica's count decides.
    int after = 0;
    EXPECT_TRUE(Eventually(
        [&] {
          after = Otp(*b);
          return after == 200 || after == 429;
        },
        std::chrono::seconds(60)));
    admitted += after == 200;
    for (int i = 0; i < 3; ++i) admitted += Otp(*a) == 200;
    EXPECT_EQ(a->Stop(), 0);
    EXPECT_EQ(b->Stop(), 0);
    return admitted;
  }

  std::unique_ptr<RedisSentinelSet> set_;
};

TEST_F(FailoverLossTest, AnAdmissionTheReplicaNeverReceivedIsLostAtFailover) {
  // Four OTPs against a limit of three: the third, admitted while the link was cut, died with
  // the primary.
  EXPECT_EQ(AdmittedAcrossAFailover(kConfig), 4);
}

}  // namespace
}  // namespace tollgate
