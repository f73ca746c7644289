// Copyright tollgate authors. fail_open's demand-weighted shares: what part of a limit this
// instance's local fallback takes while the store is unreachable, learned while it answers.
//
//   std::shared_ptr<tollgate::FallbackShares> shares = tollgate::FallbackShares::Create();
//   auto registry = tollgate::InstanceRegistry::Start(
//       {.redis = redis, .fallback_shares = shares});
//   auto store = tollgate::ResilientStore::Create(redis_store,
//       {.instance_count = [&] { return (*registry)->Count(); }, .fallback_shares = shares});
//
// The ResilientStore counts the requests asked (admitted and refused) of every fail_open limit
// with Shares::kDemand (Count); each InstanceRegistry heartbeat adds this instance's counts to
// the fleet's totals of the current period in Redis, in the same atomic step that brings back
// the totals of the last two complete periods; while the store is
// unreachable the fallback takes Fraction(limit, N) of each such limit, not 1/N. The rule
// (src/algorithm/share.h):
//
//   g(p)     = (what this instance asked + 4) / (what the fleet asked + 4 N), in period p
//              (4 requests each instance is taken to have asked beyond those counted: a
//              period of few requests stays near 1/N)
//   fraction = min(g) over the two periods, at least 1/(10 N), at most 1,
//              decaying linearly to 1/N over `horizon_ms` after the last heartbeat
//
// and its bound: the fleet's fractions sum to at most 1.1 (docs/resilience.md, "Failure
// policies"). Without a heartbeat (never learned, a registry with a fixed N, or a restart
// during an outage) every fraction is 1/N, the equal share. Thread-safe.
#ifndef TOLLGATE_FALLBACK_SHARES_H_
#define TOLLGATE_FALLBACK_SHARES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/clock.h"

namespace tollgate {

struct FallbackSharesOptions {
  // Ages what was learned. nullptr: SystemClock(). REQUIRES: outlives the object.
  Clock* clock = nullptr;
  // Learned fractions decay linearly (in steps of a thousandth of it) to the equal share 1/N
  // over this long after the last heartbeat that refreshed them (a long outage ends with
  // equal shares).
  int64_t horizon_ms = 300'000;
  // Limits counted; units asked of further limits are not counted (their fraction is the
  // floor, or 1/N where the fleet did not ask for them either).
  size_t max_limits = 1024;
};

class FallbackShares {
 public:
  static std::shared_ptr<FallbackShares> Create(FallbackSharesOptions options = {});

  FallbackShares(const FallbackShares&) = delete;
  FallbackShares& operator=(const FallbackShares&) = delete;
  virtual ~FallbackShares() = default;

  // `units` (> 0) asked of `limit` at this instance, admitted or refused. Cheap: once a thread
  // has counted a limit, a lookup in that thread's own table and one atomic add, no lock.
  virtual void Count(std::string_view limit, int64_t units) = 0;

  // The fraction of `limit` this instance's fallback takes with `instances` live (N): in
  // [1/(10 N), 1] once learned, exactly 1/N when nothing is.
  virtual double Fraction(std::string_view limit, int64_t instances) const = 0;
  // Fraction of every limit this instance knows of (counted here, or in the fleet's totals),
  // sorted by name.
  virtual std::vector<std::pair<std::string, double>> Fractions(int64_t instances) const = 0;

 protected:
  FallbackShares() = default;
};

}  // namespace tollgate

#endif  // TOLLGATE_FALLBACK_SHARES_H_
