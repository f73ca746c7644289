// Copyright tollgate authors. Metrics rendering (Prometheus text 0.0.4) and the handler's
// operational endpoints (/metrics, /readyz) and limiter swap, without sockets.
#include "src/server/metrics.h"

#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/http_handler.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"

namespace tollgate::server {
namespace {

using ::testing::HasSubstr;

// The value of the sample whose line starts with `series` ("name{labels}"), or nullopt.
std::optional<double> Sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

// Checks `text` against the exposition format; returns the problems found.
std::vector<std::string> FormatProblems(const std::string& text) {
  std::vector<std::string> problems;
  const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")"
      R"((,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? )"
      R"((-?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?|\+Inf|-Inf|NaN))");
  const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+)");
  const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram))");
  std::set<std::string> helped, typed, finished;
  std::map<std::string, std::string> types;
  std::string current;  // the family whose samples are being read
  std::istringstream lines(text);
  std::string line;
  if (text.empty() || text.back() != '\n') problems.push_back("does not end in a newline");
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_match(line, match, help)) {
      if (!helped.insert(match[1]).second) problems.push_back("HELP twice: " + line);
      continue;
    }
    if (std::regex_match(line, match, type)) {
      if (!typed.insert(match[1]).second) problems.push_back("TYPE twice: " + line);
      types[match[1]] = match[2];
      continue;
    }
    if (!std::regex_match(line, match, sample)) {
      problems.push_back("not a sample: " + line);
      continue;
    }
    std::string family = match[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string base = family.substr(0, family.size() - std::string(suffix).size());
      if (family.ends_with(suffix) && types.count(base) && types[base] == "histogram") {
        family = base;
      }
    }
    if (!typed.contains(family)) problems.push_back("sample before its TYPE: " + line);
    if (family != current) {
      if (finished.contains(family)) problems.push_back("family not contiguous: " + line);
      if (!current.empty()) finished.insert(current);
      current = family;
    }
  }
  for (const std::string& family : typed) {
    if (!helped.contains(family)) problems.push_back("no HELP for " + family);
  }
  return problems;
}

Decision Allowed(DecisionSource source) {
  Decision decision;
  decision.allowed = true;
  decision.source = source;
  return decision;
}

Decision Refused(DecisionSource source) {
  Decision decision;
  decision.allowed = false;
  decision.reason = DenyReason::kOverLimit;
  decision.source = source;
  return decision;
}

TEST(MetricsTest, RendersValidPrometheusText) {
  Metrics metrics;
  Limit plain;
  plain.name = "api_per_user";
  Limit odd;
  odd.name = "quote\"back\\slash\nnewline";
  metrics.RegisterLimits({plain, odd});
  metrics.RecordDecision("api_per_user", Allowed(DecisionSource::kMemory));
  metrics.RecordDecision(odd.name, Refused(DecisionSource::kRedis));
  metrics.RecordCheckError("api_per_user");
  metrics.ObserveCheckDuration(CheckApi::kHttp, 120);
  metrics.ObserveCheckDuration(CheckApi::kEnvoy, 3'000'000);
  metrics.RecordReload(true);
  metrics.set_instance_count([] { return 3; });
  metrics.set_fallback_shares([] {
    return std::vector<std::pair<std::string, double>>{{"api_per_user", 0.5}};
  });

  const std::string text = metrics.Render();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty()) << text;
  EXPECT_THAT(text, HasSubstr(R"(limit="quote\"back\\slash\nnewline")"));
  EXPECT_EQ(Sample(text, R"(tollgate_decisions_total{limit="quote\"back\\slash\nnewline",)"
                         R"(source="redis",outcome="refused"})"),
            1);
  EXPECT_EQ(Sample(text, "tollgate_instances"), 3);
  EXPECT_EQ(Sample(text, R"(tollgate_fallback_share{limit="api_per_user"})"), 0.5);
  EXPECT_EQ(Sample(text, R"(tollgate_config_reloads_total{result="success"})"), 1);
  EXPECT_EQ(Sample(text, R"(tollgate_config_reloads_total{result="failure"})"), 0);
  // No store statistics without a resilient store.
  EXPECT_THAT(text, ::testing::Not(HasSubstr("tollgate_circuit_breaker_state")));
}

