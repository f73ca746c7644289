// Copyright tollgate authors.
//
// Outages told truthfully (issue 22), end to end: real `tollgate serve` processes on one real
// redis-server that is killed, paused and restarted empty. After recovery a user within the
// limit keeps getting it and a user over it gets the limit (no seconds of zero admissions),
// the whole run admits no more than the limit permits, /readyz follows Redis with no
// traffic at all, and every state change is logged.
//
// Real time is unavoidable here (Redis' own TIME, a real restart): phases are bounded and
// the assertions are ranges.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using ::tollgate::testing::HttpTestClient;
using ::tollgate::testing::RedisServer;
using ::tollgate::testing::ServeProcess;
using Clock = std::chrono::steady_clock;
using ::envoy::service::ratelimit::v3::RateLimitRequest;
using ::envoy::service::ratelimit::v3::RateLimitResponse;
using ::envoy::service::ratelimit::v3::RateLimitService;

int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// Polls GET /readyz (and nothing else) until it answers `want`; returns the milliseconds it
// took, or -1 after `timeout_ms`.
int64_t MillisUntilReadyz(int port, int want, int64_t timeout_ms) {
  const Clock::time_point start = Clock::now();
  auto client = std::make_unique<HttpTestClient>(port);
  while (MillisSince(start) < timeout_ms) {
    std::optional<testing::HttpTestResponse> response = client->Send(http::verb::get, "/readyz");
    if (response.has_value() && static_cast<int>(response->result_int()) == want)
      return MillisSince(start);
    if (!response.has_value()) client = std::make_unique<HttpTestClient>(port);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// Redis failing or returning shows in /readyz within about a second (the probe runs every
// 250 ms and waits at most 250 ms); bounded generously for a loaded machine under ASan.
constexpr int64_t kReadinessBoundMillis = 2000;

TEST(OutageTest, ReadinessFollowsRedisWithNoTraffic) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kConfig[] = R"(limits:
  api:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 5
  otp:
    algorithm: fixed_window
    limit: 3
    window: 1h
    on_store_failure: fail_closed
)";
  constexpr char kFailOpenOnly[] = R"(limits:
  api:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 5
)";
  auto server = ServeProcess::Start(kConfig, {"--redis", (*redis)->url()});
  ASSERT_NE(server, nullptr);
  auto lenient =
      ServeProcess::Start(kFailOpenOnly, {"--redis", (*redis)->url(), "--instances", "1"});
  ASSERT_NE(lenient, nullptr);
  ASSERT_GE(MillisUntilReadyz(server->port(), 200, kReadinessBoundMillis), 0) << server->log();

  (*redis)->Kill();
  const int64_t unready_after_kill = MillisUntilReadyz(server->port(), 503, 5000);
  EXPECT_GE(unready_after_kill, 0) << server->log();
  EXPECT_LE(unready_after_kill, kReadinessBoundMillis);
  // No limit fails closed: Redis down does not make it unready.
  EXPECT_GE(MillisUntilReadyz(lenient->port(), 200, 100), 0);

  ASSERT_TRUE((*redis)->Restart().ok());
  const int64_t ready_after_restart = MillisUntilReadyz(server->port(), 200, 5000);
  EXPECT_GE(ready_after_restart, 0) << server->log();
  EXPECT_LE(ready_after_restart, kReadinessBoundMillis);

  (*redis)->Pause();
  const int64_t unready_after_pause = MillisUntilReadyz(server->port(), 503, 5000);
  (*redis)->Resume();
  EXPECT_GE(unready_after_pause, 0) << server->log();
  EXPECT_LE(unready_after_pause, kReadinessBoundMillis);
  const int64_t ready_after_resume = MillisUntilReadyz(server->port(), 200, 5000);
  EXPECT_GE(ready_after_resume, 0) << server->log();
  EXPECT_LE(ready_after_resume, kReadinessBoundMillis);

  std::printf(
      "readyz: 503 %lld ms after SIGKILL, 200 %lld ms after restart, 503 %lld ms after "
      "SIGSTOP, 200 %lld ms after SIGCONT\n",
      static_cast<long long>(unready_after_kill), static_cast<long long>(ready_after_restart),
      static_cast<long long>(unready_after_pause), static_cast<long long>(ready_after_resume));
  HttpTestClient client(server->port());
  auto ready = client.Send(http::verb::get, "/readyz");
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->result_int(), 200);

  EXPECT_EQ(server->Stop(), 0);
  EXPECT_EQ(lenient->Stop(), 0);
  const std::string log = server->log();
  EXPECT_THAT(log, HasSubstr("redis unreachable (probe failed"));
  EXPECT_THAT(log, HasSubstr("redis reachable again"));
}

