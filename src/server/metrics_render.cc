// Copyright tollgate authors. Rendering: the counters as Prometheus' text exposition format.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "src/core/absl_view.h"
#include "src/core/build_info.h"
#include "src/server/grpc_tls.h"
#include "src/server/metrics.h"

namespace tollgate::server {
namespace {

constexpr std::array<DecisionSource, 4> kSourceOrder = {
    DecisionSource::kMemory, DecisionSource::kRedis, DecisionSource::kSync,
    DecisionSource::kFallback};
constexpr std::array<const char*, 3> kOutcomeNames = {"allowed", "refused", "shadow_refused"};
constexpr std::array<const char*, 2> kApiNames = {"http", "envoy"};
// kCheckDurationBucketsMicros in seconds, as Prometheus clients print them.
constexpr std::array<const char*, kCheckDurationBucketsMicros.size()> kBucketBounds = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
    "0.01",  "0.025",  "0.05",    "0.1",    "0.25",  "0.5",    "1"};

// kStoreRoundTripBucketsMicros in seconds.
constexpr std::array<const char*, kStoreRoundTripBucketsMicros.size()> kRoundTripBounds = {
    "5e-05",  "0.0001", "0.0002", "0.0003", "0.0005", "0.00075", "0.001",
    "0.0015", "0.0025", "0.005",  "0.01",   "0.025",  "0.05",    "0.1"};

void RenderGrpcTls(std::string& out, const GrpcTlsCounters& tls) {
  auto value = [](const std::atomic<int64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  AppendFamilyHeader(
      out, "tollgate_grpc_tls_handshakes_in_progress", "gauge",
      "TLS handshakes on the gRPC port not yet done (at most --grpc-tls-max-handshakes).");
  absl::StrAppend(&out, "tollgate_grpc_tls_handshakes_in_progress ",
                  value(tls.handshakes_in_progress), "\n");
  AppendFamilyHeader(out, "tollgate_grpc_tls_handshakes_total", "counter",
                     "TLS handshakes on the gRPC port that completed.");
  absl::StrAppend(&out, "tollgate_grpc_tls_handshakes_total ", value(tls.handshakes_completed),
                  "\n");
  AppendFamilyHeader(
      out, "tollgate_grpc_tls_handshake_failures_total", "counter",
      "Connections to the gRPC port closed before their TLS handshake completed: failed by "
      "the client or the protocol, timeout, or over_cap (refused at once: too many "
      "handshakes in progress).");
  const std::pair<const char*, int64_t> failures[] = {{"failed", value(tls.handshakes_failed)},
                                                      {"timeout", value(tls.handshakes_timed_out)},
                                                      {"over_cap", value(tls.handshakes_refused)}};
  for (const auto& [reason, count] : failures) {
    absl::StrAppend(&out, "tollgate_grpc_tls_handshake_failures_total{reason=\"", reason, "\"} ",
                    count, "\n");
  }
  AppendFamilyHeader(
      out, "tollgate_grpc_tls_reloads_total", "counter",
      "Reloads of the gRPC port's certificates by result (a failed one keeps the old ones).");
  absl::StrAppend(&out, "tollgate_grpc_tls_reloads_total{result=\"success\"} ",
                  value(tls.reloads_succeeded), "\n");
  absl::StrAppend(&out, "tollgate_grpc_tls_reloads_total{result=\"failure\"} ",
                  value(tls.reloads_failed), "\n");
}

// A histogram family of kStoreRoundTripBucketsMicros.
void RenderRoundTrips(std::string& out, const char* name, std::string_view help,
                      const StoreRoundTripHistogram& histogram) {
  AppendFamilyHeader(out, name, "histogram", help);
  int64_t cumulative = 0;
  for (size_t i = 0; i < kRoundTripBounds.size(); ++i) {
    cumulative += histogram.counts[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", kRoundTripBounds[i], "\"} ", cumulative, "\n");
  }
  cumulative += histogram.counts.back();
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", cumulative, "\n");
  absl::StrAppend(&out, name, "_sum ", absl::StrFormat("%.6f", histogram.sum_micros / 1e6), "\n");
  absl::StrAppend(&out, name, "_count ", cumulative, "\n");
}

void RenderDurableWaits(std::string& out, const DurableWaitStats& stats) {
  AppendFamilyHeader(out, "tollgate_durable_waits_total", "counter",
                     "Redis WAITs sent for durable limits: one per group of durable calls.");
  absl::StrAppend(&out, "tollgate_durable_waits_total ", stats.waits, "\n");
  AppendFamilyHeader(out, "tollgate_durable_wait_timeouts_total", "counter",
                     "WAITs for durable limits that returned without a replica's confirmation.");
  absl::StrAppend(&out, "tollgate_durable_wait_timeouts_total ", stats.wait_timeouts, "\n");
  AppendFamilyHeader(
      out, "tollgate_durable_calls_total", "counter",
      "Durable calls that wrote, by whether a replica confirmed them in time (unconfirmed: "
      "answered by the limit's on_store_failure).");
  absl::StrAppend(&out, "tollgate_durable_calls_total{result=\"confirmed\"} ",
                  stats.calls_confirmed, "\n");
  absl::StrAppend(&out, "tollgate_durable_calls_total{result=\"unconfirmed\"} ",
                  stats.calls_unconfirmed, "\n");
  RenderRoundTrips(out, "tollgate_durable_wait_seconds",
                   "Time a WAIT for durable limits took, from sent to answered.",
                   stats.wait_latency);
}

void RenderTracing(std::string& out, const TracingStats& stats) {
  AppendFamilyHeader(out, "tollgate_tracing_spans_exported_total", "counter",
                     "Spans an OpenTelemetry collector accepted.");
  absl::StrAppend(&out, "tollgate_tracing_spans_exported_total ", stats.spans_exported, "\n");
  AppendFamilyHeader(
      out, "tollgate_tracing_spans_dropped_total", "counter",
      "Sampled spans not exported: the export queue was full, or their export failed.");
  absl::StrAppend(&out, "tollgate_tracing_spans_dropped_total{reason=\"queue_full\"} ",
                  stats.spans_dropped_queue_full, "\n");
  absl::StrAppend(&out, "tollgate_tracing_spans_dropped_total{reason=\"export_failed\"} ",
                  stats.spans_dropped_export_failed, "\n");
  AppendFamilyHeader(
      out, "tollgate_tracing_exports_total", "counter",
      "Export requests to the collector by how they ended: success, rejected (answered "
      "other than 2xx), timeout, unreachable (refused, reset, name not resolved).");
  const std::pair<const char*, int64_t> results[] = {{"success", stats.exports_succeeded},
                                                     {"rejected", stats.exports_rejected},
                                                     {"timeout", stats.exports_timed_out},
                                                     {"unreachable", stats.exports_unreachable}};
  for (const auto& [result, count] : results) {
    absl::StrAppend(&out, "tollgate_tracing_exports_total{result=\"", result, "\"} ", count, "\n");
  }
  AppendFamilyHeader(out, "tollgate_tracing_queued_spans", "gauge",
                     "Spans waiting for export (bounded by the queue's size).");
  absl::StrAppend(&out, "tollgate_tracing_queued_spans ", stats.queued_spans, "\n");
}

}  // namespace

void AppendFamilyHeader(std::string& out, std::string_view name, std::string_view type,
                        std::string_view help) {
  absl::StrAppend(&out, "# HELP ", AbslView(name), " ", AbslView(help), "\n# TYPE ", AbslView(name),
                  " ", AbslView(type), "\n");
}

std::string EscapeLabelValue(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        escaped += "\\\\";
        break;
      case '"':
        escaped += "\\\"";
        break;
      case '\n':
        escaped += "\\n";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

std::string Metrics::Render() const {
  std::vector<std::pair<std::string, const LimitCounters*>> limits;
  const ResilientStore* store = nullptr;
  std::function<int64_t()> instance_count;
  std::function<std::vector<std::pair<std::string, double>>()> fallback_shares;
  const MemoryStore* memory_store = nullptr;
  int64_t memory_max_keys = 0;
  const GrpcTlsCounters* grpc_tls = nullptr;
  std::function<TracingStats()> tracing_stats;
  std::function<DurableWaitStats()> durable_waits;
  std::function<RlqsStats()> rlqs_stats;
  {
    absl::MutexLock lock(&mu_);
    tracing_stats = tracing_stats_;
    durable_waits = durable_waits_;
    rlqs_stats = rlqs_stats_;
    const Table* table = table_.load(std::memory_order_acquire);
    for (const auto& [name, counters] : table->by_name) limits.emplace_back(name, counters);
    store = resilient_store_;
    instance_count = instance_count_;
    fallback_shares = fallback_shares_;
    memory_store = memory_store_;
    memory_max_keys = memory_max_keys_;
    grpc_tls = grpc_tls_;
  }
  std::sort(limits.begin(), limits.end());
  if (unregistered_.errors.load(std::memory_order_relaxed) != 0 ||
      unregistered_.charged_units.load(std::memory_order_relaxed) != 0 ||
      std::any_of(unregistered_.decisions.begin(), unregistered_.decisions.end(),
                  [](const auto& outcomes) {
                    return std::any_of(outcomes.begin(), outcomes.end(), [](const auto& count) {
                      return count.load(std::memory_order_relaxed) != 0;
                    });
                  })) {
    limits.emplace_back("", &unregistered_);
  }

  std::string out;
  AppendFamilyHeader(
      out, "tollgate_build_info", "gauge",
      "Always 1; the labels say which version and commit this server was built from");
  absl::StrAppend(&out, "tollgate_build_info{version=\"", EscapeLabelValue(kBuildVersion),
                  "\",commit=\"", EscapeLabelValue(kBuildCommit), "\"} 1\n");
  AppendFamilyHeader(out, "tollgate_decisions_total", "counter",
                     "Decisions by limit, the part of tollgate that made them, and outcome.");
  for (const auto& [name, counters] : limits) {
    const std::string limit = EscapeLabelValue(name);
    for (DecisionSource source : kSourceOrder) {
      const std::string_view source_name = DecisionSourceName(source);
      for (size_t outcome = 0; outcome < kOutcomeNames.size(); ++outcome) {
        absl::StrAppend(
            &out, "tollgate_decisions_total{limit=\"", limit, "\",source=\"", AbslView(source_name),
            "\",outcome=\"", kOutcomeNames[outcome], "\"} ",
            counters->decisions[SourceIndex(source)][outcome].load(std::memory_order_relaxed),
            "\n");
      }
    }
  }
  // A family with one series per limit, of one counter of LimitCounters.
  auto per_limit = [&](std::string_view family, std::string_view help,
                       std::atomic<int64_t> LimitCounters::*counter) {
    AppendFamilyHeader(out, family, "counter", help);
    for (const auto& [name, counters] : limits) {
      absl::StrAppend(&out, AbslView(family), "{limit=\"", EscapeLabelValue(name), "\"} ",
                      (counters->*counter).load(std::memory_order_relaxed), "\n");
    }
  };
  per_limit("tollgate_check_errors_total",
            "Checks answered with an error instead of a decision, by limit.",
            &LimitCounters::errors);
  per_limit("tollgate_charged_units_total",
            "Units charged after the fact (POST /v1/charge, Envoy reports), by limit.",
            &LimitCounters::charged_units);
  per_limit("tollgate_debt_units_total",
            "Charged units beyond what the limit had left: how far charges put limits into "
            "debt, by limit.",
            &LimitCounters::debt_units);

  {
    AppendFamilyHeader(
        out, "tollgate_leases_held", "gauge",
        "Leases of a concurrency limit granted or renewed through this instance, neither "
        "released nor past their lease time, by limit.");
    absl::MutexLock lock(&leases_mu_);
    const int64_t now = NowMicros();
    std::vector<std::pair<std::string, int64_t>> held;
    for (const std::string& name : concurrency_limits_) held.emplace_back(name, 0);
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.expires_at_micros <= now) {
        leases_.erase(it++);
        continue;
      }
      auto counted = std::find_if(held.begin(), held.end(), [&](const auto& entry) {
        return entry.first == it->second.limit;
      });
      if (counted == held.end()) {
        held.emplace_back(it->second.limit, 1);
      } else {
        ++counted->second;
      }
      ++it;
    }
    std::sort(held.begin(), held.end());
    for (const auto& [name, count] : held) {
      absl::StrAppend(&out, "tollgate_leases_held{limit=\"", EscapeLabelValue(name), "\"} ", count,
                      "\n");
    }
  }
  AppendFamilyHeader(out, "tollgate_check_duration_seconds", "histogram",
                     "Time from a parsed check request to its reply, as seen by the server.");
  for (size_t api = 0; api < durations_.size(); ++api) {
    const Histogram& histogram = durations_[api];
    int64_t cumulative = 0;
    for (size_t i = 0; i < kBucketBounds.size(); ++i) {
      cumulative += histogram.buckets[i].load(std::memory_order_relaxed);
      absl::StrAppend(&out, "tollgate_check_duration_seconds_bucket{api=\"", kApiNames[api],
                      "\",le=\"", kBucketBounds[i], "\"} ", cumulative, "\n");
    }
    cumulative += histogram.buckets.back().load(std::memory_order_relaxed);
    absl::StrAppend(&out, "tollgate_check_duration_seconds_bucket{api=\"", kApiNames[api],
                    "\",le=\"+Inf\"} ", cumulative, "\n");
    absl::StrAppend(
        &out, "tollgate_check_duration_seconds_sum{api=\"", kApiNames[api], "\"} ",
        absl::StrFormat("%.6f", histogram.sum_micros.load(std::memory_order_relaxed) / 1e6), "\n");
    absl::StrAppend(&out, "tollgate_check_duration_seconds_count{api=\"", kApiNames[api], "\"} ",
                    cumulative, "\n");
  }

