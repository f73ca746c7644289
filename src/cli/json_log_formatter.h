// Copyright tollgate authors. Log lines as JSON objects, one per line, with the field names of
// envoyproxy/ratelimit's JSON logs (logrus): {"level":"info","msg":"...","time":"..."}, so
// that a log pipeline written for the peer (LOG_FORMAT=json) reads tollgate's lines.
#ifndef TOLLGATE_SRC_CLI_JSON_LOG_FORMATTER_H_
#define TOLLGATE_SRC_CLI_JSON_LOG_FORMATTER_H_

#include <memory>

#include "spdlog/formatter.h"

namespace tollgate::cli {

// `time` is RFC 3339 in UTC with microseconds; `level` is logrus's name (trace, debug, info,
// warning, error, fatal); `msg` is the message, escaped as a JSON string (control bytes as
// \u00XX, bytes of invalid UTF-8 as U+FFFD). Thread-safe as spdlog requires (one instance
// per sink; format() keeps no state).
class JsonLogFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  std::unique_ptr<spdlog::formatter> clone() const override;
};

}  // namespace tollgate::cli

#endif  // TOLLGATE_SRC_CLI_JSON_LOG_FORMATTER_H_
