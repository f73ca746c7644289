// Copyright tollgate authors. `tollgate serve`'s GET /metrics and GET /readyz, end to end: a
// real process on a loopback port.
#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process.h"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::ServeProcess;

constexpr char kConfig[] = R"(limits:
  burst:
    algorithm: token_bucket
    capacity: 5
    refill_per_second: 0.001
  other:
    algorithm: token_bucket
    capacity: 100
    refill_per_second: 0.001
)";

// Every sample of the exposition by its series ("name{labels}"); adds a failure for a line
// that is neither a comment nor a sample.
std::map<std::string, double> Samples(const std::string& text) {
  const std::regex sample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?) ([-+0-9.eInfNa]+))");
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::smatch match;
    if (!std::regex_match(line, match, sample)) {
      ADD_FAILURE() << "not a sample: " << line;
      continue;
    }
    samples[match[1]] = std::stod(match[3]);
  }
  return samples;
}

std::map<std::string, double> ScrapeMetrics(int port) {
  HttpTestClient client(port);
  std::optional<testing::HttpTestResponse> response = client.Send(http::verb::get, "/metrics");
  EXPECT_TRUE(response.has_value());
  if (!response.has_value()) return {};
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_THAT(testing::HeaderValue(*response, "Content-Type"), HasSubstr("text/plain"));
  return Samples(response->body());
}

std::string Decisions(const std::string& limit, const std::string& source,
                      const std::string& outcome) {
  return "tollgate_decisions_total{limit=\"" + limit + "\",source=\"" + source + "\",outcome=\"" +
         outcome + "\"}";
}

TEST(ServeMetricsTest, CountersMatchTheDecisionsMade) {
  auto server = ServeProcess::Start(kConfig);
  ASSERT_NE(server, nullptr);
  constexpr int kAllowed = 5;  // the bucket's capacity
  constexpr int kRefused = 3;
  int allowed = 0, refused = 0;
  HttpTestClient client(server->port());
  for (int i = 0; i < kAllowed + kRefused; ++i) {
    auto response = client.Check(R"({"limit":"burst","key":"user:1"})");
    ASSERT_TRUE(response.has_value());
    if (response->result_int() == 200) ++allowed;
    if (response->result_int() == 429) ++refused;
  }
  ASSERT_EQ(allowed, kAllowed);
  ASSERT_EQ(refused, kRefused);
  // An unknown limit is a 400 before any check: no decision, no error counted.
  ASSERT_EQ(client.Check(R"({"limit":"nope","key":"k"})")->result_int(), 400);

  std::map<std::string, double> samples = ScrapeMetrics(server->port());
  EXPECT_EQ(samples[Decisions("burst", "memory", "allowed")], kAllowed);
  EXPECT_EQ(samples[Decisions("burst", "memory", "refused")], kRefused);
  EXPECT_EQ(samples[Decisions("burst", "memory", "shadow_refused")], 0);
  EXPECT_EQ(samples[Decisions("other", "memory", "allowed")], 0);
  EXPECT_EQ(samples[R"(tollgate_check_errors_total{limit="burst"})"], 0);
  EXPECT_EQ(samples[R"(tollgate_check_duration_seconds_count{api="http"})"], kAllowed + kRefused);
  EXPECT_EQ(samples[R"(tollgate_check_duration_seconds_bucket{api="http",le="+Inf"})"],
            kAllowed + kRefused);
  EXPECT_EQ(samples[R"(tollgate_config_reloads_total{result="success"})"], 0);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

TEST(ServeMetricsTest, EnvoyDecisionsAreCountedWithShadowRefusals) {
  constexpr char kEnvoyConfig[] = R"(domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ip
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
)";
  auto server = ServeProcess::Start(kEnvoyConfig);
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  const std::string user =
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"user","value":"u1"}]}]})";
  const std::string ip =
      R"({"domain":"shop","descriptors":[{"entries":[{"key":"ip","value":"10.0.0.1"}]}]})";
  std::vector<int> user_codes, ip_codes;
  for (int i = 0; i < 3; ++i) {
    user_codes.push_back(client.Send(http::verb::post, "/json", user)->result_int());
    ip_codes.push_back(client.Send(http::verb::post, "/json", ip)->result_int());
  }
  ASSERT_THAT(user_codes, ::testing::ElementsAre(200, 200, 429));
  ASSERT_THAT(ip_codes, ::testing::ElementsAre(200, 200, 200));  // shadow: never refuses

  // Summed over the rules' limits, whatever they are named.
  double allowed = 0, refused = 0, shadow_refused = 0;
  for (const auto& [series, value] : ScrapeMetrics(server->port())) {
    if (series.rfind("tollgate_decisions_total{", 0) != 0) continue;
    if (series.find(R"(outcome="allowed")") != std::string::npos) allowed += value;
    if (series.find(R"(outcome="refused")") != std::string::npos) refused += value;
    if (series.find(R"(outcome="shadow_refused")") != std::string::npos) shadow_refused += value;
  }
  EXPECT_EQ(allowed, 3);  // user twice, ip once
  EXPECT_EQ(refused, 1);
  EXPECT_EQ(shadow_refused, 2);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// Every check call to Redis is one observation of the round-trip histogram; its buckets are
