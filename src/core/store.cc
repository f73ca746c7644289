// Copyright tollgate authors.
#include "tollgate/store.h"

#include <future>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace tollgate {

namespace {

// Runs `start(callback)` and waits for the callback's decisions.
template <typename Start>
absl::StatusOr<std::vector<Decision>> WaitForDecisions(Start start) {
  std::promise<absl::StatusOr<std::vector<Decision>>> promise;
  std::future<absl::StatusOr<std::vector<Decision>>> result = promise.get_future();
  start([&promise](absl::StatusOr<std::vector<Decision>> decisions) {
    promise.set_value(std::move(decisions));
  });
  return result.get();
}

}  // namespace

absl::StatusOr<std::vector<Decision>> Store::Check(std::vector<CheckItem> items) {
  return WaitForDecisions(
      [&](CheckCallback done) { CheckAsync(std::move(items), std::move(done)); });
}

absl::StatusOr<Decision> Store::CheckOne(const Limit& limit, std::string_view key, int64_t cost) {
  if (key.empty()) return absl::InvalidArgumentError("empty key");
  if (cost < 0) return absl::InvalidArgumentError("negative cost");
  std::vector<CheckItem> items;
  items.push_back(CheckItem{&limit, std::string(key), cost});
  // The callback writes into this frame, which outlives it: we wait for it before returning.
  absl::Notification answered;
  absl::StatusOr<Decision> result;
  CheckAsync(std::move(items), [&](absl::StatusOr<std::vector<Decision>> decisions) {
    if (!decisions.ok()) {
      result = std::move(decisions).status();
    } else if (decisions->size() != 1) {
      result = absl::InternalError(absl::StrCat(
          std::string(Name()), " store answered one item with ", decisions->size(), " decisions"));
    } else {
      result = decisions->front();
    }
    answered.Notify();
  });
  answered.WaitForNotification();
  return result;
}

void Store::ApplyAsync(std::vector<CheckItem> items, CheckCallback done) {
  for (const CheckItem& item : items) {
    if (item.op != ItemOp::kCheck) {
      std::move(done)(absl::UnimplementedError(absl::StrCat(
          "the ", std::string(Name()), " store keeps no charges, reservations or leases (limit '",
          item.limit->name, "')")));
      return;
    }
  }
  CheckAsync(std::move(items), std::move(done));
}

absl::StatusOr<std::vector<Decision>> Store::Apply(std::vector<CheckItem> items) {
  return WaitForDecisions(
      [&](CheckCallback done) { ApplyAsync(std::move(items), std::move(done)); });
}

std::unique_ptr<PreparedCheck> Store::PrepareCheck(const Limit& /*limit*/) { return nullptr; }

// The interface takes ownership of the items, which this default does not need.
// NOLINTNEXTLINE(performance-unnecessary-value-param)
void Store::AddAsync(std::vector<CheckItem> /*items*/, AddCallback done) {
  std::move(done)(
      absl::UnimplementedError(absl::StrCat(std::string(Name()), " store cannot add consumption")));
}

}  // namespace tollgate
