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
using testing::FirstGrants;
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

  void ExpectTheShareOfADepartedEnvoyToMove(bool killed);
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
  const RlqsAdmitted admitted = DriveRlqs(traffic, kWindowSeconds, 21);
  const std::vector<int64_t> full = admitted.Full(kApi);
  const int64_t bound = Bound(envoys);
  std::printf("admitted per full window: %s (limit %lld, bound %lld)\n",
              DescribeWindows(full).c_str(), static_cast<long long>(kLimit),
              static_cast<long long>(bound));
  ASSERT_GE(full.size(), 3u);
  for (int64_t n : full) EXPECT_LE(n, kLimit + bound);
  // And the limit is used, once the Envoys' reports have shown their demand (the first full
  // window may start a moment after the first requests, when the shares are not yet weighted).
  for (size_t i = 1; i < full.size(); ++i) EXPECT_GE(full[i], kLimit * 8 / 10) << i;
}

TEST_F(RlqsFleetTest, ASkewedFleetGetsAtLeastNinetyPercentOfTheLimit) {
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  for (int i = 0; i < 4; ++i) envoys.push_back(Envoy(i % 2));
  const double total = 4.0 * kLimit / kWindowSeconds;
  std::vector<RlqsTraffic> traffic = {{envoys[0].get(), kApi, 0.8 * total},
                                      {envoys[1].get(), kApi, 0.2 * total / 3},
                                      {envoys[2].get(), kApi, 0.2 * total / 3},
                                      {envoys[3].get(), kApi, 0.2 * total / 3}};
  // Traffic starts as a window starts, so the first full window opens five reporting
  // intervals in, after the reports have shown the skew: until then the shares are equal and
  // the Envoy with 80% of the traffic holds a quarter of the limit.
  testing::WaitForWindowStart(kWindowSeconds);
  const RlqsAdmitted admitted = DriveRlqs(traffic, kWindowSeconds, 21);
  const std::vector<int64_t> full = admitted.Full(kApi);
  std::printf("admitted per full window: %s (limit %lld)\n", DescribeWindows(full).c_str(),
              static_cast<long long>(kLimit));
  ASSERT_GE(full.size(), 2u);
  for (int64_t n : full) EXPECT_GE(n, kLimit * 9 / 10);
  const int64_t bound = Bound(envoys);
  for (int64_t n : full) EXPECT_LE(n, kLimit + bound);
}

// Two Envoys, one per server, each offering twice the limit. Envoy 1 goes away two seconds
// into the run's second window: `killed`, its stream cancelled (its process gone), else
// silent with its stream open (hung). The share it held goes to Envoy 0 within two reporting
// intervals and a round: every window that starts 3 s or more after it left opens with a grant
// to Envoy 0 of most of the limit (where the window before opened with about half), and the
// fleet admits the limit, Envoy 0 alone, within the measured bound.
void RlqsFleetTest::ExpectTheShareOfADepartedEnvoyToMove(bool killed) {
  std::vector<std::unique_ptr<SimulatedEnvoy>> envoys;
  envoys.push_back(Envoy(0));
  envoys.push_back(Envoy(1));
  const double rate = 2.0 * kLimit / kWindowSeconds;
  std::vector<RlqsTraffic> traffic = {{envoys[0].get(), kApi, rate}, {envoys[1].get(), kApi, rate}};
  testing::WaitForWindowStart(kWindowSeconds);
  RlqsAdmitted admitted{.window_seconds = kWindowSeconds};  // its WindowOf, in the lambda
  int64_t left_in = 0;                                      // the window it left in
  admitted = DriveRlqs(traffic, kWindowSeconds, 21,
                       {{kWindowSeconds + 2.0, [&] {
                           if (killed) {
                             envoys[1]->Stop();
                           } else {
                             envoys[1]->StopReporting();
                           }
                           traffic[1].envoy = nullptr;
                           left_in = admitted.WindowOf(std::chrono::system_clock::now());
                         }}});
  const std::vector<int64_t> before = FirstGrants(*envoys[0], kApi, admitted, left_in, left_in);
  const std::vector<int64_t> after =
      FirstGrants(*envoys[0], kApi, admitted, left_in + 1, admitted.last_window - 1);
  const std::vector<int64_t> full = admitted.Full(kApi, left_in + 1);
  const int64_t bound = Bound(envoys);
  std::printf(
      "Envoy 0's first grant of the window it left in: %s; of each window after: %s; admitted "
      "per full window after: %s (limit %lld, bound %lld)\n",
      DescribeWindows(before).c_str(), DescribeWindows(after).c_str(),
      DescribeWindows(full).c_str(), static_cast<long long>(kLimit), static_cast<long long>(bound));
  ASSERT_EQ(before.size(), 1u);
  EXPECT_GE(before[0], 1);
  EXPECT_LE(before[0], kLimit * 6 / 10);
  ASSERT_GE(after.size(), 2u);
  for (int64_t first : after) EXPECT_GE(first, kLimit * 8 / 10);
  ASSERT_EQ(full.size(), after.size());
  for (int64_t n : full) {
    EXPECT_GE(n, kLimit * 9 / 10);
    EXPECT_LE(n, kLimit + bound);
  }
}

TEST_F(RlqsFleetTest, TheShareOfAnEnvoyThatDisappearsGoesToTheOthersWithinTwoIntervals) {
  ExpectTheShareOfADepartedEnvoyToMove(/*killed=*/true);
}

TEST_F(RlqsFleetTest, TheShareOfAnEnvoyThatFallsSilentGoesToTheOthersWithinTwoIntervals) {
  ExpectTheShareOfADepartedEnvoyToMove(/*killed=*/false);
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