// Concurrency limits while Redis is down (issue 28), end to end: fail_open takes local slots at
// this instance's share (limit / N: 5 / 2 instances = 2), released and renewed locally; a lease
// Redis granted cannot be released or renewed until Redis answers (503); `local` holds its
// `local:` block's slots; fail_closed refuses with 503 and takes none.
TEST(OutageTest, LeasesWhileRedisIsDownAreLocalSlotsAtThisInstancesShare) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kConfig[] = R"(limits:
  in_flight: {algorithm: concurrency, limit: 5, lease: 1h, timeout: 200ms}
  local_slots:
    algorithm: concurrency
    limit: 10
    lease: 1h
    timeout: 200ms
    on_store_failure: local
    local: {algorithm: concurrency, limit: 3, lease: 1h}
  closed_slots:
    {algorithm: concurrency, limit: 10, lease: 1h, timeout: 200ms, on_store_failure: fail_closed}
)";
  auto server = ServeProcess::Start(kConfig, {"--redis", (*redis)->url(), "--instances", "2"});
  ASSERT_NE(server, nullptr);
  HttpTestClient client(server->port());
  auto post = [&](const std::string& path, const std::string& body) {
    std::optional<testing::HttpTestResponse> response = client.Send(http::verb::post, path, body);
    EXPECT_TRUE(response.has_value()) << path << " " << body;
    if (!response.has_value()) return std::make_pair(0, nlohmann::json());
    return std::make_pair(static_cast<int>(response->result_int()),
                          nlohmann::json::parse(response->body(), nullptr, false));
  };
  auto held = [](const std::string& limit, const std::string& lease) {
    return absl::StrCat(R"({"limit":")", limit, R"(","key":"k","lease":")", lease, R"("})");
  };
  const std::string acquire = R"({"limit":"in_flight","key":"k"})";
  auto [status, shared] = post("/v1/acquire", acquire);
  ASSERT_EQ(status, 200) << shared;
  EXPECT_EQ(shared["source"], "redis");

  (*redis)->Kill();
  std::vector<std::string> leases;
  for (int i = 0; i < 3; ++i) {
    auto [code, reply] = post("/v1/acquire", acquire);
    EXPECT_EQ(reply["source"], "fallback") << reply;
    EXPECT_EQ(reply["limit"], 2) << reply;
    if (i < 2) {
      ASSERT_EQ(code, 200) << reply;
      leases.push_back(reply["lease"].get<std::string>());
    } else {
      EXPECT_EQ(code, 429) << reply;
    }
  }
  auto [renewed, renewal] = post("/v1/renew", held("in_flight", leases[0]));
  EXPECT_EQ(renewed, 200) << renewal;
  auto [released, release] = post("/v1/release", held("in_flight", leases[1]));
  EXPECT_EQ(released, 200) << release;
  EXPECT_EQ(release["released"], true) << release;
  EXPECT_EQ(post("/v1/acquire", acquire).first, 200);
  // The lease Redis granted: only Redis can free it.
  auto [unreachable, error] =
      post("/v1/release", held("in_flight", shared["lease"].get<std::string>()));
  EXPECT_EQ(unreachable, 503) << error;
  EXPECT_THAT(error["error"].get<std::string>(), HasSubstr("'in_flight'"));

  int local = 0;
  for (int i = 0; i < 5; ++i) {
    if (post("/v1/acquire", R"({"limit":"local_slots","key":"k"})").first == 200) ++local;
  }
  EXPECT_EQ(local, 3);
  auto [closed, refusal] = post("/v1/acquire", R"({"limit":"closed_slots","key":"k"})");
  EXPECT_EQ(closed, 503) << refusal;
  EXPECT_EQ(refusal["reason"], "store_unavailable") << refusal;
  EXPECT_FALSE(refusal.contains("lease")) << refusal;
  EXPECT_EQ(server->Stop(), 0);
}

