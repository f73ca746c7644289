// Copyright tollgate authors. FallbackShares' implementation, and the heartbeat's side of it
// (src/resilience/instance_registry.cc): what it takes and what it learns.
#ifndef TOLLGATE_SRC_RESILIENCE_FALLBACK_SHARES_IMPL_H_
#define TOLLGATE_SRC_RESILIENCE_FALLBACK_SHARES_IMPL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/store/redis/instance_set.h"
#include "tollgate/clock.h"
#include "tollgate/fallback_shares.h"

namespace tollgate::resilience {

class FallbackSharesImpl final : public FallbackShares {
 public:
  // Units per limit.
  using Counts = redis::DemandUnits;

  explicit FallbackSharesImpl(FallbackSharesOptions options = {});
  ~FallbackSharesImpl() override;

  void Count(std::string_view limit, int64_t units) override;
  double Fraction(std::string_view limit, int64_t instances) const override;
  std::vector<std::pair<std::string, double>> Fractions(int64_t instances) const override;

  // ---- The heartbeat's side (InstanceRegistry) ----

  // The units counted since the last call, per limit (limits with none left out), now zero.
  Counts TakeCounts();
  // The period whose heartbeat last succeeded (its fleet totals of the two periods before are
  // known), or -1.
  int64_t period() const;
  // The fleet's totals of one period as the heartbeat read them.
  using PeriodTotals = redis::DemandTotals;
  // A heartbeat in `period` added `reported` (what TakeCounts returned) to the incarnation
  // `created` of the period's totals. `previous`: the totals of period - 1 and period - 2,
  // when the heartbeat brought them (it does when `period` differs from period()).
  void Learn(int64_t period, std::string_view created, const Counts& reported,
             const std::vector<PeriodTotals>* previous);

 private:
  struct State;
  const FallbackSharesOptions options_;
  Clock* const clock_;
  const std::unique_ptr<State> state_;
};

// The heartbeat's side of `shares`. Every FallbackShares is a FallbackSharesImpl
// (FallbackShares::Create makes them).
inline FallbackSharesImpl& HeartbeatSide(FallbackShares& shares) {
  return static_cast<FallbackSharesImpl&>(shares);
}

}  // namespace tollgate::resilience

#endif  // TOLLGATE_SRC_RESILIENCE_FALLBACK_SHARES_IMPL_H_
