// Copyright tollgate authors. The Rate Limit Quota Service as a fleet: simulated Envoys
// (tests/support/rlqs_envoy.h: what Envoy's rate_limit_quota filter does, over real gRPC)
// against two `tollgate serve` sharing one real redis-server, in real time. Each test drives
// traffic for a bounded run and asserts what the fleet admitted per window, never how long
// anything took.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/rlqs_envoy.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

using testing::RlqsBucket;
using testing::SimulatedEnvoy;

// 100 requests per 5-second window for the bucket {name: api}.
constexpr int64_t kLimit = 100;
constexpr int64_t kWindowSeconds = 5;
constexpr char kConfig[] = R"(domain: tiffin
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 100, unit_multiplier: 5}
)";
const RlqsBucket kApi = {{"name", "api"}};

int64_t WindowOf(std::chrono::system_clock::time_point at) {
  return std::chrono::duration_cast<std::chrono::seconds>(at.time_since_epoch()).count() /
         kWindowSeconds;
}

struct Traffic {
  SimulatedEnvoy* envoy = nullptr;
  double per_second = 0;
};

// What the fleet admitted, per window (Redis' clock is this host's), over one run.
struct Admitted {
  std::map<int64_t, int64_t> per_window;
  int64_t first_window = 0;  // the run started in it (partial)
  int64_t last_window = 0;   // the run ended in it (partial)
  // The windows that lay entirely inside the run, at or after `from` (0: all).
  std::vector<int64_t> Full(int64_t from = 0) const {
    std::vector<int64_t> out;
    for (int64_t w = std::max(first_window + 1, from); w < last_window; ++w) {
      auto it = per_window.find(w);
      out.push_back(it == per_window.end() ? 0 : it->second);
    }
    return out;
  }
};