TEST(MetricsTest, XdsFamiliesOnceTheClientStarted) {
  Metrics metrics;
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("tollgate_xds_")));
  metrics.SetXdsConnected(false);
  std::string text = metrics.Render();
  EXPECT_EQ(Sample(text, "tollgate_xds_connected"), 0);
  EXPECT_EQ(Sample(text, "tollgate_xds_config_applied_total"), 0);
  // No version before one is applied.
  EXPECT_THAT(text, ::testing::Not(HasSubstr("tollgate_xds_config_version_info")));

  metrics.SetXdsConnected(true);
  metrics.RecordXdsApplied("v\"7", 1'700'000'000'250'000);
  metrics.RecordXdsRejected();
  metrics.RecordXdsRejected();
  metrics.RecordXdsStreamRestart();
  text = metrics.Render();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty()) << text;
  EXPECT_EQ(Sample(text, "tollgate_xds_connected"), 1);
  EXPECT_EQ(Sample(text, "tollgate_xds_config_applied_total"), 1);
  EXPECT_EQ(Sample(text, "tollgate_xds_config_rejected_total"), 2);
  EXPECT_EQ(Sample(text, "tollgate_xds_stream_restarts_total"), 1);
  EXPECT_EQ(Sample(text, R"(tollgate_xds_config_version_info{version="v\"7"})"), 1);
  EXPECT_EQ(Sample(text, "tollgate_xds_last_applied_timestamp_seconds"), 1'700'000'000);
}

TEST(MetricsTest, TracingFamiliesOnlyWhenTracing) {
  Metrics metrics;
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("tollgate_tracing")));
  metrics.set_tracing_stats([] {
    return TracingStats{.spans_exported = 10,
                        .spans_dropped_queue_full = 2,
                        .spans_dropped_export_failed = 3,
                        .exports_succeeded = 4,
                        .exports_rejected = 5,
                        .exports_timed_out = 6,
                        .exports_unreachable = 7,
                        .queued_spans = 8};
  });
  const std::string text = metrics.Render();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty()) << text;
  EXPECT_EQ(Sample(text, "tollgate_tracing_spans_exported_total"), 10);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_spans_dropped_total{reason="queue_full"})"), 2);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_spans_dropped_total{reason="export_failed"})"), 3);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_exports_total{result="success"})"), 4);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_exports_total{result="rejected"})"), 5);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_exports_total{result="timeout"})"), 6);
  EXPECT_EQ(Sample(text, R"(tollgate_tracing_exports_total{result="unreachable"})"), 7);
  EXPECT_EQ(Sample(text, "tollgate_tracing_queued_spans"), 8);
}

TEST(MetricsTest, DurableWaitFamiliesWithTheRedisStore) {
  Metrics metrics;
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("tollgate_durable")));
  metrics.set_durable_waits([] {
    DurableWaitStats stats;
    stats.waits = 4;
    stats.wait_timeouts = 1;
    stats.calls_confirmed = 30;
    stats.calls_unconfirmed = 2;
    stats.wait_latency.counts[1] = 3;      // (50 µs, 100 µs]
    stats.wait_latency.counts.back() = 1;  // over 100 ms
    stats.wait_latency.count = 4;
    stats.wait_latency.sum_micros = 250'000;
    return stats;
  });
  const std::string text = metrics.Render();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty()) << text;
  EXPECT_EQ(Sample(text, "tollgate_durable_waits_total"), 4);
  EXPECT_EQ(Sample(text, "tollgate_durable_wait_timeouts_total"), 1);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_calls_total{result="confirmed"})"), 30);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_calls_total{result="unconfirmed"})"), 2);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_wait_seconds_bucket{le="5e-05"})"), 0);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_wait_seconds_bucket{le="0.0001"})"), 3);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_wait_seconds_bucket{le="0.1"})"), 3);
  EXPECT_EQ(Sample(text, R"(tollgate_durable_wait_seconds_bucket{le="+Inf"})"), 4);
  EXPECT_EQ(Sample(text, "tollgate_durable_wait_seconds_count"), 4);
  EXPECT_EQ(Sample(text, "tollgate_durable_wait_seconds_sum"), 0.25);
}

TEST(MetricsTest, TheValidatorCatchesBrokenText) {
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a counter\na{l=\"x\"y\"} 1\n"),
              ::testing::Not(::testing::IsEmpty()));
  EXPECT_THAT(FormatProblems("# HELP a x\n# TYPE a counter\n# TYPE a counter\na 1\n"),
              ::testing::Not(::testing::IsEmpty()));
  EXPECT_THAT(FormatProblems("a 1\n"), ::testing::Not(::testing::IsEmpty()));
}

