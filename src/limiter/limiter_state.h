// Copyright tollgate authors. What a Limiter holds, and the helpers its verbs share
// (limiter.cc: checks; limiter_metered.cc: charges, reservations and leases).
#ifndef TOLLGATE_SRC_LIMITER_LIMITER_STATE_H_
#define TOLLGATE_SRC_LIMITER_LIMITER_STATE_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "tollgate/limiter.h"
#include "tollgate/store.h"

namespace tollgate {

struct Limiter::State {
  std::vector<Limit> limits;
  // Each limit's index in `limits`. Keys view the names in `limits`, which never change
  // after Create().
  absl::flat_hash_map<std::string_view, size_t> by_name;
  std::shared_ptr<Store> store;
  std::shared_ptr<Store> sync_store;
  // Every limit prepared on `store` (parallel to `limits`), where the store decides inline
  // (Store::PrepareCheck); null elsewhere (a remote store, or numbers the store refuses,
  // whose checks then answer why). Declared after `store`, so destroyed before it.
  std::vector<std::unique_ptr<PreparedCheck>> prepared;
};

namespace internal {

// The checks every request gets before it reaches a store, with the messages users see.
absl::Status ValidateRequest(std::string_view limit, std::string_view key, int64_t cost);

// What an item's op asks of its limit, beyond ValidateRequest.
absl::Status ValidateOp(const CheckItem& item);

// NotFound naming `limit`.
absl::Status UnknownLimit(std::string_view limit);

// The one decision of a one-item MultiDecision.
absl::StatusOr<Decision> SingleDecision(absl::StatusOr<MultiDecision> result);

// Runs `start` with a callback and waits for it: the callback writes into this frame, which
// outlives it.
template <typename T, typename Start>
absl::StatusOr<T> Wait(Start start) {
  absl::Notification answered;
  absl::StatusOr<T> result;
  start([&](absl::StatusOr<T> answer) {
    result = std::move(answer);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

}  // namespace internal
}  // namespace tollgate

#endif  // TOLLGATE_SRC_LIMITER_LIMITER_STATE_H_
