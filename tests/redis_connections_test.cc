// Copyright tollgate authors. One set of Redis connections shared by the exact store, the
// sync store and the instance registry, in the library and in `tollgate serve`, against a
// real redis-server (counted with CLIENT LIST).
#include "tollgate/redis_connections.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "src/store/redis/client.h"
#include "src/store/sync/sync_store_testing.h"
#include "tests/support/limits.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_test.h"
#include "tests/support/serve_process.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/sync_store.h"

namespace tollgate {
namespace {

class RedisConnectionsTest : public testing::RedisTest {
 protected:
  // Clients connected to Redis, this test's own one not counted.
  int OtherClients() {
    absl::StatusOr<redis::RedisReply> reply = client_->Command({"CLIENT", "LIST"});
    EXPECT_TRUE(reply.ok()) << reply.status();
    if (!reply.ok()) return -1;
    int clients = 0;
    for (absl::string_view line : absl::StrSplit(reply->str, '\n', absl::SkipEmpty())) {
      if (!absl::StrContains(line, "cmd=client")) ++clients;
    }
    return clients;
  }

  // Connections to the test's Redis: `connections` on their own I/O thread.
  std::shared_ptr<RedisConnections> Connect(int connections) {
    RedisConnectionsOptions options;
    options.url = server_->url();
    options.connections = connections;
    absl::StatusOr<std::shared_ptr<RedisConnections>> redis = RedisConnections::Connect(options);
    EXPECT_TRUE(redis.ok()) << redis.status();
    return redis.ok() ? *std::move(redis) : nullptr;
  }