// The issue's scenario, scaled: 4 servers on one Redis, limits of 10 a second, a greedy user
// offering 4x the rate and a quiet one offering 44% of it, spread round-robin over the
// servers; Redis killed for 2.5 s and restarted empty.
TEST(OutageTest, AfterRedisRestartsEmptyUsersGetTheLimitAndTheRunStaysWithinIt) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kConfig[] = R"(limits:
  bucket:
    algorithm: token_bucket
    capacity: 5
    refill_per_second: 10
    timeout: 100ms
  fixed:
    algorithm: fixed_window
    limit: 10
    window: 1s
    timeout: 100ms
  sliding:
    algorithm: sliding_window
    limit: 10
    window: 1s
    timeout: 100ms
)";
  const std::vector<std::string> limits = {"bucket", "fixed", "sliding"};
  constexpr int kServers = 4;
  std::vector<std::unique_ptr<ServeProcess>> servers;
  for (int i = 0; i < kServers; ++i) {
    servers.push_back(ServeProcess::Start(kConfig, {"--redis", (*redis)->url()}));
    ASSERT_NE(servers.back(), nullptr);
  }
  // Every server must have learned N = 4 before Redis goes away.
  for (auto& server : servers) {
    const Clock::time_point start = Clock::now();
    bool learned = false;
    while (!learned && MillisSince(start) < 10'000) {
      HttpTestClient client(server->port());
      auto metrics = client.Send(http::verb::get, "/metrics");
      learned = metrics.has_value() &&
                metrics->body().find("\ntollgate_instances 4\n") != std::string::npos;
      if (!learned) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_TRUE(learned) << server->log();
  }

  std::vector<std::unique_ptr<HttpTestClient>> clients;
  for (auto& server : servers) clients.push_back(std::make_unique<HttpTestClient>(server->port()));
  struct Counts {
    int offered = 0;
    int allowed = 0;
  };
  // [limit][user][phase]: phase 0 before, 1 outage, 2 the 3 s after recovery.
  std::map<std::string, std::map<std::string, std::array<Counts, 3>>> counts;
  int errors = 0;
  int round = 0;
  int phase = 0;
  auto run_until = [&](Clock::time_point end) {
    constexpr auto kRound = std::chrono::milliseconds(25);  // greedy: 40/s, 4x the rate
    Clock::time_point next = Clock::now();
    while (Clock::now() < end) {
      std::vector<std::string> users = {"user:greedy"};
      if (round % 9 == 1) users.push_back("user:quiet");  // 4.4/s, over every server
      HttpTestClient& client = *clients[round % kServers];
      for (const std::string& user : users) {
        for (const std::string& limit : limits) {
          auto response =
              client.Check(absl::StrCat(R"({"limit":")", limit, R"(","key":")", user, R"("})"));
          Counts& c = counts[limit][user][phase];
          ++c.offered;
          if (!response.has_value() ||
              (response->result_int() != 200 && response->result_int() != 429)) {
            ++errors;
            continue;
          }
          c.allowed += response->result_int() == 200 ? 1 : 0;
        }
      }
      ++round;
      next += kRound;
      std::this_thread::sleep_until(next);
    }
  };
  const Clock::time_point run_start = Clock::now();
  run_until(Clock::now() + std::chrono::milliseconds(1500));
  (*redis)->Kill();
  phase = 1;
  run_until(Clock::now() + std::chrono::milliseconds(2500));
  ASSERT_TRUE((*redis)->Restart().ok());
  phase = 2;
  run_until(Clock::now() + std::chrono::seconds(3));
  const double run_seconds = static_cast<double>(MillisSince(run_start)) / 1000;
  EXPECT_EQ(errors, 0);

  for (const std::string& limit : limits) {
    const auto& greedy = counts[limit]["user:greedy"];
    const auto& quiet = counts[limit]["user:quiet"];
    const std::string summary = (absl::StrCat(
        limit, ": greedy allowed ", greedy[0].allowed, "/", greedy[0].offered, ", ",
        greedy[1].allowed, "/", greedy[1].offered, ", ", greedy[2].allowed, "/", greedy[2].offered,
        "; quiet ", quiet[2].allowed, "/", quiet[2].offered, " after, over ", run_seconds, " s"));
    SCOPED_TRACE(summary);
    std::printf("%s\n", summary.c_str());
    // Over the limit: about the limit after recovery (>= 60% of 10/s over 3 s), not zero.
    EXPECT_GE(greedy[2].allowed, 18);
    // Within the limit: (almost) everything after recovery.
    EXPECT_GE(quiet[2].allowed, quiet[2].offered * 9 / 10);
    // The whole run: what the limit permits over its length (10 a second, plus the bucket's
    // capacity or the window partly begun), + 10%. (The fallback's local shares start full:
    // their bursts, N x capacity / N, are the outage's excess, which reconciliation does not
    // take back; docs/resilience.md.)
    const double permit = 10 * run_seconds + (limit == "bucket" ? 5 : 10);
    EXPECT_LE(greedy[0].allowed + greedy[1].allowed + greedy[2].allowed, permit * 1.1);
  }

  // Each limit's fail_open share (shares: demand, the default) is a gauge.
  auto metrics = HttpTestClient(servers[0]->port()).Send(http::verb::get, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body(), HasSubstr("\ntollgate_fallback_share{limit=\"bucket\"} 0."));
  for (auto& server : servers) EXPECT_EQ(server->Stop(), 0);
  // Every state change is logged, once per change.
  const std::string log = servers[0]->log();
  EXPECT_THAT(log, HasSubstr("live instances: "));
  EXPECT_THAT(log, HasSubstr("circuit breaker opened after"));
  EXPECT_THAT(log, HasSubstr("fallback started: decisions come from on_store_failure policies "
                             "(fail_open shares with N=4: "));
  EXPECT_THAT(log, HasSubstr("redis unreachable (probe failed"));
  EXPECT_THAT(log, HasSubstr("redis reachable again"));
  EXPECT_THAT(log, HasSubstr("circuit breaker closed"));
  EXPECT_THAT(log, ::testing::ContainsRegex("fallback ended after [1-9][0-9]* decisions"));
  EXPECT_THAT(log, ::testing::ContainsRegex(
                       "reconciled fallback consumption into redis: [1-9][0-9]* items added"));
}

