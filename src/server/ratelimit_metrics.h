// Copyright tollgate authors. envoyproxy/ratelimit's metric families, under the names Envoy
// Gateway's default statsd mapping gives them (its statsd_conf.yaml, and the dashboards and
// docs that read them), kept per Envoy rule beside tollgate's own (Metrics).
//
//   ratelimit_service_rate_limit_total_hits{domain,key1[,key2]}    counter; hits checked
//   ratelimit_service_rate_limit_over_limit{...}                   hits refused (shadow too)
//   ratelimit_service_rate_limit_near_limit{...}                   hits allowed past the
//       near-limit ratio of the limit
//   ratelimit_service_rate_limit_within_limit{...}                 hits allowed
//   ratelimit_service_rate_limit_shadow_mode{...}                  hits refused by a rule in
//       shadow mode (answered OK)
//   ratelimit_service_config_load_success / _error                 counters; config loads
//   ratelimit_service_should_rate_limit_error{err_type}            counter; calls whose store
//       failed (err_type="redis_error")
//
// The labels are the peer's: its stat key of a rule is the rule's full key,
// "domain.key[_value].key[_value]...", split at its dots: domain, then key1 and, for a
// nested rule, key2 (deeper levels are not labelled, as in the peer's mapping). A hit is one
// unit of hits_addend. Unlike the peer, which splits one request's hits between near_limit
// and over_limit at the threshold, a request's hits all go to the one it ends in.
#ifndef TOLLGATE_SRC_SERVER_RATELIMIT_METRICS_H_
#define TOLLGATE_SRC_SERVER_RATELIMIT_METRICS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tollgate/decision.h"

namespace tollgate::server {

// One rule's counters. Recording is lock-free (relaxed atomics).
struct RatelimitCounters {
  std::atomic<int64_t> total_hits{0};
  std::atomic<int64_t> over_limit{0};
  std::atomic<int64_t> near_limit{0};
  std::atomic<int64_t> within_limit{0};
  std::atomic<int64_t> shadow_mode{0};

  // `hits` checked, ending in `decision`; `shadow`: the rule is in shadow mode.
  // `near_limit_ratio` in [0, 1].
  void Record(int64_t hits, const Decision& decision, bool shadow, double near_limit_ratio);
  bool empty() const { return total_hits.load(std::memory_order_relaxed) == 0; }
};

// The rate-limit families for `rules` (name, counters), in that order; rules with no hit
// are left out. A name may end in "#N" (a second rule with the same full key), which is
// not part of the labels.
void RenderRatelimitFamilies(
    std::string& out, const std::vector<std::pair<std::string, const RatelimitCounters*>>& rules);

// The service-wide families.
void RenderRatelimitServiceFamilies(std::string& out, int64_t config_loads_succeeded,
                                    int64_t config_loads_failed, int64_t store_errors);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RATELIMIT_METRICS_H_
