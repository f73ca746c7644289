// Copyright tollgate authors.
#include "src/resilience/circuit_breaker.h"

#include "gtest/gtest.h"

namespace tollgate::resilience {
namespace {

using Admission = CircuitBreaker::Admission;

TEST(CircuitBreakerTest, OpensAfterThresholdConsecutiveFailures) {
  SimulatedClock clock;
  CircuitBreaker breaker({.failure_threshold = 3, .open_duration_ms = 500}, &clock);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
    breaker.RecordFailure(false);
  }
  // A success in between resets the count.
  ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
  breaker.RecordSuccess(false);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
    breaker.RecordFailure(false);
  }
  EXPECT_EQ(breaker.state(), CircuitState::kClosed);
  ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
  breaker.RecordFailure(false);
  EXPECT_EQ(breaker.state(), CircuitState::kOpen);
  EXPECT_EQ(breaker.Admit(), Admission::kReject);
}

TEST(CircuitBreakerTest, LetsOneProbeThroughAfterTheOpenDuration) {
  SimulatedClock clock;
  CircuitBreaker breaker({.failure_threshold = 1, .open_duration_ms = 500}, &clock);
  ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
  breaker.RecordFailure(false);
  clock.AdvanceMillis(499);
  EXPECT_EQ(breaker.Admit(), Admission::kReject);
  clock.AdvanceMillis(1);
  EXPECT_EQ(breaker.Admit(), Admission::kProbe);
  EXPECT_EQ(breaker.state(), CircuitState::kHalfOpen);
  // Only one probe at a time.
  EXPECT_EQ(breaker.Admit(), Admission::kReject);
  // A failed probe opens it again for the full duration.
  breaker.RecordFailure(true);
  EXPECT_EQ(breaker.state(), CircuitState::kOpen);
  clock.AdvanceMillis(499);
  EXPECT_EQ(breaker.Admit(), Admission::kReject);
  clock.AdvanceMillis(1);
  ASSERT_EQ(breaker.Admit(), Admission::kProbe);
  // A successful probe closes it: everything goes through again.
  breaker.RecordSuccess(true);
  EXPECT_EQ(breaker.state(), CircuitState::kClosed);
  EXPECT_EQ(breaker.Admit(), Admission::kAdmit);
  EXPECT_EQ(breaker.Admit(), Admission::kAdmit);
}

// A call admitted while the breaker was closed, answered after it opened, closes it again
// (the store answers); successes while it is closed and quiet change nothing.
TEST(CircuitBreakerTest, ALateSuccessClosesAnOpenBreaker) {
  SimulatedClock clock;
  CircuitBreaker breaker({.failure_threshold = 2, .open_duration_ms = 500}, &clock);
  ASSERT_EQ(breaker.Admit(), Admission::kAdmit);  // answered last, below
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
    EXPECT_FALSE(breaker.RecordSuccess(false));
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(breaker.Admit(), Admission::kAdmit);
    EXPECT_EQ(breaker.RecordFailure(false), i == 1);  // true: this failure opened it
  }
  EXPECT_EQ(breaker.Admit(), Admission::kReject);
  EXPECT_TRUE(breaker.RecordSuccess(false));
  EXPECT_EQ(breaker.state(), CircuitState::kClosed);
  EXPECT_EQ(breaker.Admit(), Admission::kAdmit);
  EXPECT_FALSE(breaker.RecordSuccess(false));
}

}  // namespace
}  // namespace tollgate::resilience
