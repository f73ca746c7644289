// Copyright tollgate authors.
#include "src/server/ratelimit_metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "src/core/absl_view.h"
#include "src/server/metrics.h"

namespace tollgate::server {
namespace {

struct Family {
  std::string_view name;
  std::string_view help;
  std::atomic<int64_t> RatelimitCounters::*counter;
};

constexpr Family kFamilies[] = {
    {"ratelimit_service_rate_limit_total_hits", "Hits checked against the rule",
     &RatelimitCounters::total_hits},
    {"ratelimit_service_rate_limit_over_limit", "Hits refused by the rule (in shadow mode too)",
     &RatelimitCounters::over_limit},
    {"ratelimit_service_rate_limit_near_limit",
     "Hits allowed past the near-limit ratio of the rule's limit", &RatelimitCounters::near_limit},
    {"ratelimit_service_rate_limit_within_limit", "Hits allowed by the rule",
     &RatelimitCounters::within_limit},
    {"ratelimit_service_rate_limit_shadow_mode",
     "Hits refused by the rule in shadow mode, answered OK", &RatelimitCounters::shadow_mode},
};

// {domain="...",key1="..."[,key2="..."]} of a rule's name.
std::string Labels(std::string_view name) {
  const size_t hash = name.rfind('#');
  if (hash != std::string_view::npos) name = name.substr(0, hash);
  std::vector<std::string> parts = absl::StrSplit(AbslView(name), '.');
  std::string labels = absl::StrCat("{domain=\"", EscapeLabelValue(parts[0]), "\"");
  if (parts.size() > 1) absl::StrAppend(&labels, ",key1=\"", EscapeLabelValue(parts[1]), "\"");
  if (parts.size() > 2) absl::StrAppend(&labels, ",key2=\"", EscapeLabelValue(parts[2]), "\"");
  labels += "}";
  return labels;
}

}  // namespace

void RatelimitCounters::Record(int64_t hits, const Decision& decision, bool shadow,
                               double near_limit_ratio) {
  total_hits.fetch_add(hits, std::memory_order_relaxed);
  if (!decision.allowed) {
    over_limit.fetch_add(hits, std::memory_order_relaxed);
    if (shadow) shadow_mode.fetch_add(hits, std::memory_order_relaxed);
    return;
  }
  within_limit.fetch_add(hits, std::memory_order_relaxed);
  // Used after this request, against the peer's threshold floor(limit * ratio).
  const int64_t used = decision.limit - decision.remaining;
  const auto threshold =
      static_cast<int64_t>(std::floor(static_cast<double>(decision.limit) * near_limit_ratio));
  if (used > threshold) near_limit.fetch_add(hits, std::memory_order_relaxed);
}

void RenderRatelimitFamilies(
    std::string& out, const std::vector<std::pair<std::string, const RatelimitCounters*>>& rules) {
  std::vector<std::pair<std::string, const RatelimitCounters*>> used;
  for (const auto& rule : rules) {
    if (!rule.second->empty()) used.emplace_back(Labels(rule.first), rule.second);
  }
  if (used.empty()) return;
  for (const Family& family : kFamilies) {
    AppendFamilyHeader(out, family.name, "counter", family.help);
    for (const auto& [labels, counters] : used) {
      absl::StrAppend(&out, AbslView(family.name), labels, " ",
                      (counters->*family.counter).load(std::memory_order_relaxed), "\n");
    }
  }
}

void RenderRatelimitServiceFamilies(std::string& out, int64_t config_loads_succeeded,
                                    int64_t config_loads_failed, int64_t store_errors) {
  AppendFamilyHeader(out, "ratelimit_service_config_load_success", "counter", "Configs loaded");
  absl::StrAppend(&out, "ratelimit_service_config_load_success ", config_loads_succeeded, "\n");
  AppendFamilyHeader(out, "ratelimit_service_config_load_error", "counter", "Configs refused");
  absl::StrAppend(&out, "ratelimit_service_config_load_error ", config_loads_failed, "\n");
  AppendFamilyHeader(out, "ratelimit_service_should_rate_limit_error", "counter",
                     "ShouldRateLimit calls whose store failed");
  absl::StrAppend(&out, "ratelimit_service_should_rate_limit_error{err_type=\"redis_error\"} ",
                  store_errors, "\n");
}

}  // namespace tollgate::server
