// Copyright tollgate authors. Metered work over HTTP (docs/http.md): POST /v1/charge,
// reservations (`"reserve": true`) and POST /v1/settle, leases (POST /v1/acquire, /v1/release,
// /v1/renew and concurrency items in /v1/check), against a real `tollgate serve` with its own
// Redis, and one in memory (no --redis).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "boost/beast/http.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/redis_server.h"
#include "tests/support/serve_process.h"

namespace tollgate {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;
using Client = ::tollgate::testing::HttpTestClient;
using Response = ::tollgate::testing::HttpTestResponse;
using Server = ::tollgate::testing::ServeProcess;

// Nothing refills during a test: a token per 1000 s, a window of a day. A 2 s store timeout
// keeps a loaded machine from answering from the fallback.
constexpr char kConfig[] = R"(limits:
  requests_per_minute: {algorithm: fixed_window, limit: 3, window: 1d, timeout: 2s}
  tokens_per_minute: {algorithm: token_bucket, capacity: 1000, refill_per_second: 0.001,
                      timeout: 2s, reservation_ttl: 10m}
  tokens_sliding: {algorithm: sliding_window, limit: 1000, window: 1d, timeout: 2s}
  in_flight: {algorithm: concurrency, limit: 2, lease: 1h, timeout: 2s}
)";

nlohmann::json Json(const Response& response) {
  return nlohmann::json::parse(response.body(), nullptr, false);
}

std::string Header(const Response& response, std::string_view name) {
  return ::tollgate::testing::HeaderValue(response, name);
}

// One `tollgate serve`, with Redis (true) or in memory.
class MeteredHttpTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    std::vector<std::string> args;
    if (GetParam()) {
      auto started = tollgate::testing::RedisServer::Start();
      ASSERT_TRUE(started.ok()) << started.status();
      redis_ = std::move(*started);
      args = {"--redis", redis_->url(), "--instances", "1"};
    }
    server_ = Server::Start(kConfig, args);
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<Client>(server_->port());
  }

  Response Post(const std::string& path, const std::string& body) {
    std::optional<Response> response = client_->Send(http::verb::post, path, body);
    EXPECT_TRUE(response.has_value()) << path;
    return response.has_value() ? *response : Response();
  }

  std::string Source() const { return GetParam() ? "redis" : "memory"; }

  std::unique_ptr<tollgate::testing::RedisServer> redis_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// The issue's first complaint: 900 then 300 tokens on a 1000-token limit. Reported as
// charges, both count, the limit is 200 in debt, and the next request is refused until
// refill, with retry_after_ms saying when.
TEST_P(MeteredHttpTest, AChargeLeavesDebtThatRefusesTheNextRequest) {
  for (const std::string limit : {"tokens_per_minute", "tokens_sliding"}) {
    SCOPED_TRACE(limit);
    const std::string key = absl::StrCat("tenant-", limit);
    Response first = Post("/v1/charge", absl::StrCat(R"({"limit":")", limit, R"(","key":")", key,
                                                     R"(","cost":900})"));
    ASSERT_EQ(first.result(), http::status::ok) << first.body();
    EXPECT_EQ(Json(first)["allowed"], true);
    EXPECT_EQ(Json(first)["remaining"], 100);
    EXPECT_FALSE(Json(first).contains("debt"));
    EXPECT_EQ(Json(first)["source"], Source());
    EXPECT_THAT(Header(first, "RateLimit"), HasSubstr(absl::StrCat(limit, "\";r=100")));
    EXPECT_THAT(Header(first, "RateLimit-Policy"), HasSubstr("q=1000"));

    Response second = Post("/v1/charge", absl::StrCat(R"({"limit":")", limit, R"(","key":")", key,
                                                      R"(","cost":300})"));
    ASSERT_EQ(second.result(), http::status::ok) << second.body();  // a charge is never refused
    EXPECT_EQ(Json(second)["remaining"], 0);
    EXPECT_EQ(Json(second)["debt"], 200);
    EXPECT_GT(Json(second)["retry_after_ms"].get<int64_t>(), 0);
    EXPECT_EQ(Header(second, "Retry-After"), "");

    // The next request, and a peek, are refused while the debt lasts.
    for (const int cost : {1, 0}) {
      Response next = Post("/v1/check", absl::StrCat(R"({"limit":")", limit, R"(","key":")", key,
                                                     R"(","cost":)", cost, "}"));
      EXPECT_EQ(next.result(), http::status::too_many_requests) << next.body();
      EXPECT_EQ(Json(next)["reason"], "over_limit");
      EXPECT_EQ(Json(next)["debt"], 200);
      EXPECT_GT(Json(next)["retry_after_ms"].get<int64_t>(), 1000);
      EXPECT_NE(Header(next, "Retry-After"), "");
    }
  }
}

