// Copyright tollgate authors.
#include "tollgate/config.h"

#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/process.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kMs = 1'000;
constexpr int64_t kSecond = 1'000'000;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// The error ParseConfig gives for `yaml` read as "bad.yaml".
std::string ErrorFor(const std::string& yaml) {
  absl::StatusOr<Config> config = ParseConfig(yaml, "bad.yaml");
  EXPECT_FALSE(config.ok()) << "accepted:\n" << yaml;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return Message(config.status());
}

Config ParseOk(const std::string& yaml) {
  absl::StatusOr<Config> config = ParseConfig(yaml, "good.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config{};
}

TEST(ConfigTest, TiffinExampleLoads) {
  const std::string path = std::string(TOLLGATE_SOURCE_DIR) + "/examples/tiffin.yaml";
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status();

  std::vector<std::string> names;
  for (const Limit& limit : config->limits) names.push_back(limit.name);
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("api_per_user", "orders_per_user",
                                                     "otp_per_phone", "otp_verify_per_phone",
                                                     "partner_hot_key", "assistant_requests",
                                                     "assistant_tokens", "assistant_streams"));
  auto limit = [&](std::string_view name) -> const Limit& {
    for (const Limit& l : config->limits) {
      if (l.name == name) return l;
    }
    ADD_FAILURE() << "no limit " << name;
    return config->limits[0];
  };

  const Limit& api = limit("api_per_user");
  EXPECT_EQ(api.numbers.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(api.numbers.capacity, 10);
  EXPECT_EQ(api.numbers.refill_per_second, 5);
  EXPECT_EQ(api.on_store_failure, FailureMode::kFailOpen);
  EXPECT_EQ(api.timeout_micros, 10 * kMs);
  EXPECT_EQ(api.mode, Mode::kExact);

  const Limit& orders = limit("orders_per_user");
  EXPECT_EQ(orders.numbers.algorithm, Algorithm::kSlidingWindow);
  EXPECT_EQ(orders.numbers.limit, 20);
  EXPECT_EQ(orders.numbers.window_micros, 60 * kSecond);

  const Limit& otp = limit("otp_per_phone");
  EXPECT_EQ(otp.numbers.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(otp.numbers.limit, 3);
  EXPECT_EQ(otp.numbers.window_micros, 600 * kSecond);
  EXPECT_EQ(otp.on_store_failure, FailureMode::kFailClosed);
  EXPECT_EQ(otp.mode, Mode::kExact);

  const Limit& verify = limit("otp_verify_per_phone");
  EXPECT_EQ(verify.on_store_failure, FailureMode::kLocal);
  ASSERT_TRUE(verify.local.has_value());
  EXPECT_EQ(verify.local->algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(verify.local->limit, 1);
  EXPECT_EQ(verify.local->window_micros, 600 * kSecond);

  const Limit& partner = limit("partner_hot_key");
  EXPECT_EQ(partner.numbers.limit, 1000);
  EXPECT_EQ(partner.numbers.window_micros, kSecond);
  EXPECT_EQ(partner.mode, Mode::kSync);
  EXPECT_EQ(partner.sync_interval_micros, 100 * kMs);

  // The LLM gateway's three (demo/run llm): requests, tokens charged after the fact, streams.
  const Limit& tokens = limit("assistant_tokens");
  EXPECT_EQ(tokens.numbers.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(tokens.numbers.capacity, 3000);
  EXPECT_EQ(tokens.numbers.refill_per_second, 1000);
  const Limit& streams = limit("assistant_streams");
  EXPECT_EQ(streams.numbers.algorithm, Algorithm::kConcurrency);
  EXPECT_EQ(streams.numbers.limit, 4);
  EXPECT_EQ(streams.numbers.window_micros, 3 * kSecond);
  EXPECT_EQ(streams.timeout_micros, 50 * kMs);
}

// docs/config.md opens with an example; it must stay a valid file.
TEST(ConfigTest, DocumentationExampleLoads) {
  std::ifstream in(std::string(TOLLGATE_SOURCE_DIR) + "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md missing";
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t start = doc.find("```yaml\n");
  ASSERT_NE(start, std::string::npos);
  const size_t body = start + std::string("```yaml\n").size();
  const size_t end = doc.find("```", body);
  ASSERT_NE(end, std::string::npos);
  Config config = ParseOk(doc.substr(body, end - body));
  ASSERT_EQ(config.limits.size(), 2u);
  EXPECT_EQ(config.limits[0].name, "api_per_user");
  EXPECT_EQ(config.limits[1].on_store_failure, FailureMode::kFailClosed);
}

// One error is one line, in the form docs/config.md describes.
TEST(ConfigTest, DocumentedErrorIsExact) {
  absl::StatusOr<Config> config = ParseConfig(
      "limits:\n"
      "  api_per_user:\n"
      "    algorithm: token_bucket\n"
      "    capacity: 1.5\n"
      "    refill_per_second: 5\n",
      "limits.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(Message(config.status()),
            "limits.yaml:4:15: limits.api_per_user.capacity: expected a whole number from 1 to "
            "1000000000000, got '1.5'");
}

TEST(ConfigTest, DefaultsApplyWhenOptionalFieldsAreLeftOut) {
  Config config = ParseOk(
      "limits:\n"
      "  a:\n"
      "    algorithm: fixed_window\n"
      "    limit: 3\n"
      "    window: 10m\n");
  ASSERT_EQ(config.limits.size(), 1u);
  const Limit& limit = config.limits[0];
  EXPECT_EQ(limit.on_store_failure, FailureMode::kFailOpen);
  EXPECT_FALSE(limit.local.has_value());
  EXPECT_EQ(limit.timeout_micros, 10 * kMs);
  EXPECT_EQ(limit.mode, Mode::kExact);
  EXPECT_EQ(limit.sync_interval_micros, kSecond);
  EXPECT_EQ(limit.shares, Shares::kDemand);
}

TEST(ConfigTest, ReadsEveryField) {
  Config config = ParseOk(
      "limits:\n"
      "  hot:\n"
      "    algorithm: sliding_window\n"
      "    limit: 1000\n"
      "    window: 1m\n"
      "    on_store_failure: fail_open\n"
      "    timeout: 5ms\n"
      "    mode: sync\n"
      "    sync_interval: 250ms\n"
      "    shares: equal\n"
      "  slow_bucket:\n"
      "    algorithm: token_bucket\n"
      "    capacity: 3\n"
      "    refill_per_second: 0.5\n"
      "    timeout: 60s\n");
  ASSERT_EQ(config.limits.size(), 2u);
  const Limit& hot = config.limits[0];
  EXPECT_EQ(hot.name, "hot");
  EXPECT_EQ(hot.mode, Mode::kSync);
  EXPECT_EQ(hot.sync_interval_micros, 250 * kMs);
  EXPECT_EQ(hot.shares, Shares::kEqual);
  EXPECT_EQ(hot.timeout_micros, 5 * kMs);
  const Limit& bucket = config.limits[1];
  EXPECT_EQ(bucket.numbers.refill_per_second, 0.5);
  EXPECT_EQ(bucket.timeout_micros, 60 * kSecond);
}

TEST(ConfigTest, LimitsAreSortedByName) {
  Config config = ParseOk(
      "limits:\n"
      "  zeta: {algorithm: fixed_window, limit: 1, window: 1s}\n"
      "  Alpha: {algorithm: fixed_window, limit: 2, window: 1s}\n"
      "  mid.dle-1: {algorithm: fixed_window, limit: 3, window: 1s}\n"
      "  alpha: {algorithm: fixed_window, limit: 4, window: 1s}\n");
  std::vector<std::string> names;
  for (const Limit& limit : config.limits) names.push_back(limit.name);
  EXPECT_THAT(names, ::testing::ElementsAre("Alpha", "alpha", "mid.dle-1", "zeta"));
  EXPECT_EQ(config.limits[1].numbers.limit, 4);
}

TEST(ConfigTest, LocalFailureModeReadsItsOwnAlgorithmAndNumbers) {
  Config config = ParseOk(
      "limits:\n"
      "  otp:\n"
      "    algorithm: fixed_window\n"
      "    limit: 5\n"
      "    window: 10m\n"
      "    on_store_failure: local\n"
      "    local:\n"
      "      algorithm: token_bucket\n"
      "      capacity: 2\n"
      "      refill_per_second: 0.01\n");
  ASSERT_EQ(config.limits.size(), 1u);
  const Limit& otp = config.limits[0];
  EXPECT_EQ(otp.on_store_failure, FailureMode::kLocal);
  ASSERT_TRUE(otp.local.has_value());
  EXPECT_EQ(otp.local->algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(otp.local->capacity, 2);
  EXPECT_EQ(otp.local->refill_per_second, 0.01);
  // The limit's own numbers are untouched by the local block.
  EXPECT_EQ(otp.numbers.algorithm, Algorithm::kFixedWindow);
  EXPECT_EQ(otp.numbers.limit, 5);
}

TEST(ConfigTest, LocalBlockIsRequiredWithLocalAndRefusedOtherwise) {
  EXPECT_THAT(ErrorFor("limits:\n"
                       "  otp:\n"
                       "    algorithm: fixed_window\n"
                       "    limit: 5\n"
                       "    window: 10m\n"
                       "    on_store_failure: local\n"),
              AllOf(HasSubstr("bad.yaml:2:3: "), HasSubstr("limits.otp.local: required")));
  EXPECT_THAT(ErrorFor("limits:\n"
                       "  otp:\n"
                       "    algorithm: fixed_window\n"
                       "    limit: 5\n"
                       "    window: 10m\n"
                       "    local: {algorithm: fixed_window, limit: 1, window: 10m}\n"),
              AllOf(HasSubstr("bad.yaml:6:5: "),
                    HasSubstr("limits.otp.local: only allowed with "
                              "on_store_failure: local"),
                    HasSubstr("fail_open")));
  EXPECT_THAT(
      ErrorFor("limits:\n"
               "  otp:\n"
               "    algorithm: fixed_window\n"
               "    limit: 5\n"
               "    window: 10m\n"
               "    on_store_failure: local\n"
               "    local:\n"
               "      algorithm: fixed_window\n"
               "      limit: 1\n"
               "      window: 10m\n"
               "      timeout: 5ms\n"),
      AllOf(HasSubstr("bad.yaml:11:7: "), HasSubstr("limits.otp.local.timeout: unknown key"),
            HasSubstr("algorithm, capacity, refill_per_second, limit, window")));
  EXPECT_THAT(ErrorFor("limits:\n"
                       "  otp:\n"
                       "    algorithm: fixed_window\n"
                       "    limit: 5\n"
                       "    window: 10m\n"
                       "    on_store_failure: local\n"
                       "    local:\n"
                       "      algorithm: fixed_window\n"
                       "      limit: 0\n"
                       "      window: 10m\n"),
              AllOf(HasSubstr("bad.yaml:9:14: "),
                    HasSubstr("limits.otp.local.limit: expected a "
                              "whole number from 1 to"),
                    HasSubstr("got '0'")));
  EXPECT_THAT(ErrorFor("limits:\n"
                       "  otp:\n"
                       "    algorithm: fixed_window\n"
                       "    limit: 5\n"
                       "    window: 10m\n"
                       "    on_store_failure: local\n"
                       "    local:\n"
                       "      algorithm: fixed_window\n"
                       "      limit: 1\n"),
              AllOf(HasSubstr("bad.yaml:7:5: "), HasSubstr("limits.otp.local.window: required")));
  EXPECT_THAT(ErrorFor("limits:\n"
                       "  otp:\n"
                       "    algorithm: fixed_window\n"
                       "    limit: 5\n"
                       "    window: 10m\n"
                       "    on_store_failure: local\n"
                       "    local: strict\n"),
              AllOf(HasSubstr("bad.yaml:7:12: "), HasSubstr("limits.otp.local: expected a map"),
                    HasSubstr("got 'strict'")));
}

// One bad file and what its error must say.
struct BadCase {
  const char* what;
  std::string yaml;
  std::vector<std::string> expected;  // substrings of the message
};

// A valid token bucket named `api` with `extra` appended as its last lines (indent 4).
std::string Bucket(const std::string& extra = "") {
  return "limits:\n"
         "  api:\n"
         "    algorithm: token_bucket\n"
         "    capacity: 10\n"
         "    refill_per_second: 5\n" +
         extra;
}

// A valid fixed window named `win` (window 1m) with `extra` appended (indent 4).
std::string Window(const std::string& extra = "") {
  return "limits:\n"
         "  win:\n"
         "    algorithm: fixed_window\n"
         "    limit: 100\n"
         "    window: 1m\n" +
         extra;
}

void PrintTo(const BadCase& bad, std::ostream* out) { *out << bad.what; }

class BadConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, NamesFileLineAndField) {
  const BadCase& bad = GetParam();
  const std::string message = ErrorFor(bad.yaml);
  for (const std::string& part : bad.expected) {
    EXPECT_THAT(message, HasSubstr(part)) << bad.what;
  }
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

const BadCase kBadCases[] = {
    // Whole-file problems.
    {"empty file", "", {"bad.yaml:1:1: ", "expected a top-level 'limits:' map, got an empty file"}},
    {"only comments", "# nothing here\n", {"bad.yaml:1:1: ", "got an empty file"}},
    {"top level is a list", "- a\n- b\n", {"bad.yaml:1:1: ", "got a list"}},
    {"no limits key", "other: 1\n", {"bad.yaml:1:1: other: unknown key", "expected one of limits"}},
    {"limits empty", "limits:\n", {"bad.yaml:1:1: limits: expected a map", "got nothing"}},
    {"limits empty map", "limits: {}\n", {"bad.yaml:1:9: limits: expected at least one limit"}},
    {"limits is a scalar", "limits: 5\n", {"bad.yaml:1:9: limits: expected a map", "got '5'"}},
    {"two documents", Bucket() + "---\nlimits: {}\n", {"bad.yaml:", "expected one YAML document"}},
    {"syntax error", "limits:\n  api: {algorithm: token_bucket\n", {"bad.yaml:3:1: invalid YAML"}},
    {"tab indentation", "limits:\n\tapi: 1\n", {"bad.yaml:2:", "invalid YAML"}},
    {"unknown top-level key",
     Bucket() + "limts: 3\n",
     {"bad.yaml:6:1: limts: unknown key; expected one of limits", "did you mean 'limits'"}},

    // Names.
    {"bad character in name",
     Replace(Bucket(), "api:", "\"a b\":"),
     {"bad.yaml:2:3: limits: expected a limit name of letters, digits", "got 'a b'"}},
    {"empty name",
     Replace(Bucket(), "api:", "\"\":"),
     {"bad.yaml:2:3: limits: expected a non-empty limit name"}},
    {"name too long",
     Replace(Bucket(), "api:", std::string(129, 'n') + ":"),
     {"bad.yaml:2:3: limits: expected a limit name of at most 128 bytes"}},
    {"null name", Replace(Bucket(), "api:", "~:"), {"bad.yaml:2:3: limits: expected a plain key"}},
    {"duplicate limit name",
     Bucket() + "  api:\n    algorithm: fixed_window\n    limit: 1\n    window: 1s\n",
     {"bad.yaml:6:3: limits.api: duplicate key (first at line 2)"}},
    {"limit is not a map",
     "limits:\n  api: 5\n",
     {"bad.yaml:2:8: limits.api: expected a map of settings", "got '5'"}},
    {"limit is empty",
     "limits:\n  api:\n",
     {"bad.yaml:2:3: limits.api: expected a map of settings", "got nothing"}},

    // Keys inside a limit.
    {"typo in key",
     Replace(Bucket(), "capacity", "capcity"),
     {"bad.yaml:4:5: limits.api.capcity: unknown key; expected one of algorithm, capacity, "
      "refill_per_second, limit, window, lease, on_store_failure, timeout, mode, sync_interval, "
      "shares, local, allow_sync_with_fail_closed, reservation_ttl",
      "did you mean 'capacity'"}},
    {"duplicate key",
     Bucket("    capacity: 20\n"),
     {"bad.yaml:6:5: limits.api.capacity: duplicate key (first at line 4)"}},
    {"window on a token bucket",
     Bucket("    window: 1m\n"),
     {"bad.yaml:6:5: limits.api.window: not a field of this limit",
      "token_bucket takes capacity and refill_per_second"}},
    {"capacity on a window",
     Window("    capacity: 5\n"),
     {"bad.yaml:6:5: limits.win.capacity: not a field of this limit",
      "fixed_window takes limit and window"}},
    {"missing algorithm",
     "limits:\n  api:\n    capacity: 10\n",
     {"bad.yaml:2:3: limits.api.algorithm: required",
      "token_bucket, fixed_window, sliding_window, concurrency"}},
    {"unknown algorithm",
     Replace(Bucket(), "algorithm: token_bucket", "algorithm: leaky_bucket"),
     {"bad.yaml:3:16: limits.api.algorithm: expected one of token_bucket, fixed_window, "
      "sliding_window, concurrency, got 'leaky_bucket'"}},
    {"missing capacity",
     Replace(Bucket(), "    capacity: 10\n", ""),
     {"bad.yaml:2:3: limits.api.capacity: required, missing"}},
    {"missing window",
     Replace(Window(), "    window: 1m\n", ""),
     {"bad.yaml:2:3: limits.win.window: required, missing"}},

    // Numbers.
    {"fractional capacity",
     Replace(Bucket(), "capacity: 10", "capacity: 1.5"),
     {"bad.yaml:4:15: limits.api.capacity: expected a whole number from 1 to 1000000000000",
      "got '1.5'"}},
    {"negative capacity",
     Replace(Bucket(), "capacity: 10", "capacity: -3"),
     {"bad.yaml:4:15: limits.api.capacity", "got '-3'"}},
    {"zero limit",
     Replace(Window(), "limit: 100", "limit: 0"),
     {"bad.yaml:4:12: limits.win.limit", "got '0'"}},
    {"words for capacity",
     Replace(Bucket(), "capacity: 10", "capacity: ten"),
     {"bad.yaml:4:15: limits.api.capacity", "got 'ten'"}},
    {"absurd capacity",
     Replace(Bucket(), "capacity: 10", "capacity: 1000000000001"),
     {"bad.yaml:4:15: limits.api.capacity", "got '1000000000001'"}},
    {"capacity beyond int64",
     Replace(Bucket(), "capacity: 10", "capacity: 99999999999999999999"),
     {"bad.yaml:4:15: limits.api.capacity", "got '99999999999999999999'"}},
    {"capacity with exponent",
     Replace(Bucket(), "capacity: 10", "capacity: 1e3"),
     {"bad.yaml:4:15: limits.api.capacity", "got '1e3'"}},
    {"capacity is a list",
     Replace(Bucket(), "capacity: 10", "capacity: [10]"),
     {"bad.yaml:4:15: limits.api.capacity", "got a list"}},
    {"capacity left empty",
     Replace(Bucket(), "capacity: 10", "capacity:"),
     {"bad.yaml:4:5: limits.api.capacity", "got nothing"}},
    {"zero refill",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: 0"),
     {"bad.yaml:5:24: limits.api.refill_per_second: expected a positive number", "got '0'"}},
    {"negative refill",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: -1"),
     {"bad.yaml:5:24: limits.api.refill_per_second", "got '-1'"}},
    {"infinite refill",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: .inf"),
     {"bad.yaml:5:24: limits.api.refill_per_second", "got '.inf'"}},
    {"nan refill",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: nan"),
     {"bad.yaml:5:24: limits.api.refill_per_second", "got 'nan'"}},
    {"refill in words",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: 5/s"),
     {"bad.yaml:5:24: limits.api.refill_per_second", "got '5/s'"}},
    {"refill too slow to ever fill",
     Replace(Bucket(), "refill_per_second: 5", "refill_per_second: 0.0000001"),
     {"bad.yaml:5:24: limits.api.refill_per_second: expected a rate that refills the bucket "
      "within 365d"}},

    // Durations.
    {"window without unit",
     Replace(Window(), "window: 1m", "window: 60"),
     {"bad.yaml:5:13: limits.win.window: expected a unit after the number", "got '60'"}},
    {"window zero",
     Replace(Window(), "window: 1m", "window: 0s"),
     {"bad.yaml:5:13: limits.win.window: expected a positive duration", "got '0s'"}},
    {"window negative",
     Replace(Window(), "window: 1m", "window: -1m"),
     {"bad.yaml:5:13: limits.win.window", "got '-1m'"}},
    {"window fractional",
     Replace(Window(), "window: 1m", "window: 1.5m"),
     {"bad.yaml:5:13: limits.win.window", "got '1.5m'"}},
    {"window unknown unit",
     Replace(Window(), "window: 1m", "window: 1w"),
     {"bad.yaml:5:13: limits.win.window", "got '1w'"}},
    {"window below 1ms",
     Replace(Window(), "window: 1m", "window: 999us"),
     {"bad.yaml:5:13: limits.win.window: expected a duration from 1ms to 365d, got '999us'"}},
    {"window overflows",
     Replace(Window(), "window: 1m", "window: 9999999999999999d"),
     {"bad.yaml:5:13: limits.win.window: expected a duration that fits"}},
    {"timeout too long",
     Bucket("    timeout: 61s\n"),
     {"bad.yaml:6:14: limits.api.timeout: expected a duration from 1ms to 60s, got '61s'"}},
    {"timeout too short",
     Bucket("    timeout: 500us\n"),
     {"bad.yaml:6:14: limits.api.timeout: expected a duration from 1ms to 60s, got '500us'"}},
    {"timeout without unit",
     Bucket("    timeout: 10\n"),
     {"bad.yaml:6:14: limits.api.timeout: expected a unit after the number"}},

    // Failure mode and mode.
    {"unknown failure mode",
     Bucket("    on_store_failure: fail_safe\n"),
     {"bad.yaml:6:23: limits.api.on_store_failure: expected one of fail_open, fail_closed, local, "
      "got 'fail_safe'"}},
    {"unknown mode",
     Window("    mode: fast\n"),
     {"bad.yaml:6:11: limits.win.mode: expected one of exact, sync, got 'fast'"}},
    {"sync with a token bucket",
     Bucket("    mode: sync\n"),
     {"bad.yaml:6:11: limits.api.mode: sync mode counts requests per window and supports "
      "fixed_window and sliding_window only"}},
    {"sync with fail_closed",
     Window("    on_store_failure: fail_closed\n    mode: sync\n"),
     {"bad.yaml:7:11: limits.win.mode: sync mode admits a bounded overshoot", "like 5 OTP guesses",
      "allow_sync_with_fail_closed: true"}},
    {"sync_interval without sync",
     Window("    sync_interval: 1s\n"),
     {"bad.yaml:6:5: limits.win.sync_interval: only allowed with mode: sync"}},
    {"sync_interval too short",
     Window("    mode: sync\n    sync_interval: 5ms\n"),
     {"bad.yaml:7:20: limits.win.sync_interval: expected a duration from 10ms", "got '5ms'"}},
    {"sync_interval longer than window",
     Window("    mode: sync\n    sync_interval: 2m\n"),
     {"bad.yaml:7:20: limits.win.sync_interval: expected at most the window (1m), got '2m'"}},
    {"default sync_interval longer than window",
     Replace(Window("    mode: sync\n"), "window: 1m", "window: 500ms"),
     {"bad.yaml:6:11: limits.win.sync_interval: expected at most the window (500ms), got the "
      "default '1s'"}},
    {"unknown shares",
     Window("    shares: fair\n"),
     {"bad.yaml:6:13: limits.win.shares: expected one of demand, equal, got 'fair'"}},
    {"shares where nothing is shared",
     Window("    on_store_failure: fail_closed\n    shares: equal\n"),
     {"bad.yaml:7:5: limits.win.shares: only allowed with mode: sync or on_store_failure: "
      "fail_open",
      "got mode: exact and on_store_failure: fail_closed"}},
    {"allow flag not a bool",
     Window("    allow_sync_with_fail_closed: yes please\n"),
     {"bad.yaml:6:34: limits.win.allow_sync_with_fail_closed: expected true or false"}},
};

INSTANTIATE_TEST_SUITE_P(Errors, BadConfigTest, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& info) {
                           std::string name;
                           for (const char* c = info.param.what; *c != '\0'; ++c) {
                             name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
                           }
                           return name;
                         });

// Metered work's fields: a concurrency limit (limit, lease) and a rate limit's
// reservation_ttl; and what they refuse, each with its file, line and field.
TEST(ConfigTest, ConcurrencyLimitsAndReservationTtl) {
  const Config config = ParseOk(R"(limits:
  in_flight: {algorithm: concurrency, limit: 5, lease: 30s, on_store_failure: fail_closed}
  tokens:
    algorithm: token_bucket
    capacity: 10000
    refill_per_second: 166.7
    reservation_ttl: 15m
  local_slots:
    algorithm: concurrency
    limit: 8
    lease: 2m
    on_store_failure: local
    local: {algorithm: concurrency, limit: 2, lease: 2m}
)");
  ASSERT_EQ(config.limits.size(), 3u);
  const Limit& in_flight = config.limits[0];
  EXPECT_EQ(in_flight.name, "in_flight");
  EXPECT_EQ(in_flight.numbers.algorithm, Algorithm::kConcurrency);
  EXPECT_EQ(in_flight.numbers.limit, 5);
  EXPECT_EQ(in_flight.numbers.window_micros, 30'000'000);  // the lease time
  EXPECT_EQ(in_flight.numbers.MaxCost(), 5);
  EXPECT_EQ(config.limits[1].local->limit, 2);
  EXPECT_EQ(config.limits[2].reservation_ttl_micros, 900'000'000);
  EXPECT_EQ(in_flight.reservation_ttl_micros, 3'600'000'000);  // the default

  struct Bad {
    std::string yaml;
    std::string error;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 30s, mode: sync}\n",
            "bad.yaml:2:59: limits.c.mode: a concurrency limit's leases are taken and released in "
            "one atomic store step, which sync mode's local counts cannot give: expected mode: "
            "exact, got 'sync'"},
           {"limits:\n  c: {algorithm: concurrency, limit: 5}\n",
            "bad.yaml:2:3: limits.c.lease: required, missing (algorithm concurrency takes limit "
            "and lease)"},
           {"limits:\n  c: {algorithm: concurrency, limit: 5, window: 1m, lease: 1s}\n",
            "limits.c.window: not a field of this limit: algorithm concurrency takes limit and "
            "lease"},
           {"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 5ms}\n",
            "limits.c.lease: expected a duration from 10ms to 1d, got '5ms'"},
           {"limits:\n  w: {algorithm: fixed_window, limit: 5, window: 1m, lease: 1s}\n",
            "limits.w.lease: not a field of this limit: algorithm fixed_window takes limit and "
            "window"},
           {"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 1s, reservation_ttl: 1h}\n",
            "limits.c.reservation_ttl: not a field of a concurrency limit"},
           {"limits:\n  t: {algorithm: token_bucket, capacity: 5, refill_per_second: 1, "
            "reservation_ttl: 0s}\n",
            "limits.t.reservation_ttl: expected a positive duration"},
           {"limits:\n  c: {algorithm: concurrency, limit: 5, lease: 1s, on_store_failure: local, "
            "local: {algorithm: fixed_window, limit: 1, window: 1s}}\n",
            "limits.c.local.algorithm: a concurrency limit's local limit holds leases too"},
       }) {
    absl::StatusOr<Config> config = ParseConfig(bad.yaml, "bad.yaml");
    ASSERT_FALSE(config.ok()) << bad.yaml;
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(bad.error)) << bad.yaml;
  }
}

TEST(ConfigTest, SyncWithFailClosedPassesWhenExplicitlyAllowed) {
  Config config =
      ParseOk(Window("    on_store_failure: fail_closed\n"
                     "    mode: sync\n"
                     "    sync_interval: 100ms\n"
                     "    allow_sync_with_fail_closed: true\n"));
  ASSERT_EQ(config.limits.size(), 1u);
  EXPECT_EQ(config.limits[0].mode, Mode::kSync);
  EXPECT_EQ(config.limits[0].on_store_failure, FailureMode::kFailClosed);
  EXPECT_EQ(config.limits[0].sync_interval_micros, 100 * kMs);
}

TEST(ConfigTest, BoundaryValuesAreAccepted) {
  Config config = ParseOk(
      "limits:\n"
      "  max_bucket: {algorithm: token_bucket, capacity: 1000000000000, refill_per_second: 1e12}\n"
      "  min_window: {algorithm: fixed_window, limit: 1, window: 1ms, timeout: 1ms}\n"
      "  quoted: {algorithm: sliding_window, limit: \"7\", window: '365d', timeout: 60s}\n"
      "  " +
      std::string(128, 'n') + ": {algorithm: fixed_window, limit: 1, window: 1s}\n");
  ASSERT_EQ(config.limits.size(), 4u);
  EXPECT_EQ(config.limits[0].numbers.capacity, 1'000'000'000'000);
  EXPECT_EQ(config.limits[1].numbers.window_micros, kMs);
  EXPECT_EQ(config.limits[2].name, std::string(128, 'n'));
  EXPECT_EQ(config.limits[3].numbers.limit, 7);
  EXPECT_EQ(config.limits[3].numbers.window_micros, 365 * 86'400 * kSecond);
}

TEST(ConfigTest, AnchorsAndAliasesShareSettings) {
  Config config = ParseOk(
      "limits:\n"
      "  a: &per_minute {algorithm: sliding_window, limit: 60, window: 1m}\n"
      "  b: *per_minute\n");
  ASSERT_EQ(config.limits.size(), 2u);
  EXPECT_EQ(config.limits[1].name, "b");
  EXPECT_EQ(config.limits[1].numbers.limit, 60);
}

TEST(ConfigTest, MalformedInputIsAnErrorNeverACrash) {
  const std::string inputs[] = {
      std::string(100'000, '['),
      "limits:\n" + std::string(5'000, '{'),
      std::string("limits:\0\xff\xfe garbage", sizeof("limits:\0\xff\xfe garbage") - 1),
      "limits: \"unterminated\n",
      "limits: &a [*a]\n",
      "limits:\n  api: !!binary AAAA\n",
      "%YAML 9.9\n---\nlimits: {}\n",
      ": : :\n",
  };
  for (const std::string& input : inputs) {
    absl::StatusOr<Config> config = ParseConfig(input, "bad.yaml");
    EXPECT_FALSE(config.ok()) << input.substr(0, 40);
    EXPECT_THAT(Message(config.status()), ::testing::StartsWith("bad.yaml")) << config.status();
  }
}

TEST(ConfigTest, ErrorsUseTheGivenFileName) {
  absl::StatusOr<Config> config = ParseConfig("limits: {}\n", "conf/limits.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(Message(config.status()), ::testing::StartsWith("conf/limits.yaml:1:9: limits: "));
}

TEST(ConfigTest, LoadConfigFileReportsErrorsWithItsPath) {
  const std::string dir = testing::MakeTempDir("config_test");
  const std::string path = dir + "/bad.yaml";
  testing::WriteFile(path, Bucket("    capacity: 20\n"));
  absl::StatusOr<Config> config = LoadConfigFile(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(config.status()), HasSubstr(path + ":6:5: limits.api.capacity"));
}

TEST(ConfigTest, LoadConfigFileIsNotFoundForMissingFilesAndDirectories) {
  const std::string dir = testing::MakeTempDir("config_test");
  const std::string missing = dir + "/missing.yaml";
  absl::StatusOr<Config> config = LoadConfigFile(missing);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Message(config.status()), HasSubstr(missing));

  config = LoadConfigFile(dir);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Message(config.status()), dir + ": is a directory, expected a config file such as " +
                                          dir + "/limits.yaml (it holds no .yaml file)");

  testing::WriteFile(dir + "/b.yaml", Bucket());
  testing::WriteFile(dir + "/a.yml", Bucket());
  testing::WriteFile(dir + "/notes.txt", "");
  config = LoadConfigFile(dir + "/");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(Message(config.status()),
            dir + "/: is a directory, expected a config file: load each of its files (" + dir +
                "/a.yml, " + dir + "/b.yaml)");
}

// The lines of an error message.
std::vector<std::string> Lines(const std::string& message) {
  std::vector<std::string> lines;
  std::istringstream in(message);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A file with several errors reports every one of them, one line each in file order, so a
// user fixes them in one pass; what depends on a wrong field is not reported again.
TEST(ConfigTest, EveryErrorOfAFileIsReportedInFileOrder) {
  const std::string message = ErrorFor(
      "limits:\n"
      "  api:\n"
      "    algorithm: token_bucket\n"
      "    capcity: 10\n"
      "    refill_per_second: 0\n"
      "  otp:\n"
      "    algorithm: fixed_window\n"
      "    limit: 3\n"
      "    window: 10 minutes\n"
      "    on_store_failure: fail_shut\n"
      "    local: {algorithm: fixed_window, limit: 1, window: 1m}\n"
      "  ok:\n"
      "    algorithm: sliding_window\n"
      "    limit: 5\n"
      "    window: 1m\n"
      "  leaky:\n"
      "    algorithm: leaky_bucket\n"
      "    capacity: 5\n"
      "memory_stor: {max_keys: 5}\n");
  EXPECT_THAT(
      Lines(message),
      ::testing::ElementsAre(
          "bad.yaml:2:3: limits.api.capacity: required, missing (algorithm token_bucket takes "
          "capacity and refill_per_second)",
          "bad.yaml:4:5: limits.api.capcity: unknown key; expected one of algorithm, capacity, "
          "refill_per_second, limit, window, lease, on_store_failure, timeout, mode, "
          "sync_interval, shares, local, allow_sync_with_fail_closed, reservation_ttl, durable "
          "(did you mean 'capacity'?)",
          "bad.yaml:5:24: limits.api.refill_per_second: expected a positive number of tokens per "
          "second such as 5 or 0.5, got '0'",
          "bad.yaml:9:13: limits.otp.window: expected a duration: a whole number and a unit (us, "
          "ms, s, m, h, d) such as 10ms, got '10 minutes'",
          "bad.yaml:10:23: limits.otp.on_store_failure: expected one of fail_open, fail_closed, "
          "local, got 'fail_shut'",
          "bad.yaml:17:16: limits.leaky.algorithm: expected one of token_bucket, fixed_window, "
          "sliding_window, concurrency, got 'leaky_bucket'",
          "bad.yaml:19:1: memory_stor: unknown key; expected one of limits, memory_store (did you "
          "mean 'memory_store'?)"));
}

// A misspelt `limits:` gets "did you mean" and no second line saying `limits` is missing.
TEST(ConfigTest, AMisspeltLimitsKeyIsOneError) {
  EXPECT_EQ(ErrorFor("limit:\n  api: {algorithm: fixed_window, limit: 1, window: 1s}\n"),
            "bad.yaml:1:1: limit: unknown key; expected one of limits, memory_store (did you mean "
            "'limits'?)");
  EXPECT_EQ(ErrorFor("memory_store: {max_keys: 10}\n"),
            "bad.yaml:1:1: limits: required top-level key, missing");
}

// A file of garbage cannot make a message of unbounded size: the lines beyond
// Problems::kMaxReported are counted in one last line.
TEST(ConfigTest, ReportedErrorsAreCapped) {
  std::string yaml = "limits:\n";
  for (int i = 0; i < 150; ++i) yaml += "  l" + std::to_string(i) + ": {algorithm: bad}\n";
  const std::vector<std::string> lines = Lines(ErrorFor(yaml));
  ASSERT_EQ(lines.size(), 101u);
  EXPECT_THAT(lines[0], ::testing::StartsWith("bad.yaml:2:19: limits.l0.algorithm: "));
  EXPECT_THAT(lines[99], ::testing::StartsWith("bad.yaml:101:"));
  EXPECT_EQ(lines[100], "bad.yaml: and 50 more errors");
}

// The embedded store's key cap, beside the limits; absent: 0 (the server's default).
TEST(ConfigTest, MemoryStoreMaxKeys) {
  constexpr char kLimit[] = "limits:\n  a: {algorithm: fixed_window, limit: 1, window: 1s}\n";
  EXPECT_EQ(ParseOk(kLimit).memory_store_max_keys, 0);
  EXPECT_EQ(
      ParseOk(std::string(kLimit) + "memory_store:\n  max_keys: 2000000\n").memory_store_max_keys,
      2'000'000);
  EXPECT_EQ(ParseOk(std::string(kLimit) + "memory_store: {}\n").memory_store_max_keys, 0);
  EXPECT_EQ(ErrorFor(std::string(kLimit) + "memory_store:\n  max_keys: 0\n"),
            "bad.yaml:4:13: memory_store.max_keys: expected a whole number from 1 to "
            "1000000000000, got '0'");
  EXPECT_EQ(ErrorFor(std::string(kLimit) + "memory_store:\n  max_key: 10\n"),
            "bad.yaml:4:3: memory_store.max_key: unknown key; expected one of max_keys (did you "
            "mean 'max_keys'?)");
  EXPECT_EQ(ErrorFor(std::string(kLimit) + "memory_store: 10\n"),
            "bad.yaml:3:15: memory_store: expected a map (max_keys), got '10'");
  // Still a limits: file: the limits are required.
  EXPECT_THAT(ErrorFor("memory_store: {max_keys: 10}\n"), HasSubstr("limits"));
}

}  // namespace
}  // namespace tollgate
