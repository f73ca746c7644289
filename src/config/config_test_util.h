// Copyright tollgate authors. What config_test.cc and config_errors_test.cc share.
#ifndef TOLLGATE_SRC_CONFIG_CONFIG_TEST_UTIL_H_
#define TOLLGATE_SRC_CONFIG_CONFIG_TEST_UTIL_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tollgate/config.h"

namespace tollgate::config_test {

inline constexpr int64_t kMs = 1'000;
inline constexpr int64_t kSecond = 1'000'000;

inline std::string Message(const absl::Status& status) { return std::string(status.message()); }

// The error ParseConfig gives for `yaml` read as "bad.yaml".
inline std::string ErrorFor(const std::string& yaml) {
  absl::StatusOr<Config> config = ParseConfig(yaml, "bad.yaml");
  EXPECT_FALSE(config.ok()) << "accepted:\n" << yaml;
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  return Message(config.status());
}

inline Config ParseOk(const std::string& yaml) {
  absl::StatusOr<Config> config = ParseConfig(yaml, "good.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config{};
}

// The lines of an error message.
inline std::vector<std::string> Lines(const std::string& message) {
  std::vector<std::string> lines;
  std::istringstream in(message);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A valid token bucket named `api` with `extra` appended as its last lines (indent 4).
inline std::string Bucket(const std::string& extra = "") {
  return "limits:\n"
         "  api:\n"
         "    algorithm: token_bucket\n"
         "    capacity: 10\n"
         "    refill_per_second: 5\n" +
         extra;
}

// A valid fixed window named `win` (window 1m) with `extra` appended (indent 4).
inline std::string Window(const std::string& extra = "") {
  return "limits:\n"
         "  win:\n"
         "    algorithm: fixed_window\n"
         "    limit: 100\n"
         "    window: 1m\n" +
         extra;
}

}  // namespace tollgate::config_test

#endif  // TOLLGATE_SRC_CONFIG_CONFIG_TEST_UTIL_H_
