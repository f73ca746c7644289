// Copyright tollgate authors.
#include "src/server/resilience_log.h"

#include <optional>
#include <string>

#include "gtest/gtest.h"

namespace tollgate::server {
namespace {

using Kind = ResilienceEvent::Kind;

ResilienceEvent Event(Kind kind, int64_t count = 0, int64_t dropped = 0) {
  ResilienceEvent event;
  event.kind = kind;
  event.count = count;
  event.dropped = dropped;
  return event;
}

TEST(ResilienceLogTest, OneLinePerChangeAtWarnForDegradationAndInfoForRecovery) {
  SimulatedClock clock;
  ResilienceLog log({.clock = &clock});
  ResilienceEvent unreachable = Event(Kind::kStoreUnreachable);
  unreachable.detail = "connection refused";
  std::optional<ResilienceLog::Line> line = log.Format(unreachable);
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->level, ResilienceLog::Level::kWarn);
  EXPECT_EQ(line->text, "redis unreachable (probe failed: connection refused)");

  line = log.Format(Event(Kind::kFallbackEnded, 42));
  ASSERT_TRUE(line.has_value());
  EXPECT_EQ(line->level, ResilienceLog::Level::kInfo);
  EXPECT_EQ(line->text, "fallback ended after 42 decisions");

  line = log.Format(Event(Kind::kReconciled, 7, 0));
  EXPECT_EQ(line->text, "reconciled fallback consumption into redis: 7 items added, 0 dropped");
  EXPECT_EQ(line->level, ResilienceLog::Level::kInfo);
  EXPECT_EQ(log.Format(Event(Kind::kReconciled, 7, 3))->level, ResilienceLog::Level::kWarn);

  ResilienceEvent started = Event(Kind::kFallbackStarted, 4);
  started.detail = "fail_open shares with N=4: api 0.480, others 1/N";
  line = log.Format(started);
  EXPECT_EQ(line->level, ResilienceLog::Level::kWarn);
  EXPECT_EQ(line->text,
            "fallback started: decisions come from on_store_failure policies (fail_open shares "
            "with N=4: api 0.480, others 1/N)");

  ResilienceEvent instances = Event(Kind::kInstanceCountChanged, 4);
  instances.previous = 3;
  EXPECT_EQ(log.Format(instances)->text, "live instances: 3 -> 4");
}

TEST(ResilienceLogTest, AFlappingStateIsRateLimitedAndTheSuppressedAreCounted) {
  SimulatedClock clock;
  ResilienceLog log({.clock = &clock, .window_ms = 10'000, .lines_per_window = 2});
  EXPECT_TRUE(log.Format(Event(Kind::kBreakerOpened, 5)).has_value());
  EXPECT_TRUE(log.Format(Event(Kind::kBreakerOpened, 5)).has_value());
  EXPECT_FALSE(log.Format(Event(Kind::kBreakerOpened, 5)).has_value());
  EXPECT_FALSE(log.Format(Event(Kind::kBreakerOpened, 5)).has_value());
  // Other kinds have their own budget.
  EXPECT_TRUE(log.Format(Event(Kind::kBreakerClosed)).has_value());
  clock.AdvanceMillis(10'000);
  std::optional<ResilienceLog::Line> line = log.Format(Event(Kind::kBreakerOpened, 5));
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->text.find("(2 more like this not logged)"), std::string::npos) << line->text;
}

}  // namespace
}  // namespace tollgate::server
