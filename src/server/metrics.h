// Copyright tollgate authors. The service's counters, rendered for `GET /metrics` in
// Prometheus' text exposition format 0.0.4.
//
//   Metrics metrics;
//   metrics.RegisterLimits(config.limits);          // at config load, not per request
//   metrics.RecordDecision("api_per_user", decision);  // per decision: lock-free
//   std::string text = metrics.Render();            // GET /metrics
//
// Families:
//   tollgate_build_info{version,commit}             gauge; always 1 (src/core/build_info.h)
//   tollgate_decisions_total{limit,source,outcome}  counter; outcome allowed | refused |
//       shadow_refused (refused by a rule in shadow mode, answered as allowed)
//   tollgate_check_errors_total{limit}              counter; checks answered with an error
//   tollgate_charged_units_total{limit}             counter; units charged after the fact
//   tollgate_debt_units_total{limit}                counter; charged units beyond what was left
//   tollgate_leases_held{limit}                     gauge; leases this instance granted (or
//       renewed) that are neither released nor past their lease time
//   tollgate_check_duration_seconds{api}            histogram; a check as seen by the server,
//       from the parsed request to the reply (api: http for /v1/check, envoy for gRPC and
//       /json)
//   tollgate_store_*_total                          counters of ResilientStore::stats()
//   tollgate_store_round_trip_seconds               histogram; the shared store's answer time
//       per check call (ResilientStore::store_round_trips(), buckets 50 us .. 100 ms)
//   tollgate_circuit_breaker_state                  gauge; 0 closed, 1 open, 2 half_open
//   tollgate_durable_waits_total, tollgate_durable_wait_timeouts_total,
//   tollgate_durable_calls_total
//       {result: confirmed | unconfirmed}, tollgate_durable_wait_seconds (histogram): the
//       WAITs of durable limits (RedisStore::durable_waits(), set_durable_waits)
//   tollgate_instances                              gauge; live instances sharing the limits
//   tollgate_fallback_share{limit}                  gauge; the fraction of a fail_open limit
//       this instance's fallback takes (learned from demand; 1/N when nothing is learned)
//   tollgate_memory_store_keys                      gauge; entries the embedded store holds
//   tollgate_memory_store_max_keys                  gauge; its cap (--memory-max-keys)
//   tollgate_memory_store_evictions_total           counter; entries evicted at the cap
//   tollgate_config_reloads_total{result}           counter; success | failure
//   tollgate_grpc_tls_*                             with TLS on the gRPC port (set_grpc_tls):
//       handshakes_in_progress (gauge), handshakes_total (completed), handshake_failures_total
//       {reason: failed | timeout | over_cap}, reloads_total{result: success | failure}
// and, with EnableRatelimitFamilies, envoyproxy/ratelimit's families (ratelimit_metrics.h).
// With an xDS client (serve --xds-server; src/xds/ads_client.h), once it has started:
//   tollgate_xds_connected                          gauge; 1 while its stream is up, else 0
//   tollgate_xds_config_applied_total               counter; responses applied (ACKed)
//   tollgate_xds_config_rejected_total              counter; responses rejected (NACKed)
//   tollgate_xds_stream_restarts_total              counter; streams that ended and were
//       opened again
//   tollgate_xds_config_version_info{version}       gauge; 1, after the first config applied
//   tollgate_xds_last_applied_timestamp_seconds     gauge; when it was applied (Unix time)
//   tollgate_tracing_spans_exported_total           counter; spans a collector accepted
//   tollgate_tracing_spans_dropped_total{reason}    counter; queue_full | export_failed
//   tollgate_tracing_exports_total{result}          counter; export requests: success |
//       rejected (answered other than 2xx) | timeout | unreachable
//   tollgate_tracing_queued_spans                   gauge; spans waiting for export
//   (the tracing families only when tracing is on)
//   tollgate_rlqs_*                                 the Rate Limit Quota Service
//       (src/server/rlqs_stats.h, RenderRlqsStats): streams, buckets, reports, assignments by
//       strategy, abandoned and refused buckets, rounds by result, Redis commands
#ifndef TOLLGATE_SRC_SERVER_METRICS_H_
#define TOLLGATE_SRC_SERVER_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "src/server/otlp_exporter.h"
#include "src/server/ratelimit_metrics.h"
#include "src/server/rlqs_stats.h"
#include "tollgate/decision.h"
#include "tollgate/limit.h"
#include "tollgate/memory_store.h"
#include "tollgate/redis_store.h"
#include "tollgate/resilience.h"
#include "tollgate/timers.h"

