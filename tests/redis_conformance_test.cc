// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) and
// the metered work's (tests/metered_conformance.h), run against RedisStore on a real
// redis-server. Redis keeps its own time (TIME), so the factory leaves `advance` empty and
// the suite skips the cases that need it.
#include "tests/metered_conformance.h"
#include "tests/support/redis_server.h"
#include "tollgate/redis_store.h"

namespace tollgate {
namespace {

absl::StatusOr<StoreUnderTest> MakeRedisStore() {
  // One redis-server for the whole binary (the suite's keys are unique per case), killed by
  // its destructor at exit.
  static absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start();
  if (!server.ok()) return server.status();
  RedisStoreOptions options;
  options.url = (*server)->url();
  absl::StatusOr<std::unique_ptr<RedisStore>> store = RedisStore::Create(options);
  if (!store.ok()) return store.status();
  StoreUnderTest out;
  out.store = std::shared_ptr<Store>(std::move(store).value());
  out.source = DecisionSource::kRedis;
  return out;
}

INSTANTIATE_TEST_SUITE_P(RedisStores, StoreConformanceTest,
                         ::testing::Values(StoreFactory{"Redis", &MakeRedisStore}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(RedisStores, MeteredConformanceTest,
                         ::testing::Values(StoreFactory{"Redis", &MakeRedisStore}),
                         [](const ::testing::TestParamInfo<StoreFactory>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tollgate