// A batch of charges, as a gateway reports one response against several limits.
TEST_P(MeteredHttpTest, ABatchOfCharges) {
  Response batch = Post("/v1/charge", R"({"checks":[
      {"limit":"requests_per_minute","key":"t","cost":1},
      {"limit":"tokens_per_minute","key":"t","cost":1200}]})");
  ASSERT_EQ(batch.result(), http::status::ok) << batch.body();
  const nlohmann::json reply = Json(batch);
  EXPECT_EQ(reply["allowed"], true);
  ASSERT_EQ(reply["results"].size(), 2u);
  EXPECT_EQ(reply["results"][0]["remaining"], 2);
  EXPECT_EQ(reply["results"][1]["debt"], 200);
  // The one with the least left speaks for the request.
  EXPECT_EQ(reply["name"], "tokens_per_minute");
  EXPECT_THAT(Header(batch, "RateLimit"), HasSubstr("\"requests_per_minute\";r=2"));
}

TEST_P(MeteredHttpTest, BadChargesAre400AndChargeNothing) {
  struct Case {
    std::string body;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"limit":"nope","key":"k","cost":1})", "limit: unknown limit \"nope\""},
           {R"({"limit":"tokens_per_minute","key":"k","cost":-1})", "cost: expected an integer"},
           {R"({"limit":"tokens_per_minute","key":"k","cost":1000000000001})",
            "cost must be at most 1000000000000"},
           {R"({"limit":"tokens_per_minute","cost":5})", "key: missing"},
       }) {
    Response response = Post("/v1/charge", c.body);
    EXPECT_EQ(response.result(), http::status::bad_request) << c.body;
    EXPECT_THAT(Json(response)["error"].get<std::string>(), HasSubstr(c.error)) << c.body;
  }
  std::optional<Response> get = client_->Send(http::verb::get, "/v1/charge");
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->result(), http::status::method_not_allowed);
  Response peek = Post("/v1/check", R"({"limit":"tokens_per_minute","key":"k","cost":0})");
  EXPECT_EQ(Json(peek)["remaining"], 1000);
}

// GET /metrics counts the charged units, and those beyond what was left.
TEST_P(MeteredHttpTest, MetricsCountChargedUnitsAndDebt) {
  Post("/v1/charge", R"({"limit":"tokens_per_minute","key":"m","cost":900})");
  Post("/v1/charge", R"({"limit":"tokens_per_minute","key":"m","cost":300})");
  std::optional<Response> metrics = client_->Send(http::verb::get, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body(),
              HasSubstr("tollgate_charged_units_total{limit=\"tokens_per_minute\"} 1200\n"));
  EXPECT_THAT(metrics->body(),
              HasSubstr("tollgate_debt_units_total{limit=\"tokens_per_minute\"} 200\n"));
}

