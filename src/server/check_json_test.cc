// Copyright tollgate authors.
#include "src/server/check_json.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(std::string_view body) {
  absl::StatusOr<ParsedCheckBody> parsed = ParseCheckBody(body);
  EXPECT_FALSE(parsed.ok()) << body;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(parsed.status().message());
}

TEST(CheckJsonTest, ParsesOneCheckWithDefaultCost) {
  absl::StatusOr<ParsedCheckBody> parsed = ParseCheckBody(R"({"limit":"api","key":"user:42"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->batch);
  ASSERT_EQ(parsed->requests.size(), 1u);
  EXPECT_EQ(parsed->requests[0].limit, "api");
  EXPECT_EQ(parsed->requests[0].key, "user:42");
  EXPECT_EQ(parsed->requests[0].cost, 1);
}

TEST(CheckJsonTest, ParsesCostZeroAsAPeek) {
  absl::StatusOr<ParsedCheckBody> parsed = ParseCheckBody(R"({"limit":"api","key":"k","cost":0})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->requests[0].cost, 0);
}

TEST(CheckJsonTest, ParsesABatchInOrder) {
  absl::StatusOr<ParsedCheckBody> parsed =
      ParseCheckBody(R"({"checks":[{"limit":"a","key":"k1","cost":2},{"limit":"b","key":"k2"}]})");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->batch);
  ASSERT_EQ(parsed->requests.size(), 2u);
  EXPECT_EQ(parsed->requests[0].limit, "a");
  EXPECT_EQ(parsed->requests[0].cost, 2);
  EXPECT_EQ(parsed->requests[1].key, "k2");
  EXPECT_EQ(parsed->requests[1].cost, 1);
}

TEST(CheckJsonTest, RejectsMalformedJson) {
  EXPECT_THAT(ErrorOf(""), HasSubstr("empty body"));
  EXPECT_THAT(ErrorOf("{"), HasSubstr("invalid JSON"));
  EXPECT_THAT(ErrorOf("{\"limit\": \"a\",}"), HasSubstr("invalid JSON"));
  EXPECT_THAT(ErrorOf("[1,2]"), HasSubstr("expected a JSON object"));
  EXPECT_THAT(ErrorOf("\"limit\""), HasSubstr("expected a JSON object"));
  EXPECT_THAT(ErrorOf(std::string(10'000, '[') + std::string(10'000, ']')),
              HasSubstr("nested deeper"));
}

TEST(CheckJsonTest, RejectsWrongTypesNamingTheField) {
  EXPECT_EQ(ErrorOf(R"({"limit":"a","key":"k","cost":"3"})"),
            "cost: expected an integer >= 0, got \"3\"");
  EXPECT_EQ(ErrorOf(R"({"limit":"a","key":42})"), "key: expected a string, got 42");
  EXPECT_EQ(ErrorOf(R"({"limit":7,"key":"k"})"), "limit: expected a string, got 7");
  EXPECT_THAT(ErrorOf(R"({"limit":"a","key":"k","cost":1.5})"), HasSubstr("cost: expected"));
  EXPECT_THAT(ErrorOf(R"({"limit":"a","key":"k","cost":null})"), HasSubstr("cost: expected"));
  EXPECT_THAT(ErrorOf(R"({"limit":"a","key":"k","cost":true})"), HasSubstr("cost: expected"));
}

TEST(CheckJsonTest, RejectsMissingEmptyAndOutOfRangeValues) {
  EXPECT_EQ(ErrorOf(R"({"key":"k"})"), "limit: missing");
  EXPECT_EQ(ErrorOf(R"({"limit":"a"})"), "key: missing");
  EXPECT_EQ(ErrorOf(R"({"limit":"","key":"k"})"), "limit: must not be empty");
  EXPECT_EQ(ErrorOf(R"({"limit":"a","key":""})"), "key: must not be empty");
  EXPECT_EQ(ErrorOf(R"({"limit":"a","key":"k","cost":-1})"),
            "cost: expected an integer >= 0, got -1");
  EXPECT_EQ(ErrorOf(R"({"limit":"a","key":"k","cost":18446744073709551615})"), "cost: too large");
  EXPECT_THAT(ErrorOf(R"({"limit":"a","key":"k","cots":1})"), HasSubstr("\"cots\": unknown field"));
}

TEST(CheckJsonTest, KeyLengthIsCappedAtOneKibibyte) {
  std::string at_limit(kMaxKeyBytes, 'k');
  EXPECT_TRUE(ParseCheckBody(R"({"limit":"a","key":")" + at_limit + "\"}").ok());
  EXPECT_THAT(ErrorOf(R"({"limit":"a","key":")" + at_limit + "k\"}"),
              HasSubstr("key: longer than 1024 bytes"));
}