// cumulative and end at the count.
TEST(ServeMetricsTest, StoreRoundTripHistogramCountsEveryRedisCall) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  // A deadline no loaded machine misses, so every call is answered by Redis in time.
  constexpr char kRedisConfig[] = R"(limits:
  shared:
    algorithm: token_bucket
    capacity: 1000
    refill_per_second: 0.001
    timeout: 30s
)";
  auto server = ServeProcess::Start(kRedisConfig, {"--redis", (*redis)->url(), "--instances", "1"});
  ASSERT_NE(server, nullptr);
  constexpr int kChecks = 25;
  HttpTestClient client(server->port());
  for (int i = 0; i < kChecks; ++i) {
    auto response = client.Check(absl::StrCat(R"({"limit":"shared","key":"k)", i % 3, R"("})"));
    ASSERT_TRUE(response.has_value());
    ASSERT_EQ(response->result_int(), 200) << response->body();
  }
  // A batch of two limits' items is still one call.
  auto batch =
      client.Check(R"({"checks":[{"limit":"shared","key":"a"},{"limit":"shared","key":"b"}]})");
  ASSERT_TRUE(batch.has_value());
  ASSERT_EQ(batch->result_int(), 200) << batch->body();

  std::map<std::string, double> samples = ScrapeMetrics(server->port());
  EXPECT_EQ(samples["tollgate_store_round_trip_seconds_count"], kChecks + 1);
  EXPECT_EQ(samples["tollgate_store_decisions_total"], kChecks + 1);
  EXPECT_EQ(samples[R"(tollgate_store_round_trip_seconds_bucket{le="+Inf"})"], kChecks + 1);
  EXPECT_GT(samples["tollgate_store_round_trip_seconds_sum"], 0);
  // Cumulative: every bucket holds at least the one below it.
  std::vector<std::pair<double, double>> buckets;  // (le, count)
  const std::regex bucket("tollgate_store_round_trip_seconds_bucket[{]le=\"([^\"+]+)\"[}]");
  for (const auto& [series, value] : samples) {
    std::smatch match;
    if (std::regex_match(series, match, bucket)) buckets.emplace_back(std::stod(match[1]), value);
  }
  ASSERT_EQ(buckets.size(), 14u);
  std::sort(buckets.begin(), buckets.end());
  EXPECT_EQ(buckets.front().first, 50e-6);
  EXPECT_EQ(buckets.back().first, 0.1);
  for (size_t i = 1; i < buckets.size(); ++i) {
    EXPECT_GE(buckets[i].second, buckets[i - 1].second) << "le=" << buckets[i].first;
  }
  EXPECT_LE(buckets.back().second, kChecks + 1);
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// The one tollgate_build_info series carries the version and commit `tollgate --version`
// prints, so a dashboard tells which build each instance runs; so does the start-up log.
TEST(ServeMetricsTest, BuildInfoNamesWhatVersionPrints) {
  const std::string log = testing::MakeTempDir("tollgate-version") + "/out.log";
  absl::StatusOr<testing::Subprocess> version =
      testing::Subprocess::Start({TOLLGATE_BINARY, "--version"}, log);
  ASSERT_TRUE(version.ok()) << version.status();
  ASSERT_EQ(version->Wait(), 0);
  std::smatch match;
  const std::string printed = testing::ReadFileText(log);
  ASSERT_TRUE(std::regex_match(printed, match, std::regex(R"(tollgate (\S+) \(commit (\S+)\)\n)")))
      << printed;

  auto server = ServeProcess::Start(kConfig);
  ASSERT_NE(server, nullptr);
  // The start-up log names the build too (journalctl tells which build ran when).
  EXPECT_THAT(server->log(), HasSubstr(printed.substr(0, printed.size() - 1)));
  std::vector<std::string> build_info;
  for (const auto& [series, value] : ScrapeMetrics(server->port())) {
    if (series.rfind("tollgate_build_info", 0) != 0) continue;
    build_info.push_back(series);
    EXPECT_EQ(value, 1) << series;
  }
  EXPECT_THAT(build_info, ::testing::ElementsAre(absl::StrCat("tollgate_build_info{version=\"",
                                                              std::string(match[1]), "\",commit=\"",
                                                              std::string(match[2]), "\"}")));
}

