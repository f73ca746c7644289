// Copyright tollgate authors.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "src/algorithm/share.h"
#include "src/core/absl_view.h"
#include "src/resilience/fallback_shares_impl.h"

namespace tollgate {
namespace resilience {
namespace {

using Units = absl::flat_hash_map<std::string, int64_t>;

constexpr int64_t kFreshnessSteps = 1000;

int64_t UnitsOf(const Units& units, std::string_view limit) {
  auto it = units.find(AbslView(limit));
  return it == units.end() ? 0 : it->second;
}

}  // namespace

struct FallbackSharesImpl::State {
  static uint64_t NextId() {
    static std::atomic<uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  // This instance's units in one period, as added to one incarnation of its totals.
  struct OwnPeriod {
    int64_t period = -1;
    std::string created;
    Units units;
  };
  // The fleet's totals of one period (`created` empty: not known).
  struct FleetPeriod {
    std::string created;
    Units units;
  };

  // Tells this object's counters apart in the threads' caches (Count): unique in the
  // process, where an address could be reused by a later object.
  const uint64_t id = NextId();
  absl::Mutex counters_mu;
  // Never erased, so a counter's address is stable while this object lives (the threads'
  // caches keep it).
  absl::flat_hash_map<std::string, std::unique_ptr<std::atomic<int64_t>>> counters
      ABSL_GUARDED_BY(counters_mu);

  mutable absl::Mutex learned_mu;
  int64_t period ABSL_GUARDED_BY(learned_mu) = -1;
  int64_t learned_at_micros ABSL_GUARDED_BY(learned_mu) = 0;
  // Own units of periods period - 2 .. period (at most three, oldest first).
  std::vector<OwnPeriod> own ABSL_GUARDED_BY(learned_mu);
  // The fleet's totals of period - 2 and period - 1, in that order.
  FleetPeriod fleet[2] ABSL_GUARDED_BY(learned_mu);

  const OwnPeriod* Own(int64_t p) const ABSL_SHARED_LOCKS_REQUIRED(learned_mu) {
    for (const OwnPeriod& own_period : own) {
      if (own_period.period == p) return &own_period;
    }
    return nullptr;
  }

  // REQUIRES: period >= 0.
  double Fraction(std::string_view limit, int64_t instances, int64_t now_micros,
                  int64_t horizon_micros) const ABSL_SHARED_LOCKS_REQUIRED(learned_mu) {
    algorithm::FallbackDemandPeriod periods[2];
    for (int back = 2; back >= 1; --back) {
      const FleetPeriod& totals = fleet[2 - back];
      algorithm::FallbackDemandPeriod& learned = periods[2 - back];
      learned.fleet = UnitsOf(totals.units, limit);
      // What this instance added counts only if it went into the incarnation read back (a
      // Redis that lost the period's hash since has lost this instance's units too).
      const OwnPeriod* own_period = Own(period - back);
      if (own_period != nullptr && own_period->created == totals.created) {
        learned.own = UnitsOf(own_period->units, limit);
      }
    }
    // In steps of a thousandth of the horizon, so the fallback's numbers (and the local
    // limiter built from them) change at most that often, not at every check.
    const int64_t age = std::max<int64_t>(0, now_micros - learned_at_micros);
    const int64_t steps = std::min<int64_t>(
        kFreshnessSteps, age / std::max<int64_t>(1, horizon_micros / kFreshnessSteps));
    const double freshness = static_cast<double>(kFreshnessSteps - steps) / kFreshnessSteps;
    return algorithm::FallbackDemandFraction(periods, instances, freshness);
  }
};

FallbackSharesImpl::FallbackSharesImpl(FallbackSharesOptions options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : &SystemClock()),
      state_(std::make_unique<State>()) {}

FallbackSharesImpl::~FallbackSharesImpl() = default;

void FallbackSharesImpl::Count(std::string_view limit, int64_t units) {
  if (units <= 0) return;
  // Every check of a demand-shared limit counts here, on every event loop: each thread
  // keeps the counters it has found (for the last object it counted for), so that a count
  // takes no lock shared with the other loops.
  struct Cache {
    uint64_t owner = 0;
    absl::flat_hash_map<std::string, std::atomic<int64_t>*> counters;
  };
  thread_local Cache cache;
  if (cache.owner != state_->id) {
    cache.owner = state_->id;
    cache.counters.clear();
  }
  if (auto cached = cache.counters.find(AbslView(limit)); cached != cache.counters.end()) {
    cached->second->fetch_add(units, std::memory_order_relaxed);
    return;
  }
  std::atomic<int64_t>* counter = nullptr;
  {
    absl::MutexLock lock(&state_->counters_mu);
    auto it = state_->counters.find(AbslView(limit));
    if (it == state_->counters.end()) {
      if (state_->counters.size() >= options_.max_limits) return;
      it = state_->counters.emplace(std::string(limit), std::make_unique<std::atomic<int64_t>>(0))
               .first;
    }
    counter = it->second.get();
  }
  cache.counters.emplace(std::string(limit), counter);
  counter->fetch_add(units, std::memory_order_relaxed);
}

FallbackSharesImpl::Counts FallbackSharesImpl::TakeCounts() {
  Counts counts;
  absl::ReaderMutexLock lock(&state_->counters_mu);
  for (const auto& [limit, counter] : state_->counters) {
    const int64_t units = counter->exchange(0, std::memory_order_relaxed);
    if (units > 0) counts.emplace_back(limit, units);
  }
  return counts;
}

int64_t FallbackSharesImpl::period() const {
  absl::ReaderMutexLock lock(&state_->learned_mu);
  return state_->period;
}

void FallbackSharesImpl::Learn(int64_t period, std::string_view created, const Counts& reported,
                               const std::vector<PeriodTotals>* previous) {
  const int64_t now_micros = clock_->NowMicros();
  absl::MutexLock lock(&state_->learned_mu);
  State& state = *state_;
  if (period != state.period) {
    // A new period: keep the own units of the two before it, and take the fleet's totals of
    // those two as read now (or none: nothing is known of them).
    std::erase_if(state.own, [&](const State::OwnPeriod& own_period) {
      return own_period.period < period - 2 || own_period.period >= period;
    });
    for (int back = 2; back >= 1; --back) {
      State::FleetPeriod& totals = state.fleet[2 - back];
      totals = {};
      if (previous != nullptr && previous->size() >= static_cast<size_t>(back)) {
        const PeriodTotals& read = (*previous)[back - 1];
        totals.created = read.created;
        for (const auto& [limit, units] : read.units) totals.units[limit] += units;
      }
    }
    state.own.push_back({.period = period, .created = std::string(created), .units = {}});
    state.period = period;
  }
  State::OwnPeriod& current = state.own.back();
  if (current.created != created) {
    // The period's hash was replaced (Redis lost it): what was added before is gone there.
    current.created = std::string(created);
    current.units.clear();
  }
  for (const auto& [limit, units] : reported) current.units[limit] += units;
  state.learned_at_micros = now_micros;
}

double FallbackSharesImpl::Fraction(std::string_view limit, int64_t instances) const {
  const int64_t now_micros = clock_->NowMicros();
  absl::ReaderMutexLock lock(&state_->learned_mu);
  if (state_->period < 0) return 1.0 / static_cast<double>(std::max<int64_t>(1, instances));
  return state_->Fraction(limit, instances, now_micros, options_.horizon_ms * 1000);
}

std::vector<std::pair<std::string, double>> FallbackSharesImpl::Fractions(int64_t instances) const {
  std::vector<std::string> names;
  {
    absl::ReaderMutexLock lock(&state_->counters_mu);
    for (const auto& entry : state_->counters) names.push_back(entry.first);
  }
  {
    absl::ReaderMutexLock lock(&state_->learned_mu);
    for (const State::FleetPeriod& totals : state_->fleet) {
      for (const auto& entry : totals.units) names.push_back(entry.first);
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::vector<std::pair<std::string, double>> fractions;
  fractions.reserve(names.size());
  for (const std::string& name : names) fractions.emplace_back(name, Fraction(name, instances));
  return fractions;
}

}  // namespace resilience

std::shared_ptr<FallbackShares> FallbackShares::Create(FallbackSharesOptions options) {
  return std::make_shared<resilience::FallbackSharesImpl>(options);
}

}  // namespace tollgate