TEST(CheckJsonTest, RejectsBadBatches) {
  EXPECT_EQ(ErrorOf(R"({"checks":[]})"), "checks: must not be empty");
  EXPECT_EQ(ErrorOf(R"({"checks":{}})"), "checks: expected an array, got {}");
  EXPECT_THAT(ErrorOf(R"({"checks":[{"limit":"a","key":"k"}],"limit":"a"})"),
              HasSubstr("not both"));
  EXPECT_EQ(ErrorOf(R"({"checks":[{"limit":"a","key":"k"},{"limit":"b","key":"k","cost":-2}]})"),
            "checks[1].cost: expected an integer >= 0, got -2");
  EXPECT_THAT(ErrorOf(R"({"checks":[{"limit":"a","key":"k"}, 3]})"),
              HasSubstr("checks[1]: expected an object"));

  std::string many = R"({"checks":[)";
  for (size_t i = 0; i <= kMaxChecksPerRequest; ++i) {
    if (i > 0) many += ",";
    many += R"({"limit":"a","key":"k"})";
  }
  many += "]}";
  EXPECT_EQ(ErrorOf(many), "checks: at most 64 items, got 65");
}

TEST(CheckJsonTest, MostRestrictiveRefusalWaitsLongest) {
  std::vector<Decision> decisions = {
      {.allowed = true, .remaining = 0},
      {.allowed = false, .retry_after_micros = 5, .reason = DenyReason::kOverLimit},
      {.allowed = false, .retry_after_micros = 9, .reason = DenyReason::kOverLimit},
  };
  EXPECT_EQ(MostRestrictive(false, decisions), 2u);
  decisions.push_back({.allowed = false, .reason = DenyReason::kCostExceedsLimit});
  EXPECT_EQ(MostRestrictive(false, decisions), 3u);
}

TEST(CheckJsonTest, MostRestrictiveAllowedHasLeastRemaining) {
  std::vector<Decision> decisions = {{.allowed = true, .remaining = 5},
                                     {.allowed = true, .remaining = 2},
                                     {.allowed = true, .remaining = 2}};
  EXPECT_EQ(MostRestrictive(true, decisions), 1u);
}

TEST(CheckJsonTest, DecisionJsonHasMillisecondsRoundedUpAndReasonOnlyWhenRefused) {
  Decision allowed{.allowed = true, .limit = 10, .remaining = 9, .reset_after_micros = 1'001};
  nlohmann::json json = nlohmann::json::parse(DecisionJson("api", allowed));
  EXPECT_EQ(json["allowed"], true);
  EXPECT_EQ(json["name"], "api");
  EXPECT_EQ(json["limit"], 10);
  EXPECT_EQ(json["remaining"], 9);
  EXPECT_EQ(json["reset_after_ms"], 2);
  EXPECT_EQ(json["retry_after_ms"], 0);
  EXPECT_EQ(json["source"], "memory");
  EXPECT_FALSE(json.contains("reason"));

  Decision refused{
      .allowed = false, .limit = 10, .retry_after_micros = 999, .reason = DenyReason::kOverLimit};
  json = nlohmann::json::parse(DecisionJson("api", refused));
  EXPECT_EQ(json["retry_after_ms"], 1);
  EXPECT_EQ(json["reason"], "over_limit");
}

TEST(CheckJsonTest, BatchReplySpeaksForTheRefusingItem) {
  absl::StatusOr<ParsedCheckBody> body =
      ParseCheckBody(R"({"checks":[{"limit":"a","key":"k"},{"limit":"b","key":"k"}]})");
  ASSERT_TRUE(body.ok());
  MultiDecision result{.allowed = false,
                       .decisions = {{.allowed = true, .limit = 5, .remaining = 4},
                                     {.allowed = false,
                                      .limit = 1,
                                      .retry_after_micros = 2'000,
                                      .reason = DenyReason::kOverLimit}}};
  nlohmann::json json = nlohmann::json::parse(CheckReplyBody(*body, result));
  EXPECT_EQ(json["allowed"], false);
  EXPECT_EQ(json["name"], "b");
  EXPECT_EQ(json["limit"], 1);
  EXPECT_EQ(json["retry_after_ms"], 2);
  EXPECT_EQ(json["reason"], "over_limit");
  ASSERT_EQ(json["results"].size(), 2u);
  EXPECT_EQ(json["results"][0]["name"], "a");
  EXPECT_EQ(json["results"][0]["allowed"], true);
  EXPECT_EQ(json["results"][1]["allowed"], false);
}

TEST(CheckJsonTest, ErrorBodySurvivesInvalidUtf8) {
  EXPECT_EQ(ErrorBody("bad \xff byte"), "{\"error\":\"bad \xEF\xBF\xBD byte\"}");
}

}  // namespace
}  // namespace tollgate::server
