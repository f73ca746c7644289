// Copyright tollgate authors. What tests and benchmarks switch off in a SyncStore to drive it
// in simulated time; never set in production (SyncStore::Create leaves them all on).
#ifndef TOLLGATE_SRC_STORE_SYNC_SYNC_STORE_TESTING_H_
#define TOLLGATE_SRC_STORE_SYNC_SYNC_STORE_TESTING_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "tollgate/sync_store.h"

namespace tollgate::sync {

struct SyncStoreTestOptions {
  // Learn the offset between the store's clock and Redis TIME at every sync and apply it to
  // window indexes. Off for a SimulatedClock, whose time is not Redis'.
  bool use_redis_time = true;
  // Schedule rounds on the timers. Off for callers that run them with SyncNow().
  bool schedule_rounds = true;
  // For benchmarks that model the round trip in simulated time: runs on the thread that
  // receives a sync round's reply (or error; the destructor's last round too), before the
  // reply is applied, so the checks it makes (on this store too) are those a real round trip
  // lets through on the old grant. It may check, never SyncNow().
  std::function<void()> before_reply_applied;
};

// SyncStore::Create with `test`'s switches.
absl::StatusOr<std::unique_ptr<SyncStore>> CreateSyncStore(SyncStoreOptions options,
                                                           SyncStoreTestOptions test);

}  // namespace tollgate::sync

#endif  // TOLLGATE_SRC_STORE_SYNC_SYNC_STORE_TESTING_H_
