// Copyright tollgate authors. The HTTP API without sockets: a real limiter on a simulated
// clock, so the numbers in headers and bodies are exact.
#include "src/server/http_handler.h"

#include <memory>
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"

namespace tollgate::server {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;

class HttpHandlerTest : public ::testing::Test {
 protected:
  HttpHandlerTest() {
    Limit bucket;
    bucket.name = "bucket";
    bucket.numbers = {.algorithm = Algorithm::kTokenBucket, .capacity = 3, .refill_per_second = 1};
    Limit window;
    window.name = "window";
    window.numbers = {
        .algorithm = Algorithm::kFixedWindow, .limit = 5, .window_micros = 60'000'000};
    auto service = CheckService::Create(CheckServiceOptions{nullptr, &clock_, nullptr, 1000},
                                        LoadedConfigs{{bucket, window}, {}});
    EXPECT_TRUE(service.ok()) << service.status();
    handler_ = std::make_unique<HttpHandler>(std::shared_ptr<CheckService>(*std::move(service)));
  }

  HttpResponse Send(http::verb method, const std::string& target, std::string body = "") {
    HttpRequest request(method, target, 11);
    request.insert(http::field::host, "tollgate");  // HTTP/1.1 requires it
    request.body() = std::move(body);
    std::optional<HttpResponse> response;
    handler_->Handle(request, [&](HttpResponse r) { response = std::move(r); });
    EXPECT_TRUE(response.has_value()) << "the memory store answers inline";
    return response.value_or(HttpResponse());
  }

  HttpResponse Check(std::string body) {
    return Send(http::verb::post, "/v1/check", std::move(body));
  }

  static nlohmann::json Json(const HttpResponse& response) {
    return nlohmann::json::parse(response.body(), nullptr, false);
  }

  static std::string Header(const HttpResponse& response, std::string_view name) {
    const auto value = response[boost::beast::string_view(name.data(), name.size())];
    return std::string(value.data(), value.size());
  }

  SimulatedClock clock_;
  std::unique_ptr<HttpHandler> handler_;
};

TEST_F(HttpHandlerTest, AllowedCheckCarriesBodyAndHeaders) {
  HttpResponse response = Check(R"({"limit":"bucket","key":"u1"})");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(Header(response, "Content-Type"), "application/json");
  // draft-11 by default: the limit's name is the policy's.
  EXPECT_EQ(Header(response, "RateLimit-Policy"), R"("bucket";q=3;w=3)");
  EXPECT_EQ(Header(response, "RateLimit"), R"("bucket";r=2;t=1)");
  EXPECT_EQ(Header(response, "Retry-After"), "");
  nlohmann::json json = Json(response);
  EXPECT_EQ(json["allowed"], true);
  EXPECT_EQ(json["name"], "bucket");
  EXPECT_EQ(json["limit"], 3);
  EXPECT_EQ(json["remaining"], 2);
  EXPECT_EQ(json["reset_after_ms"], 1000);
  EXPECT_EQ(json["retry_after_ms"], 0);
  EXPECT_EQ(json["source"], "memory");
  EXPECT_FALSE(json.contains("reason"));
}

TEST_F(HttpHandlerTest, OverTheLimitIs429WithRetryAfter) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Check(R"({"limit":"bucket","key":"u1"})").result(), http::status::ok);
  }
  HttpResponse response = Check(R"({"limit":"bucket","key":"u1","cost":2})");
  EXPECT_EQ(response.result(), http::status::too_many_requests);
  EXPECT_EQ(Header(response, "Retry-After"), "2");
  EXPECT_EQ(Header(response, "RateLimit"), R"("bucket";r=0;t=3)");
  nlohmann::json json = Json(response);
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["reason"], "over_limit");
  EXPECT_EQ(json["retry_after_ms"], 2000);

  clock_.AdvanceMillis(2000);
  EXPECT_EQ(Check(R"({"limit":"bucket","key":"u1","cost":2})").result(), http::status::ok);
}

TEST_F(HttpHandlerTest, CostAboveTheLimitIs429WithoutRetryAfter) {
  HttpResponse response = Check(R"({"limit":"bucket","key":"u1","cost":4})");
  EXPECT_EQ(response.result(), http::status::too_many_requests);
  EXPECT_EQ(Header(response, "Retry-After"), "");
  EXPECT_EQ(Json(response)["reason"], "cost_exceeds_limit");
}

