// Copyright tollgate authors. The store conformance suite (tests/store_conformance.h) and
// the metered work's (tests/metered_conformance.h), run against RedisStore on a real
// redis-server. Redis keeps its own time (TIME), so the factory leaves `advance` empty and
// the suite skips the cases that need it.
#include "tests/metered_conformance.h"
#include "tests/support/redis_server.h"

namespace tollgate {
namespace {

absl::StatusOr<StoreUnderTest> MakeRedisStore() {
  // One redis-server for the whole binary (the suite's keys are unique per case), killed by
  // its destructor at exit.
  static absl::StatusOr<std::unique_ptr<testing::RedisServer>> server =
      testing::RedisServer::Start();
  if (!server.ok()) return server.status();
  return RedisUnderTest((*server)->url());
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
