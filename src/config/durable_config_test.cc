// Copyright tollgate authors. `durable` in both config formats (docs/redis.md#durable-limits).
#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tollgate/config.h"
#include "tollgate/limit.h"

namespace tollgate {
namespace {

using ::testing::HasSubstr;

constexpr char kOtp[] = R"(limits:
  otp_per_phone:
    algorithm: fixed_window
    limit: 3
    window: 10m
    on_store_failure: fail_closed
    durable: true
  api_per_user:
    algorithm: token_bucket
    capacity: 10
    refill_per_second: 5
    durable: false
  orders_per_user:
    algorithm: sliding_window
    limit: 5
    window: 1m
)";

const Limit& Find(const Config& config, const std::string& name) {
  for (const Limit& limit : config.limits) {
    if (limit.name == name) return limit;
  }
  ADD_FAILURE() << "no limit " << name;
  return config.limits.front();
}

TEST(DurableConfigTest, ParsesTrueFalseAndUnset) {
  absl::StatusOr<Config> config = ParseConfig(kOtp, "limits.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(Find(*config, "otp_per_phone").durable, std::optional<bool>(true));
  EXPECT_EQ(Find(*config, "api_per_user").durable, std::optional<bool>(false));
  EXPECT_EQ(Find(*config, "orders_per_user").durable, std::nullopt);
  // Where the true one is said: a durable limit the Redis cannot honour is refused there.
  EXPECT_THAT(config->durable_positions,
              ::testing::ElementsAre(::testing::Pair("otp_per_phone", "limits.yaml:7:14")));
}

TEST(DurableConfigTest, ABadValueNamesFileLineAndField) {
  const std::string yaml = R"(limits:
  otp_per_phone:
    algorithm: fixed_window
    limit: 3
    window: 10m
    durable: yes please
)";
  absl::StatusOr<Config> config = ParseConfig(yaml, "bad.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(std::string(config.status().message()),
            "bad.yaml:6:14: limits.otp_per_phone.durable: expected true or false, got 'yes "
            "please'");
}

TEST(DurableConfigTest, SyncModeWithDurableIsRefusedAtTheField) {
  const std::string yaml = R"(limits:
  search:
    algorithm: fixed_window
    limit: 100
    window: 1m
    mode: sync
    durable: true
)";
  absl::StatusOr<Config> config = ParseConfig(yaml, "bad.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("bad.yaml:7:14: limits.search.durable: sync mode answers from local "
                        "counts"));
  // durable: false is what sync mode does anyway.
  std::string plain = yaml;
  plain.replace(plain.find("durable: true"), 13, "durable: false");
  EXPECT_TRUE(ParseConfig(plain, "ok.yaml").ok());
}

TEST(DurableConfigTest, ValidateLimitRefusesSyncWithDurable) {
  Limit limit;
  limit.name = "search";
  limit.numbers = {.algorithm = Algorithm::kFixedWindow, .limit = 100, .window_micros = 60'000'000};
  limit.mode = Mode::kSync;
  limit.durable = true;
  absl::Status status = ValidateLimit(limit);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("limit 'search': durable: "));
  limit.durable = std::nullopt;  // the default never makes a sync limit durable
  EXPECT_TRUE(ValidateLimit(limit).ok());
}

}  // namespace
}  // namespace tollgate
