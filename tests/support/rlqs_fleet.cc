// Copyright tollgate authors.
#include "tests/support/rlqs_fleet.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tollgate::testing {

std::vector<int64_t> RlqsAdmitted::Full(const RlqsBucket& bucket, int64_t from) const {
  std::vector<int64_t> out;
  auto counts = per_window.find(bucket);
  for (int64_t w = std::max(first_window + 1, from); w < last_window; ++w) {
    int64_t n = 0;
    if (counts != per_window.end()) {
      auto it = counts->second.find(w);
      if (it != counts->second.end()) n = it->second;
    }
    out.push_back(n);
  }
  return out;
}

int64_t RlqsAdmitted::WindowOf(std::chrono::system_clock::time_point at) const {
  return std::chrono::duration_cast<std::chrono::seconds>(at.time_since_epoch()).count() /
         window_seconds;
}

RlqsAdmitted DriveRlqs(std::vector<RlqsTraffic>& traffic, int64_t window_seconds, int seconds,
                       std::map<double, std::function<void()>> at_second) {
  RlqsAdmitted admitted;
  admitted.window_seconds = window_seconds;
  const auto start = std::chrono::steady_clock::now();
  admitted.first_window = admitted.WindowOf(std::chrono::system_clock::now());
  std::vector<int64_t> sent(traffic.size(), 0);
  while (true) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed >= seconds) break;
    for (auto it = at_second.begin(); it != at_second.end() && it->first <= elapsed;) {
      it->second();
      it = at_second.erase(it);
    }
    for (size_t i = 0; i < traffic.size(); ++i) {
      const auto due = static_cast<int64_t>(elapsed * traffic[i].per_second);
      for (; sent[i] < due && traffic[i].envoy != nullptr; ++sent[i]) {
        if (traffic[i].envoy->Request(traffic[i].bucket)) {
          ++admitted
                .per_window[traffic[i].bucket][admitted.WindowOf(std::chrono::system_clock::now())];
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the traffic's pace
  }
  admitted.last_window = admitted.WindowOf(std::chrono::system_clock::now());
  return admitted;
}

std::vector<int64_t> FirstGrants(const SimulatedEnvoy& envoy, const RlqsBucket& bucket,
                                 const RlqsAdmitted& admitted, int64_t from, int64_t to) {
  std::vector<int64_t> first(static_cast<size_t>(std::max<int64_t>(0, to - from + 1)), -1);
  for (const RlqsGrant& grant : envoy.counts(bucket).grants) {
    const int64_t window = admitted.WindowOf(grant.at);
    if (window < from || window > to) continue;
    int64_t& slot = first[static_cast<size_t>(window - from)];
    if (slot < 0) slot = grant.tokens;
  }
  return first;
}

void WaitForWindowStart(int64_t window_seconds) {
  const auto now = std::chrono::system_clock::now();
  const int64_t seconds =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  const std::chrono::system_clock::time_point start{
      std::chrono::seconds((seconds / window_seconds + 1) * window_seconds)};
  std::this_thread::sleep_until(start + std::chrono::milliseconds(50));
}

std::string DescribeWindows(const std::vector<int64_t>& windows) {
  std::string out;
  for (int64_t n : windows) absl::StrAppend(&out, out.empty() ? "" : " ", n);
  return out;
}

void RlqsFleet::SetUp() {
  absl::StatusOr<std::unique_ptr<RedisServer>> redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  redis_ = *std::move(redis);
  for (int i = 0; i < 2; ++i) {
    servers_.push_back(ServeProcess::Start(
        config_, {"--redis", redis_->url(), "--rlqs-round-ms", "500",
                  "--rlqs-reporting-interval-ms", "1000", "--rlqs-idle-ms", "3000"}));
    ASSERT_NE(servers_.back(), nullptr);
  }
  // The fleet is formed once each instance counts both (N is learned from heartbeats): before
  // that, each would take the whole limit for itself, as in sync mode.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (const auto& server : servers_) {
    while (MetricValue(ScrapeMetrics(server->port()), "tollgate_instances") != 2) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "the instances never saw each other";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

std::unique_ptr<SimulatedEnvoy> RlqsFleet::Envoy(int server) {
  return std::make_unique<SimulatedEnvoy>(
      servers_[server]->grpc_port(),
      SimulatedEnvoyOptions{.reporting_interval = std::chrono::seconds(1),
                            .no_assignment_allows = false});
}

}  // namespace tollgate::testing
