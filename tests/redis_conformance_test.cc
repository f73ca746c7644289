// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) against
// the stores that need a real redis-server: RedisStore (which keeps Redis' own time, so the
// factory leaves `advance` empty and the suite skips the cases that need it), SyncStore (one
// instance, on a simulated clock, syncing whenever the suite moves time), and ResilientStore
// answering from its fail_open fallback because its Redis was killed.
#include "tests/store_conformance.h"
#include "tests/support/redis_server.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/sync_store.h"
#include "tollgate/timers.h"

namespace tollgate {
namespace {

// One redis-server for the whole binary (the suite's keys are unique per case), killed by its
// destructor at exit.
absl::StatusOr<std::string> SharedRedisUrl() {
  static absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start();
  if (!server.ok()) return server.status();
  return (*server)->url();
}

absl::StatusOr<StoreUnderTest> MakeRedisStore() {
  absl::StatusOr<std::string> url = SharedRedisUrl();
  if (!url.ok()) return url.status();
  RedisStoreOptions options;
  options.url = *url;
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(options);
  if (!store.ok()) return store.status();
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(std::move(store).value());
  out.source = DecisionSource::kRedis;
  return out;
}

absl::StatusOr<StoreUnderTest> MakeSyncStore() {
  absl::StatusOr<std::string> url = SharedRedisUrl();
  if (!url.ok()) return url.status();
  struct Holder {
    SimulatedClock clock;
    std::unique_ptr<SyncStore> store;
  };
  auto holder = std::make_shared<Holder>();
  SyncStoreOptions options;
  options.redis_url = *url;
  options.clock = &holder->clock;
  options.use_redis_time = false;
  options.schedule_rounds = false;
  absl::StatusOr<std::unique_ptr<SyncStore>> store = SyncStore::Create(options);
  if (!store.ok()) return store.status();
  holder->store = *std::move(store);
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(holder, holder->store.get());
  out.advance = [holder](int64_t micros) {
    holder->clock.AdvanceMicros(micros);
    const absl::Status synced = holder->store->SyncNow();
    EXPECT_TRUE(synced.ok()) << synced;
  };
  out.source = DecisionSource::kSync;
  out.algorithms = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow};
  return out;
}

absl::StatusOr<StoreUnderTest> MakeResilientFallback() {
  struct Holder {
    SimulatedClock clock;
    std::shared_ptr<SimulatedTimers> timers = std::make_shared<SimulatedTimers>();
    std::unique_ptr<testing::RedisServer> server;
    std::unique_ptr<ResilientStore> store;
  };
  auto holder = std::make_shared<Holder>();
  absl::StatusOr<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start();
  if (!server.ok()) return server.status();
  holder->server = *std::move(server);
  RedisStoreOptions redis_options;
  redis_options.url = holder->server->url();
  absl::StatusOr<std::unique_ptr<RedisStore>> redis = RedisStore::Create(redis_options);
  if (!redis.ok()) return redis.status();
  holder->server->Kill();  // every check fails at once: the fallback answers
  ResilienceOptions options;
  options.clock = &holder->clock;
  options.timers = holder->timers;
  absl::StatusOr<std::unique_ptr<ResilientStore>> store =
      ResilientStore::Create(std::shared_ptr<Store>(*std::move(redis)), options);
  if (!store.ok()) return store.status();
  holder->store = *std::move(store);
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(holder, holder->store.get());
  out.advance = [holder](int64_t micros) {
    holder->clock.AdvanceMicros(micros);
    holder->timers->AdvanceMicros(micros);
  };
  out.source = DecisionSource::kFallback;
  return out;
}

INSTANTIATE_TEST_SUITE_P(RedisStores, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"Redis", &MakeRedisStore},
                                           StoreFactory{"Sync", &MakeSyncStore},
                                           StoreFactory{"ResilientFallback",
                                                        &MakeResilientFallback}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tollgate