// A gateway's request: one request per minute and an estimate of 500 tokens reserved, all or
// nothing; then the response's actual tokens settle the reservation.
TEST_P(MeteredHttpTest, ReserveThenSettle) {
  Response admitted = Post("/v1/check", R"({"checks":[
      {"limit":"requests_per_minute","key":"r"},
      {"limit":"tokens_per_minute","key":"r","cost":500,"reserve":true}]})");
  ASSERT_EQ(admitted.result(), http::status::ok) << admitted.body();
  const nlohmann::json reply = Json(admitted);
  EXPECT_FALSE(reply["results"][0].contains("reservation"));
  ASSERT_TRUE(reply["results"][1]["reservation"].is_string()) << admitted.body();
  const std::string reservation = reply["results"][1]["reservation"];
  EXPECT_EQ(reply["results"][1]["remaining"], 500);

  // The response used 200: 300 come back.
  Response settled =
      Post("/v1/settle", absl::StrCat(R"({"reservation":")", reservation, R"(","cost":200})"));
  ASSERT_EQ(settled.result(), http::status::ok) << settled.body();
  EXPECT_EQ(Json(settled)["remaining"], 800);
  EXPECT_EQ(Json(settled)["name"], "tokens_per_minute");
  EXPECT_THAT(Header(settled, "RateLimit"), HasSubstr("\"tokens_per_minute\";r=800"));
  // Once only: a second settle changes nothing.
  Response again =
      Post("/v1/settle", absl::StrCat(R"({"reservation":")", reservation, R"(","cost":0})"));
  EXPECT_EQ(again.result(), http::status::conflict) << again.body();
  EXPECT_THAT(Json(again)["error"].get<std::string>(), HasSubstr("settled already"));
  // A reservation nobody made (another id, same limit and key) is refused.
  std::string forged = reservation;
  forged[0] = forged[0] == 'A' ? 'B' : 'A';
  Response unknown =
      Post("/v1/settle", absl::StrCat(R"({"reservation":")", forged, R"(","cost":0})"));
  EXPECT_EQ(unknown.result(), http::status::not_found) << unknown.body();
  Response peek = Post("/v1/check", R"({"limit":"tokens_per_minute","key":"r","cost":0})");
  EXPECT_EQ(Json(peek)["remaining"], 800);

  // A single reserving check answers its reservation at the top level; a settle above it
  // charges the extra, into debt if need be.
  Response one =
      Post("/v1/check", R"({"limit":"tokens_per_minute","key":"r","cost":100,"reserve":true})");
  ASSERT_EQ(one.result(), http::status::ok) << one.body();
  ASSERT_TRUE(Json(one)["reservation"].is_string()) << one.body();
  Response over = Post(
      "/v1/settle", absl::StrCat(R"({"reservation":")", Json(one)["reservation"].get<std::string>(),
                                 R"(","cost":1000})"));
  ASSERT_EQ(over.result(), http::status::ok) << over.body();
  EXPECT_EQ(Json(over)["debt"], 200);
}

TEST_P(MeteredHttpTest, BadSettlesAre400) {
  struct Case {
    std::string body;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"reservation":"nope","cost":1})", "reservation: not a reservation token"},
           {R"({"reservation":"x"})", "cost: missing"},
           {R"({"cost":1})", "reservation: missing"},
           {R"({"reservation":"AAAAAAAAAAAAAAAAAAAAAA.dG9rZW5zX3Blcl9taW51dGU.cg","cost":-2})",
            "cost: expected an integer >= 0"},
           {R"({"reservation":"AAAAAAAAAAAAAAAAAAAAAA.dG9rZW5zX3Blcl9taW51dGU.cg"})",
            "cost: missing"},
           {R"({"reservation":"a","cost":1,"extra":2})", "\"extra\": unknown field"},
       }) {
    Response response = Post("/v1/settle", c.body);
    EXPECT_EQ(response.result(), http::status::bad_request) << c.body;
    EXPECT_THAT(Json(response)["error"].get<std::string>(), HasSubstr(c.error)) << c.body;
  }
  Response charge =
      Post("/v1/charge", R"({"limit":"tokens_per_minute","key":"k","cost":1,"reserve":true})");
  EXPECT_EQ(charge.result(), http::status::bad_request);
  EXPECT_THAT(Json(charge)["error"].get<std::string>(), HasSubstr("reserve: only on"));
  // Well formed, for a limit this config has not: unknown.
  Response other = Post(
      "/v1/settle", R"({"reservation":"AAAAAAAAAAAAAAAAAAAAAA.bm8tc3VjaC1saW1pdA.cg","cost":1})");
  EXPECT_EQ(other.result(), http::status::not_found) << other.body();
}

