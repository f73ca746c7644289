// Copyright tollgate authors. Checks issued from the store's own callbacks (a caller that
// sends its next check when the last one is answered, like compare_driver's closed loop):
// they go out on the connection whose replies are being handed out, when that batch is done.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

using testing::RedisServer;
using ::tollgate::testing::TokenBucket;

// `chains` callers each check `per_chain` times, each check sent from the callback of the
// previous one (on the store's I/O thread), all on one key.
struct Chains {
  Store* store = nullptr;
  const Limit* limit = nullptr;
  int chains = 0;
  int per_chain = 0;
  std::atomic<int> answered{0};
  std::atomic<int> allowed{0};
  std::atomic<int> errors{0};
  std::atomic<int> running{0};
  absl::Notification done;

  void Start() {
    running = chains;
    for (int chain = 0; chain < chains; ++chain) Next(per_chain);
  }

  void Next(int left) {
    if (left == 0) {
      if (--running == 0) done.Notify();
      return;
    }
    store->ApplyAsync({CheckItem{limit, "hot"}},
                      [this, left](absl::StatusOr<std::vector<Decision>> decisions) {
                        ++answered;
                        if (!decisions.ok() || decisions->size() != 1) {
                          ++errors;
                        } else if ((*decisions)[0].allowed) {
                          ++allowed;
                        }
                        Next(left - 1);
                      });
  }
};

TEST(RedisPipeliningTest, ChecksSentFromCallbacksAllCompleteOnceAndNeverOverAdmit) {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  for (int connections : {1, 2, 3}) {
    absl::StatusOr<std::unique_ptr<RedisStore>> store = testing::ConnectRedisStore(
        {.url = (*server)->url(), .connections = connections},
        {.key_prefix = "pipelining" + std::to_string(connections) + ":"});
    ASSERT_TRUE(store.ok()) << store.status();
    // Refills one token in 1000 s: over the test the bucket only drains.
    const Limit limit = TokenBucket("api", 1500, 0.001);
    Chains chains;
    chains.store = store->get();
    chains.limit = &limit;
    chains.chains = 64;
    chains.per_chain = 40;
    chains.Start();
    // Generous: a loaded machine may be slow, but a command left unsent would hang forever.
    ASSERT_TRUE(chains.done.WaitForNotificationWithTimeout(absl::Seconds(120)))
        << connections << " connections: " << chains.answered << " of 2560 answered";
    EXPECT_EQ(chains.answered, 64 * 40) << connections << " connections";
    EXPECT_EQ(chains.errors, 0) << connections << " connections";
    // Exactly the capacity: every check was answered once, and none over-admitted.
    EXPECT_EQ(chains.allowed, 1500) << connections << " connections";
  }
}

}  // namespace
}  // namespace tollgate
