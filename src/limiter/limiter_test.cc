// Copyright tollgate authors.
#include "tollgate/limiter.h"

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tollgate/clock.h"
#include "tollgate/memory_store.h"

namespace tollgate {
namespace {

using ::tollgate::testing::TokenBucket;

Limit FixedWindow(std::string name, int64_t max, int64_t window_micros) {
  return ::tollgate::testing::Window(std::move(name), Algorithm::kFixedWindow, max, window_micros);
}

class LimiterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto limiter =
        Limiter::Create({.limits = {TokenBucket("api", 3, 1), FixedWindow("otp", 2, 600'000'000)},
                         .clock = &clock_});
    ASSERT_TRUE(limiter.ok()) << limiter.status();
    limiter_ = std::move(*limiter);
  }

  SimulatedClock clock_;
  std::unique_ptr<Limiter> limiter_;
};

TEST_F(LimiterTest, AllowsTheBurstThenRefusesWithRetryAfter) {
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<Decision> decision = limiter_->Check("api", "user:1");
    ASSERT_TRUE(decision.ok()) << decision.status();
    EXPECT_TRUE(decision->allowed);
    EXPECT_EQ(decision->remaining, 2 - i);
    EXPECT_EQ(decision->source, DecisionSource::kMemory);
  }
  absl::StatusOr<Decision> refused = limiter_->Check("api", "user:1");
  ASSERT_TRUE(refused.ok());
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->reason, DenyReason::kOverLimit);
  EXPECT_EQ(refused->retry_after_micros, 1'000'000);
  // Another key has its own bucket.
  EXPECT_TRUE(limiter_->Check("api", "user:2")->allowed);
  clock_.AdvanceMillis(1000);
  EXPECT_TRUE(limiter_->Check("api", "user:1")->allowed);
}

TEST_F(LimiterTest, RejectsBadRequestsWithClearErrors) {
  EXPECT_EQ(limiter_->Check("nope", "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(limiter_->Check("api", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(limiter_->Check("api", std::string(kMaxKeyBytes + 1, 'k')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(limiter_->Check("api", std::string(kMaxKeyBytes, 'k')).ok());
  absl::Status negative = limiter_->Check("api", "k", -1).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("cost"), absl::string_view::npos) << negative;
  EXPECT_FALSE(limiter_->CheckAll({}).ok());
}

TEST_F(LimiterTest, CostAboveTheLimitIsRefusedForGood) {
  absl::StatusOr<Decision> decision = limiter_->Check("api", "user:1", 4);
  ASSERT_TRUE(decision.ok());
  EXPECT_FALSE(decision->allowed);
  EXPECT_EQ(decision->reason, DenyReason::kCostExceedsLimit);
  EXPECT_EQ(decision->retry_after_micros, 0);
  EXPECT_EQ(limiter_->Check("api", "user:1", 0)->remaining, 3);  // nothing consumed
}

TEST_F(LimiterTest, SeveralLimitsAreAllOrNothing) {
  // Spend the OTP window, then ask for both: the refusal by otp must not spend api.
  ASSERT_TRUE(limiter_->Check("otp", "phone:1", 2)->allowed);
  std::vector<CheckRequest> both = {{"api", "user:1", 1}, {"otp", "phone:1", 1}};
  absl::StatusOr<MultiDecision> result = limiter_->CheckAll(both);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->allowed);
  ASSERT_EQ(result->decisions.size(), 2u);
  EXPECT_TRUE(result->decisions[0].allowed);  // would have passed alone
  EXPECT_FALSE(result->decisions[1].allowed);
  EXPECT_EQ(limiter_->Check("api", "user:1", 0)->remaining, 3);

  std::vector<CheckRequest> api_twice = {{"api", "user:9", 2}, {"api", "user:9", 1}};
  result = limiter_->CheckAll(api_twice);
  ASSERT_TRUE(result.ok());
  EXPECT_TRUE(result->allowed);
  EXPECT_EQ(limiter_->Check("api", "user:9", 0)->remaining, 0);
}

TEST_F(LimiterTest, AsyncAndFutureFormsAnswerOnce) {
  std::vector<CheckRequest> one = {{"api", "user:5", 1}};
  int calls = 0;
  limiter_->CheckAllAsync(one, [&calls](absl::StatusOr<MultiDecision> result) {
    ++calls;
    ASSERT_TRUE(result.ok());
    EXPECT_TRUE(result->allowed);
  });
  EXPECT_EQ(calls, 1);
  limiter_->CheckAllAsync({{"missing", "k", 1}},
                          [&calls](const absl::StatusOr<MultiDecision>& result) {
                            ++calls;
                            EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
                          });
  EXPECT_EQ(calls, 2);
  absl::StatusOr<MultiDecision> result = limiter_->CheckAll(one);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->decisions[0].remaining, 1);
}