TEST(MetricsTest, CountsEachDecisionByLimitSourceAndOutcome) {
  Metrics metrics;
  metrics.RegisterLimitNames({"a", "b"});
  for (int i = 0; i < 3; ++i) metrics.RecordDecision("a", Allowed(DecisionSource::kMemory));
  for (int i = 0; i < 2; ++i) metrics.RecordDecision("a", Refused(DecisionSource::kMemory));
  metrics.RecordDecision("a", Refused(DecisionSource::kMemory), /*shadow=*/true);
  metrics.RecordDecision("b", Allowed(DecisionSource::kFallback));
  // Never registered: counted under limit="" rather than lost.
  metrics.RecordDecision("gone", Allowed(DecisionSource::kMemory));

  const std::string text = metrics.Render();
  auto decisions = [&](const std::string& limit, const std::string& source,
                       const std::string& outcome) {
    return Sample(text, "tollgate_decisions_total{limit=\"" + limit + "\",source=\"" + source +
                            "\",outcome=\"" + outcome + "\"}");
  };
  EXPECT_EQ(decisions("a", "memory", "allowed"), 3);
  EXPECT_EQ(decisions("a", "memory", "refused"), 2);
  EXPECT_EQ(decisions("a", "memory", "shadow_refused"), 1);
  EXPECT_EQ(decisions("a", "redis", "allowed"), 0);
  EXPECT_EQ(decisions("b", "fallback", "allowed"), 1);
  EXPECT_EQ(decisions("", "memory", "allowed"), 1);
}

TEST(MetricsTest, RatelimitFamiliesUseThePeersNamesAndLabels) {
  Metrics metrics;
  metrics.RegisterLimitNames({"rl.user", "rl.path_/api.user#2", "tollgate_limit"});
  EXPECT_THAT(metrics.Render(), ::testing::Not(HasSubstr("ratelimit_service")));  // off by default
  metrics.EnableRatelimitFamilies(0.8);
  Decision allowed = Allowed(DecisionSource::kRedis);
  allowed.limit = 10;
  allowed.remaining = 5;  // 5 of 10 used: within, not near (threshold 8)
  metrics.RecordRatelimitHits("rl.user", 1, allowed, false);
  allowed.remaining = 1;  // 9 used: near
  metrics.RecordRatelimitHits("rl.user", 2, allowed, false);
  metrics.RecordRatelimitHits("rl.user", 3, Refused(DecisionSource::kRedis), false);
  metrics.RecordRatelimitHits("rl.path_/api.user#2", 4, Refused(DecisionSource::kRedis), true);
  metrics.RecordRatelimitCallError();
  metrics.RecordInitialLoad();
  metrics.RecordReload(true);
  metrics.RecordReload(false);

  const std::string text = metrics.Render();
  EXPECT_THAT(FormatProblems(text), ::testing::IsEmpty());
  const std::string user = R"({domain="rl",key1="user"})";
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_total_hits" + user), 6);
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_within_limit" + user), 3);
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_near_limit" + user), 2);
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_over_limit" + user), 3);
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_shadow_mode" + user), 0);
  // A nested rule: key1 and key2, without the "#2" that tells two rules of one key apart.
  const std::string nested = R"({domain="rl",key1="path_/api",key2="user"})";
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_over_limit" + nested), 4);
  EXPECT_EQ(Sample(text, "ratelimit_service_rate_limit_shadow_mode" + nested), 4);
  // A limit with no hit has no series.
  EXPECT_THAT(text, ::testing::Not(HasSubstr(R"(domain="tollgate_limit")")));
  EXPECT_EQ(Sample(text, "ratelimit_service_config_load_success"), 2);
  EXPECT_EQ(Sample(text, "ratelimit_service_config_load_error"), 1);
  EXPECT_EQ(Sample(text, R"(ratelimit_service_should_rate_limit_error{err_type="redis_error"})"),
            1);
}

