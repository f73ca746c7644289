// Copyright tollgate authors.
#include "src/cli/json_log_formatter.h"

#include <chrono>
#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace tollgate::cli {
namespace {

std::string_view LevelName(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warning";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "fatal";
    default:
      return "info";
  }
}

}  // namespace

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  const absl::Time time = absl::FromChrono(msg.time);
  nlohmann::json line = {
      {"level", LevelName(msg.level)},
      {"msg", std::string(msg.payload.data(), msg.payload.size())},
      {"time", absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", time, absl::UTCTimeZone())},
  };
  const std::string text =
      line.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
  dest.append(text.data(), text.data() + text.size());
  dest.push_back('\n');
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const {
  return std::make_unique<JsonLogFormatter>();
}

}  // namespace tollgate::cli
