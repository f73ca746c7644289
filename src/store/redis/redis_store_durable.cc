// Copyright tollgate authors. RedisStoreImpl's durable limits: which calls wait for a replica,
// and what their waits found (durability.h, durable_writes.h).
#include <vector>

#include "src/store/redis/durability.h"
#include "src/store/redis/redis_connections_impl.h"
#include "src/store/redis/redis_store_impl.h"

namespace tollgate::redis {

bool RedisStoreImpl::Durable(const Limit& limit) const {
  return IsDurable(limit, durability_.durable_by_default);
}

absl::Status RedisStoreImpl::CheckDurable(const std::vector<Limit>& limits) const {
  return CheckDurableLimits(limits, durability_);
}

DurableWaitStats RedisStoreImpl::durable_waits() const {
  return DurableMonitorOf(*connections_).Snapshot();
}

}  // namespace tollgate::redis