// Sends each Envoy's requests at its rate for `seconds`, counting what they let through.
// `at_second` runs once, that many seconds into the run (from this thread).
Admitted Drive(const std::vector<Traffic>& traffic, int seconds,
               std::map<int, std::function<void()>> at_second = {}) {
  Admitted admitted;
  const auto start = std::chrono::steady_clock::now();
  admitted.first_window = WindowOf(std::chrono::system_clock::now());
  std::vector<int64_t> sent(traffic.size(), 0);
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (elapsed >= seconds) break;
    for (auto it = at_second.begin(); it != at_second.end() && it->first <= elapsed;) {
      it->second();
      it = at_second.erase(it);
    }
    for (size_t i = 0; i < traffic.size(); ++i) {
      if (traffic[i].envoy == nullptr) continue;
      const auto due = static_cast<int64_t>(elapsed * traffic[i].per_second);
      for (; sent[i] < due; ++sent[i]) {
        if (traffic[i].envoy->Request(kApi)) {
          ++admitted.per_window[WindowOf(std::chrono::system_clock::now())];
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the traffic's pace
  }
  admitted.last_window = WindowOf(std::chrono::system_clock::now());
  return admitted;
}

std::string Describe(const std::vector<int64_t>& windows) {
  std::string out;
  for (int64_t n : windows) absl::StrAppend(&out, out.empty() ? "" : " ", n);
  return out;
}

class RlqsFleetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<testing::RedisServer>> redis = testing::RedisServer::Start();
    ASSERT_TRUE(redis.ok()) << redis.status();
    redis_ = *std::move(redis);
    for (int i = 0; i < 2; ++i) {
      servers_.push_back(testing::ServeProcess::Start(
          kConfig, {"--redis", redis_->url(), "--rlqs-round-ms", "500",
                    "--rlqs-reporting-interval-ms", "1000", "--rlqs-idle-ms", "3000"}));
      ASSERT_NE(servers_.back(), nullptr);
    }
    // The fleet is formed once each instance counts both (N is learned from heartbeats): before
    // that, each would take the whole limit for itself, as in sync mode.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (const auto& server : servers_) {
      while (testing::MetricValue(testing::ScrapeMetrics(server->port()), "tollgate_instances") !=
             2) {
        ASSERT_LT(std::chrono::steady_clock::now(), give_up)
            << "the instances never saw each other";
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  }

  // An Envoy reporting every second to server `server`, denying until its first assignment
  // (Envoy's no_assignment_behavior set to DENY_ALL).
  std::unique_ptr<SimulatedEnvoy> Envoy(int server) {
    return std::make_unique<SimulatedEnvoy>(
        servers_[server]->grpc_port(),
        testing::SimulatedEnvoyOptions{.reporting_interval = std::chrono::seconds(1),
                                       .no_assignment_allows = false});
  }

  std::unique_ptr<testing::RedisServer> redis_;
  std::vector<std::unique_ptr<testing::ServeProcess>> servers_;
};

// The measured bound (docs/envoy.md): what an Envoy may admit between its report and the
// assignment that follows it, unknown to the fleet, is at most the rest of its last grant; so
// per window the fleet admits at most the limit plus the largest grant each Envoy was sent.
int64_t Bound(const std::vector<std::unique_ptr<SimulatedEnvoy>>& envoys) {
  int64_t bound = 0;
  for (const auto& envoy : envoys) bound += envoy->counts(kApi).max_tokens_seen;
  return bound;
}

TEST_F(RlqsFleetTest, FourTimesOversubscribedTheFleetAdmitsTheLimitPlusTheBoundPerWindow) {
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  std::vector<Traffic> traffic;
  for (int i = 0; i < 4; ++i) envoys.push_back(Envoy(i % 2));
  // 4 x 100 per 5 s, evenly.
  for (auto& envoy : envoys) traffic.push_back({envoy.get(), 4.0 * kLimit / kWindowSeconds / 4});
  const Admitted admitted = Drive(traffic, 18);
  const std::vector<int64_t> full = admitted.Full();
  const int64_t bound = Bound(envoys);
  std::printf("admitted per full window: %s (limit %lld, bound %lld)\n", Describe(full).c_str(),
              static_cast<long long>(kLimit), static_cast<long long>(bound));
  ASSERT_GE(full.size(), 2u);
  for (int64_t n : full) {
    EXPECT_LE(n, kLimit + bound);
    EXPECT_GE(n, kLimit * 8 / 10);  // and the limit is used
  }
}

TEST_F(RlqsFleetTest, ASkewedFleetGetsAtLeastNinetyPercentOfTheLimit) {
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  for (int i = 0; i < 4; ++i) envoys.push_back(Envoy(i % 2));
  const double total = 4.0 * kLimit / kWindowSeconds;
  std::vector<Traffic> traffic = {{envoys[0].get(), 0.8 * total},
                                  {envoys[1].get(), 0.2 * total / 3},
                                  {envoys[2].get(), 0.2 * total / 3},
                                  {envoys[3].get(), 0.2 * total / 3}};
  const Admitted admitted = Drive(traffic, 18);
  const std::vector<int64_t> full = admitted.Full();
  std::printf("admitted per full window: %s (limit %lld)\n", Describe(full).c_str(),
              static_cast<long long>(kLimit));
  ASSERT_GE(full.size(), 2u);
  for (int64_t n : full) EXPECT_GE(n, kLimit * 9 / 10);
  const int64_t bound = Bound(envoys);
  for (int64_t n : full) EXPECT_LE(n, kLimit + bound);
}

TEST_F(RlqsFleetTest, TheShareOfAnEnvoyThatDisappearsGoesToTheOthersWithinTwoIntervals) {
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  envoys.push_back(Envoy(0));
  envoys.push_back(Envoy(1));
  const double rate = 4.0 * kLimit / kWindowSeconds / 2;
  std::vector<Traffic> traffic = {{envoys[0].get(), rate}, {envoys[1].get(), rate}};
  // Envoy 1 goes away 6 s in: no more reports, its stream cancelled.
  int64_t gone_window = 0;
  const Admitted admitted = Drive(
      traffic, 19, {{6, [&] {
                       envoys[1]->Stop();
                       traffic[1].envoy = nullptr;
                       gone_window =
                           WindowOf(std::chrono::system_clock::now() + std::chrono::seconds(3));
                     }}});
  // From the first window that starts two intervals (and a round) after it left, Envoy 0
  // alone takes the whole limit.
  const std::vector<int64_t> after = admitted.Full(gone_window + 1);
  std::printf("admitted per full window after the Envoy left: %s (limit %lld)\n",
              Describe(after).c_str(), static_cast<long long>(kLimit));
  ASSERT_GE(after.size(), 1u);
  for (int64_t n : after) EXPECT_GE(n, kLimit * 9 / 10);
}

TEST_F(RlqsFleetTest, ABucketWithoutRequestsIsAbandoned) {
  std::unique_ptr<SimulatedEnvoy> envoy = Envoy(0);
  envoy->Request(kApi);
  // Envoy keeps reporting it, with no request: after --rlqs-idle-ms the server abandons it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (envoy->counts(kApi).abandons == 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(envoy->counts(kApi).abandons, 1);
  EXPECT_FALSE(envoy->HasBucket(kApi));
  const std::string metrics = testing::ScrapeMetrics(servers_[0]->port());
  EXPECT_EQ(testing::MetricValue(metrics, "tollgate_rlqs_abandoned_buckets_total"), 1);
  EXPECT_EQ(testing::MetricValue(metrics, "tollgate_rlqs_buckets"), 0);
}

}  // namespace
}  // namespace tollgate
