// Copyright tollgate authors. Limiter::CheckAsync, the single-item path an event loop calls,
// never blocks its caller on Redis: with the server stopped, the call returns at once and
// the answer arrives when Redis answers.
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tollgate/limiter.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

TEST(LimiterCheckAsyncTest, ReturnsBeforeRedisAnswers) {
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<RedisStore>> store =
      testing::ConnectRedisStore({.url = (*server)->url()});
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::unique_ptr<Limiter>> limiter = Limiter::Create(
      {.limits = {testing::TokenBucket("async", 5, 1)}, .store = std::move(*store)});
  ASSERT_TRUE(limiter.ok()) << limiter.status();
  const Limit& limit = *(*limiter)->FindLimit("async");
  // The connection is up and the script loaded before Redis is stopped.
  ASSERT_TRUE((*limiter)->Check("async", "warm", 1).ok());

  (*server)->Pause();
  absl::Notification answered;
  std::optional<absl::StatusOr<Decision>> decision;
  (*limiter)->CheckAsync(limit, "user:1", 1, [&](absl::StatusOr<Decision> d) {
    decision = std::move(d);
    answered.Notify();
  });
  // Returned with Redis stopped: nothing can have answered yet.
  EXPECT_FALSE(answered.HasBeenNotified());
  (*server)->Resume();
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(decision->ok()) << decision->status();
  EXPECT_TRUE((*decision)->allowed);
  EXPECT_EQ((*decision)->remaining, 4);
  EXPECT_EQ((*decision)->source, DecisionSource::kRedis);
}

}  // namespace
}  // namespace tollgate
