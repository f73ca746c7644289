// Copyright tollgate authors. What the Rate Limit Quota Service's fleet tests share: a
// redis-server and two `tollgate serve` over it, simulated Envoys (rlqs_envoy.h) on them, and
// traffic driven through the Envoys in real time, counted per fixed window.
#ifndef TOLLGATE_TESTS_SUPPORT_RLQS_FLEET_H_
#define TOLLGATE_TESTS_SUPPORT_RLQS_FLEET_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/redis_server.h"
#include "tests/support/rlqs_envoy.h"
#include "tests/support/serve_process.h"

namespace tollgate::testing {

// One Envoy's requests of one bucket, at a rate.
struct RlqsTraffic {
  SimulatedEnvoy* envoy = nullptr;  // nullptr: this traffic has stopped
  RlqsBucket bucket;
  double per_second = 0;
};

// What the Envoys let through, per bucket and fixed window of `window_seconds` (Redis' clock
// is this host's), over one run.
struct RlqsAdmitted {
  int64_t window_seconds = 1;
  std::map<RlqsBucket, std::map<int64_t, int64_t>> per_window;
  int64_t first_window = 0;  // the run started in it (partial)
  int64_t last_window = 0;   // the run ended in it (partial)

  // The counts of `bucket` in the windows that lay entirely inside the run, from window
  // `from` on (0: all).
  std::vector<int64_t> Full(const RlqsBucket& bucket, int64_t from = 0) const;
  // The window `at` is in.
  int64_t WindowOf(std::chrono::system_clock::time_point at) const;
};

// Sends every traffic's requests at its rate for `seconds`, counting what is let through.
// Each of `at_second` runs once, that many seconds into the run, on this thread; it may change
// `traffic` (stop one by setting its envoy to nullptr).
RlqsAdmitted DriveRlqs(std::vector<RlqsTraffic>& traffic, int64_t window_seconds, int seconds,
                       std::map<double, std::function<void()>> at_second = {});

// The first grant `envoy` received for `bucket` in each window of `admitted` from `from` to
// `to` (-1 for a window without one).
std::vector<int64_t> FirstGrants(const SimulatedEnvoy& envoy, const RlqsBucket& bucket,
                                 const RlqsAdmitted& admitted, int64_t from, int64_t to);

// Returns just after the next fixed window of `window_seconds` starts (on this host's clock,
// which is Redis'), so that a run's events fall at known places in its windows.
void WaitForWindowStart(int64_t window_seconds);

// "93 95 96".
std::string DescribeWindows(const std::vector<int64_t>& windows);

// A redis-server and two `tollgate serve` sharing it, serving `config`, with RLQS rounds of
// 500 ms, buckets reporting every second and abandoned after 3 s without a request; SetUp
// returns once each instance counts both.
class RlqsFleet : public ::testing::Test {
 protected:
  explicit RlqsFleet(std::string config) : config_(std::move(config)) {}
  void SetUp() override;

  // An Envoy reporting every second to server `server` (0 or 1), denying until its first
  // assignment (its no_assignment_behavior DENY_ALL).
  std::unique_ptr<SimulatedEnvoy> Envoy(int server);

  const std::string config_;
  std::unique_ptr<RedisServer> redis_;
  std::vector<std::unique_ptr<ServeProcess>> servers_;
};

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_RLQS_FLEET_H_
