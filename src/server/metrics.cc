// Copyright tollgate authors. Recording: the counters each decision, check and config event
// updates. Rendering them is metrics_render.cc.
#include "src/server/metrics.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "src/core/absl_view.h"

namespace tollgate::server {

int Metrics::SourceIndex(DecisionSource source) {
  switch (source) {
    case DecisionSource::kMemory:
      return 0;
    case DecisionSource::kRedis:
      return 1;
    case DecisionSource::kSync:
      return 2;
    case DecisionSource::kFallback:
      return 3;
  }
  return 0;
}

Metrics::Metrics(std::shared_ptr<Timers> timers)
    : timers_(timers != nullptr ? std::move(timers) : LoopTimers({})) {
  auto table = std::make_unique<const Table>();
  table_.store(table.get(), std::memory_order_release);
  tables_.push_back(std::move(table));
}

Metrics::~Metrics() = default;

void Metrics::RegisterLimits(absl::Span<const Limit> limits) {
  std::vector<std::string> names;
  names.reserve(limits.size());
  for (const Limit& limit : limits) names.push_back(limit.name);
  RegisterLimitNames(names);
  absl::MutexLock lock(&leases_mu_);
  for (const Limit& limit : limits) {
    if (limit.numbers.algorithm == Algorithm::kConcurrency &&
        std::find(concurrency_limits_.begin(), concurrency_limits_.end(), limit.name) ==
            concurrency_limits_.end()) {
      concurrency_limits_.push_back(limit.name);
    }
  }
}

void Metrics::LeaseHeld(std::string_view limit, std::string_view lease, int64_t lease_micros) {
  const int64_t expires_at = NowMicros() + lease_micros;
  absl::MutexLock lock(&leases_mu_);
  auto it = leases_.find(AbslView(lease));
  if (it != leases_.end()) {
    it->second.expires_at_micros = expires_at;
    return;
  }
  if (leases_.size() >= kMaxTrackedLeases) return;
  leases_.emplace(std::string(lease), TrackedLease{std::string(limit), expires_at});
}

void Metrics::LeaseGone(std::string_view lease) {
  absl::MutexLock lock(&leases_mu_);
  leases_.erase(AbslView(lease));
}

void Metrics::RegisterLimitNames(absl::Span<const std::string> names) {
  absl::MutexLock lock(&mu_);
  const Table* current = table_.load(std::memory_order_acquire);
  bool all_known = true;
  for (const std::string& name : names) all_known &= current->by_name.contains(name);
  if (all_known) return;
  auto next = std::make_unique<Table>(*current);
  for (const std::string& name : names) {
    if (next->by_name.contains(name)) continue;
    counters_.push_back(std::make_unique<LimitCounters>());
    next->by_name.emplace(name, counters_.back().get());
  }
  // Release: a reader that sees the new table sees its counters constructed.
  table_.store(next.get(), std::memory_order_release);
  tables_.push_back(std::move(next));
}

Metrics::LimitCounters& Metrics::CountersFor(std::string_view limit) {
  const Table* table = table_.load(std::memory_order_acquire);
  auto it = table->by_name.find(AbslView(limit));
  return it == table->by_name.end() ? unregistered_ : *it->second;
}

void Metrics::RecordDecision(std::string_view limit, const Decision& decision, bool shadow) {
  const int outcome = decision.allowed ? 0 : (shadow ? 2 : 1);
  CountersFor(limit).decisions[SourceIndex(decision.source)][outcome].fetch_add(
      1, std::memory_order_relaxed);
}

void Metrics::RecordCheckError(std::string_view limit) {
  CountersFor(limit).errors.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordCharge(std::string_view limit, int64_t cost, const Decision& decision) {
  LimitCounters& counters = CountersFor(limit);
  counters.charged_units.fetch_add(cost, std::memory_order_relaxed);
  counters.debt_units.fetch_add(std::min(cost, decision.debt), std::memory_order_relaxed);
}

void Metrics::ObserveCheckDuration(CheckApi api, int64_t duration_micros) {
  Histogram& histogram = durations_[api == CheckApi::kHttp ? 0 : 1];
  const auto bound = std::lower_bound(kCheckDurationBucketsMicros.begin(),
                                      kCheckDurationBucketsMicros.end(), duration_micros);
  histogram.buckets[bound - kCheckDurationBucketsMicros.begin()].fetch_add(
      1, std::memory_order_relaxed);
  histogram.sum_micros.fetch_add(std::max<int64_t>(duration_micros, 0), std::memory_order_relaxed);
}

void Metrics::RecordReload(bool success) {
  (success ? reloads_succeeded_ : reloads_failed_).fetch_add(1, std::memory_order_relaxed);
}

void Metrics::EnableRatelimitFamilies(double near_limit_ratio) {
  near_limit_ratio_.store(near_limit_ratio, std::memory_order_relaxed);
  ratelimit_families_.store(true, std::memory_order_relaxed);
}

void Metrics::RecordRatelimitHits(std::string_view limit, int64_t hits, const Decision& decision,
                                  bool shadow) {
  CountersFor(limit).ratelimit.Record(hits, decision, shadow,
                                      near_limit_ratio_.load(std::memory_order_relaxed));
}

void Metrics::RecordInitialLoad() { initial_loads_.fetch_add(1, std::memory_order_relaxed); }

void Metrics::RecordRatelimitCallError() {
  ratelimit_call_errors_.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::SetXdsConnected(bool connected) {
  xds_connected_.store(connected, std::memory_order_relaxed);
  xds_started_.store(true, std::memory_order_relaxed);
}

void Metrics::RecordXdsApplied(std::string_view version, int64_t unix_micros) {
  {
    absl::MutexLock lock(&mu_);
    xds_version_ = std::string(version);
    xds_applied_unix_micros_ = unix_micros;
  }
  xds_applied_.fetch_add(1, std::memory_order_relaxed);
  xds_started_.store(true, std::memory_order_relaxed);
}

void Metrics::RecordXdsRejected() {
  xds_rejected_.fetch_add(1, std::memory_order_relaxed);
  xds_started_.store(true, std::memory_order_relaxed);
}

void Metrics::RecordXdsStreamRestart() {
  xds_restarts_.fetch_add(1, std::memory_order_relaxed);
  xds_started_.store(true, std::memory_order_relaxed);
}

void Metrics::set_resilient_store(const ResilientStore* store) {
  absl::MutexLock lock(&mu_);
  resilient_store_ = store;
}

void Metrics::set_instance_count(std::function<int64_t()> instance_count) {
  absl::MutexLock lock(&mu_);
  instance_count_ = std::move(instance_count);
}

void Metrics::set_fallback_shares(
    std::function<std::vector<std::pair<std::string, double>>()> fallback_shares) {
  absl::MutexLock lock(&mu_);
  fallback_shares_ = std::move(fallback_shares);
}

void Metrics::set_memory_store(const MemoryStore* store, int64_t max_keys) {
  absl::MutexLock lock(&mu_);
  memory_store_ = store;
  memory_max_keys_ = max_keys;
}

void Metrics::set_grpc_tls(const GrpcTlsCounters* counters) {
  absl::MutexLock lock(&mu_);
  grpc_tls_ = counters;
}

void Metrics::set_tracing_stats(std::function<TracingStats()> tracing_stats) {
  absl::MutexLock lock(&mu_);
  tracing_stats_ = std::move(tracing_stats);
}

void Metrics::set_rlqs_stats(std::function<RlqsStats()> rlqs_stats) {
  absl::MutexLock lock(&mu_);
  rlqs_stats_ = std::move(rlqs_stats);
}

void Metrics::set_durable_waits(std::function<DurableWaitStats()> durable_waits) {
  absl::MutexLock lock(&mu_);
  durable_waits_ = std::move(durable_waits);
}
}  // namespace tollgate::server