namespace tollgate::server {

struct GrpcTlsCounters;  // src/server/grpc_tls.h

// Which API a check came through.
enum class CheckApi { kHttp, kEnvoy };

// Histogram bucket bounds of tollgate_check_duration_seconds, in microseconds (50 us .. 1 s).
inline constexpr std::array<int64_t, 14> kCheckDurationBucketsMicros = {
    50,     100,    250,    500,     1'000,   2'500,   5'000,
    10'000, 25'000, 50'000, 100'000, 250'000, 500'000, 1'000'000};

// Thread-safe. Recording is lock-free (relaxed atomics); RegisterLimits and the setters take
// a mutex and are meant for start-up and config reloads.
class Metrics {
 public:
  // `timers`: the monotonic time of check durations and lease expiries (only NowMicros() is
  // used). nullptr: a monotonic clock of its own (LoopTimers over no loops).
  explicit Metrics(std::shared_ptr<Timers> timers = nullptr);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;
  ~Metrics();

  // Creates the counters of each limit not yet known (idempotent; counters are never
  // dropped, so a limit removed by a reload keeps its totals). A decision for a limit
  // never registered is counted under limit="" rather than lost.
  void RegisterLimits(absl::Span<const Limit> limits);
  void RegisterLimitNames(absl::Span<const std::string> names);

  // One decision of `limit`. `shadow`: the limit is in shadow mode, so a refusal was
  // answered as allowed (counted as shadow_refused).
  void RecordDecision(std::string_view limit, const Decision& decision, bool shadow = false);
  // A check of `limit` answered with an error status.
  void RecordCheckError(std::string_view limit);
  // A charge of `cost` units to `limit` that left `decision`:
  // counts the units, and those of them beyond what was left (min(cost, decision.debt)).
  void RecordCharge(std::string_view limit, int64_t cost, const Decision& decision);
  // A lease of the concurrency limit `limit` granted or renewed through this instance, held
  // for `lease_micros` from now unless LeaseGone says otherwise; and one released. Leases are
  // counted per limit until they end or expire (by the monotonic clock); at most
  // kMaxTrackedLeases at once (more are not counted). Takes a mutex.
  void LeaseHeld(std::string_view limit, std::string_view lease, int64_t lease_micros);
  void LeaseGone(std::string_view lease);
  static constexpr size_t kMaxTrackedLeases = 1'000'000;
  void ObserveCheckDuration(CheckApi api, int64_t duration_micros);
  void RecordReload(bool success);
  // The config the service started with was loaded (for ratelimit_service_config_load_success).
  void RecordInitialLoad();

  // envoyproxy/ratelimit's families (src/server/ratelimit_metrics.h) beside tollgate's,
  // with its near-limit ratio. Call before serving.
  void EnableRatelimitFamilies(double near_limit_ratio);
  bool ratelimit_families() const { return ratelimit_families_.load(std::memory_order_relaxed); }
  // `hits` of the Envoy rule whose limit is `limit`, ending in `decision`; `shadow`: the rule
  // is in shadow mode. And one ShouldRateLimit call whose store failed.
  void RecordRatelimitHits(std::string_view limit, int64_t hits, const Decision& decision,
                           bool shadow);
  void RecordRatelimitCallError();
  // The xDS client's state (src/xds/ads_client.h); its families are rendered once one of
  // these has been called.
  void SetXdsConnected(bool connected);
  void RecordXdsApplied(std::string_view version, int64_t unix_micros);
  void RecordXdsRejected();
  void RecordXdsStreamRestart();

  // Read at each Render. nullptr / empty leave the family out. REQUIRES: `store` outlives
  // this object.
  void set_resilient_store(const ResilientStore* store);
  void set_instance_count(std::function<int64_t()> instance_count);
  // The fail_open fraction per limit (FallbackShares::Fractions), sorted by limit.
  void set_fallback_shares(
      std::function<std::vector<std::pair<std::string, double>>()> fallback_shares);
  // The embedded in-memory store (serve without --redis) and the cap it was made with.
  // REQUIRES: `store` outlives this object.
  void set_memory_store(const MemoryStore* store, int64_t max_keys);
  // The gRPC port's TLS counters (GrpcTls::counters()). REQUIRES: they outlive this object.
  void set_grpc_tls(const GrpcTlsCounters* counters);
  // The trace exporter's totals (src/server/otlp_exporter.h).
  void set_tracing_stats(std::function<TracingStats()> tracing_stats);
  // The Redis store's WAITs for durable limits (RedisStore::durable_waits()).
  void set_durable_waits(std::function<DurableWaitStats()> durable_waits);
  // The Rate Limit Quota Service's totals (tollgate_rlqs_*, src/server/rlqs_stats.h).
  void set_rlqs_stats(std::function<RlqsStats()> rlqs_stats);

