// Copyright tollgate authors. The Rate Limit Quota Service's totals, for /metrics
// (src/server/metrics.h renders them; src/rlqs/ledger.h counts them).
#ifndef TOLLGATE_SRC_SERVER_RLQS_STATS_H_
#define TOLLGATE_SRC_SERVER_RLQS_STATS_H_

#include <cstdint>
#include <string>

namespace tollgate::server {

// Totals for /metrics. Monotonic except streams and buckets.
struct RlqsStats {
  int64_t streams = 0;
  int64_t buckets = 0;
  int64_t reports = 0;  // bucket usage reports received
  int64_t token_bucket_assignments = 0;
  int64_t deny_all_assignments = 0;
  int64_t allow_all_assignments = 0;
  int64_t abandoned_buckets = 0;
  int64_t refused_buckets = 0;  // over max_buckets_per_stream
  int64_t rounds = 0;
  int64_t failed_rounds = 0;   // rounds whose Redis calls failed (fallback assignments)
  int64_t redis_commands = 0;  // script calls sent by rounds
};

// Appends the tollgate_rlqs_* families of `stats` to `out` (Prometheus' text format).
void RenderRlqsStats(std::string& out, const RlqsStats& stats);

}  // namespace tollgate::server

#endif  // TOLLGATE_SRC_SERVER_RLQS_STATS_H_
