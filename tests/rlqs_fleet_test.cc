// Copyright tollgate authors. The Rate Limit Quota Service as a fleet: simulated Envoys
// (tests/support/rlqs_envoy.h: what Envoy's rate_limit_quota filter does, over real gRPC)
// against two `tollgate serve` sharing one real redis-server, in real time. Each test drives
// traffic for a bounded run and asserts what the fleet admitted per window, never how long
// anything took.
#include "tests/support/rlqs_fleet.h"

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
#include "tests/support/rlqs_envoy.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

using testing::DescribeWindows;
using testing::DriveRlqs;
using testing::RlqsAdmitted;
using testing::RlqsBucket;
using testing::RlqsTraffic;
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

class RlqsFleetTest : public testing::RlqsFleet {
 protected:
  RlqsFleetTest() : RlqsFleet(kConfig) {}
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
  std::vector<RlqsTraffic> traffic;
  for (int i = 0; i < 4; ++i) envoys.push_back(Envoy(i % 2));
  // 4 x 100 per 5 s, evenly.
  for (auto& envoy : envoys)
    traffic.push_back({envoy.get(), kApi, 4.0 * kLimit / kWindowSeconds / 4});
  const RlqsAdmitted admitted = DriveRlqs(traffic, kWindowSeconds, 18);
  const std::vector<int64_t> full = admitted.Full(kApi);
  const int64_t bound = Bound(envoys);
  std::printf("admitted per full window: %s (limit %lld, bound %lld)\n",
              DescribeWindows(full).c_str(), static_cast<long long>(kLimit),
              static_cast<long long>(bound));
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
  std::vector<RlqsTraffic> traffic = {{envoys[0].get(), kApi, 0.8 * total},
                                      {envoys[1].get(), kApi, 0.2 * total / 3},
                                      {envoys[2].get(), kApi, 0.2 * total / 3},
                                      {envoys[3].get(), kApi, 0.2 * total / 3}};
  const RlqsAdmitted admitted = DriveRlqs(traffic, kWindowSeconds, 18);
  const std::vector<int64_t> full = admitted.Full(kApi);
  std::printf("admitted per full window: %s (limit %lld)\n", DescribeWindows(full).c_str(),
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
  std::vector<RlqsTraffic> traffic = {{envoys[0].get(), kApi, rate}, {envoys[1].get(), kApi, rate}};
  // Envoy 1 goes away 6 s in: no more reports, its stream cancelled.
  int64_t gone_window = 0;
  RlqsAdmitted admitted{.window_seconds = kWindowSeconds};  // its WindowOf, in the lambda
  admitted = DriveRlqs(traffic, kWindowSeconds, 19,
                       {{6, [&] {
                           envoys[1]->Stop();
                           traffic[1].envoy = nullptr;
                           gone_window = admitted.WindowOf(std::chrono::system_clock::now() +
                                                           std::chrono::seconds(3));
                         }}});
  // From the first window that starts two intervals (and a round) after it left, Envoy 0
  // alone takes the whole limit.
  const std::vector<int64_t> after = admitted.Full(kApi, gone_window + 1);
  std::printf("admitted per full window after the Envoy left: %s (limit %lld)\n",
              DescribeWindows(after).c_str(), static_cast<long long>(kLimit));
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