  // The whole exposition, every family with its HELP and TYPE once.
  std::string Render() const;

  // Now, on the monotonic clock durations are measured on (a check's start for
  // ObserveCheckDuration).
  int64_t NowMicros() const { return timers_->NowMicros(); }

 private:
  const std::shared_ptr<Timers> timers_;
  static constexpr int kSources = 4;   // DecisionSource
  static constexpr int kOutcomes = 3;  // allowed, refused, shadow_refused
  struct LimitCounters {
    std::array<std::array<std::atomic<int64_t>, kOutcomes>, kSources> decisions{};
    std::atomic<int64_t> errors{0};
    std::atomic<int64_t> charged_units{0};
    std::atomic<int64_t> debt_units{0};
    RatelimitCounters ratelimit;
  };
  // Immutable once published; replaced (never freed before ~Metrics) when limits are added,
  // so a reader holding an older table stays valid without a lock.
  struct Table {
    absl::flat_hash_map<std::string, LimitCounters*> by_name;
  };
  struct Histogram {
    std::array<std::atomic<int64_t>, kCheckDurationBucketsMicros.size() + 1> buckets{};
    std::atomic<int64_t> sum_micros{0};
  };

  LimitCounters& CountersFor(std::string_view limit);
  // Where a decision of `source` is counted in LimitCounters::decisions.
  static int SourceIndex(DecisionSource source);
  // The tollgate_xds_* families.
  void RenderXds(std::string& out) const;

  std::atomic<const Table*> table_;
  LimitCounters unregistered_;
  std::array<Histogram, 2> durations_;
  std::atomic<int64_t> reloads_succeeded_{0};
  std::atomic<int64_t> reloads_failed_{0};
  std::atomic<bool> ratelimit_families_{false};
  std::atomic<double> near_limit_ratio_{0.8};
  std::atomic<int64_t> ratelimit_call_errors_{0};
  std::atomic<int64_t> initial_loads_{0};
  std::atomic<bool> xds_started_{false};
  std::atomic<bool> xds_connected_{false};
  std::atomic<int64_t> xds_applied_{0};
  std::atomic<int64_t> xds_rejected_{0};
  std::atomic<int64_t> xds_restarts_{0};

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<LimitCounters>> counters_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<const Table>> tables_ ABSL_GUARDED_BY(mu_);
  const ResilientStore* resilient_store_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::function<int64_t()> instance_count_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<std::pair<std::string, double>>()> fallback_shares_
      ABSL_GUARDED_BY(mu_);
  const MemoryStore* memory_store_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t memory_max_keys_ ABSL_GUARDED_BY(mu_) = 0;
  const GrpcTlsCounters* grpc_tls_ ABSL_GUARDED_BY(mu_) = nullptr;
  // The xDS config last applied, and when (0: none yet).
  std::string xds_version_ ABSL_GUARDED_BY(mu_);
  int64_t xds_applied_unix_micros_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<TracingStats()> tracing_stats_ ABSL_GUARDED_BY(mu_);
  std::function<DurableWaitStats()> durable_waits_ ABSL_GUARDED_BY(mu_);
  std::function<RlqsStats()> rlqs_stats_ ABSL_GUARDED_BY(mu_);

  struct TrackedLease {
    std::string limit;
    int64_t expires_at_micros = 0;  // steady clock
  };
  mutable absl::Mutex leases_mu_;
  // By lease id; expired ones are dropped when rendered.
  mutable absl::flat_hash_map<std::string, TrackedLease> leases_ ABSL_GUARDED_BY(leases_mu_);
  // The concurrency limits registered, shown at 0 when none of their leases is held.
  std::vector<std::string> concurrency_limits_ ABSL_GUARDED_BY(leases_mu_);
};

// `value` escaped for a label value: backslash, double quote and newline.
std::string EscapeLabelValue(std::string_view value);

// Appends the "# HELP" and "# TYPE" lines that open family `name` (`type`: counter, gauge,
// histogram) in Prometheus' text format.
void AppendFamilyHeader(std::string& out, std::string_view name, std::string_view type,
                        std::string_view help);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_METRICS_H_