TEST(ServeReadyzTest, ReadyWithTheMemoryStore) {
  auto server = ServeProcess::Start(kConfig);
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  auto ready = client.Send(http::verb::get, "/readyz");
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->result_int(), 200) << ready->body();
  EXPECT_EQ(server->Stop(), 0) << server->log();
}

// With Redis down, a fail_closed limit makes the instance unready, while fail_open limits can
// keep serving; the breaker opens after a few failed checks.
TEST(ServeReadyzTest, RedisDownIsUnreadyOnlyWhenALimitFailsClosed) {
  auto redis = testing::RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kFailClosed[] = R"(limits:
  strict:
    algorithm: token_bucket
    capacity: 100
    refill_per_second: 0.001
    on_store_failure: fail_closed
    timeout: 200ms
)";
  constexpr char kFailOpen[] = R"(limits:
  lenient:
    algorithm: token_bucket
    capacity: 100
    refill_per_second: 0.001
    timeout: 200ms
)";
  auto closed = ServeProcess::Start(kFailClosed, {"--redis", (*redis)->url(), "--instances", "1"});
  ASSERT_NE(closed, nullptr);
  auto open = ServeProcess::Start(kFailOpen, {"--redis", (*redis)->url(), "--instances", "1"});
  ASSERT_NE(open, nullptr);
  HttpTestClient closed_client(closed->port());
  HttpTestClient open_client(open->port());
  EXPECT_EQ(closed_client.Send(http::verb::get, "/readyz")->result_int(), 200);
  EXPECT_EQ(open_client.Send(http::verb::get, "/readyz")->result_int(), 200);

  (*redis)->Kill();
  // Enough failures to open the breaker (5 by default).
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(closed_client.Check(R"({"limit":"strict","key":"k"})").has_value());
    ASSERT_TRUE(open_client.Check(R"({"limit":"lenient","key":"k"})").has_value());
  }
  // Readiness follows the instance's own probe (every 250 ms), not these checks.
  std::optional<testing::HttpTestResponse> unready;
  for (int i = 0; i < 60; ++i) {
    unready = closed_client.Send(http::verb::get, "/readyz");
    ASSERT_TRUE(unready.has_value());
    if (unready->result_int() != 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(unready->result_int(), 503) << unready->body();
  nlohmann::json body = nlohmann::json::parse(unready->body(), nullptr, false);
  EXPECT_EQ(body["status"], "not_ready") << unready->body();
  EXPECT_THAT(body["reason"].dump(), HasSubstr("strict")) << unready->body();
  EXPECT_EQ(open_client.Send(http::verb::get, "/readyz")->result_int(), 200);

  // The breaker and the store's failures are in the metrics.
  std::map<std::string, double> samples = ScrapeMetrics(closed->port());
  EXPECT_GE(samples["tollgate_circuit_breaker_state"], 1);
  EXPECT_EQ(samples["tollgate_instances"], 1);
  EXPECT_EQ(samples[Decisions("strict", "fallback", "refused")], 8);
  EXPECT_GE(samples["tollgate_store_fallback_decisions_total"], 8);
  EXPECT_GE(samples["tollgate_store_breaker_rejections_total"], 1);

  EXPECT_EQ(closed->Stop(), 0) << closed->log();
  EXPECT_EQ(open->Stop(), 0) << open->log();
}

}  // namespace
}  // namespace tollgate
