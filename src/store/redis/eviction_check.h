// Copyright tollgate authors. Whether Redis may evict limit keys.
#ifndef TOLLGATE_SRC_STORE_REDIS_EVICTION_CHECK_H_
#define TOLLGATE_SRC_STORE_REDIS_EVICTION_CHECK_H_

#include <string>
#include <vector>

#include "src/store/redis/router.h"

namespace tollgate::redis {

// Reads Redis' maxmemory settings and appends a warning to `warnings` unless the policy is
// noeviction (or when they cannot be read). An eviction policy other than noeviction can
// evict our keys once Redis reaches maxmemory: allkeys-* pick any key, and volatile-* pick
// keys with a TTL, which every tollgate key has. Either silently resets counters.
// Blocking. REQUIRES: not on the router's I/O thread.
void CheckEviction(Router& client, std::vector<std::string>* warnings);

}  // namespace tollgate::redis

#endif  // TOLLGATE_SRC_STORE_REDIS_EVICTION_CHECK_H_
