// Copyright tollgate authors. One log line per resilience state change, rate-limited.
#ifndef TOLLGATE_SRC_SERVER_RESILIENCE_LOG_H_
#define TOLLGATE_SRC_SERVER_RESILIENCE_LOG_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "tollgate/clock.h"
#include "tollgate/resilience.h"

namespace tollgate::server {

struct ResilienceLogOptions {
  // nullptr: SystemClock(). REQUIRES: outlives the log.
  Clock* clock = nullptr;
  // At most `lines_per_window` lines of one kind of event per `window_ms`; the rest are
  // counted, and the next line of that kind says how many were not logged.
  int64_t window_ms = 10'000;
  int lines_per_window = 5;
};

// Turns ResilienceEvents into log lines: warnings for what degrades (Redis unreachable,
// breaker opened, fallback started, consumption dropped), info for what recovers.
// Thread-safe.
class ResilienceLog {
 public:
  enum class Level { kInfo, kWarn };
  struct Line {
    Level level = Level::kInfo;
    std::string text;
  };

  explicit ResilienceLog(ResilienceLogOptions options = {});

  // The line for `event`, or nullopt when its kind is over the rate limit.
  std::optional<Line> Format(const ResilienceEvent& event);

  // Format, then writes the line with spdlog.
  void Log(const ResilienceEvent& event);

 private:
  struct Window {
    int64_t start_micros = 0;
    int lines = 0;
    int64_t suppressed = 0;
  };
  const ResilienceLogOptions options_;
  Clock* const clock_;
  absl::Mutex mutex_;
  absl::flat_hash_map<int, Window> windows_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RESILIENCE_LOG_H_