TEST(MetricsTest, ConcurrentRecordingLosesNothing) {
  Metrics metrics;
  metrics.RegisterLimitNames({"a"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        metrics.RecordDecision("a", Allowed(DecisionSource::kMemory));
        metrics.ObserveCheckDuration(CheckApi::kHttp, 10);
        // Registration (a reload) while others record.
        if (i == 500) metrics.RegisterLimitNames({"late" + std::to_string(t)});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const std::string text = metrics.Render();
  EXPECT_EQ(
      Sample(text, R"(tollgate_decisions_total{limit="a",source="memory",outcome="allowed"})"),
      4000);
  EXPECT_EQ(Sample(text, R"(tollgate_check_duration_seconds_count{api="http"})"), 4000);
  EXPECT_TRUE(Sample(text, R"(tollgate_check_errors_total{limit="late3"})").has_value());
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  Metrics metrics;
  metrics.ObserveCheckDuration(CheckApi::kHttp, 40);         // <= 50 us
  metrics.ObserveCheckDuration(CheckApi::kHttp, 50);         // <= 50 us (le is inclusive)
  metrics.ObserveCheckDuration(CheckApi::kHttp, 3'000);      // <= 5 ms
  metrics.ObserveCheckDuration(CheckApi::kHttp, 2'000'000);  // over 1 s
  const std::string text = metrics.Render();
  auto bucket = [&](const std::string& le) {
    return Sample(text, R"(tollgate_check_duration_seconds_bucket{api="http",le=")" + le + "\"}");
  };
  EXPECT_EQ(bucket("5e-05"), 2);
  EXPECT_EQ(bucket("0.0025"), 2);
  EXPECT_EQ(bucket("0.005"), 3);
  EXPECT_EQ(bucket("1"), 3);
  EXPECT_EQ(bucket("+Inf"), 4);
  EXPECT_EQ(Sample(text, R"(tollgate_check_duration_seconds_count{api="http"})"), 4);
  EXPECT_NEAR(*Sample(text, R"(tollgate_check_duration_seconds_sum{api="http"})"), 2.00309, 1e-6);
  EXPECT_EQ(Sample(text, R"(tollgate_check_duration_seconds_count{api="envoy"})"), 0);
}

namespace http = boost::beast::http;

class HandlerOpsTest : public ::testing::Test {
 protected:
  static LoadedConfigs Config(int64_t capacity) {
    Limit bucket;
    bucket.name = "bucket";
    bucket.numbers = {
        .algorithm = Algorithm::kFixedWindow, .limit = capacity, .window_micros = 3'600'000'000};
    return LoadedConfigs{{bucket}, {}};
  }
  static std::shared_ptr<CheckService> MakeService(Clock* clock,
                                                   const std::shared_ptr<Store>& store,
                                                   int64_t capacity, Metrics* metrics = nullptr) {
    LimiterFactory new_limiter;  // empty: the service's own memory store, on `clock`
    if (store != nullptr) {
      new_limiter = [store](std::vector<Limit> limits) {
        return Limiter::Create({.limits = std::move(limits), .store = store});
      };
    }
    auto service = CheckService::Create({.new_limiter = std::move(new_limiter),
                                         .clock = clock,
                                         .metrics = metrics,
                                         .max_override_limits = 1000},
                                        Config(capacity));
    EXPECT_TRUE(service.ok()) << service.status();
    return std::shared_ptr<CheckService>(*std::move(service));
  }

  HttpResponse Send(HttpHandler& handler, http::verb method, const std::string& target,
                    std::string body = "") {
    HttpRequest request(method, target, 11);
    request.insert(http::field::host, "tollgate");  // HTTP/1.1 requires it
    request.body() = std::move(body);
    std::optional<HttpResponse> response;
    handler.Handle(request, [&](HttpResponse reply) { response = std::move(reply); });
    EXPECT_TRUE(response.has_value());
    return response.has_value() ? *std::move(response) : HttpResponse();
  }

  SimulatedClock clock_;
};

TEST_F(HandlerOpsTest, MetricsCountTheChecksItAnswered) {
  Metrics metrics;
  HttpHandler handler(MakeService(&clock_, nullptr, 2, &metrics));
  handler.set_metrics(&metrics);
  for (int i = 0; i < 3; ++i) {
    HttpResponse check =
        Send(handler, http::verb::post, "/v1/check", R"({"limit":"bucket","key":"k"})");
    EXPECT_NE(check.result(), http::status::bad_request) << check.body();
  }
  HttpResponse response = Send(handler, http::verb::get, "/metrics");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_THAT(std::string(response[http::field::content_type]), HasSubstr("version=0.0.4"));
  EXPECT_THAT(FormatProblems(response.body()), ::testing::IsEmpty());
  EXPECT_EQ(Sample(response.body(),
                   R"(tollgate_decisions_total{limit="bucket",source="memory",outcome="allowed"})"),
            2);
  EXPECT_EQ(Sample(response.body(),
                   R"(tollgate_decisions_total{limit="bucket",source="memory",outcome="refused"})"),
            1);
  EXPECT_EQ(Sample(response.body(), R"(tollgate_check_duration_seconds_count{api="http"})"), 3);
  EXPECT_EQ(Send(handler, http::verb::post, "/metrics").result(), http::status::method_not_allowed);
}

TEST_F(HandlerOpsTest, ReadyzFollowsTheReadinessCheck) {
  HttpHandler handler(MakeService(&clock_, nullptr, 2));
  EXPECT_EQ(Send(handler, http::verb::get, "/readyz").result(), http::status::ok);
  absl::Status ready = absl::UnavailableError("store down and limit 'x' fails closed");
  handler.set_readiness([&] { return ready; });
  HttpResponse down = Send(handler, http::verb::get, "/readyz");
  EXPECT_EQ(down.result(), http::status::service_unavailable);
  EXPECT_THAT(down.body(), HasSubstr(R"("reason":"store down and limit 'x' fails closed")"));
  ready = absl::OkStatus();
  EXPECT_EQ(Send(handler, http::verb::get, "/readyz").result(), http::status::ok);
  // A note is said by a ready answer only.
  std::string note = "no config from xDS yet: answering OK with no limits";
  handler.set_readiness_note([&] { return note; });
  HttpResponse noted = Send(handler, http::verb::get, "/readyz");
  EXPECT_EQ(noted.result(), http::status::ok);
  EXPECT_EQ(noted.body(),
            R"({"note":"no config from xDS yet: answering OK with no limits","status":"ready"})"
            "\n");
  note.clear();
  EXPECT_EQ(Send(handler, http::verb::get, "/readyz").body(), "{\"status\":\"ready\"}\n");
}

TEST_F(HandlerOpsTest, HealthcheckAnswersAsThePeerDoes) {
  HttpHandler handler(MakeService(&clock_, nullptr, 2));
  HttpResponse healthy = Send(handler, http::verb::get, "/healthcheck");
  EXPECT_EQ(healthy.result(), http::status::ok);
  EXPECT_EQ(healthy.body(), "OK");
  absl::Status health = absl::UnavailableError("draining: a stop signal came");
  handler.set_health_check([&] { return health; });
  HttpResponse draining = Send(handler, http::verb::get, "/healthcheck");
  EXPECT_EQ(draining.result(), http::status::internal_server_error);
  EXPECT_THAT(draining.body(), HasSubstr("draining"));
  EXPECT_EQ(Send(handler, http::verb::post, "/healthcheck").result(),
            http::status::method_not_allowed);
}

TEST_F(HandlerOpsTest, AMetricsOnlyListenerServesItsPathAndNothingElse) {
  Metrics metrics;
  HttpHandler handler(MakeService(&clock_, nullptr, 2, &metrics));
  handler.set_metrics(&metrics);
  handler.set_metrics_only("/stats/prometheus");
  HttpResponse scraped = Send(handler, http::verb::get, "/stats/prometheus");
  EXPECT_EQ(scraped.result(), http::status::ok);
  EXPECT_THAT(scraped.body(), HasSubstr("tollgate_build_info"));
  EXPECT_EQ(Send(handler, http::verb::get, "/metrics").result(), http::status::not_found);
  EXPECT_EQ(
      Send(handler, http::verb::post, "/v1/check", R"({"limit":"bucket","key":"k"})").result(),
      http::status::not_found);
}

TEST_F(HandlerOpsTest, AReloadAppliesTheNewLimitsAndKeepsTheCounters) {
  auto store = MemoryStore::Create({.clock = &clock_});
  ASSERT_TRUE(store.ok()) << store.status();
  std::shared_ptr<Store> shared(*std::move(store));
  std::shared_ptr<CheckService> service = MakeService(&clock_, shared, 2);
  HttpHandler handler(service);
  const std::string body = R"({"limit":"bucket","key":"k"})";
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(), http::status::ok);
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(), http::status::ok);
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(),
            http::status::too_many_requests);
  // Limit 2 -> 4 on the same store: the 2 requests counted in this window stay counted.
  ASSERT_TRUE(service->Reload(Config(4)).ok());
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(), http::status::ok);
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(), http::status::ok);
  EXPECT_EQ(Send(handler, http::verb::post, "/v1/check", body).result(),
            http::status::too_many_requests);
}

}  // namespace
}  // namespace tollgate::server
