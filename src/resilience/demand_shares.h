// Copyright tollgate authors. fail_open's demand-weighted shares (tollgate/fallback_shares.h)
// as the resilient store uses them: the demand it counts, and the share its fallback takes.
#ifndef TOLLGATE_SRC_RESILIENCE_DEMAND_SHARES_H_
#define TOLLGATE_SRC_RESILIENCE_DEMAND_SHARES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "src/algorithm/share.h"
#include "tollgate/fallback_shares.h"
#include "tollgate/limit.h"
#include "tollgate/store.h"

namespace tollgate::resilience {

// A limit uses demand-weighted shares when it is a fail_open rate limit with Shares::kDemand
// and there are `shares`; every other limit's fallback takes exactly 1/N. Thread-safe.
class DemandShares {
 public:
  // `shares` may be null: equal shares only.
  explicit DemandShares(std::shared_ptr<FallbackShares> shares) : shares_(std::move(shares)) {}

  // Counts the requests (items, whatever their cost) asked of limits with demand-weighted
  // shares (checks, reservations and charges; admitted or refused): a share is learned from
  // how many requests came, which a few large costs do not swing.
  void Count(const std::vector<CheckItem>& items) const;

  // The weights of `limit`'s fail_open share with `instances` live: its learned fraction
  // with demand-weighted shares, else exactly 1/N.
  algorithm::ShareWeights Weights(const Limit& limit, int64_t instances) const;

  // For the fallback-started event: the shares in use with `instances` live.
  std::string InUse(int64_t instances) const;

 private:
  bool Uses(const Limit& limit) const;

  const std::shared_ptr<FallbackShares> shares_;
};

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_DEMAND_SHARES_H_
