// Copyright tollgate authors.
#include "src/server/resilience_log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tollgate::server {

ResilienceLog::ResilienceLog(ResilienceLogOptions options)
    : options_(options), clock_(options.clock != nullptr ? options.clock : &SystemClock()) {}

std::optional<ResilienceLog::Line> ResilienceLog::Format(const ResilienceEvent& event) {
  int64_t suppressed = 0;
  {
    const int64_t now = clock_->NowMicros();
    absl::MutexLock lock(&mutex_);
    Window& window = windows_[static_cast<int>(event.kind)];
    if (window.lines == 0 || now - window.start_micros >= options_.window_ms * 1000) {
      window.start_micros = now;
      window.lines = 0;
    }
    if (window.lines >= options_.lines_per_window) {
      ++window.suppressed;
      return std::nullopt;
    }
    ++window.lines;
    suppressed = std::exchange(window.suppressed, 0);
  }
  using Kind = ResilienceEvent::Kind;
  Line line;
  switch (event.kind) {
    case Kind::kStoreUnreachable:
      line = {Level::kWarn, absl::StrCat("redis unreachable (probe failed: ", event.detail, ")")};
      break;
    case Kind::kStoreReachable:
      line = {Level::kInfo, "redis reachable again (probe answered)"};
      break;
    case Kind::kBreakerOpened:
      line = {Level::kWarn, absl::StrCat("circuit breaker opened after ", event.count,
                                         " consecutive failures (last: ", event.detail,
                                         "): limits answer from their on_store_failure policy")};
      break;
    case Kind::kBreakerClosed:
      line = {Level::kInfo, "circuit breaker closed: redis answers checks again"};
      break;
    case Kind::kFallbackStarted:
      line = {Level::kWarn, "fallback started: decisions come from on_store_failure policies"};
      if (!event.detail.empty()) absl::StrAppend(&line.text, " (", event.detail, ")");
      break;
    case Kind::kFallbackEnded:
      line = {Level::kInfo, absl::StrCat("fallback ended after ", event.count, " decisions")};
      break;
    case Kind::kReconciled:
      line = {event.dropped > 0 ? Level::kWarn : Level::kInfo,
              absl::StrCat("reconciled fallback consumption into redis: ", event.count,
                           " items added, ", event.dropped, " dropped")};
      break;
    case Kind::kInstanceCountChanged:
      line = {Level::kInfo, absl::StrCat("live instances: ", event.previous, " -> ", event.count)};
      break;
    case Kind::kReplicasNotConfirming:
      line = {Level::kWarn,
              absl::StrCat("no replica confirms durable writes (", event.detail,
                           "): durable limits answer from their on_store_failure policy")};
      break;
    case Kind::kReplicasConfirming:
      line = {Level::kInfo,
              absl::StrCat("a replica confirms durable writes again (", event.detail, ")")};
      break;
  }
  if (suppressed > 0) {
    absl::StrAppend(&line.text, " (", suppressed, " more like this not logged)");
  }
  return line;
}

void ResilienceLog::Log(const ResilienceEvent& event) {
  std::optional<Line> line = Format(event);
  if (!line.has_value()) return;
  if (line->level == Level::kWarn) {
    spdlog::warn("{}", line->text);
  } else {
    spdlog::info("{}", line->text);
  }
}

}  // namespace tollgate::server
