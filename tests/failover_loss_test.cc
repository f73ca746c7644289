// Copyright tollgate authors. What a Redis failover loses, and what durable limits keep: a
// primary, a replica whose replication link goes through a TCP proxy, one Sentinel, and two
// `tollgate serve` on the Sentinel URL, all real processes on loopback. Two OTPs are admitted
// and replicated; the proxy stops forwarding (a partition between primary and replica, or a
// replica that lags); a third OTP is asked for; the primary is SIGKILLed and the Sentinel
// promotes the replica. Redis replication is asynchronous: a non-durable limit's third OTP,
// admitted by the primary alone, dies with it, and the same phone then gets a fourth against a
// limit of three. A durable limit answers the third only once a replica holds it, which none
// does: its fail_closed policy refuses it (503), and it admits at most three over the run,
// while checks of a non-durable limit are still decided by Redis as the replica lags.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/limits.h"
#include "tests/support/proxied_replication.h"
#include "tests/support/redis_cluster.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

using ::tollgate::testing::FaultProxy;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::RedisCommand;
using ::tollgate::testing::ServeProcess;

// The OTP limit, `durable` as given, and a limit of API calls left to the default (a fail_open
// limit, so not durable).
std::string Config(bool durable) {
  return absl::StrCat(R"(limits:
  otp_per_phone:
    algorithm: fixed_window
    limit: 3
    window: 10m
    on_store_failure: fail_closed
    timeout: 200ms
    durable: )",
                      durable ? "true" : "false", R"(
  api_per_user:
    algorithm: token_bucket
    capacity: 1000
    refill_per_second: 100
    timeout: 200ms
)");
}

constexpr char kPhone[] = R"({"limit":"otp_per_phone","key":"+919800000000"})";
constexpr char kUser[] = R"({"limit":"api_per_user","key":"user:42"})";

// One check through `server`: its HTTP status (-1: no answer) and the decision's source.
struct Answer {
  int status = -1;
  std::string source;
};
Answer Check(const ServeProcess& server, const char* body) {
  HttpTestClient client(server.port());
  std::optional<testing::HttpTestResponse> response = client.Check(body);
  if (!response) return {};
  nlohmann::json json = nlohmann::json::parse(response->body(), nullptr, false);
  return {static_cast<int>(response->result_int()),
          json.is_object() && json.contains("source") ? json["source"].get<std::string>() : ""};
}

// The HTTP status of one OTP request through `server`.
int Otp(const ServeProcess& server) { return Check(server, kPhone).status; }

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

class FailoverLossTest : public ::tollgate::testing::ProxiedReplicationTest {
 protected:
  std::unique_ptr<ServeProcess> Serve(const std::string& config) {
    return ServeProcess::Start(config, {"--redis", set_->url()});
  }

  // The OTPs admitted across a partition of the replication link and a failover, through
  // two servers (each asked in turn), of a durable limit or not.
  int AdmittedAcrossAFailover(bool durable) {
    // The OTPs are counted in one 10-minute window over the whole run, failover included.
    testing::WaitClearOfWindowEdge(600'000'000, 60'000'000);
    const std::string config = Config(durable);
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

    link().set_fault(FaultProxy::Fault::kBlackHole);
    const int third = Otp(*a);
    admitted += third == 200;
    // A durable limit's third waits for a replica, which never confirms: its policy refuses.
    EXPECT_EQ(third, durable ? 503 : 200);
    // Meanwhile the other limit is decided by Redis as usual, on both servers, and the
    // servers stay ready.
    for (const ServeProcess* server : {a.get(), b.get(), a.get(), b.get()}) {
      const Answer api = Check(*server, kUser);
      EXPECT_EQ(api.status, 200);
      EXPECT_EQ(api.source, "redis");
      HttpTestClient client(server->port());
      std::optional<testing::HttpTestResponse> ready =
          client.Send(boost::beast::http::verb::get, "/readyz");
      EXPECT_TRUE(ready.has_value() && ready->result_int() == 200);
    }
    set_->KillPrimary();
    // The Sentinel promotes the replica (down after 1 s).
    EXPECT_TRUE(Eventually(
        [&] {
          absl::StatusOr<int> primary = set_->PrimaryPort();
          return primary.ok() && *primary == set_->port(1);
        },
        std::chrono::seconds(60)));
    // Until both servers follow the new primary, fail_closed answers 503 (nothing admitted);
    // then the replica's count decides: for a durable limit, with a WAIT that no replica can
    // confirm now (the promoted one has none), so its policy refuses still.
    for (const ServeProcess* server : {a.get(), b.get()}) {
      EXPECT_TRUE(Eventually([&] { return Check(*server, kUser).source == "redis"; },
                             std::chrono::seconds(60)));
    }
    int after = 0;
    EXPECT_TRUE(Eventually(
        [&] {
          after = Otp(*b);
          return after == 200 || after == 429 || durable;
        },
        std::chrono::seconds(60)));
    admitted += after == 200;
    for (int i = 0; i < 3; ++i) admitted += Otp(*a) == 200;
    EXPECT_EQ(a->Stop(), 0);
    EXPECT_EQ(b->Stop(), 0);
    return admitted;
  }
};

TEST_F(FailoverLossTest, AnAdmissionTheReplicaNeverReceivedIsLostAtFailover) {
  // Four OTPs against a limit of three: the third, admitted while the link was cut, died with
  // the primary.
  EXPECT_EQ(AdmittedAcrossAFailover(/*durable=*/false), 4);
}

TEST_F(FailoverLossTest, ADurableLimitLosesNoneOfItsAdmissions) {
  const int admitted = AdmittedAcrossAFailover(/*durable=*/true);
  EXPECT_LE(admitted, 3);
  EXPECT_EQ(admitted, 2);  // the two confirmed before the cut
}

}  // namespace
}  // namespace tollgate
