// Copyright tollgate authors. The metered verbs of Limiter in both forms (blocking and async,
// by name and by Limit), and a Lease that lets go without blocking.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"
#include "tollgate/limiter.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

using ::tollgate::testing::TokenBucket;
using ::tollgate::testing::Window;

constexpr int64_t kMinute = 60'000'000;

Limit Slots(std::string name, int64_t slots) {
  return Window(std::move(name), Algorithm::kConcurrency, slots, kMinute);
}

// A memory store whose releases wait until the test answers them, as a slow Redis would.
class ParkedReleases final : public Store {
 public:
  explicit ParkedReleases(Clock* clock) : inner_(*MemoryStore::Create({.clock = clock})) {}

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    if (items.front().op != ItemOp::kRelease) {
      inner_->ApplyAsync(std::move(items), std::move(done));
      return;
    }
    absl::MutexLock lock(&mu_);
    parked_.push_back({std::move(items), std::move(done)});
  }
  std::string_view Name() const override { return "parked"; }

  size_t parked() {
    absl::MutexLock lock(&mu_);
    return parked_.size();
  }
  // Lets the parked releases reach the memory store.
  void Release() {
    std::vector<Parked> parked;
    {
      absl::MutexLock lock(&mu_);
      parked.swap(parked_);
    }
    for (Parked& call : parked) inner_->ApplyAsync(std::move(call.items), std::move(call.done));
  }

 private:
  struct Parked {
    std::vector<CheckItem> items;
    CheckCallback done;
  };
  const std::unique_ptr<Store> inner_;
  absl::Mutex mu_;
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

TEST(LeaseTest, ItsDestructorSendsTheReleaseWithoutWaitingForIt) {
  SimulatedClock clock;
  auto store = std::make_shared<ParkedReleases>(&clock);
  auto limiter = Limiter::Create({.limits = {Slots("streams", 1)}, .store = store});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  {
    absl::StatusOr<Lease> lease = (*limiter)->Acquire("streams", "t");
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_TRUE(lease->held());
    EXPECT_FALSE((*limiter)->Acquire("streams", "t")->held());  // the one slot is taken
  }  // the release is parked in the store: a blocking destructor would never get here
  EXPECT_EQ(store->parked(), 1u);
  store->Release();
  EXPECT_TRUE((*limiter)->Acquire("streams", "t")->held());  // freed by the sent release
}

TEST(LeaseTest, ReleaseWaitsForTheStoreAndIsIdempotent) {
  SimulatedClock clock;
  auto limiter = Limiter::Create({.limits = {Slots("streams", 1)}, .clock = &clock});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  absl::StatusOr<Lease> lease = (*limiter)->Acquire("streams", "t");
  ASSERT_TRUE(lease.ok() && lease->held());
  EXPECT_TRUE(lease->Renew()->allowed);
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_FALSE(lease->held());
  EXPECT_TRUE(lease->Release().ok());
  EXPECT_EQ(lease->Renew().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*limiter)->Acquire("streams", "t")->held());
}

class LimiterVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto limiter = Limiter::Create(
        {.limits = {TokenBucket("tokens", 100, 1), Slots("streams", 2)}, .clock = &clock_});
    ASSERT_TRUE(limiter.ok()) << limiter.status();
    limiter_ = *std::move(limiter);
  }

  // What an async verb answered, inline (the memory store answers before it returns).
  template <typename T>
  struct Answer {
    std::optional<absl::StatusOr<T>> value;
    absl::AnyInvocable<void(absl::StatusOr<T>) &&> Callback() {
      return [this](absl::StatusOr<T> answer) { value = std::move(answer); };
    }
    const T& operator*() const { return **value; }
    const T* operator->() const { return &**value; }
  };

  SimulatedClock clock_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(LimiterVerbsTest, ChargeInBothFormsByNameAndByLimit) {
  EXPECT_EQ(limiter_->Charge("tokens", "t", 30)->remaining, 70);
  Answer<Decision> charged;
  limiter_->ChargeAsync(*limiter_->FindLimit("tokens"), "t", 80, charged.Callback());
  ASSERT_TRUE(charged.value.has_value() && charged.value->ok());
  EXPECT_TRUE(charged->allowed);
  EXPECT_EQ(charged->debt, 10);
  Answer<Decision> unknown;
  limiter_->ChargeAsync("nope", "t", 1, unknown.Callback());
  EXPECT_EQ(unknown.value->status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LimiterVerbsTest, ReserveAndSettleInBothForms) {
  Answer<Reservation> reserved;
  limiter_->ReserveAsync("tokens", "t", 60, reserved.Callback());
  ASSERT_TRUE(reserved.value.has_value() && reserved.value->ok());
  ASSERT_FALSE(reserved->token.empty());
  EXPECT_EQ(reserved->decision.remaining, 40);
  Answer<Decision> settled;
  limiter_->SettleAsync(reserved->token, 20, settled.Callback());
  ASSERT_TRUE(settled.value.has_value() && settled.value->ok());
  EXPECT_EQ(settled->remaining, 80);  // 40 of the estimate came back
  EXPECT_EQ(limiter_->Settle(reserved->token, 20)->reason, DenyReason::kAlreadySettled);
  absl::StatusOr<Reservation> blocking = limiter_->Reserve("tokens", "t", 10);
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  EXPECT_EQ(limiter_->Settle(blocking->token, 10)->remaining, 70);
}

TEST_F(LimiterVerbsTest, AcquireRenewAndReleaseInBothForms) {
  Answer<Lease> acquired;
  limiter_->AcquireAsync("streams", "t", acquired.Callback());
  ASSERT_TRUE(acquired.value.has_value() && acquired.value->ok());
  ASSERT_TRUE(acquired->held());
  const std::string id = acquired->id();
  const Limit& streams = *limiter_->FindLimit("streams");
  Answer<Decision> renewed;
  limiter_->RenewAsync(streams, "t", id, renewed.Callback());
  EXPECT_TRUE((*renewed.value)->allowed);
  Answer<Decision> released;
  limiter_->ReleaseAsync("streams", "t", id, released.Callback());
  EXPECT_TRUE((*released.value)->allowed);
  EXPECT_EQ(limiter_->Release(streams, "t", id)->reason, DenyReason::kNotFound);
  EXPECT_EQ(limiter_->Renew("streams", "t", id)->reason, DenyReason::kNotFound);
  Answer<Lease> not_slots;
  limiter_->AcquireAsync("tokens", "t", not_slots.Callback());
  EXPECT_EQ(not_slots.value->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LimiterVerbsTest, CheckAllTakesChecksReservationsAndChargesByNameOrByLimit) {
  const Limit outside = TokenBucket("outside", 5, 1);  // not one of the limiter's
  absl::StatusOr<MultiDecision> result = limiter_->CheckAll({{"tokens", "t", 10, ItemOp::kReserve},
                                                             {"streams", "t", 1},
                                                             {outside, "t", 2},
                                                             {"tokens", "u", 7, ItemOp::kCharge}});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->allowed);
  ASSERT_EQ(result->tokens.size(), 4u);
  EXPECT_FALSE(result->tokens[0].empty());  // the reservation
  EXPECT_FALSE(result->tokens[1].empty());  // the lease
  EXPECT_EQ(result->decisions[2].remaining, 3);
  EXPECT_EQ(result->decisions[3].remaining, 93);
  EXPECT_EQ(limiter_->CheckAll({{"tokens", "t", 1, ItemOp::kSettle}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter_->CheckAll({{"missing", "t"}}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(limiter_->CheckAll({{LimitRef(), "t"}}).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tollgate
