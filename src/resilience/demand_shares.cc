// Copyright tollgate authors.
#include "src/resilience/demand_shares.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tollgate::resilience {

void DemandShares::Count(const std::vector<CheckItem>& items) const {
  if (shares_ == nullptr) return;
  for (const CheckItem& item : items) {
    if (Uses(*item.limit) && item.cost > 0 &&
        (item.op == ItemOp::kCheck || item.op == ItemOp::kReserve || item.op == ItemOp::kCharge)) {
      shares_->Count(item.limit->name, 1);
    }
  }
}

algorithm::ShareWeights DemandShares::Weights(const Limit& limit, int64_t instances) const {
  if (!Uses(limit)) return algorithm::EqualWeights(instances);
  return algorithm::FallbackFractionWeights(shares_->Fraction(limit.name, instances), instances);
}

std::string DemandShares::InUse(int64_t instances) const {
  std::string text = absl::StrCat("fail_open shares with N=", instances, ": ");
  if (shares_ == nullptr) return absl::StrCat(text, "limit / N each");
  constexpr size_t kListed = 8;
  const std::vector<std::pair<std::string, double>> fractions = shares_->Fractions(instances);
  for (size_t i = 0; i < std::min(fractions.size(), kListed); ++i) {
    absl::StrAppend(&text, fractions[i].first, " ", absl::StrFormat("%.3f", fractions[i].second),
                    ", ");
  }
  if (fractions.size() > kListed) {
    absl::StrAppend(&text, "and ", fractions.size() - kListed, " more by demand, ");
  }
  return absl::StrCat(text, fractions.empty() ? "" : "others ", "1/N");
}

bool DemandShares::Uses(const Limit& limit) const {
  return shares_ != nullptr && limit.shares == Shares::kDemand &&
         limit.on_store_failure == FailureMode::kFailOpen &&
         limit.numbers.algorithm != Algorithm::kConcurrency;
}

}  // namespace tollgate::resilience