  if (store != nullptr) {
    const ResilienceStats stats = store->stats();
    const std::pair<const char*, std::pair<const char*, int64_t>> store_counters[] = {
        {"tollgate_store_decisions_total",
         {"Checks answered by the shared store.", stats.store_decisions}},
        {"tollgate_store_fallback_decisions_total",
         {"Checks answered by a limit's on_store_failure policy.", stats.fallback_decisions}},
        {"tollgate_store_errors_total",
         {"Store calls that answered with an error.", stats.store_errors}},
        {"tollgate_store_deadlines_missed_total",
         {"Store calls that did not answer within the limit's timeout.", stats.deadlines_missed}},
        {"tollgate_store_breaker_rejections_total",
         {"Checks not sent to the store because its circuit breaker was open.",
          stats.breaker_rejections}},
        {"tollgate_store_late_replies_total",
         {"Store answers that came after their deadline and were discarded.", stats.late_replies}},
        {"tollgate_store_reconciled_items_total",
         {"Fallback consumption entries added back to the store after an outage.",
          stats.reconciled_items}},
        {"tollgate_store_reconcile_dropped_items_total",
         {"Fallback consumption entries not added back (over the bound, or the add failed).",
          stats.reconcile_dropped_items}},
    };
    for (const auto& [name, help_value] : store_counters) {
      AppendFamilyHeader(out, name, "counter", help_value.first);
      absl::StrAppend(&out, name, " ", help_value.second, "\n");
    }
    RenderRoundTrips(out, "tollgate_store_round_trip_seconds",
                     "Time the shared store (Redis) took to answer a check call, late answers "
                     "included.",
                     store->store_round_trips());
    AppendFamilyHeader(out, "tollgate_circuit_breaker_state", "gauge",
                       "The store's circuit breaker: 0 closed, 1 open, 2 half_open.");
    int state = 0;
    switch (store->circuit_state()) {
      case CircuitState::kClosed:
        state = 0;
        break;
      case CircuitState::kOpen:
        state = 1;
        break;
      case CircuitState::kHalfOpen:
        state = 2;
        break;
    }
    absl::StrAppend(&out, "tollgate_circuit_breaker_state ", state, "\n");
  }
  if (durable_waits) RenderDurableWaits(out, durable_waits());
  if (instance_count) {
    AppendFamilyHeader(out, "tollgate_instances", "gauge",
                       "Live tollgate instances sharing the limits (N of the fallback share).");
    absl::StrAppend(&out, "tollgate_instances ", instance_count(), "\n");
  }
  if (fallback_shares) {
    AppendFamilyHeader(
        out, "tollgate_fallback_share", "gauge",
        "The fraction of a fail_open limit this instance's fallback takes while the store is "
        "unreachable, learned from its share of the fleet's demand (1/N when nothing is).");
    for (const auto& [limit, fraction] : fallback_shares()) {
      absl::StrAppend(&out, "tollgate_fallback_share{limit=\"", EscapeLabelValue(limit), "\"} ",
                      absl::StrFormat("%.6f", fraction), "\n");
    }
  }
  if (memory_store != nullptr) {
    AppendFamilyHeader(
        out, "tollgate_memory_store_keys", "gauge",
        "Entries (limit and key) the embedded in-memory store holds, expired ones not yet "
        "swept included.");
    absl::StrAppend(&out, "tollgate_memory_store_keys ", memory_store->Size(), "\n");
    AppendFamilyHeader(
        out, "tollgate_memory_store_max_keys", "gauge",
        "The embedded store's cap on entries (--memory-max-keys, memory_store.max_keys).");
    absl::StrAppend(&out, "tollgate_memory_store_max_keys ", memory_max_keys, "\n");
    AppendFamilyHeader(
        out, "tollgate_memory_store_evictions_total", "counter",
        "Entries evicted because the embedded store was at its cap (their next check sees a "
        "fresh limit).");
    absl::StrAppend(&out, "tollgate_memory_store_evictions_total ", memory_store->Evictions(),
                    "\n");
  }