TEST_P(MeteredHttpTest, AcquireReleaseRenew) {
  const std::string body = R"({"limit":"in_flight","key":"tenant:7"})";
  Response first = Post("/v1/acquire", body);
  ASSERT_EQ(first.result(), http::status::ok) << first.body();
  ASSERT_TRUE(Json(first)["lease"].is_string()) << first.body();
  EXPECT_EQ(Json(first)["expires_in_ms"], 3'600'000);
  EXPECT_EQ(Json(first)["remaining"], 1);
  EXPECT_EQ(Json(first)["limit"], 2);
  EXPECT_EQ(Header(first, "RateLimit-Policy"), "\"in_flight\";q=2;qu=\"concurrent-requests\"");
  const std::string lease = Json(first)["lease"];
  Response second = Post("/v1/acquire", body);
  ASSERT_EQ(second.result(), http::status::ok) << second.body();
  Response full = Post("/v1/acquire", body);
  EXPECT_EQ(full.result(), http::status::too_many_requests) << full.body();
  EXPECT_FALSE(Json(full).contains("lease"));
  EXPECT_GT(Json(full)["retry_after_ms"].get<int64_t>(), 3'500'000);
  EXPECT_NE(Header(full, "Retry-After"), "");

  const std::string held =
      absl::StrCat(R"({"limit":"in_flight","key":"tenant:7","lease":")", lease, R"("})");
  Response renewed = Post("/v1/renew", held);
  ASSERT_EQ(renewed.result(), http::status::ok) << renewed.body();
  EXPECT_EQ(Json(renewed)["lease"], lease);
  EXPECT_EQ(Json(renewed)["expires_in_ms"], 3'600'000);
  Response released = Post("/v1/release", held);
  ASSERT_EQ(released.result(), http::status::ok) << released.body();
  EXPECT_EQ(Json(released)["released"], true);
  EXPECT_EQ(Json(released)["remaining"], 1);
  // Idempotent: a second release is answered, and says it freed nothing.
  Response again = Post("/v1/release", held);
  ASSERT_EQ(again.result(), http::status::ok) << again.body();
  EXPECT_EQ(Json(again)["released"], false);
  EXPECT_EQ(Json(again)["remaining"], 1);
  Response gone = Post("/v1/renew", held);
  EXPECT_EQ(gone.result(), http::status::not_found) << gone.body();
  EXPECT_THAT(Json(gone)["error"].get<std::string>(), HasSubstr("acquire again"));
  // A peek says what is free without taking it.
  Response peek = Post("/v1/check", R"({"limit":"in_flight","key":"tenant:7","cost":0})");
  EXPECT_EQ(peek.result(), http::status::ok);
  EXPECT_EQ(Json(peek)["remaining"], 1);

  std::optional<Response> metrics = client_->Send(http::verb::get, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_THAT(metrics->body(), HasSubstr("tollgate_leases_held{limit=\"in_flight\"} 1\n"));
}

// A gateway's request as one all-or-nothing step: a request of the minute, a reservation of
// tokens and a concurrency slot.
TEST_P(MeteredHttpTest, ABatchTakesItsSlotWithTheOthersAllOrNothing) {
  const std::string batch = R"({"checks":[
      {"limit":"requests_per_minute","key":"g"},
      {"limit":"tokens_per_minute","key":"g","cost":300,"reserve":true},
      {"limit":"in_flight","key":"g"}]})";
  for (int i = 0; i < 2; ++i) {
    Response admitted = Post("/v1/check", batch);
    ASSERT_EQ(admitted.result(), http::status::ok) << admitted.body();
    const nlohmann::json reply = Json(admitted);
    EXPECT_TRUE(reply["results"][1]["reservation"].is_string());
    EXPECT_TRUE(reply["results"][2]["lease"].is_string());
    EXPECT_EQ(reply["results"][2]["expires_in_ms"], 3'600'000);
  }
  Response refused = Post("/v1/check", batch);  // no slot left
  EXPECT_EQ(refused.result(), http::status::too_many_requests) << refused.body();
  EXPECT_EQ(Json(refused)["name"], "in_flight");
  EXPECT_FALSE(Json(refused)["results"][2].contains("lease"));
  EXPECT_FALSE(Json(refused)["results"][1].contains("reservation"));
  Response rpm = Post("/v1/check", R"({"limit":"requests_per_minute","key":"g","cost":0})");
  EXPECT_EQ(Json(rpm)["remaining"], 1);  // the refused request took nothing
  Response tpm = Post("/v1/check", R"({"limit":"tokens_per_minute","key":"g","cost":0})");
  EXPECT_EQ(Json(tpm)["remaining"], 400);
}

