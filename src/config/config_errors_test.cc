// Copyright tollgate authors. tollgate's config format: what a bad file's errors say, and
// where.
#include <ostream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/config/config_test_util.h"
#include "tollgate/config.h"

namespace tollgate {
namespace {

using config_test::Bucket;
using config_test::ErrorFor;
using config_test::Lines;
using config_test::Message;
using config_test::Window;
using ::testing::HasSubstr;

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

// One bad file and what its error must say.
struct BadCase {
  const char* what;
  std::string yaml;
  std::vector<std::string> expected;  // substrings of the message
};

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
      "shares, local, allow_sync_with_fail_closed, reservation_ttl, durable",
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

}  // namespace
}  // namespace tollgate