  AppendFamilyHeader(out, "tollgate_config_reloads_total", "counter",
                     "Configuration reloads by result (a failed one keeps the old configuration).");
  absl::StrAppend(&out, "tollgate_config_reloads_total{result=\"success\"} ",
                  reloads_succeeded_.load(std::memory_order_relaxed), "\n");
  absl::StrAppend(&out, "tollgate_config_reloads_total{result=\"failure\"} ",
                  reloads_failed_.load(std::memory_order_relaxed), "\n");
  if (grpc_tls != nullptr) RenderGrpcTls(out, *grpc_tls);
  if (ratelimit_families_.load(std::memory_order_relaxed)) {
    std::vector<std::pair<std::string, const RatelimitCounters*>> rules;
    rules.reserve(limits.size());
    for (const auto& [name, counters] : limits) rules.emplace_back(name, &counters->ratelimit);
    RenderRatelimitFamilies(out, rules);
    RenderRatelimitServiceFamilies(out,
                                   initial_loads_.load(std::memory_order_relaxed) +
                                       reloads_succeeded_.load(std::memory_order_relaxed),
                                   reloads_failed_.load(std::memory_order_relaxed),
                                   ratelimit_call_errors_.load(std::memory_order_relaxed));
  }
  if (xds_started_.load(std::memory_order_relaxed)) RenderXds(out);
  if (tracing_stats) RenderTracing(out, tracing_stats());
  if (rlqs_stats) RenderRlqsStats(out, rlqs_stats());  // rlqs_stats.cc
  return out;
}