TEST_F(LimiterTest, CheckAsyncAnswersInlineOnTheMemoryStoreAsCheckDoes) {
  const Limit* api = limiter_->FindLimit("api");
  ASSERT_NE(api, nullptr);
  for (int i = 0; i < 4; ++i) {
    std::optional<absl::StatusOr<Decision>> answer;
    limiter_->CheckAsync(*api, "user:async", 1,
                         [&](const absl::StatusOr<Decision>& d) { answer = d; });
    ASSERT_TRUE(answer.has_value()) << "answered before CheckAsync returned";
    ASSERT_TRUE(answer->ok()) << answer->status();
    EXPECT_EQ((*answer)->allowed, i < 3) << i;
    EXPECT_EQ((*answer)->remaining, i < 3 ? 2 - i : 0) << i;
  }
  // The same bucket as Check by name.
  EXPECT_FALSE(limiter_->Check("api", "user:async", 1)->allowed);
  // A limit the limiter was not created with (an override) is checked by its numbers.
  const Limit other = FixedWindow("other", 1, 600'000'000);
  std::optional<absl::StatusOr<Decision>> answer;
  limiter_->CheckAsync(other, "k", 1, [&](const absl::StatusOr<Decision>& d) { answer = d; });
  ASSERT_TRUE(answer.has_value() && answer->ok());
  EXPECT_TRUE((*answer)->allowed);
  limiter_->CheckAsync(other, "", 1, [&](const absl::StatusOr<Decision>& d) { answer = d; });
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LimiterTest, CheckAllAsyncIsAllOrNothingOverTheEnforcedItems) {
  const Limit* api = limiter_->FindLimit("api");
  const Limit* otp = limiter_->FindLimit("otp");
  ASSERT_TRUE(limiter_->Check("otp", "u", 2)->allowed);  // otp is full
  std::vector<CheckRequest> items = {CheckRequest{*api, "u", 1}, CheckRequest{*otp, "u", 1}};
  items[1].shadow = true;
  std::optional<absl::StatusOr<MultiDecision>> result;
  limiter_->CheckAllAsync(items, [&](absl::StatusOr<MultiDecision> r) { result = std::move(r); });
  ASSERT_TRUE(result.has_value() && result->ok());
  EXPECT_TRUE((*result)->allowed);  // refused only by the shadow item
  EXPECT_FALSE((*result)->decisions[1].allowed);
  EXPECT_EQ(limiter_->Check("api", "u", 0)->remaining, 2);  // the enforced item was counted

  items[1].shadow = false;
  limiter_->CheckAllAsync(items, [&](absl::StatusOr<MultiDecision> r) { result = std::move(r); });
  ASSERT_TRUE(result->ok());
  EXPECT_FALSE((*result)->allowed);
  EXPECT_EQ((*result)->decisions[0].remaining, 2);  // what is left: nothing was taken
  EXPECT_EQ(limiter_->Check("api", "u", 0)->remaining, 2);

  limiter_->CheckAllAsync({}, [&](absl::StatusOr<MultiDecision> r) { result = std::move(r); });
  EXPECT_EQ(result->status().code(), absl::StatusCode::kInvalidArgument);
  limiter_->CheckAllAsync({CheckRequest{*api, "u", -1}},
                          [&](absl::StatusOr<MultiDecision> r) { result = std::move(r); });
  EXPECT_EQ(result->status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LimiterTest, ManyThreadsOnOneKeyGetExactlyTheCapacity) {
  auto limiter = Limiter::Create({.limits = {TokenBucket("burst", 100, 1)}, .clock = &clock_});
  ASSERT_TRUE(limiter.ok());
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  threads.reserve(16);
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        if ((*limiter)->Check("burst", "hot")->allowed) allowed.fetch_add(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(allowed.load(), 100);
}

// On a memory store, Check() goes through limits the limiter prepared for it; CheckAll and
// the store's own Apply go by Limit. All three spend one bucket per key.
TEST(LimiterStoreTest, CheckAndTheByLimitPathsSpendTheSameBucket) {
  SimulatedClock clock;
  std::shared_ptr<MemoryStore> store = *MemoryStore::Create({.clock = &clock});
  auto limiter = Limiter::Create(
      {.limits = {TokenBucket("api", 4, 1), FixedWindow("otp", 3, 600'000'000)}, .store = store});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  for (const char* name : {"api", "otp"}) {
    EXPECT_TRUE((*limiter)->Check(name, "u")->allowed) << name;
    absl::StatusOr<MultiDecision> both = (*limiter)->CheckAll({{name, "u", 1}});
    ASSERT_TRUE(both.ok()) << both.status();
    EXPECT_TRUE(both->allowed) << name;
    absl::StatusOr<std::vector<Decision>> direct =
        store->Apply({CheckItem{(*limiter)->FindLimit(name), "u", 1}});
    ASSERT_TRUE(direct.ok()) << direct.status();
    EXPECT_EQ(direct->front().remaining, (*limiter)->FindLimit(name)->numbers.MaxCost() - 3)
        << name;
    absl::StatusOr<Decision> last = (*limiter)->Check(name, "u", 1);
    ASSERT_TRUE(last.ok()) << last.status();
    EXPECT_EQ(last->allowed, std::string_view(name) == "api") << name;
    EXPECT_EQ(last->remaining, 0) << name;
  }
  EXPECT_EQ(store->Size(), 2);
}

TEST(LimiterRoutingTest, SyncModeLimitsGoToTheSyncStoreAndAreNotMixedWithExactOnes) {
  SimulatedClock clock;
  std::shared_ptr<MemoryStore> exact = *MemoryStore::Create({.clock = &clock});
  std::shared_ptr<MemoryStore> sync = *MemoryStore::Create({.clock = &clock});
  Limit hot = FixedWindow("partner", 1000, 1'000'000);
  hot.mode = Mode::kSync;
  auto limiter = Limiter::Create({.limits = {hot, TokenBucket("api", 3, 1)},
                                  .store = exact,
                                  .sync_store = sync,
                                  .clock = &clock});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  ASSERT_TRUE((*limiter)->Check("partner", "p1")->allowed);
  ASSERT_TRUE((*limiter)->Check("api", "u1")->allowed);
  EXPECT_EQ(sync->Size(), 1);
  EXPECT_EQ(exact->Size(), 1);
  std::vector<CheckRequest> mixed = {{"partner", "p1", 1}, {"api", "u1", 1}};
  absl::StatusOr<MultiDecision> refused = (*limiter)->CheckAll(mixed);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*limiter)->Check("api", "u1", 0)->remaining, 2);  // nothing consumed
}

