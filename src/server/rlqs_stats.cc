// Copyright tollgate authors.
#include "src/server/rlqs_stats.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/server/metrics.h"

namespace tollgate::server {

namespace {

void Sample(std::string& out, const char* series, int64_t value) {
  absl::StrAppend(&out, series, " ", value, "\n");
}

}  // namespace

void RenderRlqsStats(std::string& out, const RlqsStats& stats) {
  AppendFamilyHeader(out, "tollgate_rlqs_streams", "gauge",
                     "Rate Limit Quota Service streams open.");
  Sample(out, "tollgate_rlqs_streams", stats.streams);
  AppendFamilyHeader(out, "tollgate_rlqs_buckets", "gauge",
                     "RLQS buckets (one per stream and BucketId) this instance tracks.");
  Sample(out, "tollgate_rlqs_buckets", stats.buckets);
  AppendFamilyHeader(out, "tollgate_rlqs_reports_total", "counter",
                     "Bucket usage reports received (one per bucket per report).");
  Sample(out, "tollgate_rlqs_reports_total", stats.reports);
  AppendFamilyHeader(
      out, "tollgate_rlqs_assignments_total", "counter",
      "Quota assignments sent, by strategy: token_bucket (a grant), deny_all (nothing "
      "left, or a rule of 0), allow_all (not limited).");
  Sample(out, "tollgate_rlqs_assignments_total{strategy=\"token_bucket\"}",
         stats.token_bucket_assignments);
  Sample(out, "tollgate_rlqs_assignments_total{strategy=\"deny_all\"}", stats.deny_all_assignments);
  Sample(out, "tollgate_rlqs_assignments_total{strategy=\"allow_all\"}",
         stats.allow_all_assignments);
  AppendFamilyHeader(out, "tollgate_rlqs_abandoned_buckets_total", "counter",
                     "Buckets abandoned (AbandonAction) after their idle time without a request.");
  Sample(out, "tollgate_rlqs_abandoned_buckets_total", stats.abandoned_buckets);
  AppendFamilyHeader(
      out, "tollgate_rlqs_refused_buckets_total", "counter",
      "Bucket reports ignored because their stream holds --rlqs-max-buckets-per-stream.");
  Sample(out, "tollgate_rlqs_refused_buckets_total", stats.refused_buckets);
  AppendFamilyHeader(
      out, "tollgate_rlqs_rounds_total", "counter",
      "Assignment rounds, by result: synced (Redis answered, or no Redis) or fallback "
      "(Redis away: each limit's on_store_failure).");
  Sample(out, "tollgate_rlqs_rounds_total{result=\"synced\"}", stats.rounds - stats.failed_rounds);
  Sample(out, "tollgate_rlqs_rounds_total{result=\"fallback\"}", stats.failed_rounds);
  AppendFamilyHeader(out, "tollgate_rlqs_redis_commands_total", "counter",
                     "Script calls RLQS rounds sent to Redis.");
  Sample(out, "tollgate_rlqs_redis_commands_total", stats.redis_commands);
}

}  // namespace tollgate::server
