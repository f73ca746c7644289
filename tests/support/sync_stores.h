// Copyright tollgate authors. SyncStores for tests in simulated time.
#ifndef TOLLGATE_TESTS_SUPPORT_SYNC_STORES_H_
#define TOLLGATE_TESTS_SUPPORT_SYNC_STORES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "tests/support/redis_stores.h"
#include "tollgate/clock.h"
#include "tollgate/sync_store.h"

namespace tollgate::testing {

// A SyncStore on connections of its own (`connection`'s timings) to the Redis at `url` that
// decides at `clock`'s time (not Redis TIME), counts `instances` live instances, and syncs
// only when the test calls SyncNow(); `options` for anything else. nullptr, with a test failure,
// when it cannot start. REQUIRES: `clock` outlives the store.
inline std::unique_ptr<SyncStore> SimulatedSyncStore(const std::string& url, Clock* clock,
                                                     int64_t instances,
                                                     SyncStoreOptions options = {},
                                                     RedisConnectionsOptions connection = {}) {
  connection.url = url;
  sync::SyncStoreTestOptions test;
  options.clock = clock;
  options.instance_count = [instances] { return instances; };
  test.use_redis_time = false;
  test.schedule_rounds = false;
  absl::StatusOr<std::unique_ptr<SyncStore>> store =
      ConnectSyncStore(std::move(connection), std::move(options), std::move(test));
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_SYNC_STORES_H_
