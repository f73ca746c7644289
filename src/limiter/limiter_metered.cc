// Copyright tollgate authors. Limiter's metered verbs: Charge, Reserve and Settle, Acquire,
// Release and Renew, and the Lease they hand out.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "src/core/absl_view.h"
#include "src/core/metered_ids.h"
#include "src/limiter/limiter_state.h"
#include "tollgate/limiter.h"

namespace tollgate {

absl::StatusOr<Decision> Limiter::Charge(LimitRef limit, std::string_view key, int64_t cost) {
  return internal::Wait<Decision>(
      [&](DecisionCallback done) { ChargeAsync(limit, key, cost, std::move(done)); });
}

void Limiter::ChargeAsync(LimitRef limit, std::string_view key, int64_t cost,
                          DecisionCallback done) {
  absl::StatusOr<const Limit*> found = Resolve(limit);
  if (!found.ok()) {
    std::move(done)(found.status());
    return;
  }
  ApplyOne(**found, key, cost, ItemOp::kCharge, "", std::move(done));
}

absl::StatusOr<Reservation> Limiter::Reserve(LimitRef limit, std::string_view key, int64_t cost) {
  return internal::Wait<Reservation>(
      [&](ReservationCallback done) { ReserveAsync(limit, key, cost, std::move(done)); });
}

void Limiter::ReserveAsync(LimitRef limit, std::string_view key, int64_t cost,
                           ReservationCallback done) {
  std::vector<CheckRequest> requests;
  requests.push_back(CheckRequest{limit, std::string(key), cost, ItemOp::kReserve});
  CheckAllAsync(std::move(requests),
                [done = std::move(done)](absl::StatusOr<MultiDecision> result) mutable {
                  absl::StatusOr<Decision> decision = internal::SingleDecision(result);
                  if (!decision.ok()) {
                    std::move(done)(decision.status());
                    return;
                  }
                  Reservation reservation{*decision, ""};
                  if (!result->tokens.empty()) reservation.token = std::move(result->tokens[0]);
                  std::move(done)(std::move(reservation));
                });
}

absl::StatusOr<Decision> Limiter::Settle(std::string_view reservation, int64_t cost) {
  return internal::Wait<Decision>(
      [&](DecisionCallback done) { SettleAsync(reservation, cost, std::move(done)); });
}

void Limiter::SettleAsync(std::string_view reservation, int64_t cost, DecisionCallback done) {
  std::optional<internal::ReservationParts> parts = internal::ParseReservationToken(reservation);
  if (!parts.has_value()) {
    std::move(done)(absl::InvalidArgumentError("reservation: not a reservation token"));
    return;
  }
  const Limit* limit = FindLimit(parts->limit);
  if (limit == nullptr) {
    // Made by a limit this configuration no longer has (or forged): nothing to settle.
    Decision decision;
    decision.reason = DenyReason::kNotFound;
    std::move(done)(decision);
    return;
  }
  ApplyOne(*limit, parts->key, cost, ItemOp::kSettle, std::move(parts->id), std::move(done));
}

absl::StatusOr<Lease> Limiter::Acquire(LimitRef limit, std::string_view key) {
  return internal::Wait<Lease>(
      [&](LeaseCallback done) { AcquireAsync(limit, key, std::move(done)); });
}

void Limiter::AcquireAsync(LimitRef limit, std::string_view key, LeaseCallback done) {
  absl::StatusOr<const Limit*> found = Resolve(limit);
  if (!found.ok()) {
    std::move(done)(found.status());
    return;
  }
  const Limit* resolved = *found;
  if (resolved->numbers.algorithm != Algorithm::kConcurrency) {
    std::move(done)(absl::InvalidArgumentError(absl::StrCat(
        "limit '", resolved->name, "' is not a concurrency limit: nothing to acquire")));
    return;
  }
  std::vector<CheckItem> items;
  items.push_back(CheckItem{resolved, std::string(key), 1});
  ApplyItems(std::move(items), [this, resolved, key = std::string(key), done = std::move(done)](
                                   absl::StatusOr<MultiDecision> result) mutable {
    absl::StatusOr<Decision> decision = internal::SingleDecision(result);
    if (!decision.ok()) {
      std::move(done)(decision.status());
      return;
    }
    Lease lease;
    lease.decision_ = *decision;
    if (decision->allowed && !result->tokens.empty()) {
      lease.limiter_ = this;
      lease.limit_ = resolved;
      lease.key_ = std::move(key);
      lease.id_ = std::move(result->tokens[0]);
    }
    std::move(done)(std::move(lease));
  });
}

absl::StatusOr<Decision> Limiter::Release(LimitRef limit, std::string_view key,
                                          std::string_view lease) {
  return LeaseWait(limit, key, lease, ItemOp::kRelease);
}

void Limiter::ReleaseAsync(LimitRef limit, std::string_view key, std::string_view lease,
                           DecisionCallback done) {
  LeaseAsync(limit, key, lease, ItemOp::kRelease, std::move(done));
}

absl::StatusOr<Decision> Limiter::Renew(LimitRef limit, std::string_view key,
                                        std::string_view lease) {
  return LeaseWait(limit, key, lease, ItemOp::kRenew);
}

void Limiter::RenewAsync(LimitRef limit, std::string_view key, std::string_view lease,
                         DecisionCallback done) {
  LeaseAsync(limit, key, lease, ItemOp::kRenew, std::move(done));
}

absl::StatusOr<Decision> Limiter::LeaseWait(LimitRef limit, std::string_view key,
                                            std::string_view lease, ItemOp op) {
  return internal::Wait<Decision>(
      [&](DecisionCallback done) { LeaseAsync(limit, key, lease, op, std::move(done)); });
}

void Limiter::LeaseAsync(LimitRef limit, std::string_view key, std::string_view lease, ItemOp op,
                         DecisionCallback done) {
  absl::StatusOr<const Limit*> found = Resolve(limit);
  if (!found.ok()) {
    std::move(done)(found.status());
    return;
  }
  const Limit& resolved = **found;
  if (internal::IsMeteredId(lease)) {
    ApplyOne(resolved, key, 1, op, std::string(lease), std::move(done));
    return;
  }
  // Not an id this library could have made: held by no one. The answer describes the limit
  // as its store sees it (a look, cost 0), as for a lease that is no longer held.
  CheckItem item{&resolved, std::string(key), 1};
  item.op = op;
  if (absl::Status status = internal::ValidateOp(item); !status.ok()) {
    std::move(done)(std::move(status));
    return;
  }
  ApplyOne(resolved, key, 0, ItemOp::kCheck, "",
           [done = std::move(done)](absl::StatusOr<Decision> decision) mutable {
             if (decision.ok()) {
               decision->allowed = false;
               decision->reason = DenyReason::kNotFound;
               decision->retry_after_micros = 0;
             }
             std::move(done)(std::move(decision));
           });
}

Lease::Lease(Lease&& other) noexcept
    : limiter_(std::exchange(other.limiter_, nullptr)),
      limit_(other.limit_),
      key_(std::move(other.key_)),
      id_(std::move(other.id_)),
      decision_(other.decision_) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    ReleaseInBackground();
    limiter_ = std::exchange(other.limiter_, nullptr);
    limit_ = other.limit_;
    key_ = std::move(other.key_);
    id_ = std::move(other.id_);
    decision_ = other.decision_;
  }
  return *this;
}

Lease::~Lease() { ReleaseInBackground(); }

void Lease::ReleaseInBackground() {
  if (limiter_ == nullptr) return;
  Limiter* limiter = std::exchange(limiter_, nullptr);
  // The store may answer after this Lease (and the Limit it points to, when it was given by
  // reference) is gone: the release carries a copy of the limit, which lives until then.
  auto limit = std::make_shared<const Limit>(*limit_);
  limiter->ReleaseAsync(*limit, key_, id_, [limit](const absl::StatusOr<Decision>&) {});
}

absl::StatusOr<Decision> Lease::Renew() {
  if (limiter_ == nullptr) return absl::FailedPreconditionError("no lease held");
  absl::StatusOr<Decision> renewed = limiter_->Renew(*limit_, key_, id_);
  // Expired: its slot may be another's; this object no longer holds it.
  if (renewed.ok() && !renewed->allowed) limiter_ = nullptr;
  return renewed;
}

absl::Status Lease::Release() {
  if (limiter_ == nullptr) return absl::OkStatus();
  Limiter* limiter = std::exchange(limiter_, nullptr);
  return limiter->Release(*limit_, key_, id_).status();
}

}  // namespace tollgate