// An Envoy rule that fails closed answers the outage, not its window: OVER_LIMIT with
// duration_until_reset the outage's retry time (not the 59 minutes left of an hourly
// window), the reason in the response's dynamic_metadata, and 503 over POST /json. A
// fail_open rule in the same domain keeps answering OK from the local share.
TEST(OutageTest, AFailClosedEnvoyRuleAnswersTheOutageOverGrpcAndJson) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kConfig[] = R"(domain: login
descriptors:
  - key: phone
    rate_limit: {unit: hour, requests_per_unit: 5, on_store_failure: fail_closed, timeout: 500ms}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100, timeout: 500ms}
)";
  // Deadlines a loaded machine keeps: the answers before the outage must come from Redis.
  auto server = ServeProcess::Start(kConfig, {"--redis", (*redis)->url(), "--instances", "1"});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->grpc_port(), 0) << server->log();
  auto stub = RateLimitService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server->grpc_port()), grpc::InsecureChannelCredentials()));
  auto request = [](const std::string& key) {
    RateLimitRequest r;
    r.set_domain("login");
    auto* entry = r.add_descriptors()->add_entries();
    entry->set_key(key);
    entry->set_value("42");
    return r;
  };
  auto call = [&](const std::string& key) {
    RateLimitResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    const grpc::Status status = stub->ShouldRateLimit(&context, request(key), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  const std::string json_body =
      R"({"domain":"login","descriptors":[{"entries":[{"key":"phone","value":"42"}]}]})";

  RateLimitResponse before = call("phone");
  ASSERT_EQ(before.overall_code(), RateLimitResponse::OK);
  EXPECT_GT(before.statuses(0).duration_until_reset().seconds(), 0);
  EXPECT_TRUE(before.dynamic_metadata().fields().empty());

  (*redis)->Kill();
  ASSERT_GE(MillisUntilReadyz(server->port(), 503, 5000), 0) << server->log();
  RateLimitResponse refused = call("phone");
  ASSERT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT) << refused.DebugString();
  ASSERT_EQ(refused.statuses_size(), 1);
  EXPECT_EQ(refused.statuses(0).limit_remaining(), 0u);
  // The fail_closed retry time (1 s by default), in whole seconds: not the hour's rest.
  EXPECT_GE(refused.statuses(0).duration_until_reset().seconds(), 1);
  EXPECT_LE(refused.statuses(0).duration_until_reset().seconds(), 2);
  const auto& fields = refused.dynamic_metadata().fields();
  ASSERT_TRUE(fields.contains("reason")) << refused.DebugString();
  EXPECT_EQ(fields.at("reason").string_value(), "store_unavailable");
  EXPECT_THAT(fields.at("limit").string_value(), HasSubstr("phone"));  // the rule's limit
  EXPECT_EQ(call("user").overall_code(), RateLimitResponse::OK);       // fail_open: the local share

  HttpTestClient client(server->port());
  auto json = client.Send(http::verb::post, "/json", json_body);
  ASSERT_TRUE(json.has_value());
  EXPECT_EQ(json->result_int(), 503) << json->body();
  EXPECT_THAT(json->body(), HasSubstr("store_unavailable"));

  ASSERT_TRUE((*redis)->Restart().ok());
  ASSERT_GE(MillisUntilReadyz(server->port(), 200, 5000), 0) << server->log();
  EXPECT_EQ(call("phone").overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(server->Stop(), 0);
}

// The tollgate_instances gauge of `server` once it reads `want`, or its last value after 10 s.
int64_t InstancesOnceThey(ServeProcess& server, int64_t want) {
  const Clock::time_point start = Clock::now();
  HttpTestClient client(server.port());
  int64_t seen = -1;
  while (MillisSince(start) < 10'000) {
    auto metrics = client.Send(http::verb::get, "/metrics");
    if (metrics.has_value()) {
      std::smatch match;
      const std::string body = metrics->body();
      if (std::regex_search(body, match, std::regex(R"(\ntollgate_instances (\d+))"))) {
        seen = std::stoll(match[1]);
        if (seen == want) return seen;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return seen;
}

// N counts the instances that enforce the same limits: an Envoy-only server on the same
// Redis is not one of a `limits:` fleet's, so it does not shrink the fleet's outage shares.
TEST(OutageTest, TheFallbackShareCountsOnlyInstancesWithTheSameLimits) {
  auto redis = RedisServer::Start();
  ASSERT_TRUE(redis.ok()) << redis.status();
  constexpr char kLimits[] = R"(limits:
  api:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 5
)";
  constexpr char kEnvoy[] = R"(domain: edge
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 10}
)";
  auto first = ServeProcess::Start(kLimits, {"--redis", (*redis)->url()});
  auto second = ServeProcess::Start(kLimits, {"--redis", (*redis)->url()});
  auto envoy = ServeProcess::Start(kEnvoy, {"--redis", (*redis)->url()});
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_NE(envoy, nullptr);
  EXPECT_EQ(InstancesOnceThey(*first, 2), 2) << first->log();
  EXPECT_EQ(InstancesOnceThey(*second, 2), 2);
  EXPECT_EQ(InstancesOnceThey(*envoy, 1), 1) << envoy->log();
  EXPECT_EQ(envoy->Stop(), 0);
  EXPECT_EQ(second->Stop(), 0);
  EXPECT_EQ(InstancesOnceThey(*first, 1), 1);
  EXPECT_EQ(first->Stop(), 0);
}

}  // namespace
}  // namespace tollgate
