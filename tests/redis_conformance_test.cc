// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) against
// the stores that need a real redis-server: RedisStore (which keeps Redis' own time, so the
// factory leaves `advance` empty and the suite skips the cases that need it), SyncStore (one
// instance, on a simulated clock, syncing whenever the suite moves time), and ResilientStore
// answering from its fail_open fallback because its Redis was killed; and the metered work's
// suite (tests/metered_conformance.h) against RedisStore. RedisStore runs each suite twice: a
// request alone in its script call, and every request inside a batch.
#include "tests/metered_conformance.h"
#include "tests/store_conformance.h"
#include "tests/support/redis_server.h"
#include "tests/support/redis_stores.h"
#include "tollgate/redis_store.h"
#include "tollgate/sync_store.h"

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
  return RedisUnderTest(*url);
}

// Every request decided in a batch, between requests of another limit.
absl::StatusOr<StoreUnderTest> MakeBatchedRedisStore() {
  absl::StatusOr<std::string> url = SharedRedisUrl();
  if (!url.ok()) return url.status();
  return RedisUnderTest(*url, /*batched=*/true);
}

// The suite's limits, in sync mode: what a SyncStore decides (it refuses any other).
class AsSyncLimits final : public Store {
 public:
  explicit AsSyncLimits(Store& sync) : sync_(sync) {}

  void ApplyAsync(std::vector<CheckItem> items, CheckCallback done) override {
    std::vector<Limit> limits;  // the sync store answers inline: they live long enough
    limits.reserve(items.size());
    for (CheckItem& item : items) {
      limits.push_back(*item.limit);
      limits.back().mode = Mode::kSync;
      item.limit = &limits.back();
    }
    sync_.ApplyAsync(std::move(items), std::move(done));
  }
  std::string_view Name() const override { return sync_.Name(); }

 private:
  Store& sync_;
};

absl::StatusOr<StoreUnderTest> MakeSyncStore() {
  absl::StatusOr<std::string> url = SharedRedisUrl();
  if (!url.ok()) return url.status();
  struct Holder {
    SimulatedClock clock;
    std::unique_ptr<SyncStore> store;
    std::unique_ptr<AsSyncLimits> as_sync;
  };
  auto holder = std::make_shared<Holder>();
  absl::StatusOr<std::unique_ptr<SyncStore>> store =
      testing::ConnectSyncStore({.url = *url}, {.clock = &holder->clock},
                                {.use_redis_time = false, .schedule_rounds = false});
  if (!store.ok()) return store.status();
  holder->store = *std::move(store);
  holder->as_sync = std::make_unique<AsSyncLimits>(*holder->store);
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(holder, holder->as_sync.get());
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
  return ResilientOver(
      [](Clock* clock) -> absl::StatusOr<std::shared_ptr<Store>> {
        // A server of its own, killed once the store is made: every check fails at once and
        // the fallback answers. The primary owns the server (destroyed after the store).
        struct Primary {
          std::unique_ptr<testing::RedisServer> server;
          std::unique_ptr<RedisStore> store;
        };
        auto primary = std::make_shared<Primary>();
        absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
            testing::RedisServer::Start();
        if (!server.ok()) return server.status();
        primary->server = *std::move(server);
        absl::StatusOr<std::unique_ptr<RedisStore>> store =
            testing::ConnectRedisStore({.url = primary->server->url()}, {.clock = clock});
        if (!store.ok()) return store.status();
        primary->store = *std::move(store);
        primary->server->Kill();
        return std::shared_ptr<Store>(primary, primary->store.get());
      },
      DecisionSource::kFallback);
}

INSTANTIATE_TEST_SUITE_P(
    RedisStores, StoreConformanceTest,
    ::testing::Values(StoreFactory{"Redis", &MakeRedisStore},
                      StoreFactory{"RedisBatched", &MakeBatchedRedisStore},
                      StoreFactory{"Sync", &MakeSyncStore},
                      StoreFactory{"ResilientFallback", &MakeResilientFallback}),
    [](const ::testing::TestParamInfo<StoreFactory>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RedisStores, MeteredConformanceTest,
                         ::testing::Values(StoreFactory{"Redis", &MakeRedisStore},
                                           StoreFactory{"RedisBatched", &MakeBatchedRedisStore}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tollgate