// A store without a prepared path: Limiter::Check reaches it through Store::ApplyAsync,
// which must give the same answers as the memory store's own fast path.
class BatchOnlyStore final : public Store {
 public:
  explicit BatchOnlyStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    batches.fetch_add(1);
    inner_->ApplyAsync(std::move(items), std::move(done));
  }
  std::string_view Name() const override { return "batch_only"; }

  std::atomic<int> batches{0};

 private:
  std::unique_ptr<Store> inner_;
};

TEST(LimiterStoreTest, CheckWorksOnAStoreWithoutASingleItemPath) {
  SimulatedClock clock;
  auto store = std::make_shared<BatchOnlyStore>(*MemoryStore::Create({.clock = &clock}));
  auto limiter = Limiter::Create({.limits = {TokenBucket("api", 2, 1)}, .store = store});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  EXPECT_EQ((*limiter)->Check("api", "u")->remaining, 1);
  EXPECT_EQ((*limiter)->Check("api", "u")->remaining, 0);
  absl::StatusOr<Decision> refused = (*limiter)->Check("api", "u");
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->allowed);
  EXPECT_EQ(refused->retry_after_micros, 1'000'000);
  EXPECT_EQ(store->batches.load(), 3);
  // Invalid requests never reach the store.
  EXPECT_EQ((*limiter)->Check("api", "", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*limiter)->Check("nope", "u").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*limiter)->Check("api", "u", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->batches.load(), 3);
}

TEST(LimiterCreateTest, RefusesInvalidLimits) {
  EXPECT_FALSE(Limiter::Create({.limits = {TokenBucket("a", 0, 1)}}).ok());
  EXPECT_FALSE(Limiter::Create({.limits = {TokenBucket("a", 1, 0)}}).ok());
  EXPECT_FALSE(Limiter::Create({.limits = {FixedWindow("w", 1, 0)}}).ok());
  EXPECT_FALSE(Limiter::Create({.limits = {TokenBucket("", 1, 1)}}).ok());
  absl::StatusOr<std::unique_ptr<Limiter>> duplicate =
      Limiter::Create({.limits = {TokenBucket("a", 1, 1), TokenBucket("a", 2, 1)}});
  ASSERT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.status().message().find("two limits are named a"), absl::string_view::npos);
  Limit local = TokenBucket("l", 1, 1);
  local.on_store_failure = FailureMode::kLocal;
  EXPECT_FALSE(Limiter::Create({.limits = {local}}).ok());
}

}  // namespace
}  // namespace tollgate