void Metrics::RenderXds(std::string& out) const {
  AppendFamilyHeader(out, "tollgate_xds_connected", "gauge",
                     "1 while the stream to the xDS server is up, else 0.");
  absl::StrAppend(&out, "tollgate_xds_connected ",
                  xds_connected_.load(std::memory_order_relaxed) ? 1 : 0, "\n");
  AppendFamilyHeader(out, "tollgate_xds_config_applied_total", "counter",
                     "xDS responses applied and ACKed.");
  absl::StrAppend(&out, "tollgate_xds_config_applied_total ",
                  xds_applied_.load(std::memory_order_relaxed), "\n");
  AppendFamilyHeader(out, "tollgate_xds_config_rejected_total", "counter",
                     "xDS responses rejected and NACKed (the running config stays).");
  absl::StrAppend(&out, "tollgate_xds_config_rejected_total ",
                  xds_rejected_.load(std::memory_order_relaxed), "\n");
  AppendFamilyHeader(out, "tollgate_xds_stream_restarts_total", "counter",
                     "xDS streams that ended and were opened again.");
  absl::StrAppend(&out, "tollgate_xds_stream_restarts_total ",
                  xds_restarts_.load(std::memory_order_relaxed), "\n");
  absl::MutexLock lock(&mu_);
  if (xds_applied_unix_micros_ == 0) return;
  AppendFamilyHeader(out, "tollgate_xds_config_version_info", "gauge",
                     "Always 1; the version of the xDS config last applied.");
  absl::StrAppend(&out, "tollgate_xds_config_version_info{version=\"",
                  EscapeLabelValue(xds_version_), "\"} 1\n");
  AppendFamilyHeader(
      out, "tollgate_xds_last_applied_timestamp_seconds", "gauge",
      "When the xDS config last applied was applied, in seconds since the Unix epoch.");
  absl::StrAppend(&out, "tollgate_xds_last_applied_timestamp_seconds ",
                  xds_applied_unix_micros_ / 1'000'000, "\n");
}

}  // namespace tollgate::server
