// Copyright tollgate authors.
#include "tollgate/store.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/synchronization/notification.h"

namespace tollgate {
namespace {

// The payload that marks UnconfirmedWriteError.
constexpr char kUnconfirmedWriteUrl[] = "tollgate/unconfirmed-write";

}  // namespace

absl::Status UnconfirmedWriteError(std::string_view message) {
  absl::Status status = absl::UnavailableError(absl::string_view(message.data(), message.size()));
  status.SetPayload(kUnconfirmedWriteUrl, absl::Cord("1"));
  return status;
}

bool IsUnconfirmedWrite(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         status.GetPayload(kUnconfirmedWriteUrl).has_value();
}

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
