// Copyright tollgate authors. Stores on connections of their own, for tests that need one
// store on one Redis (the library's stores take shared connections only: tollgate/fleet.h, or
// RedisConnections::Connect then each store's Create).
#ifndef TOLLGATE_TESTS_SUPPORT_REDIS_STORES_H_
#define TOLLGATE_TESTS_SUPPORT_REDIS_STORES_H_

#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "src/store/sync/sync_store_testing.h"
#include "tollgate/redis_connections.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/sync_store.h"

namespace tollgate::testing {

// A RedisStore on new connections of `connection` (its url and timings); `options.redis` is
// set here.
inline absl::StatusOr<std::unique_ptr<RedisStore>> ConnectRedisStore(
    RedisConnectionsOptions connection, RedisStoreOptions options = {}) {
  absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
      RedisConnections::Connect(std::move(connection));
  if (!redis.ok()) return redis.status();
  options.redis = *std::move(redis);
  return RedisStore::Create(std::move(options));
}

// A SyncStore on new connections of `connection`, with the test switches `test`.
inline absl::StatusOr<std::unique_ptr<SyncStore>> ConnectSyncStore(
    RedisConnectionsOptions connection, SyncStoreOptions options = {},
    sync::SyncStoreTestOptions test = {}) {
  absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
      RedisConnections::Connect(std::move(connection));
  if (!redis.ok()) return redis.status();
  options.redis = *std::move(redis);
  return sync::CreateSyncStore(std::move(options), std::move(test));
}

// An InstanceRegistry on new connections of `connection`.
inline absl::StatusOr<std::unique_ptr<InstanceRegistry>> ConnectRegistry(
    RedisConnectionsOptions connection, InstanceRegistryOptions options = {}) {
  absl::StatusOr<std::shared_ptr<RedisConnections>> redis =
      RedisConnections::Connect(std::move(connection));
  if (!redis.ok()) return redis.status();
  options.redis = *std::move(redis);
  return InstanceRegistry::Start(std::move(options));
}

}  // namespace tollgate::testing

#endif  // TOLLGATE_TESTS_SUPPORT_REDIS_STORES_H_