TEST_P(MeteredHttpTest, BadLeaseRequestsAre400) {
  struct Case {
    std::string path;
    std::string body;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {"/v1/acquire", R"({"limit":"tokens_per_minute","key":"k"})",
            "is not a concurrency limit"},
           {"/v1/acquire", R"({"limit":"in_flight","key":"k","cost":2})",
            "\"cost\": unknown field"},
           {"/v1/acquire", R"({"limit":"nope","key":"k"})", "limit: unknown limit"},
           {"/v1/check", R"({"limit":"in_flight","key":"k","cost":2})", "takes one slot"},
           {"/v1/check", R"({"limit":"in_flight","key":"k","reserve":true})",
            "takes leases, not charges or reservations"},
           {"/v1/charge", R"({"limit":"in_flight","key":"k","cost":1})",
            "takes leases, not charges or reservations"},
           {"/v1/release", R"({"limit":"in_flight","key":"k"})", "lease: missing"},
           {"/v1/release", R"({"limit":"tokens_per_minute","key":"k","lease":"x"})",
            "is not a concurrency limit"},
           {"/v1/renew", R"({"limit":"in_flight","key":"","lease":"x"})", "key: must not be empty"},
       }) {
    Response response = Post(c.path, c.body);
    EXPECT_EQ(response.result(), http::status::bad_request) << c.path << " " << c.body;
    EXPECT_THAT(Json(response)["error"].get<std::string>(), HasSubstr(c.error))
        << c.path << " " << c.body;
  }
  // A lease id nobody was granted releases nothing, and the answer describes the limit as
  // its store sees it: one lease held of 2.
  Response held = Post("/v1/acquire", R"({"limit":"in_flight","key":"k"})");
  ASSERT_EQ(held.result(), http::status::ok) << held.body();
  Response forged = Post("/v1/release", R"({"limit":"in_flight","key":"k","lease":"x"})");
  EXPECT_EQ(forged.result(), http::status::ok);
  EXPECT_EQ(Json(forged)["released"], false);
  EXPECT_EQ(Json(forged)["source"], GetParam() ? "redis" : "memory") << forged.body();
  EXPECT_EQ(Json(forged)["remaining"], 1) << forged.body();
  Response renewed = Post("/v1/renew", R"({"limit":"in_flight","key":"k","lease":"x"})");
  EXPECT_EQ(renewed.result(), http::status::not_found) << renewed.body();
}

INSTANTIATE_TEST_SUITE_P(Stores, MeteredHttpTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Redis" : "Memory";
                         });

}  // namespace
}  // namespace tollgate
