// Copyright tollgate authors. Decisions compared in tests.
#ifndef TOLLGATE_TESTS_SUPPORT_DECISIONS_H_
#define TOLLGATE_TESTS_SUPPORT_DECISIONS_H_

#include <string>

#include "gtest/gtest.h"
#include "tollgate/decision.h"

namespace tollgate::testing {

// Expects `actual` to decide exactly as `expected`: every field but where the decision came
// from (`source`, which callers check as their stores differ). `what` names the case.
inline void ExpectSameDecision(const Decision& expected, const Decision& actual,
                               const std::string& what) {
  EXPECT_EQ(expected.allowed, actual.allowed) << what;
  EXPECT_EQ(expected.limit, actual.limit) << what;
  EXPECT_EQ(expected.remaining, actual.remaining) << what;
  EXPECT_EQ(expected.reset_after_micros, actual.reset_after_micros) << what;
  EXPECT_EQ(expected.retry_after_micros, actual.retry_after_micros) << what;
  EXPECT_EQ(expected.reason, actual.reason) << what;
  EXPECT_EQ(expected.debt, actual.debt) << what;
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_DECISIONS_H_
