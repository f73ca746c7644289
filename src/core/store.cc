// Copyright tollgate authors.
#include "tollgate/store.h"

#include <utility>

#include "absl/synchronization/notification.h"

namespace tollgate {

absl::StatusOr<std::vector<Decision>> Store::Apply(std::vector<CheckItem> items) {
  // The callback writes into this frame, which outlives it: we wait for it before returning.
  absl::Notification answered;
  absl::StatusOr<std::vector<Decision>> result;
  ApplyAsync(std::move(items), [&](absl::StatusOr<std::vector<Decision>> decisions) {
    result = std::move(decisions);
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

std::unique_ptr<PreparedCheck> Store::PrepareCheck(const Limit& /*limit*/) { return nullptr; }

}  // namespace tollgate
