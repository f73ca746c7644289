// Copyright tollgate authors. ResilientStore: the failure policies (fail_open at this instance's
// share, fail_closed, local), leases included, while the store fails.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/resilience/resilient_store_test_util.h"
#include "tollgate/resilience.h"

namespace tollgate {
namespace {

using resilience_test::ControlledStore;
using resilience_test::ResilientStoreTest;
using resilience_test::TokenBucket;

TEST_F(ResilientStoreTest, FailOpenUsesThisInstancesShare) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  int allowed = 0;
  for (int i = 0; i < 100; ++i) {
    auto decisions = Check(open_, "user:1");
    ASSERT_TRUE(decisions.ok()) << decisions.status();
    EXPECT_EQ((*decisions)[0].source, DecisionSource::kFallback);
    if ((*decisions)[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 100 / 4);  // capacity / N with N = 4
  instances_ = 2;
  auto fresh = Check(open_, "user:2", 0);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ((*fresh)[0].limit, 50);  // the share follows N
}

TEST_F(ResilientStoreTest, FailClosedRefusesWithRetryAfterAndConsumesNothingElse) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  auto decisions = Check(closed_, "phone:1");
  ASSERT_TRUE(decisions.ok());
  EXPECT_FALSE((*decisions)[0].allowed);
  EXPECT_EQ((*decisions)[0].reason, DenyReason::kStoreUnavailable);
  EXPECT_GT((*decisions)[0].retry_after_micros, 0);
  // Its reset is the outage's too, not the bucket's 3000 s refill.
  EXPECT_EQ((*decisions)[0].reset_after_micros, (*decisions)[0].retry_after_micros);

  // A batch with a fail_closed limit is refused whole: the fail_open one spends nothing.
  std::vector<CheckItem> both = {{&open_, "user:9", 5}, {&closed_, "phone:9", 1}};
  auto batch = store_->Apply(both);
  ASSERT_TRUE(batch.ok());
  EXPECT_FALSE((*batch)[1].allowed);
  auto peek = Check(open_, "user:9", 0);
  EXPECT_EQ((*peek)[0].remaining, 25);
}

Limit Concurrency(std::string name, int64_t slots, FailureMode mode) {
  Limit limit = TokenBucket(std::move(name), 1, 1, mode);
  limit.numbers = LimitNumbers{
      .algorithm = Algorithm::kConcurrency, .limit = slots, .window_micros = 60'000'000};
  return limit;
}

// While the store fails, a fail_open concurrency limit holds local slots at this instance's
// share (limit / N, never below 1): a lease taken there is released and renewed there, and
// is never reconciled; a lease of the shared store (unknown here) cannot be released or
// renewed until it answers again (Unavailable, HTTP 503).
TEST_F(ResilientStoreTest, FailOpenLeasesAreLocalSlotsAtThisInstancesShare) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  const Limit slots = Concurrency("slots", 9, FailureMode::kFailOpen);  // 9 / 4 instances: 2
  std::vector<std::string> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(absl::StrCat("lease-", i));
    auto acquired = Apply({Item(slots, "k", ItemOp::kCheck, held.back())});
    ASSERT_TRUE(acquired.ok()) << acquired.status();
    EXPECT_EQ((*acquired)[0].source, DecisionSource::kFallback);
    EXPECT_EQ((*acquired)[0].limit, 2);
    EXPECT_EQ((*acquired)[0].allowed, i < 2) << i;
  }
  auto renewed = Apply({Item(slots, "k", ItemOp::kRenew, held[0])});
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_TRUE((*renewed)[0].allowed);
  auto released = Apply({Item(slots, "k", ItemOp::kRelease, held[1])});
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_TRUE((*released)[0].allowed);
  EXPECT_EQ((*released)[0].remaining, 1);
  EXPECT_TRUE((*Apply({Item(slots, "k", ItemOp::kCheck, "lease-3")}))[0].allowed);

  // The shared store's lease: only it can free it.
  auto shared = Apply({Item(slots, "k", ItemOp::kRelease, "granted-by-the-store")});
  EXPECT_EQ(shared.status().code(), absl::StatusCode::kUnavailable) << shared.status();
  EXPECT_NE(shared.status().message().find("'slots'"), absl::string_view::npos);
  // The share follows N, never below 1; another key has its own slots.
  instances_ = 20;
  auto one = Apply({Item(slots, "other", ItemOp::kCheck, "lease-4")});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE((*one)[0].allowed);
  EXPECT_EQ((*one)[0].limit, 1);
  EXPECT_FALSE((*Apply({Item(slots, "other", ItemOp::kCheck, "lease-5")}))[0].allowed);
  // Nothing of it is reconciled when the store returns.
  ExpectAProbeOfAHealthyStoreCloses();
  for (const ControlledStore::Added& added : primary_->added()) EXPECT_NE(added.limit, "slots");
}

// on_store_failure: local takes the `local:` block's slots; fail_closed refuses with a retry
// time and takes none, all or nothing with the rest of its batch.
TEST_F(ResilientStoreTest, LocalAndFailClosedLeases) {
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  Limit local = Concurrency("local_slots", 100, FailureMode::kLocal);
  local.local =
      LimitNumbers{.algorithm = Algorithm::kConcurrency, .limit = 3, .window_micros = 60'000'000};
  int allowed = 0;
  for (int i = 0; i < 5; ++i) {
    auto acquired = Apply({Item(local, "k", ItemOp::kCheck, absl::StrCat("local-", i))});
    ASSERT_TRUE(acquired.ok()) << acquired.status();
    if ((*acquired)[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 3);

  const Limit closed = Concurrency("closed_slots", 100, FailureMode::kFailClosed);
  auto refused = Apply(
      {Item(open_, "user:7", ItemOp::kCheck, ""), Item(closed, "k", ItemOp::kCheck, "closed-1")});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE((*refused)[1].allowed);
  EXPECT_EQ((*refused)[1].reason, DenyReason::kStoreUnavailable);
  EXPECT_GT((*refused)[1].retry_after_micros, 0);
  EXPECT_EQ((*Check(open_, "user:7", 0))[0].remaining, 25);  // the batch took nothing
}

TEST_F(ResilientStoreTest, LocalPolicyUsesItsOwnNumbers) {
  Limit local = TokenBucket("sms", 100, 0.001, FailureMode::kLocal);
  local.local =
      LimitNumbers{.algorithm = Algorithm::kTokenBucket, .capacity = 2, .refill_per_second = 0.001};
  primary_->set_behaviour(ControlledStore::Behaviour::kError);
  int allowed = 0;
  for (int i = 0; i < 10; ++i) {
    if ((*Check(local, "phone:1"))[0].allowed) ++allowed;
  }
  EXPECT_EQ(allowed, 2);
}

}  // namespace
}  // namespace tollgate
