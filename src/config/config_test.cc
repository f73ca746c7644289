// Copyright tollgate authors. tollgate's config format: files that load, and what they load to.
#include "tollgate/config.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/config/config_test_util.h"
#include "tests/support/process.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

using config_test::Bucket;
using config_test::ErrorFor;
using config_test::kMs;
using config_test::kSecond;
using config_test::Message;
using config_test::ParseOk;
using config_test::Window;
using ::testing::AllOf;
using ::testing::HasSubstr;

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