TEST_F(HttpHandlerTest, BatchIsAllOrNothing) {
  HttpResponse refused = Check(
      R"({"checks":[{"limit":"window","key":"u1","cost":2},{"limit":"bucket","key":"u1","cost":4}]})");
  EXPECT_EQ(refused.result(), http::status::too_many_requests);
  nlohmann::json json = Json(refused);
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["name"], "bucket");
  EXPECT_EQ(json["results"][0]["allowed"], true);
  EXPECT_EQ(json["results"][1]["reason"], "cost_exceeds_limit");
  // The item that refused first, then the other limit of the batch (its fixed window is 20 s
  // in at the simulated clock's start).
  EXPECT_EQ(Header(refused, "RateLimit-Policy"), R"("bucket";q=3;w=3, "window";q=5;w=60)");
  EXPECT_EQ(Header(refused, "RateLimit"), R"("bucket";r=3;t=0, "window";r=5;t=40)");

  // Nothing was consumed from "window".
  HttpResponse peek = Check(R"({"limit":"window","key":"u1","cost":0})");
  EXPECT_EQ(Json(peek)["remaining"], 5);

  HttpResponse allowed = Check(
      R"({"checks":[{"limit":"window","key":"u1","cost":2},{"limit":"bucket","key":"u1","cost":1}]})");
  EXPECT_EQ(allowed.result(), http::status::ok);
  json = Json(allowed);
  EXPECT_EQ(json["allowed"], true);
  EXPECT_EQ(json["name"], "bucket");  // 2 left, against 3 in "window"
  EXPECT_EQ(json["remaining"], 2);
  EXPECT_EQ(json["results"][0]["remaining"], 3);
  EXPECT_EQ(Header(allowed, "RateLimit"), R"("bucket";r=2;t=1, "window";r=3;t=40)");
}

TEST_F(HttpHandlerTest, Draft07FormOnRequest) {
  handler_->set_ratelimit_headers(RateLimitHeaderFormat::kDraft07);
  HttpResponse response = Check(
      R"({"checks":[{"limit":"window","key":"u1","cost":2},{"limit":"bucket","key":"u1","cost":1}]})");
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(Header(response, "RateLimit-Policy"), "3;w=3, 5;w=60");
  EXPECT_EQ(Header(response, "RateLimit"), "limit=3, remaining=2, reset=1");
}

TEST_F(HttpHandlerTest, NoRateLimitFieldsWithNoneButRetryAfterStays) {
  handler_->set_ratelimit_headers(RateLimitHeaderFormat::kNone);
  HttpResponse allowed = Check(R"({"limit":"bucket","key":"u1","cost":3})");
  EXPECT_EQ(allowed.result(), http::status::ok);
  EXPECT_EQ(Header(allowed, "RateLimit-Policy"), "");
  EXPECT_EQ(Header(allowed, "RateLimit"), "");
  HttpResponse refused = Check(R"({"limit":"bucket","key":"u1"})");
  EXPECT_EQ(refused.result(), http::status::too_many_requests);
  EXPECT_EQ(Header(refused, "RateLimit"), "");
  EXPECT_EQ(Header(refused, "Retry-After"), "1");
}

TEST_F(HttpHandlerTest, UnknownLimitIs400NamingIt) {
  HttpResponse response =
      Check(R"({"checks":[{"limit":"bucket","key":"u"},{"limit":"nope","key":"u"}]})");
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_EQ(Json(response)["error"], "checks[1].limit: unknown limit \"nope\"");
}

TEST_F(HttpHandlerTest, BadBodyIs400) {
  HttpResponse response = Check(R"({"limit":"bucket","key":42})");
  EXPECT_EQ(response.result(), http::status::bad_request);
  EXPECT_EQ(Json(response)["error"], "key: expected a string, got 42");
}

TEST_F(HttpHandlerTest, RoutesHealthAndRejectsOtherPathsAndMethods) {
  HttpResponse health = Send(http::verb::get, "/healthz");
  EXPECT_EQ(health.result(), http::status::ok);
  EXPECT_EQ(Json(health)["status"], "ok");

  HttpResponse wrong_method = Send(http::verb::get, "/v1/check");
  EXPECT_EQ(wrong_method.result(), http::status::method_not_allowed);
  EXPECT_EQ(Header(wrong_method, "Allow"), "POST");
  EXPECT_THAT(std::string(Json(wrong_method)["error"]), HasSubstr("GET not allowed"));

  HttpResponse missing = Send(http::verb::get, "/nope?x=1");
  EXPECT_EQ(missing.result(), http::status::not_found);
  EXPECT_THAT(std::string(Json(missing)["error"]), HasSubstr("\"/nope\""));
}

}  // namespace
}  // namespace tollgate::server