  static std::unique_ptr<RedisStore> ExactStore(std::shared_ptr<RedisConnections> redis) {
    RedisStoreOptions options;
    options.redis = std::move(redis);
    absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // Rounds only by SyncNow().
  static std::unique_ptr<SyncStore> SyncStoreOn(std::shared_ptr<RedisConnections> redis) {
    SyncStoreOptions options;
    options.redis = std::move(redis);
    absl::StatusOr<std::unique_ptr<SyncStore>> store =
        sync::CreateSyncStore(std::move(options), {.schedule_rounds = false});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
};

TEST_F(RedisConnectionsTest, TheExactStoreTheSyncStoreAndTheRegistryShareOneSet) {
  std::shared_ptr<RedisConnections> redis = Connect(1);
  ASSERT_NE(redis, nullptr);
  std::unique_ptr<RedisStore> exact = ExactStore(redis);
  ASSERT_NE(exact, nullptr);
  InstanceRegistryOptions registry_options;
  registry_options.redis = redis;
  registry_options.key = "tollgate:instances:shared";
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> registry =
      InstanceRegistry::Start(std::move(registry_options));
  ASSERT_TRUE(registry.ok()) << registry.status();
  std::unique_ptr<SyncStore> sync = SyncStoreOn(redis);
  ASSERT_NE(sync, nullptr);

  // Each does its work over the one connection.
  const Limit exact_limit = testing::Window("exact", Algorithm::kFixedWindow, 10, 60'000'000);
  absl::StatusOr<std::vector<Decision>> decided = exact->Apply({{&exact_limit, "k", 1}});
  ASSERT_TRUE(decided.ok()) << decided.status();
  EXPECT_EQ((*decided)[0].source, DecisionSource::kRedis);
  Limit sync_limit = testing::Window("hot", Algorithm::kFixedWindow, 100, 60'000'000);
  sync_limit.mode = Mode::kSync;
  ASSERT_TRUE(sync->Apply({{&sync_limit, "k", 3}}).ok());
  ASSERT_TRUE(sync->SyncNow().ok());
  EXPECT_EQ(sync->stats().syncs, 1);
  EXPECT_TRUE((*registry)->StoreReachable());
  EXPECT_EQ(OtherClients(), 1);
  absl::StatusOr<redis::RedisReply> members =
      client_->Command({"ZCARD", "tollgate:instances:shared"});
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->integer, 1);

  // The connections live as long as any of them holds them.
  redis.reset();
  exact.reset();
  registry->reset();  // leaves the set at once, over the shared connection
  members = client_->Command({"ZCARD", "tollgate:instances:shared"});
  ASSERT_TRUE(members.ok());
  EXPECT_EQ(members->integer, 0);
  EXPECT_EQ(OtherClients(), 1);
  sync.reset();
  // The last holder closed them; Redis notices the closed sockets on its own schedule.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (OtherClients() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(OtherClients(), 0);
}

// A store on shared connections waits for its calls' replies when it goes, except for the
// call whose callback let go of it (which would otherwise wait for itself).
TEST_F(RedisConnectionsTest, AStoreReleasedByItsOwnCallbackDoesNotWaitForThatCall) {
  std::shared_ptr<RedisConnections> redis = Connect(2);
  ASSERT_NE(redis, nullptr);
  std::shared_ptr<RedisStore> store = ExactStore(redis);
  ASSERT_NE(store, nullptr);
  const Limit limit = testing::Window("released", Algorithm::kFixedWindow, 10, 60'000'000);
  std::promise<bool> answered;
  store->ApplyAsync(
      {{&limit, "k", 1}},
      [owner = store, &answered](const absl::StatusOr<std::vector<Decision>>& d) mutable {
        owner.reset();  // the last owner lets go here, on the I/O thread
        answered.set_value(d.ok());
      });
  store.reset();
  std::future<bool> done = answered.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(done.get());
}

// A sync store released on the connections' I/O thread (in a callback of the exact store)
// does not wait there for its last round, whose reply needs that thread; the round still
// delivers its deltas.
TEST_F(RedisConnectionsTest, ASyncStoreReleasedOnTheConnectionsThreadSendsItsLastDeltas) {
  std::shared_ptr<RedisConnections> redis = Connect(1);
  ASSERT_NE(redis, nullptr);
  std::unique_ptr<RedisStore> exact = ExactStore(redis);
  ASSERT_NE(exact, nullptr);
  std::shared_ptr<SyncStore> sync = SyncStoreOn(redis);
  ASSERT_NE(sync, nullptr);

  // One hour windows: the exact store reads the counter the sync store writes.
  Limit limit = testing::Window("released", Algorithm::kFixedWindow, 100, 3'600'000'000);
  Limit sync_limit = limit;
  sync_limit.mode = Mode::kSync;
  ASSERT_TRUE(sync->Apply({{&sync_limit, "k", 3}}).ok());
  std::promise<void> released;
  exact->ApplyAsync({{&limit, "k", 0}}, [&sync, &released](auto) {
    sync.reset();  // on the connections' I/O thread
    released.set_value();
  });
  std::future<void> done = released.get_future();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(30)), std::future_status::ready);

  int64_t remaining = -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (remaining != 97 && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<std::vector<Decision>> peek = exact->Apply({{&limit, "k", 0}});
    ASSERT_TRUE(peek.ok()) << peek.status();
    remaining = (*peek)[0].remaining;
    if (remaining != 97) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(remaining, 97);
}

// `tollgate serve --redis` opens 2 connections of its own and 1 per event loop, whatever its
// limits need: the exact store, the sync store and the registry share them.
TEST_F(RedisConnectionsTest, ServeOpensOneConnectionSet) {
  constexpr char kConfig[] = R"(limits:
  api:
    algorithm: fixed_window
    limit: 100
    window: 1m
  hot:
    algorithm: fixed_window
    limit: 1000
    window: 1s
    mode: sync
    sync_interval: 100ms
)";
  std::unique_ptr<testing::ServeProcess> serve =
      testing::ServeProcess::Start(kConfig, {"--redis", server_->url()});  // --threads 2
  ASSERT_NE(serve, nullptr);
  testing::HttpTestClient http(serve->port());
  for (const char* limit : {"api", "hot"}) {
    std::optional<testing::HttpTestResponse> response =
        http.Check(absl::StrCat(R"({"limit": ")", limit, R"(", "key": "u"})"));
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->result_int(), 200) << response->body();
  }
  EXPECT_EQ(OtherClients(), 2 + 2) << serve->log();
  EXPECT_EQ(serve->Stop(), 0) << serve->log();
}

}  // namespace
}  // namespace tollgate
